"""``GET /netbay/v1/clusternets/{cluster_id}``: a cluster's nodes and leases (and on a
dual-stack cluster each node's own IPv6 address), read-only, scoped to the cluster's
project — on SQLite and PostgreSQL (no agent needed)."""

from __future__ import annotations

import ipaddress
import time
from pathlib import Path

import httpx
import pytest
from clihelp import check_svg_readable, cli, ok
from coehelp import ci_client, make_template
from conftest import neutron_error, unique

pytestmark = pytest.mark.every_db   # the store's semantics: on SQLite and PostgreSQL (tests/conftest.py)


def _cluster(ci: httpx.Client, driver: str = "flannel", labels: dict | None = None) -> dict:
    t = make_template(ci, name=unique("k8s"), external_network_id="public", network_driver=driver,
                      floating_ip_enabled=False, master_lb_enabled=False, **({"labels": labels} if labels else {}))
    r = ci.post("/clusters", json={"name": unique("c"), "cluster_template_id": t["uuid"], "node_count": 1})
    assert r.status_code == 202, r.text
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        c = ci.get(f"/clusters/{r.json()['uuid']}").json()
        if c["status"] in ("CREATE_COMPLETE", "CREATE_FAILED"):
            assert c["status"] == "CREATE_COMPLETE", c["status_reason"]
            return c
        time.sleep(0.1)
    raise AssertionError("cluster not built")


def test_show_and_scope(server) -> None:
    admin = ci_client(server, server.token())
    cluster = _cluster(admin)
    nb = httpx.Client(base_url=f"{server.url}/netbay/v1", headers={"X-Auth-Token": server.token()}, timeout=30)
    server._clients.append(nb)
    r = nb.get(f"/clusternets/{cluster['uuid']}")
    assert r.status_code == 200, r.text
    net = r.json()["clusternet"]
    assert net["id"] == cluster["uuid"] and net["driver"] == "flannel"
    assert [n["role"] for n in net["nodes"]] == ["master", "minion"]
    assert all(n["lease"] == net["leases"][n["name"]] and n["lease"].startswith("10.100.") for n in net["nodes"])
    assert all(n["address6"] is None for n in net["nodes"]), "IPv4 only: no node IPv6 address"

    # Another project's member does not see it (404, as for any resource of another project).
    user, password, project = server.make_user()
    other = httpx.Client(base_url=f"{server.url}/netbay/v1",
                         headers={"X-Auth-Token": server.token(user, password, project)}, timeout=30)
    server._clients.append(other)
    neutron_error(other.get(f"/clusternets/{cluster['uuid']}"), 404, "ClusterNetNotFound")
    neutron_error(nb.get("/clusternets/no-such-cluster"), 404, "ClusterNetNotFound",
                  "Cluster no-such-cluster has no container network.")


def test_a_dual_stack_calico_node_has_its_ipv6_address(server, tmp_path: Path) -> None:
    """Each node's ``address6``: the first address of its IPv6 block (the /122 paired with
    its IPv4 /26), where its IPv6 node ports answer — with direct routes as with VXLAN;
    ``netbay cluster topology`` shows it with the node, in text and in the picture."""
    admin = ci_client(server, server.token())
    cluster = _cluster(admin, "calico", {"calico_ipv6pool": "fd00:35::/64"})
    nb = httpx.Client(base_url=f"{server.url}/netbay/v1", headers={"X-Auth-Token": server.token()}, timeout=30)
    server._clients.append(nb)
    net = nb.get(f"/clusternets/{cluster['uuid']}").json()["clusternet"]
    for n in net["nodes"]:
        k = (int(ipaddress.ip_network(n["lease"]).network_address) - int(ipaddress.ip_address("192.168.0.0"))) // 64
        assert n["address6"] == str(ipaddress.ip_address("fd00:35::") + k * 64), n   # /26 number k: /122 number k
    assert len({n["address6"] for n in net["nodes"]}) == len(net["nodes"]) == 2
    picture = tmp_path / "topology.svg"
    out = ok(cli(server, "cluster", "topology", cluster["name"], "--svg", str(picture)))
    text = check_svg_readable(picture)
    for n in net["nodes"]:
        assert f"node IPv6 {n['address6']}" in out and f"node IPv6 {n['address6']}" in text
