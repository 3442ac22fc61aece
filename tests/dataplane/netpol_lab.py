"""The upstream NetworkPolicy e2e set-up on netbay: namespaces x, y, z with pods a, b, c.

Two kinds of lab run the same cases: ``kuryr`` (below: ports and security groups) and
``calico`` (:func:`build_calico`: a calico cluster of a master and two minions, the
pods of x and z on one minion, of y on the other (y's ``ipBlock`` is its node's
block), the master the lab's node; :class:`netbay.k8s.nodepolicy.NodePolicy` enforces the
same translation in the nodes); ``build_calico(tmp, labels)`` with ``calico_ipv6pool``
makes the calico lab dual-stack: each pod also has an IPv6 address, serves on it, and
:func:`probe` / :func:`check` take ``family="IPv6"`` to send the same probes over IPv6.

Each namespace is a netbay network (10.11/12/13.0.0/24) joined by one router; each pod
is a port plugged into a sandbox, serving TCP/80, TCP/81 and UDP/80 (sockets opened
inside its namespace, served by the prober's own poll loop); a ``node`` sandbox sits on
a fourth network. Labels live in this test model (``pod=<name>``, ``ns=<name>``), and a
:class:`netbay.k8s.policy.PolicyEngine` turns them into security groups.

:func:`probe` sends all 81 pairs × 3 (protocol, port) probes at once, in-process: a
non-blocking TCP connect completes (or is refused) when allowed and times out when
dropped; a UDP datagram is echoed back when allowed.

:func:`np` (a fixture on the module's ``lab``) applies policies and puts everything back.
"""

from __future__ import annotations

import errno
import ipaddress
import itertools
import select
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from lightkube import codecs

from netbay.client import Api
from netbay.dataplane import netns
from netbay.drivers import registry
from netbay.k8s.nodepolicy import NodePolicy
from netbay.k8s.policy import Cluster, ContainerPort, Namespace, Pod, PolicyEngine

from .agent_fixtures import Cloud, make_cloud
from .cluster_pods import ip_of, make_cluster

NAMESPACES = ("x", "y", "z")
PODS = ("a", "b", "c")
PROBES = (("TCP", 80), ("TCP", 81), ("UDP", 80))
CIDRS = {"x": "10.11.0.0/24", "y": "10.12.0.0/24", "z": "10.13.0.0/24", "node": "10.19.0.0/24",
         "svc": "10.96.0.0/24"}  # the service range: load balancers' VIPs
# named ports as upstream's pods declare them
CONTAINER_PORTS = (ContainerPort("serve-80-tcp", 80, "TCP"), ContainerPort("serve-81-tcp", 81, "TCP"),
                   ContainerPort("serve-80-udp", 80, "UDP"), ContainerPort("serve-81-udp", 81, "UDP"))


@dataclass
class Lab:
    cloud: Cloud
    engine: Any               # PolicyEngine (kuryr) or NodePolicy (calico): the same handlers
    pods: dict[str, Pod] = field(default_factory=dict)     # "x/a" -> Pod
    ns_of: dict[str, str] = field(default_factory=dict)    # "x/a" -> network namespace
    node_ns: str = ""
    node_ip: str = ""
    servers: list[socket.socket] = field(default_factory=list)
    subnets: dict[str, dict] = field(default_factory=dict)
    kind: str = "kuryr"
    cidrs: dict[str, str] = field(default_factory=lambda: dict(CIDRS))   # each namespace's pods' prefix
    nodes: list[str] = field(default_factory=list)   # node addresses (default: the node's)
    families: tuple[str, ...] = ("IPv4",)            # the pods' (dual-stack: both)
    cidrs6: dict[str, str] = field(default_factory=dict)   # each namespace's pods' IPv6 prefix

    def cluster(self) -> Cluster:
        return Cluster.of([Namespace(n, {"ns": n}) for n in NAMESPACES], self.pods.values(),
                          nodes=self.nodes or [f"{self.node_ip}/32"], families=self.families)

    def ip(self, key: str, family: str = "IPv4") -> str:
        """Pod ``key``'s address of ``family``."""
        return self.pods[key].ips_of(family)[0]


def _sock(ns: str, kind: int, family: str = "IPv4") -> socket.socket:
    with netns.entered(ns):
        s = socket.socket(socket.AF_INET6 if family == "IPv6" else socket.AF_INET, kind)
    s.setblocking(False)
    return s


@pytest.fixture
def np(lab: Lab) -> Iterator[Any]:
    """``np(ns, name, spec)`` applies a policy; every policy and label goes back after."""
    made: list[tuple[str, str]] = []
    pods = dict(lab.pods)

    def apply(ns: str, name: str, spec: dict) -> None:
        lab.engine.on_policy(codecs.from_dict({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                                               "metadata": {"name": name, "namespace": ns}, "spec": spec}))
        made.append((ns, name))

    yield apply
    engine = lab.engine  # a test may have replaced it (a restart)
    for ns, name in made:
        engine.on_policy_deleted(ns, name)
    for key, pod in pods.items():
        if lab.pods[key] != pod:
            lab.pods[key] = pod
            engine.on_pod(pod)
    for n in NAMESPACES:
        engine.on_namespace(Namespace(n, {"ns": n}))


