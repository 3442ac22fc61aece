"""Plug a pod into its node: the one attach/detach step every container path uses.

The flannel and calico drivers, the Docker driver and the CNI plugin all call
:func:`attach` and :func:`detach` — like the CNI reference ``bridge`` and calico's
``cni-plugin``, reduced to one job:

* **bridged** (``bridge="cni0"``, flannel): a veth whose host end ``veth<hash>`` is
  a port of the node's bridge and whose other end is ``ifname`` in the pod, with
  ``address`` (the lease's prefix), MTU, and a default route via ``gateway`` (the
  lease's first address, on the bridge); on a dual-stack node also ``address6``
  (the IPv6 lease's prefix, no duplicate address detection: the lease made it
  unique) and a default IPv6 route via ``gateway6``.
* **routed** (``bridge=None``, calico): no bridge; the host end ``cali<hash>`` has
  the fixed MAC ``ee:ee:ee:ee:ee:ee`` as in calico; the pod has ``address`` as a
  /32, a link route to ``gateway`` (``169.254.1.1``, calico's dummy next hop), a
  default route via it, and a permanent neighbour entry ``169.254.1.1 →
  ee:ee:ee:ee:ee:ee``. Calico answers that ARP by proxy-ARP on the host end;
  netbay writes the entry instead, so the pod's first packet needs no ARP round
  trip and the node needs no route covering 169.254.1.1. The node gets
  ``address/32 dev cali<hash> scope link``. The node resolves the pod by ARP from
  one of its own IPv4 addresses (a cluster node has eth0's): a node namespace
  without any IPv4 address cannot reach its routed pods.

The pair gets BIG TCP (:mod:`netbay.dataplane.bigtcp`), and so does a bridge once it
has a port, where this host's probe found it faster on the pod's path
(``pod-bridged`` for flannel, ``pod-routed`` for calico): a pod's TCP then builds
packets as large as its node's own. On some kernel builds the node cuts them up again
in software where they leave through its 64 KiB ``eth0``, and the pod gets a third
of the node's throughput; there the probe keeps the kernel's default. Never where the
pod's traffic leaves through a VXLAN device (``big_packets=False``, ``pod-vxlan``):
packets above 64 KiB do not survive encapsulation.

Both are idempotent (attaching again converges addresses, MTU and routes and
changes nothing that is right), both use :mod:`netbay.dataplane.rtnl` (no forks,
about ten netlink requests for a new pod). The pod namespace is created if absent;
:func:`detach` deletes the veth (both ends, and with it the node's /32 route), not
the pod namespace, which belongs to whoever made the pod.
"""

from __future__ import annotations

import errno
import hashlib
import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING

from netbay.dataplane import bigtcp, netns, veth
from netbay.dataplane import rtnl as kernel
from netbay.dataplane.rtnl import LinkError, rtnl

if TYPE_CHECKING:
    from netbay.dataplane.rtnl import Rtnl

__all__ = ["Bridged", "PodLink", "attach", "detach", "plug_for_runtime", "gso_path", "host_ifname", "ROUTED_GATEWAY", "ROUTED_MAC", "ROUTED_GATEWAY6"]

ROUTED_GATEWAY = "169.254.1.1"
ROUTED_MAC = "ee:ee:ee:ee:ee:ee"
ROUTED_GATEWAY6 = "fe80::ecee:eeff:feee:eeee"   # calico's IPv6 next hop: the link-local of ROUTED_MAC
RTPROT_BOOT = 3


def host_ifname(pod_ns: str, ifname: str = "eth0", prefix: str = "veth") -> str:
    """The node-side name of a pod's veth: ``prefix`` + 11 hex of a hash of the pod
    namespace and interface (15 characters at most), stable, so detach finds it."""
    return prefix + hashlib.sha1(f"{pod_ns}/{ifname}".encode()).hexdigest()[:15 - len(prefix)]


@dataclass(frozen=True)
class PodLink:
    node_ns: str
    pod_ns: str
    ifname: str          # inside the pod
    host_ifname: str     # inside the node
    index: int           # ifindex of ``ifname`` in the pod
    address: str         # CIDR in the pod
    gateway: str
    mtu: int
    bridge: str | None
    address6: str | None = None   # the pod's IPv6 CIDR on a dual-stack node


