"""What the fabric is to wire, read from the desired state: each port's consumer (a
sandbox, a router leg, an external network, a load balancer, a container) by its
device owner, and the port's spec: namespace, interface name, MAC, addresses,
routes and MTU, on this host or not."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from netbay.dataplane.names import Names
from netbay.dataplane.state import Resource, State

SANDBOX = "netbay:sandbox"
EXTERNAL = "netbay:external"
ROUTER_INTERFACE = "network:router_interface"
ROUTER_GATEWAY = "network:router_gateway"
LOADBALANCER = "Octavia"
CONTAINER = "compute:netbay"
KURYR_POD = "compute:kuryr"   # a Kubernetes pod's port (netbay.k8s): plugged as a container's


@dataclass(frozen=True)
class Consumer:
    kind: str          # "sandbox" | "router" | "external" | "loadbalancer" | "container"
    owner_id: str      # the sandbox / router / network / load balancer id
    ns: str
    ifname: str


@dataclass(frozen=True)
class PortSpec:
    """Everything the fabric makes for one port."""
    port_id: str
    network_id: str
    consumer: Consumer
    mac: str
    cidrs: tuple[str, ...]
    mtu: int
    up: bool
    # (destination CIDR, next hop): the default route(s) and the subnets' host routes
    routes: tuple[tuple[str, str], ...] = ()

    @property
    def ns(self) -> str:
        return self.consumer.ns

    @property
    def ifname(self) -> str:
        return self.consumer.ifname


def on_host(sandbox: Resource, host: str | None) -> bool:
    """Whether this host's agent realizes ``sandbox`` (no host given: every sandbox)."""
    return host is None or not sandbox.get("host") or sandbox.get("host") == host


def consumer(state: State, port: Resource, names: Names, host: str | None = None) -> Consumer | None:
    """Where ``port`` goes (docs/dataplane.md), or None: not wired here (yet)."""
    owner, device = port.get("device_owner") or "", port.get("device_id") or ""
    pid = port["id"]
    if owner == SANDBOX:
        sandbox = state.sandboxes.get(device)
        if sandbox is None or not on_host(sandbox, host):
            return None
        return Consumer("sandbox", device, names.sandbox(device), sandbox_interfaces(state, sandbox)[pid])
    if owner in (ROUTER_INTERFACE, ROUTER_GATEWAY):
        if device not in state.routers:
            return None
        ifname = names.router_interface(pid) if owner == ROUTER_INTERFACE else names.router_gateway(pid)
        return Consumer("router", device, names.router(device), ifname)
    if owner == EXTERNAL:
        net = port.get("network_id") or ""
        if net not in state.networks:
            return None
        return Consumer("external", net, names.external(net), names.external_port(pid))
    if owner in (CONTAINER, KURYR_POD) and device and port.get("binding:host_id") \
            and (host is None or port.get("binding:host_id") == host):
        # The runtime plugs it (netbay.runtime.attach); the agent adopts the fabric end.
        return Consumer("container", device, "", Names.container_end(pid))
    if owner == LOADBALANCER and device.startswith("lb-"):
        lb = device[3:]
        if "loadbalancers" in state.known and lb not in state.loadbalancers:
            return None
        return Consumer("loadbalancer", lb, names.loadbalancer(lb), "vip")
    return None


def sandbox_interfaces(state: State, sandbox: Resource) -> dict[str, str]:
    """Port id -> interface of every port plugged into ``sandbox``.

    The sandbox lists its ports with their interfaces (``eth<n>`` in creation
    order); a port bound to it some other way (device_owner/device_id set through
    the Port API) gets the lowest free ``eth<n>``, in order of creation.
    """
    listed = {p["port_id"]: p["interface"] for p in sandbox.get("ports") or ()
              if isinstance(p, dict) and p.get("port_id") and p.get("interface")}
    extras = sorted((p for p in state.ports_of(sandbox["id"])
                     if p["id"] not in listed and p.get("device_owner") == SANDBOX),
                    key=lambda p: (p.get("created_at") or "", p["id"]))
    if extras:
        taken = set(listed.values())
        n = 0
        for port in extras:
            while f"eth{n}" in taken:
                n += 1
            listed[port["id"]] = f"eth{n}"
            taken.add(f"eth{n}")
    return listed


def _sandbox_ports_in_order(state: State, sandbox: Resource) -> list[Resource]:
    order = sandbox_interfaces(state, sandbox)
    ports = [state.ports[p] for p in order if p in state.ports]
    return sorted(ports, key=lambda p: _if_order(order[p["id"]]))


def _if_order(ifname: str) -> tuple[int, str]:
    digits = ifname[3:] if ifname.startswith("eth") else ""
    return (int(digits), ifname) if digits.isdigit() else (1 << 30, ifname)


def _gateways(state: State, port: Resource) -> dict[int, str]:
    """{IP version: gateway} of the subnets ``port`` has addresses on (first wins)."""
    out: dict[int, str] = {}
    for fixed in port.get("fixed_ips") or ():
        subnet = state.subnets.get(fixed.get("subnet_id") or "")
        gw = subnet.get("gateway_ip") if subnet else None
        if gw:
            out.setdefault(ipaddress.ip_address(gw).version, gw)
    return out


def default_route_ports(state: State, sandbox: Resource) -> dict[int, str]:
    """{IP version: port id}: the sandbox's first port with a gateway, per family."""
    out: dict[int, str] = {}
    for port in _sandbox_ports_in_order(state, sandbox):
        for version in _gateways(state, port):
            out.setdefault(version, port["id"])
    return out


def port_spec(state: State, port: Resource, names: Names, host: str | None = None) -> PortSpec | None:
    """The wiring ``port`` should have, or None if it should not be wired here.

    None also while something it needs has not arrived (its network or one of its
    subnets): the agent evaluates the port again when it does.
    """
    cons = consumer(state, port, names, host)
    network = state.networks.get(port.get("network_id") or "")
    if cons is None or network is None:
        return None
    cidrs: list[str] = []
    routes: list[tuple[str, str]] = []
    for fixed in port.get("fixed_ips") or ():
        subnet = state.subnets.get(fixed.get("subnet_id") or "")
        if subnet is None:
            return None
        plen = ipaddress.ip_network(subnet["cidr"], strict=False).prefixlen
        cidrs.append(f"{fixed['ip_address']}/{plen}")
        if cons.kind == "sandbox":
            for hr in subnet.get("host_routes") or ():
                routes.append((str(ipaddress.ip_network(hr["destination"], strict=False)), hr["nexthop"]))
    if cons.kind == "sandbox":
        chosen = default_route_ports(state, state.sandboxes[cons.owner_id])
        for version, gw in sorted(_gateways(state, port).items()):
            if chosen.get(version) == port["id"]:
                routes.insert(0, ("0.0.0.0/0" if version == 4 else "::/0", gw))
    return PortSpec(port_id=port["id"], network_id=network["id"], consumer=cons,
                    mac=str(port.get("mac_address") or "").lower(), cidrs=tuple(cidrs),
                    mtu=int(network.get("mtu") or 1500), up=bool(port.get("admin_state_up", True)),
                    routes=tuple(dict.fromkeys(routes)))
