"""Containers placed on cluster nodes through the container API (Zun's ``hints``), without
Docker: placement, show/list, Zun's refusals, python-zunclient's ``hints``. (Docker and
packets: tests/dataplane/test_dp_container_clusters.py.)"""

from __future__ import annotations

import time

import httpx
import pytest
from coehelp import make_template, wait_status
from conftest import unique
from zunhelp import zun_error, zun_http, zunclient

pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)


@pytest.fixture(scope="module")
def zun(server) -> httpx.Client:
    return zun_http(server, server.token())


def cluster(ci: httpx.Client, nodes: int, driver: str = "flannel") -> dict:
    t = make_template(ci, name=unique("zk"), external_network_id="public", network_driver=driver,
                      floating_ip_enabled=False, master_lb_enabled=False)
    r = ci.post("/clusters", json={"name": unique("zc"), "cluster_template_id": t["uuid"], "node_count": nodes})
    assert r.status_code == 202, r.text
    c = wait_status(ci, r.json()["uuid"], ("CREATE_COMPLETE", "CREATE_FAILED"))
    assert c["status"] == "CREATE_COMPLETE", c["status_reason"]
    return c


@pytest.fixture(scope="module")
def flannel(ci: httpx.Client) -> dict:
    return cluster(ci, 2)


def minions(server, cid: str) -> list[str]:
    state = server.http(server.token()).get(f"{server.url}/netbay/v1/state").json()
    net = next(n for n in state["clusternets"] if n["id"] == cid)
    return [n["name"] for n in net["nodes"] if n["role"] == "minion"]


def settle(zun: httpx.Client, uuid: str, timeout: float = 30) -> dict:
    """Without Docker the runner answers Error (no runtime): the API's part is done."""
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout / 0.1) + 1):
        c = zun.get(f"/containers/{uuid}").json()
        if c["status"] == "Error" or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert c["status"] == "Error" and "runtime" in c["status_reason"], c
    return c


def test_hints_place_a_container_on_a_node(server, zun, flannel) -> None:
    m0, m1 = minions(server, flannel["uuid"])
    by_name = zun.post("/containers", json={"image": "busybox", "name": unique("zp"),
                                            "hints": {"cluster": flannel["name"], "node": m1}})
    assert by_name.status_code == 202, by_name.text
    c = by_name.json()
    assert (c["cluster"], c["node"], c["addresses"]) == (flannel["uuid"], m1, {})
    chosen = zun.post("/containers", json={"image": "busybox", "hints": {"cluster": flannel["uuid"]}}).json()
    assert chosen["node"] in (m0, m1)   # the least-loaded minion, as for a pod
    listed = {x["uuid"]: x for x in zun.get("/containers").json()["containers"]}
    assert listed[c["uuid"]]["node"] == m1 and listed[chosen["uuid"]]["cluster"] == flannel["uuid"]
    plain = zun.get("/containers").json()["containers"]
    assert all(("cluster" in x and "node" in x) for x in plain)
    for made in (c, chosen):
        settle(zun, made["uuid"])
        assert zun.delete(f"/containers/{made['uuid']}").status_code == 204
        zun_error(zun.get(f"/containers/{made['uuid']}"), 404)


def test_refusals_in_zuns_format(server, ci, zun, flannel) -> None:
    before = {x["uuid"] for x in zun.get("/containers").json()["containers"]}
    cases = [
        ({"cluster": "no-such-cluster"}, 404, "no-such-cluster"),
        ({"cluster": flannel["uuid"], "node": "no-such-node"}, 400, "has no node no-such-node"),
        ({"node": "kube_minion_0"}, 400, "'node' needs 'cluster'"),
        ({"cluster": 7}, 400, "Invalid input for field 'hints/cluster'"),
    ]
    for hints, status, text in cases:
        zun_error(zun.post("/containers", json={"image": "busybox", "hints": hints}), status, contains=text)
    zun_error(zun.post("/containers", json={"image": "busybox", "hints": {"cluster": flannel["uuid"]},
                                            "nets": [{"network": "x"}]}), 400, contains="takes no 'nets'")
    calico = cluster(ci, 1, "calico")
    zun_error(zun.post("/containers", json={"image": "busybox", "hints": {"cluster": calico["uuid"]}}), 409,
              contains="plugs pods routed")
    assert {x["uuid"] for x in zun.get("/containers").json()["containers"]} == before   # nothing half-made
    assert ci.delete(f"/clusters/{calico['uuid']}").status_code == 204