def attach(node_ns: str, pod_ns: str, *, ifname: str = "eth0", address: str, gateway: str,
           mtu: int, bridge: str | None = "cni0", host_if: str | None = None,
           big_packets: bool = True, underlay: str | None = None,
           address6: str | None = None, gateway6: str | None = None) -> PodLink:
    """Connect ``pod_ns`` to ``node_ns``: see the module docstring. ``address`` is a
    CIDR (``10.100.3.5/24``; routed mode uses the address as a /32 whatever the
    prefix). ``big_packets``: False where the pod's traffic leaves through a tunnel
    that cannot carry BIG TCP; otherwise the pair (and the bridge) follow this host's
    decision for the pod's path (:func:`gso_path`), but never above the GSO limit of
    the node's ``underlay`` link (its ``eth0``) when given: a larger packet would be
    cut up in software where it leaves the node. ``address6``/``gateway6``: the pod's
    IPv6 CIDR and gateway on a dual-stack bridged node. Returns the :class:`PodLink`.
    Idempotent."""
    if address6 is not None and gateway6 is None:
        raise ValueError("an IPv6 pod address needs an IPv6 gateway")
    iface = ipaddress.ip_interface(address)
    routed = bridge is None
    if routed:
        iface = ipaddress.ip_interface(f"{iface.ip}/32")
    host = host_if or host_ifname(pod_ns, ifname, "cali" if routed else "veth")
    fresh = netns.create(pod_ns)
    node = rtnl(node_ns)
    master = None
    if not routed:
        br = node.link(bridge)
        if br is None:
            raise LinkError(errno.ENODEV, f"bridge {bridge!r} missing in node namespace {node_ns!r}")
        master = br.index
    path = gso_path(routed, big_packets)
    ceiling = _underlay_gso(node, underlay)
    created = False
    for _ in range(2):   # once more without BIG TCP if the kernel refuses it
        gso = _capped(bigtcp.gso_max_size(path), ceiling)
        try:
            node.add_veth(host, ifname, pod_ns, mtu=mtu, master=master, up=True, gso_max_size=gso)
            created = True
            break
        except LinkError as exc:
            if bigtcp.refused(exc, gso):
                continue
            if exc.errno != errno.EEXIST:
                raise
            break
    if not created:
        _adopt(node_ns, pod_ns, host, ifname, mtu, master, _capped(bigtcp.gso_max_size(path), ceiling))
    elif not routed and gso and br.gso_max_size != gso:
        kernel.allow_big_packets(node_ns, node.link(index=br.index), path)   # its first port: now it can
    if routed:
        hl = node.link(host)
        assert hl is not None
        if (hl.address or "") != ROUTED_MAC:
            node.set_link(hl.index, mac=ROUTED_MAC)
    pod = rtnl(pod_ns)
    if fresh:
        pod.set_link(1, up=True)   # lo is ifindex 1 in a new namespace
    else:
        lo = pod.link("lo")
        if lo is not None and not lo.up:
            pod.set_link(lo.index, up=True)
    link = pod.link(ifname)
    if link is None:
        raise LinkError(errno.ENODEV, f"{ifname!r} vanished in pod namespace {pod_ns!r}")
    idx = link.index
    if link.mtu != mtu:
        pod.set_link(idx, mtu=mtu)
    if not link.up:
        pod.set_link(idx, up=True)
    if created:
        # The kernel enables the bridge port (and the veth's queue) asynchronously, by
        # linkwatch, after carrier-on; a first ARP sent before is lost and costs its
        # sender a second. So, as the fabric does: no address until both ends are up.
        veth.await_carrier(pod, idx, node, host)
    want = str(iface)
    want6 = str(ipaddress.IPv6Interface(address6)) if address6 else None
    if want6 and routed:
        want6 = f"{ipaddress.IPv6Interface(want6).ip}/128"
    if not created:
        for cidr in pod.addresses(idx):
            old = ipaddress.ip_interface(cidr)
            # IPv6 ones only when this attach manages the pod's IPv6 (others may add theirs)
            if cidr not in (want, want6) and (old.version == 4 or (want6 and not old.is_link_local)):
                pod.del_address(idx, cidr)
    pod.add_address(idx, want)
    if want6:
        pod.add_address(idx, want6)
        # Until the kernel routes it locally, what answers the pod's first packets is dropped
        # (a third of first IPv6 connects waited a second for their neighbour before this).
        veth.await_delivery(pod, want6.split("/")[0])
    if routed:
        kernel.add_route(pod_ns, kernel.KRoute(f"{gateway}/32", oif=idx, proto=RTPROT_BOOT))
        kernel.add_neighbour(pod_ns, idx, gateway, ROUTED_MAC)
        pod.replace_route("0.0.0.0/0", gateway=gateway, oif=idx, onlink=True)
        hidx = node.link(host).index
        kernel.add_route(node_ns, kernel.KRoute(f"{iface.ip}/32", oif=hidx, proto=RTPROT_BOOT))
        if want6 and gateway6:
            # As for IPv4: permanent neighbours both ways, so neither side waits for its
            # link-local address's duplicate address detection to resolve the other.
            kernel.add_neighbour(pod_ns, idx, gateway6, ROUTED_MAC)
            pod.replace_route("::/0", gateway=gateway6, oif=idx)
            ip6 = want6.split("/")[0]
            kernel.add_route(node_ns, kernel.KRoute(f"{ip6}/128", oif=hidx, proto=RTPROT_BOOT))
            if link.address:
                kernel.add_neighbour(node_ns, hidx, ip6, link.address)
    else:
        onlink = ipaddress.ip_address(gateway) not in iface.network
        pod.replace_route("0.0.0.0/0", gateway=gateway, oif=idx, onlink=onlink)
        if want6 and gateway6:
            pod.replace_route("::/0", gateway=gateway6, oif=idx)
    return PodLink(node_ns=node_ns, pod_ns=pod_ns, ifname=ifname, host_ifname=host, index=idx,
                   address=want, gateway=gateway, mtu=mtu, bridge=bridge, address6=want6)


