"""Containers placed on cluster nodes through the container API (Zun's ``hints``), and the
plugin's sweep of the pod rows such containers leave after a crash.

Real dockerd (off the host's network), the plugin as a child process (``--orphan-grace
2``), a netbay server told where Docker is, a flannel cluster built by the conductor
and wired by the agent:

* python-zunclient's ``hints`` (``zun run --hint cluster=C --hint node=N``) and
  ``netbay container run --cluster C --node N``: a container on minion 0 and a pod
  on minion 1 exchange ICMP and TCP both ways, as do two containers on the two
  minions; show names the node and the pod's address; delete leaves no pod row, veth,
  namespace name or Docker network;
* the plugin SIGKILLed: while Docker removes a placed container (the row stays until
  the restarted plugin's sweep releases it), and amid concurrent ``docker run``s on a
  cluster network (whatever point the kill hit, nothing is left after restart and
  ``docker rm``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from netbay.dataplane import netns
from netbay.dataplane import rtnl as kernel
from zunhelp import zun_http, zunclient

from . import dockerd as dk
from .agent_fixtures import Cloud, wait_for
from .cluster_net import Listener, tcp_read
from .docker_fixtures import Plugin, iface, plugin_env, sh
from .dp_helpers import RUN_ID, ping
from .cluster_pods import ci, clusternet, make_cluster, pns, pod, wait_cluster
from .zun_fixtures import docker_cloud

pytestmark = pytest.mark.skipif(dk.available() is not None, reason=str(dk.available()))

PLUGIN = f"nbt{RUN_ID}zc"
LISTEN = "trap 'exit 0' TERM; echo from-container | nc -l -p 7000; sleep 600 & wait"


@pytest.fixture(scope="module")
def daemon() -> Iterator[dk.Dockerd]:
    yield from dk.running()


@pytest.fixture(scope="module")
def cloud(daemon: dk.Dockerd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cloud]:
    yield from docker_cloud(daemon, tmp_path_factory.mktemp("zuncl"), "zc", PLUGIN)


@pytest.fixture(scope="module")
def plugin(cloud: Cloud, daemon: dk.Dockerd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plugin]:
    p = Plugin(PLUGIN, cloud.server.url, cloud.names.prefix, plugin_env(cloud.server),
               tmp_path_factory.mktemp("plugin") / "plugin.log", ("--docker-host", daemon.host, "--orphan-grace", "2"))
    p.start()
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture(scope="module")
def zun(cloud: Cloud, plugin: Plugin) -> Any:
    return zun_http(cloud.server, cloud.server.token())


@pytest.fixture(scope="module")
def flannel(cloud: Cloud, daemon: dk.Dockerd, plugin: Plugin) -> Iterator[str]:
    cid = make_cluster(cloud, "zcfl", {"flannel_backend": "vxlan"}, 2)
    yield cid
    for n in daemon.client.networks.list(names=[f"zun-cluster-{cid}"]):   # kept by a delete while the plugin was down
        n.remove()
    ci(cloud).delete(f"/clusters/{cid}")
    wait_cluster(ci(cloud), cid, ("GONE",))


def minions(cloud: Cloud, cid: str) -> list[dict]:
    return [n for n in clusternet(cloud, cid)["nodes"] if n["role"] == "minion"]


def docker_pods(cloud: Cloud, cid: str) -> list[dict]:
    return [p for p in cloud.ok(cloud.http.get("/netbay/v1/pods", params={"cluster_id": cid}))["pods"]
            if p["runtime"] == "docker"]


def bridge_ports(cloud: Cloud, node: dict) -> list[str]:
    ns = cloud.names.sandbox(node["sandbox_id"])
    cni0 = kernel.rtnl(ns).link("cni0")
    return [ln.ifname for ln in kernel.rtnl(ns).links() if cni0 and ln.master == cni0.index and ln.kind == "veth"]


def host_ends(rows: list[dict]) -> list[str]:
    """Those of the endpoints' host-side ends (``nbk<EndpointID[:12]>``) still in the host
    namespace (only ours: other runs on this machine have their own)."""
    ours = {"nbk" + r["name"][len("docker-"):][:12] for r in rows}
    with open("/proc/net/dev") as f:
        return [name for ln in f if (name := ln.split(":")[0].strip()) in ours]


def wait_container(zun: Any, uuid: str, status: str, timeout: float = 60) -> dict:
    def check() -> dict | None:
        c = zun.get(f"/containers/{uuid}").json()
        assert c["status"] != "Error" or status == "Error", (c["status_reason"], c)
        return c if c["status"] == status and c["task_state"] is None else None
    return wait_for(check, timeout, 0.1, f"container {uuid} {status}")


def nothing_left(cloud: Cloud, daemon: dk.Dockerd, cid: str, rows: list[dict]) -> None:
    """No pod row of Docker's, no veth on a node's cni0, no host-side end, no named namespace."""
    assert wait_for(lambda: not docker_pods(cloud, cid), 20, 0.1, "the containers' pod rows to go")
    for m in minions(cloud, cid):
        assert wait_for(lambda m=m: not bridge_ports(cloud, m), 10, 0.05, f"no veth on {m['name']}'s cni0")
    assert not host_ends(rows)
    assert not [r["id"] for r in rows if netns.exists(cloud.names.pod(r["id"]))]


def test_zun_container_on_minion_0_reaches_a_pod_and_a_container_on_minion_1(
        cloud: Cloud, daemon: dk.Dockerd, zun: Any, flannel: str) -> None:
    from clihelp import cli, ok

    m0, m1 = minions(cloud, flannel)
    p = pod(cloud, "zcfl-p", flannel, node=m1["name"])
    listener = Listener(pns(cloud, p), p["address"], 7001, b"from-pod")
    zc = zunclient(cloud.server)
    made = zc.containers.run(name="zcfl-a", image=dk.IMAGE, command=["sh", "-c", LISTEN],
                             hints={"cluster": flannel, "node": m0["name"]})
    out = ok(cli(cloud.server, "container", "run", "--name", "zcfl-b", "--cluster", flannel, "--node", m1["name"],
                 dk.IMAGE, "--", "sleep", "600"))
    assert "Running" in out and m1["name"] in out, out
    pod_rows: list[dict] = []
    try:
        a = wait_container(zun, made.uuid, "Running")
        b = zun.get("/containers/zcfl-b").json()
        assert (a["cluster"], a["node"], b["node"]) == (flannel, m0["name"], m1["name"])
        rows = {r["node"]: r for r in docker_pods(cloud, flannel)}
        pod_rows = list(rows.values())
        assert set(rows) == {m0["name"], m1["name"]}
        (a_addrs,) = a["addresses"].values()
        ip_a, ip_b = a_addrs[0]["addr"], next(iter(b["addresses"].values()))[0]["addr"]
        assert (ip_a, ip_b) == (rows[m0["name"]]["address"], rows[m1["name"]]["address"])
        lease = clusternet(cloud, flannel)["leases"][m0["name"]]
        da = daemon.client.containers.get(a["container_id"])
        assert iface(da)[1] == [f"{ip_a}/{lease.split('/')[1]}"]   # the node's lease, plugged as a pod
        assert bridge_ports(cloud, m0)                               # a port of minion 0's cni0
        assert wait_for(lambda: ping(pns(cloud, p), ip_a, 0.5), 10, 0.05, "pod -> container ICMP")
        code, text = sh(da, f"ping -c 2 -W 2 {p['address']}")
        assert code == 0, text
        assert tcp_read(pns(cloud, p), ip_a, 7000) == b"from-container\n"
        code, text = sh(da, f"nc -w 3 {p['address']} 7001 </dev/null")
        assert code == 0 and text == "from-pod", text
        code, text = sh(da, f"ping -c 2 -W 2 {ip_b}")                # container -> container, across nodes
        assert code == 0, text
        assert zc.containers.get(made.uuid).node == m0["name"]
    finally:
        listener.close()
        zc.containers.delete(made.uuid, force=True)
        r = cli(cloud.server, "container", "delete", "--force", "zcfl-b")
        cloud.ok(cloud.http.delete(f"/netbay/v1/pods/{p['id']}"), 204)
    assert r.returncode == 0, r.stderr
    nothing_left(cloud, daemon, flannel, pod_rows)
    assert not [n.name for n in daemon.client.networks.list() if n.name.startswith(f"zun-cluster-{flannel}")]


def test_a_placed_container_removed_while_the_plugin_is_down_leaves_nothing_after_restart(
        cloud: Cloud, daemon: dk.Dockerd, plugin: Plugin, zun: Any, flannel: str) -> None:
    m0 = minions(cloud, flannel)[0]
    r = zun.post("/containers?run=true", json={"name": "zcfl-k", "image": dk.IMAGE, "command": ["sleep", "600"],
                                               "hints": {"cluster": flannel, "node": m0["name"]}})
    assert r.status_code == 202, r.text
    uuid = r.json()["uuid"]
    wait_container(zun, uuid, "Running")
    (row,) = docker_pods(cloud, flannel)
    plugin.kill()
    try:
        # Docker gives up on the dead plugin (its calls retry for 30 s each) and removes anyway
        done = daemon.cli("rm", "-f", f"zun-{uuid}", f"zun-sandbox-{uuid}", timeout=150)
        assert done.returncode == 0, done.stderr
        assert [p["id"] for p in docker_pods(cloud, flannel)] == [row["id"]]   # the row outlived them
    finally:
        plugin.start()
    nothing_left(cloud, daemon, flannel, [row])
    # The restarted plugin's sweep did it: its line comes when the whole sweep is done (after
    # the release the rows wait on), so it is waited for too.
    assert wait_for(lambda: f"'pods': ['{row['id']}']" in plugin.log.read_text(), 30, 0.1,
                    "the restarted plugin's sweep to report the pod it released")
    assert zun.delete(f"/containers/{uuid}?force=true").status_code == 204


def test_killed_amid_concurrent_runs_on_a_cluster_network_nothing_is_left(
        cloud: Cloud, daemon: dk.Dockerd, plugin: Plugin, flannel: str) -> None:
    from docker.types import IPAMConfig

    m1 = minions(cloud, flannel)[1]
    net = daemon.client.networks.create("zcfl-net", driver=PLUGIN, ipam=IPAMConfig(driver="null"),
                                        options={"netbay.cluster": flannel, "netbay.node": m1["name"]})
    names = [f"zcfl-r{i}" for i in range(4)]
    errors: list[str] = []

    def start(name: str) -> None:
        try:
            daemon.client.containers.run(dk.IMAGE, ["sleep", "600"], name=name, network="zcfl-net", detach=True)
        except Exception as exc:  # noqa: BLE001 - the kill may fail some runs: that is the point
            errors.append(f"{name}: {exc}")

    threads = [threading.Thread(target=start, args=(n,), daemon=True) for n in names]
    for t in threads:
        t.start()
    seen: dict[str, dict] = {}
    try:
        # the kill lands once a row exists: between the row and Docker finishing (or just after)
        assert wait_for(lambda: seen.update((p["id"], p) for p in docker_pods(cloud, flannel)) or seen, 30,
                        0.005, "a first pod row")
        plugin.kill()
    finally:
        plugin.start()   # Docker retries its calls meanwhile (up to 30 s): they reach the new plugin
    for t in threads:
        t.join(90)
    assert not [t for t in threads if t.is_alive()]
    seen.update((p["id"], p) for p in docker_pods(cloud, flannel))
    rows = {p["name"]: p for p in docker_pods(cloud, flannel)}
    running = daemon.client.containers.list(filters={"network": "zcfl-net"})
    node_ns = cloud.names.sandbox(m1["sandbox_id"])
    for c in running:   # what Docker reports running is networked, on its own pod row's address
        eid = c.attrs["NetworkSettings"]["Networks"]["zcfl-net"]["EndpointID"]
        address = rows[f"docker-{eid}"]["address"]
        assert iface(c)[1][0].split("/")[0] == address
        assert wait_for(lambda a=address: ping(node_ns, a, 0.5), 10, 0.05, f"node -> {c.name}")
    for n in names:
        try:
            daemon.client.containers.get(n).remove(force=True)
        except Exception:  # noqa: BLE001 - never made (its run failed)
            pass
    nothing_left(cloud, daemon, flannel, list(seen.values()))
    net.remove()