def build(tmp: Path) -> Iterator[Lab]:
    for cloud in make_cloud(tmp, "np"):
        api = Api(cloud.server.url, cloud.server.token)
        lab = Lab(cloud, PolicyEngine(api, tag="k8s-policy:test"))
        try:
            project = cloud.ok(cloud.http.get("/identity/v3/auth/projects"))["projects"]
            project_id = next(p["id"] for p in project if p["name"] == "admin")
            cloud.ok(cloud.http.put(f"/network/v2.0/quotas/{project_id}", json={"quota": {
                "security_group": 100, "security_group_rule": 1000}}))  # a cluster's policies
            router = cloud.ok(cloud.http.post("/network/v2.0/routers", json={"router": {"name": "pods"}}),
                              201)["router"]
            subnets = {}
            for name, cidr in CIDRS.items():
                net, sub = cloud.network(f"ns-{name}", cidr)
                subnets[name] = (net, sub)
                lab.subnets[name] = sub
                cloud.ok(cloud.http.put(f"/network/v2.0/routers/{router['id']}/add_router_interface",
                                        json={"subnet_id": sub["id"]}))
            made = []
            for n, p in itertools.product(NAMESPACES, PODS):
                port = cloud.ok(cloud.http.post("/network/v2.0/ports", json={"port": {
                    "network_id": subnets[n][0]["id"], "name": f"{n}-{p}"}}), 201)["port"]
                sb = cloud.sandbox(f"{n}-{p}", ports=[port["id"]])
                made.append(port["id"])
                key = f"{n}/{p}"
                lab.pods[key] = Pod(n, p, port["id"], port["fixed_ips"][0]["ip_address"], {"pod": p},
                                    CONTAINER_PORTS)
                lab.ns_of[key] = cloud.sandbox_ns(sb["id"])
            node = cloud.sandbox("node", networks=[subnets["node"][0]["id"]])
            node_port = node["ports"][0]["port_id"]
            lab.node_ns = cloud.sandbox_ns(node["id"])
            lab.node_ip = cloud.ip_of(node_port)
            for pid in [*made, node_port]:
                cloud.wait_status(f"/network/v2.0/ports/{pid}", "ACTIVE", timeout=30)
            _serve_pods(lab)
            lab.engine.sync(lab.cluster())
            yield lab
        finally:
            for s in lab.servers:
                s.close()
            lab.engine.groups.net.api.close()


def _serve_pods(lab: Lab) -> None:
    """Every pod serves TCP/80, TCP/81 and UDP/80 on its addresses (the prober answers)."""
    for key, pod in lab.pods.items():
        for family, ip in ((f, ip) for f in lab.families for ip in pod.ips_of(f)):
            for kind, port in ((socket.SOCK_STREAM, 80), (socket.SOCK_STREAM, 81), (socket.SOCK_DGRAM, 80)):
                s = _sock(lab.ns_of[key], kind, family)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((ip, port))
                if kind == socket.SOCK_STREAM:
                    s.listen(64)
                lab.servers.append(s)


def build_calico(tmp: Path, labels: dict | None = None, tag: str = "npc") -> Iterator[Lab]:
    """The same namespaces and pods on a calico cluster: x's and z's pods on one minion,
    y's on the other (no pod on the master: its security group, as Magnum's, takes no
    connection from the minions); the master's namespace is the lab's node. ``labels``
    with ``calico_ipv6pool``: a dual-stack cluster, pods and the lab both families."""
    for cloud in make_cloud(tmp, tag):
        cid = make_cluster(cloud, "netpol", labels or {}, 2, "calico")
        net = cloud.ok(cloud.http.get(f"/netbay/v1/clusternets/{cid}"))["clusternet"]
        nodes = sorted(net["nodes"], key=lambda n: (n["role"] != "minion", n["name"]))
        home = {"x": nodes[0], "y": nodes[1], "z": nodes[0]}
        where: dict[str, str] = {}
        lab = Lab(cloud, NodePolicy(lambda p: where.get(p.port_id)), kind="calico")
        try:
            for n, p in itertools.product(NAMESPACES, PODS):
                made = cloud.ok(cloud.http.post("/netbay/v1/pods", json={"pod": {
                    "name": f"{n}-{p}", "cluster_id": cid, "node": home[n]["name"]}}), 201)["pod"]
                made = cloud.wait_status(f"/netbay/v1/pods/{made['id']}", "ACTIVE", 30)
                key = f"{n}/{p}"
                where[made["id"]] = cloud.names.sandbox(home[n]["sandbox_id"])
                six = (made["address6"],) if made.get("address6") else ()
                lab.pods[key] = Pod(n, p, made["id"], made["address"], {"pod": p}, CONTAINER_PORTS, six)
                lab.ns_of[key] = cloud.names.pod(made["id"])
            lab.cidrs = {n: net["leases"][home[n]["name"]] for n in NAMESPACES}
            lab.node_ns = cloud.names.sandbox(nodes[2]["sandbox_id"])
            lab.node_ip = ip_of(nodes[2])
            blocks = list(net["leases"].values())
            if (labels or {}).get("calico_ipv6pool"):   # each node's IPv6 block, as its driver pairs it
                config = registry.loaded("calico", net["config"])
                lab.families = ("IPv4", "IPv6")
                lab.cidrs6 = {n: config.lease6(lab.cidrs[n]) for n in NAMESPACES}
                blocks += [config.lease6(b) for b in net["leases"].values()]
            lab.nodes = sorted({f"{ip_of(n)}/32" for n in nodes}   # a block's first address: its tunnel's
                               | {str(ipaddress.ip_network(ipaddress.ip_network(b).network_address)) for b in blocks})
            _serve_pods(lab)
            lab.engine.sync(lab.cluster())
            yield lab
        finally:
            for s in lab.servers:
                s.close()
            lab.engine.close(delete=True)


