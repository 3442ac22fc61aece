"""A cluster built by the conductor on the real dataplane, checked with real packets.

1 master + 2 minions with ``master_lb_enabled`` and floating IPs: from the external
namespace, the API load balancer's floating IP reaches the master's port 6443 (the
agent's kube-apiserver stand-in); the master's security group drops a port the networking guide does not
open; scaling to 3 and back to 1 and deleting leave nothing behind.
"""

from __future__ import annotations

import socket
import threading

import httpx
import pytest

from netbay.dataplane import netns

from .agent_fixtures import Cloud, wait_for
from .cluster_pods import ci as cluster_ci, wait_cluster


class Listener:
    """TCP servers inside a namespace that answer every connection with ``name``."""

    def __init__(self, ns: str, ports: list[int], name: bytes) -> None:
        self.stop = threading.Event()
        self.socks = []
        for port in ports:
            with netns.entered(ns):
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("0.0.0.0", port))
            s.listen(16)
            s.settimeout(0.1)
            self.socks.append(s)
        self.threads = [threading.Thread(target=self._serve, args=(s, name), daemon=True) for s in self.socks]
        for t in self.threads:
            t.start()

    def _serve(self, s: socket.socket, name: bytes) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = s.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                try:
                    conn.sendall(name)
                except OSError:
                    pass

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(5)
        for s in self.socks:
            s.close()


def answer(ns: str, ip: str, port: int, timeout: float = 1.0) -> bytes | None:
    """What a TCP connect from ``ns`` to ip:port is answered, None if it gets nothing."""
    with netns.entered(ns):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.settimeout(timeout)
        s.connect((ip, port))
        return s.recv(64)
    except OSError:
        return None
    finally:
        s.close()


CLOUD_TAG = "cl"   # the shared `cloud` fixture (conftest.py): its namespace prefix


@pytest.fixture(scope="module")
def ci(cloud: Cloud) -> httpx.Client:
    return cluster_ci(cloud)


def nodes(ci: httpx.Client, cid: str) -> dict[str, str]:
    """Logical node name → sandbox id, from the executor's record."""
    rows = ci.get(f"/clusters/{cid}/resources").json()["resources"]
    return {r["name"]: r["physical_id"] for r in rows if r["type"] == "OS::Nova::Server"}


def test_cluster_with_api_load_balancer_and_floating_ips(cloud: Cloud, ci: httpx.Client) -> None:
    public = cloud.ok(cloud.http.get("/network/v2.0/networks", params={"name": "public"}))["networks"][0]
    outside = cloud.names.external(public["id"])
    wait_for(lambda: netns.exists(outside), 10, what="the external namespace")
    before_ns = set(cloud.namespaces())
    r = ci.post("/clustertemplates", json={
        "name": "k8s-lb", "coe": "kubernetes", "network_driver": "flannel", "external_network_id": "public",
        "master_lb_enabled": True, "floating_ip_enabled": True, "labels": {"flannel_backend": "vxlan"}})
    assert r.status_code == 201, r.text
    r = ci.post("/clusters", json={"name": "c1", "cluster_template_id": r.json()["uuid"], "node_count": 2,
                                   "master_count": 1})
    assert r.status_code == 202, r.text
    cid = r.json()["uuid"]
    cluster = wait_cluster(ci, cid, ("CREATE_COMPLETE", "CREATE_FAILED"))
    assert cluster["status"] == "CREATE_COMPLETE", cluster["status_reason"]
    api_ip = cluster["api_address"].removeprefix("https://").rsplit(":", 1)[0]
    by_name = nodes(ci, cid)
    masters = [sid for n, sid in by_name.items() if "master" in n]
    minions = [sid for n, sid in sorted(by_name.items()) if "minion" in n]
    assert len(masters) == 1 and len(minions) == 2, by_name
    master_ns = cloud.sandbox_ns(masters[0])
    minion_ns = cloud.sandbox_ns(minions[0])
    for sid in masters + minions:
        wait_for(lambda sid=sid: netns.exists(cloud.sandbox_ns(sid)), 20, what="node namespace")
    master_port = cloud.ok(cloud.http.get("/network/v2.0/ports", params={"device_id": masters[0]}))["ports"][0]
    master_ip = master_port["fixed_ips"][0]["ip_address"]
    cloud.wait_status(f"/network/v2.0/ports/{master_port['id']}", "ACTIVE")

    # 6443 on the master is the agent's kube-apiserver stand-in (netbay/dataplane/standin.py);
    # 9999 is the test's own listener, on a port the guide does not open.
    listener = Listener(master_ns, [9999], b"master")
    stand_in = b"HTTP/1.1 200 OK"
    try:
        # The API load balancer's floating IP, from the outside world, reaches 6443.
        got = wait_for(lambda: answer(outside, api_ip, 6443), 20, 0.1, "the API LB's floating IP to answer")
        assert got.startswith(stand_in), got
        # Inside the cluster: 6443 is open on masters, 9999 is not (the guide opens no such port).
        got = wait_for(lambda: answer(minion_ns, master_ip, 6443), 10, 0.1, "6443 from a minion")
        assert got.startswith(stand_in), got
        assert answer(minion_ns, master_ip, 9999, timeout=1.0) is None
    finally:
        listener.close()

    for count in (3, 1):
        r = ci.patch(f"/clusters/{cid}", json=[{"op": "replace", "path": "/node_count", "value": count}])
        assert r.status_code == 202, r.text
        cluster = wait_cluster(ci, cid, ("UPDATE_COMPLETE", "UPDATE_FAILED"))
        assert cluster["status"] == "UPDATE_COMPLETE", cluster["status_reason"]
        assert len(cluster["node_addresses"]) == count
    assert ci.delete(f"/clusters/{cid}").status_code == 204
    wait_cluster(ci, cid, ("GONE",))
    for path, key in (("/network/v2.0/networks", "networks"), ("/network/v2.0/routers", "routers"),
                      ("/network/v2.0/floatingips", "floatingips"), ("/netbay/v1/sandboxes", "sandboxes"),
                      ("/load-balancer/v2/lbaas/loadbalancers", "loadbalancers")):
        left = [x for x in cloud.ok(cloud.http.get(path))[key] if x.get("name") != "public"]
        assert left == [], (key, left)
    wait_for(lambda: set(cloud.namespaces()) <= before_ns, 20, 0.1, "the cluster's namespaces to go")


