"""A router as the dataplane wants it (:class:`RouterSpec`), from Neutron's JSON."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from netbay.dataplane.l3.fipqos import FipLimit, fip_limits
from netbay.dataplane.l3.metering import MeterLabel, labels_for
from netbay.dataplane.names import Names

ROUTER_INTERFACE = "network:router_interface"
ROUTER_GATEWAY = "network:router_gateway"
# The protocols a port forwarding is realized for: those with ports (Neutron's API also
# takes ICMP's, which no DNAT of a port can carry).
PORTED = ("tcp", "udp", "sctp", "dccp")


@dataclass(frozen=True)
class Leg:
    """An internal leg: ``qr-<port>`` with the port's addresses (CIDRs, ``10.0.0.1/24``)
    and the IPv4 and IPv6 address scopes of its subnets (``""``: none)."""
    ifname: str
    port_id: str = ""
    addresses: Sequence[str] = ()
    scope: str = ""
    scope6: str = ""


@dataclass(frozen=True)
class Gateway:
    """The external leg ``qg-<port>``; ``gateway_ip``/``gateway_ip6`` are the external
    subnets' gateways (the default routes), None when a subnet has none."""
    ifname: str
    addresses: Sequence[str] = ()
    gateway_ip: str | None = None
    gateway_ip6: str | None = None
    port_id: str = ""
    scope: str = ""   # the external subnets' IPv4 and IPv6 address scopes ("": none)
    scope6: str = ""


@dataclass(frozen=True)
class FloatingIP:
    floating_ip_address: str
    fixed_ip_address: str
    id: str = ""


@dataclass(frozen=True)
class PortForward:
    """A floating IP's ``protocol``/``external_port`` DNATed to ``internal_ip:internal_port``."""
    floating_ip_address: str
    protocol: str
    external_port: int
    internal_ip: str
    internal_port: int


@dataclass(frozen=True)
class RouterSpec:
    """Everything :func:`ensure_router` needs for one router, as plain data."""
    router_id: str
    ns: str
    gateway: Gateway | None = None
    interfaces: Sequence[Leg] = ()
    floating_ips: Sequence[FloatingIP] = ()
    enable_snat: bool = True
    # Neutron's extra routes: (destination CIDR, nexthop on one of the legs' subnets)
    routes: Sequence[tuple[str, str]] = ()
    port_forwards: Sequence[PortForward] = ()
    # Neutron's metering labels that count this router's gateway traffic
    metering: Sequence[MeterLabel] = ()
    # The bandwidth limits of its floating IPs' QoS policies (``qos-fip``)
    fip_limits: Sequence[FipLimit] = ()


