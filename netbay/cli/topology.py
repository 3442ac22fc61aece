"""A cluster's topology, read once from the APIs a user has anyway, drawn twice.

:func:`collect` walks the cluster's resources (the executor's record) into plain
data — external network → router → private network and subnet → masters, minions
(addresses, floating IPs, security groups, container-network leases, a dual-stack
node's own IPv6 address) with the pods on each, load balancers (VIP, listeners,
members) — and :func:`tree` draws it as a rich Tree; :mod:`netbay.cli.svg` draws the
same data as a picture. Reading and drawing are apart so both pictures always show the
same facts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from rich.text import Text
from rich.tree import Tree

from netbay.cli.coeclient import Api
from netbay.cli.out import status_text


def short(ident: str | None) -> str:
    return (ident or "")[:8]


# --- the data -----------------------------------------------------------------------------------------


@dataclass
class Pod:
    id: str
    name: str
    address: str
    status: str
    node: str            # the node's logical name (kube_minion_0)


@dataclass
class Interface:
    name: str
    addresses: list[str]
    floating_ip: str | None
    security_groups: list[str]


@dataclass
class Node:
    name: str
    role: str            # master | minion
    sandbox_id: str
    status: str
    interfaces: list[Interface] = field(default_factory=list)
    lease: str | None = None
    address6: str | None = None   # its own IPv6 address on a dual-stack cluster network
    pods: list[Pod] = field(default_factory=list)

    @property
    def address(self) -> str | None:
        return next((a for i in self.interfaces for a in i.addresses), None)

    @property
    def floating_ip(self) -> str | None:
        return next((i.floating_ip for i in self.interfaces if i.floating_ip), None)


@dataclass
class Member:
    address: str
    port: int | None
    status: str


@dataclass
class Listener:
    protocol: str
    port: int | None
    pool: str | None = None          # "TCP ROUND_ROBIN, health monitor TCP every 5 s"
    members: list[Member] = field(default_factory=list)


@dataclass
class LoadBalancer:
    id: str
    name: str
    status: str
    operating_status: str
    vip: str | None
    floating_ip: str | None
    listeners: list[Listener] = field(default_factory=list)
    gone: bool = False


@dataclass
class Subnet:
    name: str
    cidr: str
    gateway: str | None


@dataclass
class Network:
    id: str
    name: str
    mtu: int | None
    subnets: list[Subnet] = field(default_factory=list)
    container_network: str | None = None   # "flannel vxlan 10.100.0.0/16, a /24 per node"
    masters: list[Node] = field(default_factory=list)
    minions: list[Node] = field(default_factory=list)
    loadbalancers: list[LoadBalancer] = field(default_factory=list)


@dataclass
class Router:
    name: str
    status: str
    gateway_ips: list[str]
    snat: bool


@dataclass
class External:
    name: str
    cidrs: list[str]


@dataclass
class SecurityGroup:
    name: str
    rules: str


@dataclass
class Topology:
    name: str
    uuid: str
    status: str
    coe: str
    driver: str
    api_address: str | None
    external: External | None = None
    router: Router | None = None
    networks: list[Network] = field(default_factory=list)
    security_groups: list[SecurityGroup] = field(default_factory=list)
    stray_pods: list[Pod] = field(default_factory=list)   # on a node not shown (being scaled away)
    labels: dict[str, Any] = field(default_factory=dict)   # the cluster's (its template's merged in)
    labels_ignored: list[str] = field(default_factory=list)   # kept, read by no part of the cluster

    @property
    def nodes(self) -> list[Node]:
        return [n for net in self.networks for n in [*net.masters, *net.minions]]

    @property
    def pods(self) -> list[Pod]:
        return [p for n in self.nodes for p in n.pods]


# --- reading it from the APIs ---------------------------------------------------------------------------


def _rules(group: dict[str, Any]) -> str:
    """A security group's ingress rules in a line: ``icmp; tcp 22; udp 8472``."""
    out: list[str] = []
    for r in group.get("security_group_rules") or []:
        if r.get("direction") != "ingress" or r.get("ethertype") not in (None, "IPv4"):
            continue
        proto = r.get("protocol") or "any"
        lo, hi = r.get("port_range_min"), r.get("port_range_max")
        ports = "" if lo is None else (f" {lo}" if lo == hi or hi is None else f" {lo}-{hi}")
        source = r.get("remote_ip_prefix") or (f"group {short(r['remote_group_id'])}"
                                               if r.get("remote_group_id") else "")
        out.append(f"{proto}{ports}" + (f" from {source}" if source else ""))
    return "; ".join(dict.fromkeys(out)) or "no ingress"