def _underlay_gso(node: Rtnl, underlay: str | None) -> int | None:
    link = node.link(underlay) if underlay else None
    return link.gso_max_size if link is not None and link.gso_max_size else None


def _capped(gso: int | None, ceiling: int | None) -> int | None:
    """``gso``, or the kernel's default where the node's way out takes less."""
    return None if gso and ceiling and ceiling < gso else gso


def gso_path(routed: bool, big_packets: bool = True) -> str:
    """The path (:data:`netbay.dataplane.bigtcp.PATHS`) whose BIG TCP decision a pod's
    veth follows: calico's routed pods, flannel's bridged ones, or behind a VXLAN device."""
    if not big_packets:
        return "pod-vxlan"
    return "pod-routed" if routed else "pod-bridged"


def _adopt(node_ns: str, pod_ns: str, host: str, ifname: str, mtu: int, master: int | None,
           gso: int | None) -> None:
    """After EEXIST: keep the pair if it is ours, else say what is in the way."""
    node, pod = rtnl(node_ns), rtnl(pod_ns)
    hl, pl = node.link(host), pod.link(ifname)
    if hl is not None and hl.kind == "veth" and pl is not None and pl.kind == "veth":
        if (master is not None and hl.master != master) or not hl.up or hl.mtu != mtu:
            node.set_link(hl.index, master=master if hl.master != master else None,
                          up=True if not hl.up else None, mtu=mtu if hl.mtu != mtu else None)
        return
    if hl is not None and pl is None and hl.kind == "veth":
        # A half-made pair (its pod end is elsewhere): replace it.
        node.delete_link(host)
        node.add_veth(host, ifname, pod_ns, mtu=mtu, master=master, up=True, gso_max_size=gso)
        return
    raise LinkError(errno.EEXIST, f"cannot attach {pod_ns}:{ifname} to {node_ns}:{host}: "
                                  f"{'an' if hl else 'no'} {host} ({hl.kind if hl else '-'}) in the node, "
                                  f"{'an' if pl else 'no'} {ifname} ({pl.kind if pl else '-'}) in the pod")


@dataclass(frozen=True)
class Bridged:
    """Where a bridged driver plugs a pod on one node: what :func:`attach` is given."""
    bridge: str
    prefixlen: int       # of the pod's address (flannel: the lease's; docker overlay: the subnet's)
    gateway: str
    mtu: int
    big_packets: bool
    underlay: str = "eth0"


def plug_for_runtime(node_ns: str, key: str, inner: str, where: Bridged, *, mac: str | None = None) -> str:
    """A pod's veth for a container runtime that configures the inside itself (Docker:
    it moves ``inner`` into the container at Join and gives it the address and
    gateway the plugin answered). The node end is made as :func:`attach` makes it —
    ``veth<hash of key>``, a port of ``where.bridge``, the pod's MTU and BIG TCP
    decision — so :func:`detach` (``pod_ns=key``) removes it. ``inner`` is made in
    the host namespace, for the runtime to move at once. Returns ``inner``. A pair
    in the way (a retry, a crash) is replaced."""
    node = rtnl(node_ns)
    br = node.link(where.bridge)
    if br is None:
        raise LinkError(errno.ENODEV, f"bridge {where.bridge!r} missing in node namespace {node_ns!r}")
    host = host_ifname(key)
    path = gso_path(False, where.big_packets)
    ceiling = _underlay_gso(node, where.underlay)

    def clear() -> None:
        node.delete_link(host)
        veth.delete_host_end(inner)

    gso = veth.make_pair(node, host, inner, None, mtu=where.mtu, peer_mac=mac, master=br.index, up=True,
                         gso_path=path, gso_ceiling=lambda gso: _capped(gso, ceiling), clear=clear)
    if gso and br.gso_max_size != gso:
        kernel.allow_big_packets(node_ns, node.link(index=br.index), path)
    return inner


def detach(node_ns: str, pod_ns: str, *, ifname: str = "eth0", host_if: str | None = None) -> bool:
    """Remove the pod's veth (both ends; a routed pod's /32 route goes with it).
    True if something was deleted. Idempotent; the pod namespace stays."""
    names = [host_if] if host_if else [host_ifname(pod_ns, ifname, "veth"), host_ifname(pod_ns, ifname, "cali")]
    if not netns.exists(node_ns):
        return False
    node = rtnl(node_ns)
    return any([node.delete_link(n) for n in names])
