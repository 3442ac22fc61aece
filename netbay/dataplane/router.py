"""Router namespaces: forwarding between legs, SNAT to the external network, floating IPs.

The legs — veths ``qr-<port>`` (internal subnets) and ``qg-<port>`` (external
network) with the ports' MACs, addresses and MTU — are wired by the fabric. This
module works *inside* the router namespace only: forwarding sysctls, the default
route via the external subnet's gateway, the floating IPs as /32s on the ``qg-`` leg
(so the router answers ARP for them) and one nftables table, ``ip netbay-nat``.

The table's rules never change. Every fact — which device is the gateway and its
SNAT address, the internal subnets, the floating IPs — is a set or map element, so
associating or releasing a floating IP adds or deletes elements (one small nft
transaction), never rewrites a rule (and so do port forwardings and extra routes)::

    chain prerouting   (nat, dstnat)
        dnat to daddr . l4proto . dport map @pf_addr : ... map @pf_port   # port forwardings
        dnat to ip daddr map @fip_dnat                            # floating -> fixed
    chain postrouting  (nat, srcnat)
        oifname @gateway_ifs snat to ip saddr map @fip_snat       # fixed -> floating
        oifname @gateway_ifs ip saddr @scope_direct accept        # one address scope: no SNAT
        ip saddr @internal_subnets snat to oifname map @gateway_snat
        ct status dnat ip saddr @internal_subnets masquerade      # hairpin to a FIP
    chain forward      (filter)
        ct status dnat accept ; ct status snat accept             # NATed flows cross scopes
        iifname . oifname @scope_blocked drop                     # address scopes apart

``gateway_snat`` (gateway device -> its address) is empty when ``enable_snat`` is
false, so internal traffic leaves with its private source. Between two internal legs
nothing matches: plain routing. A sandbox reaching a floating IP of its own network
is masqueraded to the leg address, or the reply would bypass the router. IPv6 is
routed, never NATed (as in Neutron), and kept within its address scopes by a table of
its own (:mod:`netbay.dataplane.l3.scope6`). Releasing a floating IP also deletes its
conntrack entries, so established flows do not keep the old translation.

An ensure lists the table once, diffs its elements against the desired ones and
applies the difference in one transaction; a table that is missing or not exactly
ours is rebuilt atomically. Reads of links, addresses and routes go through the one
netlink codec (:mod:`netbay.dataplane.l3.rtdump` over :mod:`netbay.dataplane.rtnl`); writes
go through :mod:`links`. The parts live in :mod:`netbay.dataplane.l3`: the spec, the NAT
table, conntrack, the reads.

Verbs, all idempotent: :func:`ensure_router`, :func:`remove_router`,
:func:`observed_routers`; :func:`from_api` turns Neutron JSON into a :class:`RouterSpec`.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import socket
from collections.abc import Sequence

from netbay.dataplane import links, netns
from netbay.dataplane.names import Names
from netbay.dataplane.l3 import fipqos
from netbay.dataplane.l3.conntrack import forget_flows
from netbay.dataplane.l3.extraroutes import sync_extra_routes
from netbay.dataplane.l3.metering import MeterLabel, sync_metering
from netbay.dataplane.l3.nat import TABLE, desired_elements, sync_nft
from netbay.dataplane.l3.rtdump import default_routes, link_table, v4_addresses
from netbay.dataplane.l3.scope6 import sync_scope6
from netbay.dataplane.l3.spec import FloatingIP, Gateway, Leg, PortForward, RouterSpec, from_api

__all__ = [
    "Leg", "Gateway", "FloatingIP", "PortForward", "RouterSpec", "TABLE", "ensure_router", "ensure",
    "remove_router", "observed_routers", "from_api",
]

log = logging.getLogger(__name__)



# What Neutron's L3 agent sets in a router namespace. Set explicitly: a new namespace
# inherits the host's IPv4 values. arp_ignore=1: answer ARP only on the leg holding
# the address (the floating IPs on qg-); arp_announce=2: ARP from the leg's own address.
ROUTER_SYSCTLS = {
    "net.ipv4.ip_forward": "1",
    "net.ipv4.conf.all.arp_ignore": "1",
    "net.ipv4.conf.all.arp_announce": "2",
    "net.ipv6.conf.all.forwarding": "1",
}


def _sysctls(ns: str) -> None:
    for key, value in ROUTER_SYSCTLS.items():
        try:
            if links.read_sysctl(ns, key) != value:
                links.sysctl(ns, key, value)
        except links.LinkError as exc:
            if exc.errno != errno.ENOENT or ".ipv6." not in key:  # no IPv6: nothing to route
                raise


def _sync_floating_addresses(ns: str, gateway: Gateway, index: int,
                             floating: Sequence[str]) -> None:
    """The floating IPs as /32s on the gateway leg; other /32s we put there go."""
    own = {str(ipaddress.ip_interface(a)) for a in gateway.addresses}
    want = {f"{ipaddress.IPv4Address(f)}/32" for f in floating} - own
    have = {a for a in v4_addresses(ns, index) if a.endswith("/32")} - own
    for a in sorted(have - want):
        links.del_address(ns, index, a)
    for a in sorted(want - have):
        links.add_address(ns, index, a)
        _announce(ns, gateway.ifname, a.split("/")[0])


def _announce(ns: str, ifname: str, address: str) -> None:
    """Gratuitous ARP for a floating IP just added, as Neutron's L3 agent sends: a
    floating IP is often reused right after its previous router let it go, and the
    outside would keep sending replies to the old router's MAC for seconds."""
    from netbay.dataplane.garp import announce
    from netbay.dataplane.rtnl import rtnl

    try:
        link = rtnl(ns).link(ifname)
        if link is not None and link.address:
            announce(ns, ifname, link.address, address)
    except OSError as exc:   # best effort: neighbours re-resolve in time anyway
        log.debug("router namespace %s: gratuitous ARP for %s: %s", ns, address, exc)