def _loadbalancer(api: Api, lb_id: str, fips: dict[str, Any]) -> LoadBalancer:
    lb = api.service("load-balancer", f"/lbaas/loadbalancers/{lb_id}", "loadbalancer")
    if lb is None:
        return LoadBalancer(lb_id, short(lb_id), "", "", None, None, gone=True)
    fip = fips.get(lb.get("vip_port_id"))
    out = LoadBalancer(lb["id"], lb["name"], lb.get("provisioning_status") or "", lb.get("operating_status") or "",
                       lb.get("vip_address"), fip["floating_ip_address"] if fip else None)
    for ref in lb.get("listeners") or []:
        listener = api.service("load-balancer", f"/lbaas/listeners/{ref['id']}", "listener") or {}
        item = Listener(str(listener.get("protocol")), listener.get("protocol_port"))
        out.listeners.append(item)
        pool_id = listener.get("default_pool_id")
        if not pool_id:
            continue
        pool = api.service("load-balancer", f"/lbaas/pools/{pool_id}", "pool") or {}
        monitor = ""
        if pool.get("healthmonitor_id"):
            hm = api.service("load-balancer", f"/lbaas/healthmonitors/{pool['healthmonitor_id']}",
                             "healthmonitor") or {}
            monitor = f", health monitor {hm.get('type')} every {hm.get('delay')} s"
        item.pool = f"{pool.get('protocol')} {pool.get('lb_algorithm')}{monitor}"
        for m in api.service("load-balancer", f"/lbaas/pools/{pool_id}/members", "members") or []:
            item.members.append(Member(str(m.get("address")), m.get("protocol_port"),
                                       str(m.get("operating_status") or "")))
    return out


def _cloud_server(api: Api, server_id: str) -> dict[str, Any]:
    """A node that is no sandbox of netbay's (a server of the cloud's Nova) as a sandbox
    is shown: its ports are the ones Neutron says the server holds (``device_id``)."""
    held = api.service("network", "/ports", "ports", device_id=server_id) or []
    return {"ports": [{"port_id": p["id"], "network_id": p["network_id"], "interface": f"eth{i}"}
                      for i, p in enumerate(held)]} if held else {}