def _cidrs(port: Mapping[str, Any], subnets: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The port's fixed IPs with their subnets' prefix lengths (unknown subnets skipped:
    the agent ensures again when the subnet arrives)."""
    out = []
    for fixed in port.get("fixed_ips") or ():
        subnet = subnets.get(fixed.get("subnet_id") or "")
        if subnet is None or not fixed.get("ip_address"):
            continue
        plen = ipaddress.ip_network(subnet["cidr"], strict=False).prefixlen
        out.append(f"{fixed['ip_address']}/{plen}")
    return out


def _subnet_gateways(port: Mapping[str, Any], subnets: Mapping[str, Mapping[str, Any]]
                     ) -> dict[int, str]:
    """{IP version: gateway_ip} of the subnets the port has addresses on (first wins)."""
    out: dict[int, str] = {}
    for fixed in port.get("fixed_ips") or ():
        subnet = subnets.get(fixed.get("subnet_id") or "")
        gw = subnet.get("gateway_ip") if subnet else None
        if gw:
            out.setdefault(ipaddress.ip_address(gw).version, gw)
    return out


def _port_range(pf: Mapping[str, Any], side: str) -> tuple[int, int]:
    """A forwarding's ``side`` ports: its ``*_port_range`` (``"a:b"``) or its one port."""
    given = pf.get(f"{side}_port_range")
    if given:
        first, _, last = str(given).partition(":")
        return int(first), int(last or first)
    return int(pf[f"{side}_port"]), int(pf[f"{side}_port"])


def _unrolled(pf: Mapping[str, Any]) -> list[tuple[int, int]]:
    """(external port, internal port) per port of a forwarding, as Neutron's L3 agent
    unrolls a range: N external ports to N internal ones in order, or N to one."""
    (ext_first, ext_last), (int_first, int_last) = _port_range(pf, "external"), _port_range(pf, "internal")
    single = int_first == int_last
    return [(port, int_first if single else int_first + i)
            for i, port in enumerate(range(ext_first, ext_last + 1))]


def _scopes(port: Mapping[str, Any], subnets: Mapping[str, Mapping[str, Any]],
            pools: Mapping[str, Mapping[str, Any]]) -> dict[int, str]:
    """{IP version: address scope} of the port's subnets, each its subnet pool's (the
    first subnet of a version wins; ``""``: none), as Neutron's L3 agent marks a leg."""
    out: dict[int, str] = {}
    for fixed in port.get("fixed_ips") or ():
        subnet = subnets.get(fixed.get("subnet_id") or "") or {}
        version = subnet.get("ip_version") or (6 if ":" in str(fixed.get("ip_address", "")) else 4)
        if version not in out:
            pool = pools.get(subnet.get("subnetpool_id") or "") or {}
            out[int(version)] = str(pool.get("address_scope_id") or "")
    return out


def from_api(router: Mapping[str, Any], ports: Iterable[Mapping[str, Any]],
             subnets: Mapping[str, Mapping[str, Any]],
             floatingips: Iterable[Mapping[str, Any]], names: Names,
             subnetpools: Mapping[str, Mapping[str, Any]] | None = None,
             metering: tuple[dict[str, Any], dict[str, Any]] | None = None,
             policies: Mapping[str, Mapping[str, Any]] | None = None) -> RouterSpec:
    """Build a router's :class:`RouterSpec` from Neutron JSON.

    ``ports`` and ``floatingips`` may be all of them: the router's own are picked by
    ``device_id``/``router_id``. Legs come from the router's ports (``device_owner``
    ``network:router_interface`` / ``network:router_gateway``), prefix lengths and
    gateways from ``subnets`` (by id), SNAT from ``external_gateway_info.enable_snat``
    (Neutron's default: true), floating IPs from those with this ``router_id`` and a
    ``port_id``, port forwardings from those with this ``router_id`` and
    ``port_forwardings``, extra routes from ``routes``, each leg's address scope from
    its subnet's pool in ``subnetpools``, the metering labels that apply to it from
    ``metering`` (labels by id, label rules by id), its floating IPs' bandwidth limits
    from their QoS ``policies`` (by id).
    """
    pools = subnetpools or {}
    rid = router["id"]
    floatingips = list(floatingips)
    legs: list[Leg] = []
    gateway: Gateway | None = None
    for port in ports:
        if port.get("device_id") != rid:
            continue
        owner = port.get("device_owner")
        if owner == ROUTER_INTERFACE:
            scopes = _scopes(port, subnets, pools)
            legs.append(Leg(names.router_interface(port["id"]), port["id"],
                            tuple(_cidrs(port, subnets)), scopes.get(4, ""), scopes.get(6, "")))
        elif owner == ROUTER_GATEWAY:
            gws, scopes = _subnet_gateways(port, subnets), _scopes(port, subnets, pools)
            gateway = Gateway(names.router_gateway(port["id"]), tuple(_cidrs(port, subnets)),
                              gateway_ip=gws.get(4), gateway_ip6=gws.get(6), port_id=port["id"],
                              scope=scopes.get(4, ""), scope6=scopes.get(6, ""))
    info = router.get("external_gateway_info") or {}
    enable_snat = bool(info) and info.get("enable_snat") is not False
    fips = tuple(
        FloatingIP(f["floating_ip_address"], f["fixed_ip_address"], f.get("id", ""))
        for f in floatingips
        if f.get("router_id") == rid and f.get("port_id") and f.get("fixed_ip_address")
        and f.get("floating_ip_address"))
    forwards = tuple(
        PortForward(f["floating_ip_address"], pf["protocol"], outside, pf["internal_ip_address"], inside)
        for f in floatingips if f.get("router_id") == rid and f.get("floating_ip_address")
        for pf in f.get("port_forwardings") or () if pf.get("protocol") in PORTED
        for outside, inside in _unrolled(pf))
    return RouterSpec(router_id=rid, ns=names.router(rid), gateway=gateway,
                      interfaces=tuple(legs), floating_ips=fips, enable_snat=enable_snat,
                      routes=tuple((r["destination"], r["nexthop"]) for r in router.get("routes") or ()),
                      port_forwards=forwards,
                      metering=labels_for(dict(router), *metering) if metering else (),
                      fip_limits=fip_limits(floatingips, rid, policies) if policies else ())