def test_swarm_masters_answer_their_load_balancers_on_the_coes_ports(cloud: Cloud, ci: httpx.Client) -> None:
    """A swarm cluster whose template moves the API to 2400: its API load balancer's
    floating IP answers there from the outside world (the master's group opens it), and
    every member of the API and etcd load balancers turns ONLINE — the agent's stand-ins
    answer on swarm's ports and the template's, not on Kubernetes' 6443."""
    public = cloud.ok(cloud.http.get("/network/v2.0/networks", params={"name": "public"}))["networks"][0]
    outside = cloud.names.external(public["id"])
    wait_for(lambda: netns.exists(outside), 10, what="the external namespace")
    r = ci.post("/clustertemplates", json={
        "name": "swarm-lb", "coe": "swarm", "network_driver": "docker", "external_network_id": "public",
        "master_lb_enabled": True, "floating_ip_enabled": True, "apiserver_port": 2400})
    assert r.status_code == 201, r.text
    r = ci.post("/clusters", json={"name": "s1", "cluster_template_id": r.json()["uuid"], "node_count": 1,
                                   "master_count": 1})
    assert r.status_code == 202, r.text
    cid = r.json()["uuid"]
    try:
        cluster = wait_cluster(ci, cid, ("CREATE_COMPLETE", "CREATE_FAILED"))
        assert cluster["status"] == "CREATE_COMPLETE", cluster["status_reason"]
        api_ip, port = cluster["api_address"].removeprefix("tcp://").rsplit(":", 1)
        assert port == "2400"
        got = wait_for(lambda: answer(outside, api_ip, 2400), 20, 0.1, "the API LB's floating IP to answer")
        assert got.startswith(b"HTTP/1.1 200 OK"), got
        master = next(sid for name, sid in nodes(ci, cid).items() if "master" in name)
        assert answer(cloud.sandbox_ns(master), "127.0.0.1", 6443, timeout=0.5) is None   # not Kubernetes'

        def members() -> list[dict]:
            pools = cloud.ok(cloud.http.get("/load-balancer/v2/lbaas/pools"))["pools"]
            return [m for p in pools for m in cloud.ok(cloud.http.get(
                f"/load-balancer/v2/lbaas/pools/{p['id']}/members"))["members"]]
        wait_for(lambda: {m["protocol_port"] for m in members()} == {2400, 2379}
                 and all(m["operating_status"] == "ONLINE" for m in members()), 40, 0.5,
                 "every API and etcd member ONLINE")
    finally:
        assert ci.delete(f"/clusters/{cid}").status_code == 204
        wait_cluster(ci, cid, ("GONE",))