def collect(api: Api, cluster: dict[str, Any]) -> Topology:
    """The cluster's topology from the container-infra, network, load-balancer and
    netbay APIs (sandboxes, pods, the cluster's container network)."""
    path = f"/clusters/{quote(cluster['uuid'], safe='')}"
    resources = (api.coe(path + "/resources") or {}).get("resources") or []
    by_type: dict[str, list[dict[str, Any]]] = {}
    for r in resources:
        if r.get("physical_id") and not str(r.get("status", "")).startswith("DELETE"):
            by_type.setdefault(r["type"], []).append(r)
    template = api.coe(f"/clustertemplates/{quote(cluster['cluster_template_id'], safe='')}") or {}
    topo = Topology(cluster["name"], cluster["uuid"], cluster["status"], str(template.get("coe", "?")),
                    str(template.get("network_driver", "?")), cluster.get("api_address"))
    topo.labels = dict(cluster.get("labels") or {})
    topo.labels_ignored = list(cluster.get("labels_ignored") or [])

    groups: dict[str, str] = {}
    for r in by_type.get("OS::Neutron::SecurityGroup", []):
        group = api.service("network", f"/security-groups/{r['physical_id']}", "security_group")
        if group:
            groups[group["id"]] = group["name"]
            topo.security_groups.append(SecurityGroup(group["name"], _rules(group)))

    servers = by_type.get("OS::Nova::Server", [])
    sandboxes = {s["physical_id"]: api.service("netbay", f"/sandboxes/{s['physical_id']}", "sandbox")
                 or _cloud_server(api, s["physical_id"]) for s in servers}
    # The private network: the one the cluster made, else the one its nodes sit on.
    net_ids = [r["physical_id"] for r in by_type.get("OS::Neutron::Net", [])]
    if not net_ids:
        net_ids = list(dict.fromkeys(p["network_id"] for sb in sandboxes.values() for p in sb.get("ports") or []))
    ports = {p["id"]: p for n in net_ids for p in api.service("network", "/ports", "ports", network_id=n) or []}
    fips = {f["port_id"]: f for f in api.service("network", "/floatingips", "floatingips") or [] if f.get("port_id")}

    routers = [api.service("network", f"/routers/{r['physical_id']}", "router")
               for r in by_type.get("OS::Neutron::Router", [])]
    routers = [r for r in routers if r]
    if routers:
        router = routers[0]
        gateway = router.get("external_gateway_info") or {}
        if gateway.get("network_id"):
            ext = api.service("network", f"/networks/{gateway['network_id']}", "network") or {}
            cidrs = [sub["cidr"] for sid in ext.get("subnets") or []
                     if (sub := api.service("network", f"/subnets/{sid}", "subnet"))]
            topo.external = External(ext.get("name", short(gateway["network_id"])), cidrs)
        topo.router = Router(router["name"], router.get("status") or "",
                             [ip["ip_address"] for ip in gateway.get("external_fixed_ips") or []],
                             bool(gateway.get("enable_snat")))

    clusternet = api.service("netbay", f"/clusternets/{quote(cluster['uuid'], safe='')}", "clusternet") or {}
    leases = {n["sandbox_id"]: n.get("lease") for n in clusternet.get("nodes") or []}
    addresses6 = {n["sandbox_id"]: n.get("address6") for n in clusternet.get("nodes") or []}
    pods = [Pod(p["id"], p["name"], p["address"], p["status"], p["node"])
            for p in api.service("netbay", "/pods", "pods", cluster_id=cluster["uuid"]) or []]
    pods.sort(key=lambda p: (p.node, p.name))

    params = (api.coe(path + "/template") or {}).get("parameters") or {}
    lb_ids = [r["physical_id"] for r in by_type.get("OS::Octavia::LoadBalancer", [])]
    placed: set[str] = set()
    for net_id in net_ids:
        body = api.service("network", f"/networks/{net_id}", "network") or {"name": short(net_id), "subnets": []}
        net = Network(net_id, body["name"], body.get("mtu"))
        topo.networks.append(net)
        for sid in body.get("subnets") or []:
            sub = api.service("network", f"/subnets/{sid}", "subnet")
            if sub:
                net.subnets.append(Subnet(sub["name"], sub["cidr"], sub.get("gateway_ip")))
        if params.get("flannel_network_cidr"):
            net.container_network = (f"flannel {params.get('flannel_backend')} {params['flannel_network_cidr']}, "
                                     f"a /{params.get('flannel_network_subnetlen')} per node")
        for s in servers:
            sandbox = sandboxes[s["physical_id"]]
            if sandbox and not any(p["network_id"] == net_id for p in sandbox.get("ports") or []):
                continue
            logical = s["name"]
            node = Node(sandbox.get("name") or logical, "master" if "master" in logical else "minion",
                        s["physical_id"], sandbox.get("status") or s.get("status") or "",
                        lease=leases.get(s["physical_id"]), address6=addresses6.get(s["physical_id"]))
            for attached in sandbox.get("ports") or []:
                port = ports.get(attached["port_id"]) or api.service("network", f"/ports/{attached['port_id']}",
                                                                     "port") or {}
                fip = fips.get(attached["port_id"])
                node.interfaces.append(Interface(
                    attached.get("interface", "eth0"), [ip["ip_address"] for ip in port.get("fixed_ips") or []],
                    fip["floating_ip_address"] if fip else None,
                    [groups.get(g, short(g)) for g in port.get("security_groups") or []]))
            node.pods = [p for p in pods if p.node == logical]
            placed.update(p.id for p in node.pods)
            (net.masters if node.role == "master" else net.minions).append(node)
        net.loadbalancers = [_loadbalancer(api, lb_id, fips) for lb_id in lb_ids]
    topo.stray_pods = [p for p in pods if p.id not in placed]
    return topo


# --- the text picture -----------------------------------------------------------------------------------