def _syncdefault_routes(ns: str, gateway: Gateway | None, index: int | None) -> None:
    """One default route per family via the external subnet's gateway on the ``qg-`` leg;
    none without a gateway."""
    for family, gw in ((socket.AF_INET, gateway.gateway_ip if gateway else None),
                       (socket.AF_INET6, gateway.gateway_ip6 if gateway else None)):
        try:
            current = default_routes(ns, family)
        except links.LinkError:
            if family == socket.AF_INET6:
                continue  # no IPv6 in this kernel
            raise
        dst = "0.0.0.0/0" if family == socket.AF_INET else "::/0"
        keep = None
        if gw is not None and index is not None:
            addr = ipaddress.ip_address(gw)
            keep = next((r for r in current if r[0] == str(addr) and r[1] == index), None)
            if keep is None:
                nets = [ipaddress.ip_interface(a).network for a in gateway.addresses]
                onlink = not any(addr in n for n in nets if n.version == addr.version)
                links.replace_route(ns, "default", gateway=str(addr), dev=index, onlink=onlink)
                current = default_routes(ns, family)
                keep = next((r for r in current if r[0] == str(addr) and r[1] == index), None)
        for r in current:
            if r is keep:
                continue
            try:
                links.del_route(ns, dst, gateway=r[0], dev=r[1], metric=r[2])
            except links.LinkError as exc:
                if exc.errno not in (errno.ENOENT, errno.ESRCH):
                    raise


# --- verbs ---------------------------------------------------------------------------------


def ensure_router(ns: str, *, gateway: Gateway | None, interfaces: Sequence[Leg],
                  floating_ips: Sequence[FloatingIP], enable_snat: bool,
                  routes: Sequence[tuple[str, str]] = (),
                  port_forwards: Sequence[PortForward] = (),
                  metering: Sequence[MeterLabel] = (),
                  fip_limits: Sequence[fipqos.FipLimit] = ()) -> None:
    """Make router namespace ``ns`` forward between its legs and NAT to the outside.

    Creates ``ns`` if the fabric has not yet; sets forwarding; syncs the nft table's
    elements (rebuilding the table only if it is missing or not ours); puts the
    floating IPs on the gateway leg, routes by default via the external gateway and
    adds the extra ``routes`` (destination, nexthop); ``port_forwards`` are DNAT map
    elements, their floating IPs on the gateway leg too; ``metering`` labels count the
    gateway leg's traffic (:mod:`netbay.dataplane.l3.metering`); ``fip_limits`` police
    floating IPs' traffic (:mod:`netbay.dataplane.l3.fipqos`). Idempotent. Legs the fabric
    has not wired yet are reported at the end with :class:`links.LinkError` (ENODEV)
    after everything else was done; so are routes whose nexthop no leg reaches.
    """
    want = desired_elements(gateway, interfaces, floating_ips, enable_snat, port_forwards)
    netns.create(ns)
    _sysctls(ns)
    released = sync_nft(ns, want)
    fipqos.sync_fip_qos(ns, fip_limits)
    sync_scope6(ns, gateway, interfaces)

    present = link_table(ns)
    lo = present.get("lo")
    if lo is not None and not lo[1]:
        links.set_up(ns, lo[0])
    missing = [leg.ifname for leg in interfaces if leg.ifname not in present]
    gw_index = None
    if gateway is not None:
        if gateway.ifname not in present:
            missing.append(gateway.ifname)
        else:
            gw_index = present[gateway.ifname][0]
            floating = [f.floating_ip_address for f in floating_ips]
            floating += [pf.floating_ip_address for pf in port_forwards]
            _sync_floating_addresses(ns, gateway, gw_index, floating)
    _syncdefault_routes(ns, gateway, gw_index)
    sync_metering(ns, gateway.ifname if gw_index is not None and gateway is not None else None, metering)
    unreachable = sync_extra_routes(ns, routes)
    forget_flows(ns, released)
    if unreachable and not missing:
        raise links.LinkError(errno.ENETUNREACH, f"router namespace {ns!r}: no leg reaches the nexthop "
                                                 f"of the routes to {', '.join(unreachable)}")
    if missing:
        raise links.LinkError(errno.ENODEV, f"router namespace {ns!r}: legs not wired yet: "
                                            f"{', '.join(missing)}")


def ensure(spec: RouterSpec) -> None:
    """:func:`ensure_router` for a :class:`RouterSpec`."""
    ensure_router(spec.ns, gateway=spec.gateway, interfaces=spec.interfaces,
                  floating_ips=spec.floating_ips, enable_snat=spec.enable_snat, routes=spec.routes,
                  port_forwards=spec.port_forwards, metering=spec.metering, fip_limits=spec.fip_limits)


def remove_router(ns: str) -> bool:
    """Delete the router namespace (its legs, table and connections go with it)."""
    fipqos.forget(ns)
    return netns.delete(ns)


def observed_routers(names: Names) -> set[str]:
    """Ids of the routers whose namespaces exist (``<prefix>r-<id>``)."""
    head = names.router("")
    return {n[len(head):] for n in netns.list(head) if len(n) > len(head)}
