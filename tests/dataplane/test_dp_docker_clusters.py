"""Docker containers placed on cluster nodes (``-o netbay.cluster=C -o netbay.node=N``).

Real dockerd (off the host's network), the plugin as a child process, a cluster
built by the conductor and wired by the agent. A container on a node is plugged
into the node's pod bridge as a pod is, with an address from the node's lease (a
``runtime: docker`` pod row, so pods and containers never share an address):

* flannel (vxlan): a container on minion 0 and a pod on minion 1 exchange ICMP and
  TCP both ways, no NAT;
* swarm with the ``docker`` driver (Docker's overlay): containers on two nodes reach
  each other on one subnet;
* refusals reach Docker: an IPAM pool on a cluster network, an unknown node;
  removing everything leaves no pod row, veth or host-side end.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from docker.types import IPAMConfig

from netbay.dataplane import netns
from netbay.dataplane import rtnl as kernel

from . import dockerd as dk
from .agent_fixtures import Cloud, wait_for
from .cluster_net import Listener, tcp_read
from .docker_fixtures import PLUGIN, Plugin, iface, plugin_env, run, sh
from .dp_helpers import ping
from .cluster_pods import ci, clusternet, make_cluster, pns, pod, wait_cluster

pytestmark = pytest.mark.skipif(dk.available() is not None, reason=str(dk.available()))


CLOUD_TAG = "dc"   # the shared `cloud` fixture (conftest.py): its namespace prefix


@pytest.fixture(scope="module")
def daemon() -> Iterator[dk.Dockerd]:
    yield from dk.running()


@pytest.fixture(scope="module")
def plugin(cloud: Cloud, daemon: dk.Dockerd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plugin]:
    p = Plugin(PLUGIN, cloud.server.url, cloud.names.prefix, plugin_env(cloud.server),
               tmp_path_factory.mktemp("plugin") / "plugin.log", ("--docker-host", daemon.host))
    p.start()
    try:
        yield p
    finally:
        p.stop()


def on_node(d: dk.Dockerd, name: str, cluster: str, node: str) -> Any:
    return d.client.networks.create(name, driver=PLUGIN, options={"netbay.cluster": cluster, "netbay.node": node},
                                    ipam=IPAMConfig(driver="null"))


def docker_pods(cloud: Cloud, cid: str) -> list[dict]:
    return [p for p in cloud.ok(cloud.http.get("/netbay/v1/pods", params={"cluster_id": cid}))["pods"]
            if p["runtime"] == "docker"]


def minions(cloud: Cloud, cid: str) -> list[dict]:
    return [n for n in clusternet(cloud, cid)["nodes"] if n["role"] == "minion"]


def addr(container: Any) -> str:
    return iface(container)[1][0].split("/")[0]


def test_container_on_minion_0_and_pod_on_minion_1_of_a_flannel_cluster(cloud: Cloud, daemon: dk.Dockerd,
                                                                          plugin: Plugin) -> None:
    cid = make_cluster(cloud, "dkfl", {"flannel_backend": "vxlan"}, 2)
    m0, m1 = minions(cloud, cid)
    dnet = on_node(daemon, "dkfl-m0", cid, m0["name"])
    c = run(daemon, "dkfl-m0", "dkfl-c", "echo from-container | nc -l -p 7000; sleep 600")
    p = pod(cloud, "dkfl-p", cid, node=m1["name"])
    listener = Listener(pns(cloud, p), p["address"], 7001, b"from-pod")
    try:
        rows = docker_pods(cloud, cid)
        assert len(rows) == 1 and rows[0]["node"] == m0["name"]
        lease = clusternet(cloud, cid)["leases"][m0["name"]]
        mac, addrs = iface(c)
        assert addrs == [f"{rows[0]['address']}/{lease.split('/')[1]}"]   # the node's lease, its prefix
        code, out = sh(c, "ip route show default")
        assert code == 0 and f"via {str(lease.split('/')[0])[:-1]}1 " in out, out   # the lease's gateway (cni0)
        ip = addr(c)
        assert wait_for(lambda: ping(pns(cloud, p), ip, 0.5), 10, 0.05, "pod -> container ICMP")
        code, out = sh(c, f"ping -c 2 -W 2 {p['address']}")
        assert code == 0, out
        assert tcp_read(pns(cloud, p), ip, 7000) == b"from-container\n"
        code, out = sh(c, f"nc -w 3 {p['address']} 7001 </dev/null")
        assert code == 0 and out == "from-pod", out
        # the plugin names the container's own namespace as the pod's (probes and pod exec enter it)
        assert wait_for(lambda: netns.exists(pns(cloud, rows[0])), 10, 0.05, "the container's namespace named")
        assert kernel.rtnl(pns(cloud, rows[0])).link("eth0").address == mac
        assert ping(pns(cloud, rows[0]), p["address"], count=2)
        # the container's veth is a port of minion 0's cni0, like a pod's
        node_ns = cloud.names.sandbox(m0["sandbox_id"])
        cni0 = kernel.rtnl(node_ns).link("cni0")
        assert [ln for ln in kernel.rtnl(node_ns).links() if ln.master == cni0.index and ln.kind == "veth"]
    finally:
        listener.close()
        c.remove(force=True)
        dnet.remove()
    assert wait_for(lambda: not docker_pods(cloud, cid), 10, 0.05, "the container's pod row to go")
    assert not netns.exists(pns(cloud, rows[0]))
    node_ns = cloud.names.sandbox(m0["sandbox_id"])
    cni0 = kernel.rtnl(node_ns).link("cni0")
    assert not [ln for ln in kernel.rtnl(node_ns).links() if ln.master == cni0.index and ln.kind == "veth"]
    assert not [ln for ln in open("/proc/net/dev").read().split() if ln.startswith("nbk")]  # noqa: SIM115
    ci(cloud).delete(f"/clusters/{cid}")
    wait_cluster(ci(cloud), cid, ("GONE",))


def test_containers_on_two_swarm_nodes_reach_each_other(cloud: Cloud, daemon: dk.Dockerd, plugin: Plugin) -> None:
    cid = make_cluster(cloud, "dksw", {}, 2, driver=None, coe="swarm")
    m0, m1 = minions(cloud, cid)
    nets = [on_node(daemon, f"dksw-{i}", cid, m["name"]) for i, m in enumerate((m0, m1))]
    a = run(daemon, "dksw-0", "dksw-a", "sleep 600")
    b = run(daemon, "dksw-1", "dksw-b", "echo from-b | nc -l -p 7000; sleep 600")
    try:
        ia, ib = addr(a), addr(b)
        assert iface(a)[1][0].endswith("/16") and iface(b)[1][0].endswith("/16")   # one overlay subnet
        assert {p["node"] for p in docker_pods(cloud, cid)} == {m0["name"], m1["name"]}
        code, out = sh(a, f"ping -c 3 -W 2 {ib}")
        assert code == 0, out
        code, out = sh(b, f"ping -c 1 -W 2 {ia}")
        assert code == 0, out
        code, out = sh(a, f"nc -w 3 {ib} 7000 </dev/null")
        assert code == 0 and out == "from-b\n", out
    finally:
        for c in (a, b):
            c.remove(force=True)
        for n in nets:
            n.remove()
    assert wait_for(lambda: not docker_pods(cloud, cid), 10, 0.05, "the containers' pod rows to go")
    ci(cloud).delete(f"/clusters/{cid}")
    wait_cluster(ci(cloud), cid, ("GONE",))


def test_refusals_reach_docker(cloud: Cloud, daemon: dk.Dockerd, plugin: Plugin) -> None:
    cid = make_cluster(cloud, "dkbad", {}, 1, driver=None, coe="swarm")
    r = daemon.cli("network", "create", "-d", PLUGIN, "--ipam-driver", PLUGIN, "--subnet", "10.77.0.0/24",
                   "-o", f"netbay.cluster={cid}", "dkbad-pool")
    assert r.returncode != 0 and "--ipam-driver null" in r.stderr, r.stderr
    r = daemon.cli("network", "create", "-d", PLUGIN, "--ipam-driver", "null", "-o", f"netbay.cluster={cid}",
                   "-o", "netbay.node=nope", "dkbad-node")
    assert r.returncode != 0 and "has no node nope" in r.stderr, r.stderr
    r = daemon.cli("network", "create", "-d", PLUGIN, "--ipam-driver", "null", "-o", "netbay.cluster=no-such",
                   "dkbad-cl")
    assert r.returncode != 0 and "no container network" in r.stderr, r.stderr
    ci(cloud).delete(f"/clusters/{cid}")
    wait_cluster(ci(cloud), cid, ("GONE",))


def test_the_specs_walk_through_with_the_driver_name_changed(cloud: Cloud, daemon: dk.Dockerd, plugin: Plugin) -> None:
    """zun-kuryr-integration's steps: network, subnet pool, subnet from the pool, then its
    own ``docker network create`` line (kuryr's option names), then a container on it."""
    net = cloud.ok(cloud.http.post("/network/v2.0/networks", json={"network": {"name": "testnet"}}), 201)["network"]
    pool = cloud.ok(cloud.http.post("/network/v2.0/subnetpools", json={"subnetpool": {
        "name": "testpool", "prefixes": ["10.2.0.0/16"]}}), 201)["subnetpool"]
    sub = cloud.ok(cloud.http.post("/network/v2.0/subnets", json={"subnet": {
        "name": "testsubnet", "network_id": net["id"], "subnetpool_id": pool["id"], "cidr": "10.2.0.0/24",
        "ip_version": 4}}), 201)["subnet"]
    r = daemon.cli("network", "create", "-d", PLUGIN, f"--ipam-driver={PLUGIN}", "--subnet", "10.2.0.0/24",
                   "--gateway", "10.2.0.1", "-o", f"neutron.net.uuid={net['id']}", "-o", f"neutron.pool.uuid={pool['id']}",
                   "--ipam-opt", f"neutron.pool.uuid={pool['id']}", "foo")
    assert r.returncode == 0, r.stderr
    c = run(daemon, "foo", "spec-c")
    try:
        mac, addrs = iface(c)
        assert addrs[0].startswith("10.2.0.") and addrs[0].endswith("/24")
        subnets = cloud.ok(cloud.http.get("/network/v2.0/subnets", params={"network_id": net["id"]}))["subnets"]
        assert [s["id"] for s in subnets] == [sub["id"]]   # the user's subnet, no second one
    finally:
        c.remove(force=True)
        assert daemon.cli("network", "rm", "foo").returncode == 0
    for path in (f"/network/v2.0/subnets/{sub['id']}", f"/network/v2.0/networks/{net['id']}",
                 f"/network/v2.0/subnetpools/{pool['id']}"):
        assert cloud.http.delete(path).status_code == 204, path