def _node_label(node: Node) -> Text:
    label = Text.assemble((node.name, "bold"), " ", status_text(node.status))
    for i in node.interfaces:
        label.append(f"  {i.name} {', '.join(i.addresses) or '-'}")
        label.append(f" ⇄ floating {i.floating_ip}" if i.floating_ip else "  (no floating IP)")
        if i.security_groups:
            label.append(f"  sg: {', '.join(i.security_groups)}", style="dim")
    if node.lease:
        label.append(f"  lease {node.lease}", style="magenta")
    if node.address6:
        label.append(f"  node IPv6 {node.address6}", style="magenta")
    return label


def _pod_label(pod: Pod) -> Text:
    return Text.assemble("pod ", (pod.name, "bold"), f" {pod.address} ", status_text(pod.status))


def _loadbalancer_branch(parent: Tree, lb: LoadBalancer) -> None:
    if lb.gone:
        parent.add(Text(f"load balancer {lb.name} (gone)", style="dim"))
        return
    node = parent.add(Text.assemble((f"load balancer {lb.name}", "bold"), " ", status_text(lb.status),
                                    f"/{lb.operating_status}", f"  VIP {lb.vip}",
                                    f" ⇄ floating {lb.floating_ip}" if lb.floating_ip else ""))
    for listener in lb.listeners:
        branch = node.add(Text(f"listener {listener.protocol}:{listener.port}"))
        if listener.pool is None:
            continue
        pool = branch.add(Text(f"pool {listener.pool}"))
        for m in listener.members:
            pool.add(Text.assemble(f"member {m.address}:{m.port} ", status_text(m.status)))
        if not listener.members:
            pool.add(Text("no members", style="dim"))


def tree(topo: Topology) -> Tree:
    """external network → router → private network and subnet → masters and minions
    (each with its pods) and load balancers; then the security groups."""
    root = Tree(Text.assemble((f"cluster {topo.name}", "bold"), " ", status_text(topo.status),
                              f"  {topo.coe}/{topo.driver}", f"  api {topo.api_address or '-'}"))
    if topo.labels:
        text = Text.assemble(("labels ", "bold"), ", ".join(f"{k}={v}" for k, v in sorted(topo.labels.items())))
        if topo.labels_ignored:
            text.append(f"  (ignored by the driver, kept: {', '.join(topo.labels_ignored)})", style="dim")
        root.add(text)
    parent = root
    if topo.external is not None:
        parent = root.add(Text.assemble((f"external network {topo.external.name}", "bold cyan"),
                                        f"  {', '.join(topo.external.cidrs)}"))
    if topo.router is not None:
        r = topo.router
        parent = parent.add(Text.assemble((f"router {r.name}", "bold"), " ", status_text(r.status),
                                          f"  gateway {', '.join(r.gateway_ips) or '-'}", ", SNAT" if r.snat else ""))
    else:
        parent = root.add(Text("no router (the cluster uses an existing network)", style="dim"))
    for net in topo.networks:
        branch = parent.add(Text.assemble((f"network {net.name}", "bold cyan"), f"  {net.id}",
                                          f"  mtu {net.mtu}" if net.mtu else ""))
        for sub in net.subnets:
            branch.add(Text(f"subnet {sub.name} {sub.cidr}  gateway {sub.gateway or '-'}"))
        if net.container_network:
            branch.add(Text(f"container network: {net.container_network}", style="magenta"))
        for role, nodes in (("master", net.masters), ("minion", net.minions)):
            group = branch.add(Text(f"{role}s ({len(nodes)})", style="bold"))
            for node in nodes:
                leaf = group.add(_node_label(node))
                for pod in node.pods:
                    leaf.add(_pod_label(pod))
        if net.loadbalancers:
            group = branch.add(Text(f"load balancers ({len(net.loadbalancers)})", style="bold"))
            for lb in net.loadbalancers:
                _loadbalancer_branch(group, lb)
    if topo.stray_pods:
        group = root.add(Text(f"pods on nodes not shown ({len(topo.stray_pods)})", style="bold"))
        for pod in topo.stray_pods:
            group.add(Text.assemble(_pod_label(pod), f"  node {pod.node}"))
    sg = root.add(Text(f"security groups ({len(topo.security_groups)})", style="bold"))
    for secgroup in topo.security_groups:
        sg.add(Text(f"{secgroup.name}: {secgroup.rules}"))
    return root
