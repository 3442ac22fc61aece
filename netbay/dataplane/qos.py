"""A port's QoS policy on its host end in the fabric: bandwidth limits and DSCP marks
(Neutron's ``qos``, applied where its Linux bridge agent applies them, on the tap).

Directions are the workload's, as in Neutron: ``egress`` is what the port sends, which
*enters* the host end; ``ingress`` is what it receives, which *leaves* it.

* ingress limit: a tbf root qdisc on the host end, through pyroute2 (no ``tc`` fork);
* egress limit: this kernel has no tc police action (``CONFIG_NET_ACT_POLICE`` unset)
  and no matchall, so what enters the host end is policed by nftables instead: a
  named ``limit`` object per limited port (``rate over … drop``), reached through a
  map keyed by the ingress port's name. nft's byte bucket holds one second of the
  rate on top of the burst, so a flow's first second may pass at up to twice the
  limit; the rate after it is the limit's;
* DSCP marks: a verdict map keyed by the ingress port's name jumps to one fixed chain
  per valid mark (``ip dscp set 26`` / ``ip6 dscp set 26``: nft cannot set a sub-byte
  field from a map's data).

Both maps live in one table of the fabric, ``bridge netbay-qos``, whose rules never
change: a limit or mark given, changed or taken away is an element (and a limit
object). A burst of 0 means 80% of the rate, as Neutron's agents take it, and never
less than a GSO packet (veths carry 64 KiB ones). Minimum bandwidth rules have no
dataplane (placement only, as in Neutron).
"""

from __future__ import annotations

import errno
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyroute2.netlink.exceptions import NetlinkError

from netbay.dataplane import links
from netbay.dataplane.nft import Nft, NftError

MIN_BURST = 128 * 1024        # bytes: a GSO packet and then some
LATENCY = "50ms"
TABLE = "netbay-qos"
_DSCP_MAP, _POLICE_MAP = "dscp", "police"
# neutron-lib's VALID_DSCP_MARKS: one chain each
DSCP_MARKS = (0, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34, 36, 38, 40, 44, 46, 48, 56)
_IFNAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")


@dataclass(frozen=True)
class PortQos:
    """What a port's policy asks of the dataplane (kbit/s, kbit; None: no such rule)."""
    egress_kbps: int | None = None
    egress_burst_kbit: int = 0
    ingress_kbps: int | None = None
    ingress_burst_kbit: int = 0
    dscp: int | None = None

    @property
    def empty(self) -> bool:
        return self.egress_kbps is None and self.ingress_kbps is None and self.dscp is None


def port_qos(port: Mapping[str, Any], networks: Mapping[str, Mapping[str, Any]],
             policies: Mapping[str, Mapping[str, Any]]) -> PortQos:
    """The port's own policy, else its network's (Neutron's precedence), as a PortQos.
    ``network:*`` ports (routers, DHCP) take no network policy, as in Neutron."""
    policy_id = port.get("qos_policy_id")
    if not policy_id and not str(port.get("device_owner") or "").startswith("network:"):
        policy_id = (networks.get(port.get("network_id") or "") or {}).get("qos_policy_id")
    policy = policies.get(policy_id or "")
    if policy is None:
        return PortQos()
    values: dict[str, Any] = {}
    for rule in policy.get("rules") or ():
        if rule.get("type") == "bandwidth_limit":
            direction = rule.get("direction") or "egress"
            values[f"{direction}_kbps"] = int(rule["max_kbps"])
            values[f"{direction}_burst_kbit"] = int(rule.get("max_burst_kbps") or 0)
        elif rule.get("type") == "dscp_marking":
            values["dscp"] = int(rule["dscp_mark"])
    return PortQos(**values)