# --- probing ---------------------------------------------------------------------------

Cell = tuple[str, str, str, int]  # (from pod, to pod, protocol, port)


def probe(lab: Lab, cells: list[Cell], timeout: float = 0.3, sources: dict[str, str] | None = None,
          family: str = "IPv4") -> dict[Cell, bool]:
    """Send every cell's probe at once (to the pods' ``family`` addresses); True where it
    got through within ``timeout``."""
    sources = sources or lab.ns_of
    result: dict[Cell, bool] = {c: False for c in cells}
    clients: dict[int, tuple[socket.socket, Cell]] = {}
    poller = select.poll()
    servers = {s.fileno(): s for s in lab.servers}
    for fd in servers:
        poller.register(fd, select.POLLIN)
    try:
        for cell in cells:
            src, dst, proto, port = cell
            ip = lab.ip(dst, family)
            if proto == "TCP":
                s = _sock(sources[src], socket.SOCK_STREAM, family)
                rc = s.connect_ex((ip, port))
                if rc not in (0, errno.EINPROGRESS):
                    s.close()
                    continue
                poller.register(s.fileno(), select.POLLOUT)
            else:
                s = _sock(sources[src], socket.SOCK_DGRAM, family)
                s.connect((ip, port))
                try:
                    s.send(b"probe")
                except OSError:
                    s.close()
                    continue
                poller.register(s.fileno(), select.POLLIN)
            clients[s.fileno()] = (s, cell)
        deadline = time.monotonic() + timeout
        pending = len(clients)
        for _ in range(100_000):
            left = deadline - time.monotonic()
            if pending == 0 or left <= 0:
                break
            for fd, _ev in poller.poll(left * 1000):
                if fd in servers:
                    _serve(servers[fd])
                    continue
                entry = clients.get(fd)
                if entry is None:
                    continue
                s, cell = entry
                if cell[2] == "TCP":
                    result[cell] = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
                else:
                    try:
                        result[cell] = s.recv(64) == b"probe"
                    except OSError:
                        result[cell] = False
                poller.unregister(fd)
                pending -= 1
        return result
    finally:
        for s, _ in clients.values():
            s.close()


def _serve(server: socket.socket) -> None:
    for _ in range(64):
        try:
            if server.type == socket.SOCK_STREAM:
                conn, _ = server.accept()
                conn.close()
            else:
                data, addr = server.recvfrom(64)
                server.sendto(data, addr)
        except (BlockingIOError, InterruptedError):
            return


def all_cells() -> list[Cell]:
    keys = [f"{n}/{p}" for n in NAMESPACES for p in PODS]
    return [(s, d, proto, port) for s in keys for d in keys for proto, port in PROBES]


Truth = Callable[[str, str, str, int], bool]


def table(lab: Lab, truth: Truth) -> dict[Cell, bool]:
    """Expected verdicts; a pod reaching itself never leaves its namespace."""
    return {c: True if c[0] == c[1] else bool(truth(*c)) for c in all_cells()}


def check(lab: Lab, truth: Truth, *, rounds: int = 20, family: str = "IPv4") -> None:
    """Probe the 243 cells (over ``family``) until they match ``truth`` (bounded: the agent
    applies a change asynchronously), else fail with the mismatching cells."""
    want = table(lab, truth)
    cells = list(want)
    got: dict[Cell, bool] = {}
    bad: list[Cell] = []
    for _ in range(rounds):
        got.update(probe(lab, cells, family=family))
        bad = [c for c in want if got[c] != want[c]]
        if not bad and len(cells) == len(want):
            return
        # re-probe what differs (a late change, a first ARP); once none does, all again
        cells = bad or list(want)
    lines = [f"  {s} -> {d} {proto}/{port}: expected {'allow' if want[(s, d, proto, port)] else 'deny'}"
             for (s, d, proto, port) in sorted(bad)]
    raise AssertionError(f"{len(bad)} of {len(want)} cells differ ({family}):\n" + "\n".join(lines[:60]))