def test_network_attach_is_refused_on_a_placed_container(zun, flannel) -> None:
    c = zun.post("/containers", json={"image": "busybox", "hints": {"cluster": flannel["uuid"]}}).json()
    settle(zun, c["uuid"])
    r = zun.post(f"/containers/{c['uuid']}/network_attach", params={"network": "anything"})
    # Error is not a state network_attach takes; the rule is Zun's and comes first
    zun_error(r, 409)
    assert zun.delete(f"/containers/{c['uuid']}").status_code == 204


def test_zunclient_hints(server, flannel) -> None:
    """The real python-zunclient sends ``hints`` as ``zun run --hint`` builds them."""
    from zunclient import exceptions
    from zunclient.common import utils as zun_utils

    m0, _ = minions(server, flannel["uuid"])
    zc = zunclient(server)
    hints = zun_utils.format_args([f"cluster={flannel['name']}", f"node={m0}"])
    made = zc.containers.create(image="busybox", hints=hints)
    shown = zc.containers.get(made.uuid)
    assert (shown.cluster, shown.node) == (flannel["uuid"], m0)
    with pytest.raises(exceptions.BadRequest):
        zc.containers.create(image="busybox", hints={"cluster": flannel["uuid"], "node": "nope"})
    with pytest.raises(exceptions.NotFound):
        zc.containers.create(image="busybox", hints={"cluster": "nope"})
    settle(zun_http(server, server.token()), made.uuid)
    zc.containers.delete(made.uuid)


def test_cli_cluster_and_node(server, zun, flannel) -> None:
    from clihelp import cli_here, ok

    _, m1 = minions(server, flannel["uuid"])
    name = unique("zcli")
    out = ok(cli_here(server, "container", "run", "--name", name, "--cluster", flannel["name"], "--node", m1,
                 "--no-wait", "busybox", "--", "sleep", "60"))
    assert m1 in out and flannel["uuid"][:8] in out, out
    c = next(x for x in zun.get("/containers").json()["containers"] if x["name"] == name)
    assert (c["cluster"], c["node"], c["command"]) == (flannel["uuid"], m1, ["sleep", "60"])
    shown = ok(cli_here(server, "container", "show", name))
    assert flannel["uuid"] in shown and m1 in shown, shown
    r = cli_here(server, "container", "run", "--node", m1, "--no-wait", "busybox")
    assert r.returncode != 0 and "--node needs --cluster" in r.stderr, r.stderr
    r = cli_here(server, "container", "run", "--cluster", flannel["uuid"], "--node", "nope", "--no-wait", "busybox")
    assert r.returncode != 0 and "has no node nope" in (r.stderr + r.stdout), r.stderr
    settle(zun, c["uuid"])
    ok(cli_here(server, "container", "delete", name))


def test_openstack_appcontainer_and_zun_cli_hints(server, zun, flannel) -> None:
    """``openstack appcontainer create --hint`` and ``zun create --hint`` as a user types them."""
    import json
    import os
    import shutil
    import subprocess

    from conftest import ADMIN_PASSWORD
    from oschelp import osc_as

    if not shutil.which("openstack") or not shutil.which("zun"):
        pytest.skip("python-openstackclient / python-zunclient's CLI not installed")
    env = {**os.environ, "OS_AUTH_URL": server.auth_url, "OS_USERNAME": "admin", "OS_PASSWORD": ADMIN_PASSWORD,
           "OS_PROJECT_NAME": "admin", "OS_USER_DOMAIN_NAME": "Default", "OS_PROJECT_DOMAIN_NAME": "Default",
           "OS_IDENTITY_API_VERSION": "3"}
    env.pop("OS_CLOUD", None)
    m0, m1 = minions(server, flannel["uuid"])
    r = osc_as(server, "appcontainer", "create", "--name", unique("zo"), "--hint",   # in this process: tests/osc.py
               f"cluster={flannel['name']}", "--hint", f"node={m1}", "-f", "json", "busybox")
    assert r.returncode == 0, r.stdout + r.stderr
    made = json.loads(r.stdout)
    assert (made["cluster"], made["node"]) == (flannel["uuid"], m1), made
    r = subprocess.run(["zun", "create", "--hint", f"cluster={flannel['uuid']},node=nope", "busybox"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "has no node nope" in r.stderr, r.stdout + r.stderr
    settle(zun, made["uuid"])
    assert zun.delete(f"/containers/{made['uuid']}").status_code == 204