def burst_bytes(kbps: int, burst_kbit: int) -> int:
    """A limit's bucket in bytes: the rule's burst, else 80% of the rate (Neutron's
    agents), never less than a GSO packet."""
    kbit = burst_kbit or int(kbps * 0.8)
    return max(kbit * 1000 // 8, MIN_BURST)


def shape(ns: str, ifname: str, kbps: int | None, burst_kbit: int = 0) -> None:
    """What leaves the host end ``ifname`` (the port's ingress) at most ``kbps``, by a
    tbf root qdisc; None: no limit (the qdisc goes). Idempotent."""
    ipr = links.ipr(ns)
    index = links.index(ns, ifname)
    if kbps is None:  # pyroute2 encodes a tbf's options even to delete it: any will do
        _del(ipr.tc, "del", "tbf", index, rate="1gbit", burst=MIN_BURST, latency=LATENCY)
        return
    try:
        ipr.tc("replace", "tbf", index, rate=f"{kbps}kbit", burst=burst_bytes(kbps, burst_kbit), latency=LATENCY)
    except NetlinkError as exc:
        raise links.LinkError(exc.code, f"shape {ifname} in {ns}: {exc}") from None


def _del(call: Any, *args: Any, **kwargs: Any) -> None:
    try:
        call(*args, **kwargs)
    except NetlinkError as exc:
        if exc.code not in (errno.ENOENT, errno.EINVAL, errno.ENODEV, errno.EOPNOTSUPP):
            raise links.LinkError(exc.code, f"tc {args[:2]}: {exc}") from None


# --- DSCP marks -------------------------------------------------------------------------


def _table_text() -> str:
    """The table, in nft's syntax (libnftables 1.0.6 cannot make limit objects nor their
    maps from JSON); idempotent, the chains' rules rewritten."""
    lines = [f"add table bridge {TABLE}",
             f"add map bridge {TABLE} {_POLICE_MAP} {{ type ifname : limit; }}",
             f"add map bridge {TABLE} {_DSCP_MAP} {{ type ifname : verdict; }}",
             f"add chain bridge {TABLE} prerouting {{ type filter hook prerouting priority -200; policy accept; }}",
             f"flush chain bridge {TABLE} prerouting",
             f"add rule bridge {TABLE} prerouting limit name iifname map @{_POLICE_MAP} drop",
             f"add rule bridge {TABLE} prerouting iifname vmap @{_DSCP_MAP}"]
    for mark in DSCP_MARKS:
        lines += [f"add chain bridge {TABLE} dscp{mark}", f"flush chain bridge {TABLE} dscp{mark}",
                  f"add rule bridge {TABLE} dscp{mark} ether type ip ip dscp set {mark}",
                  f"add rule bridge {TABLE} dscp{mark} ether type ip6 ip6 dscp set {mark}"]
    return "\n".join(lines) + "\n"


class FabricQos:
    """The fabric's QoS: :meth:`set_port` gives one host end its limits and mark."""

    def __init__(self, ns: str) -> None:
        self.ns = ns
        self._ready = False

    def _ensure(self, nft: Nft) -> None:
        if not self._ready:
            nft.run(_table_text())
            self._ready = True

    def set_port(self, ifname: str, qos: PortQos) -> None:
        """``ifname``'s egress limit and DSCP mark in nftables, its ingress limit by tc."""
        self.set_nft(ifname, qos)
        shape(self.ns, ifname, qos.ingress_kbps, qos.ingress_burst_kbit)

    def forget_port(self, ifname: str) -> None:
        """A port gone: its elements and limit object (its link took the qdisc along)."""
        self.set_nft(ifname, PortQos())

    def set_nft(self, ifname: str, qos: PortQos) -> None:
        if not _IFNAME.match(ifname):
            raise ValueError(f"not an interface name: {ifname!r}")
        if qos.dscp is not None and qos.dscp not in DSCP_MARKS:
            raise ValueError(f"DSCP mark {qos.dscp} is not one of {DSCP_MARKS}")
        with Nft(self.ns) as nft:
            self._ensure(nft)
            police, marks = self._elements(nft, _POLICE_MAP), self._elements(nft, _DSCP_MAP)
            limit = f"pl_{ifname}"
            lines = []
            if ifname in police:
                lines += [f'delete element bridge {TABLE} {_POLICE_MAP} {{ "{ifname}" }}',
                          f"delete limit bridge {TABLE} {limit}"]
            if ifname in marks:
                lines.append(f'delete element bridge {TABLE} {_DSCP_MAP} {{ "{ifname}" }}')
            if qos.egress_kbps is not None:
                rate = max(qos.egress_kbps * 1000 // 8, 1)
                burst = burst_bytes(qos.egress_kbps, qos.egress_burst_kbit)
                lines += [f"add limit bridge {TABLE} {limit} {{ rate over {rate} bytes/second burst {burst} bytes; }}",
                          f'add element bridge {TABLE} {_POLICE_MAP} {{ "{ifname}" : "{limit}" }}']
            if qos.dscp is not None:
                lines.append(f'add element bridge {TABLE} {_DSCP_MAP} {{ "{ifname}" : jump dscp{qos.dscp} }}')
            if lines:
                nft.run("\n".join(lines) + "\n")

    def marks(self) -> dict[str, int]:
        """{ifname: DSCP mark} as the kernel holds them (none before the table is made)."""
        with Nft(self.ns) as nft:
            return {k: int(v["jump"]["target"].removeprefix("dscp"))
                    for k, v in self._elements(nft, _DSCP_MAP).items()}

    def policed(self) -> set[str]:
        """The host ends whose egress is limited."""
        with Nft(self.ns) as nft:
            return set(self._elements(nft, _POLICE_MAP))

    @staticmethod
    def _elements(nft: Nft, name: str) -> dict[str, Any]:
        try:
            out = nft.run([{"list": {"map": {"family": "bridge", "table": TABLE, "name": name}}}])
        except NftError as exc:
            if "No such file" in exc.error:
                return {}
            raise
        for o in (out or {}).get("nftables", []):
            if "map" in o:
                return {k: v for k, v in o["map"].get("elem", [])}
        return {}


__all__ = ["DSCP_MARKS", "FabricQos", "PortQos", "burst_bytes", "port_qos", "shape"]
