"""A floating IP's QoS policy in its router namespace (Neutron's ``qos-fip``): the
bandwidth limits of the policy on the floating IP's traffic, where Neutron's L3 agent
puts them (its ``fip_qos`` extension: on the gateway leg, by the floating address).

Directions are the workload's, as for a port (:mod:`netbay.dataplane.qos`): ``ingress``
is what reaches the floating IP from outside, policed before DNAT (the destination is
still the floating address); ``egress`` is what leaves by it, policed after SNAT (the
source is the floating address by then). As the port's egress limit, each is an nft
``limit`` object (``rate over … drop``, the burst as :func:`qos.burst_bytes` makes it)
reached through a map keyed by the address, in one table of the router namespace,
``ip netbay-fipqos``. A limit's name carries its rate and burst, so the maps' elements
alone say what the table holds; a change of any limit rebuilds the table in one
transaction. DSCP and minimum-bandwidth rules have no meaning on a floating IP (Neutron's
L3 agent applies bandwidth limits only).

A namespace whose table this process knows to be absent and wanted absent costs no nft
call: routers without floating IP QoS pay nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from netbay.dataplane.nft import Nft
from netbay.dataplane.qos import burst_bytes, port_qos

TABLE = "netbay-fipqos"
FAMILY = "ip"
_MAPS = {"ingress": ("prerouting", "daddr", -160), "egress": ("postrouting", "saddr", 110)}
_ABSENT: set[str] = set()   # namespaces whose table is known absent (and wanted so)


@dataclass(frozen=True)
class FipLimit:
    """One floating IP's bandwidth limits (kbit/s, burst kbit; None: no limit)."""
    floating_ip_address: str
    ingress_kbps: int | None = None
    ingress_burst_kbit: int = 0
    egress_kbps: int | None = None
    egress_burst_kbit: int = 0


def fip_limits(floatingips: Iterable[Mapping[str, Any]], router_id: str,
               policies: Mapping[str, Mapping[str, Any]]) -> tuple[FipLimit, ...]:
    """The limits of the router's associated floating IPs that have a QoS policy with a
    bandwidth limit rule (the policy's rules read as a port's, :func:`qos.port_qos`)."""
    out = []
    for f in floatingips:
        if f.get("router_id") != router_id or not f.get("qos_policy_id") or not f.get("floating_ip_address"):
            continue
        # ``network:`` owner: a floating IP takes no network's policy, only its own
        q = port_qos({"qos_policy_id": f["qos_policy_id"], "device_owner": "network:floatingip"}, {}, policies)
        if q.ingress_kbps is not None or q.egress_kbps is not None:
            out.append(FipLimit(f["floating_ip_address"], q.ingress_kbps, q.ingress_burst_kbit,
                                q.egress_kbps, q.egress_burst_kbit))
    return tuple(sorted(out, key=lambda limit: limit.floating_ip_address))


def _wanted(limits: Sequence[FipLimit]) -> dict[str, dict[str, str]]:
    """{direction: {floating address: limit object name}}; the name carries the rate
    (bytes/s) and burst (bytes)."""
    out: dict[str, dict[str, str]] = {"ingress": {}, "egress": {}}
    for limit in limits:
        for direction, kbps, burst in (("ingress", limit.ingress_kbps, limit.ingress_burst_kbit),
                                       ("egress", limit.egress_kbps, limit.egress_burst_kbit)):
            if kbps is not None:
                rate = max(kbps * 1000 // 8, 1)
                name = f"{direction[:2]}_{limit.floating_ip_address.replace('.', '_')}_{rate}_{burst_bytes(kbps, burst)}"
                out[direction][limit.floating_ip_address] = name
    return out


def _present(objects: list[dict]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {"ingress": {}, "egress": {}}
    for o in objects:
        body = o.get("map")
        if body and body.get("name") in out:
            for key, value in body.get("elem") or ():
                out[body["name"]][str(key)] = str(value)
    return out


def _table_text(wanted: dict[str, dict[str, str]]) -> str:
    t = f"{FAMILY} {TABLE}"
    lines = [f"add table {t}", f"delete table {t}"]   # add+delete: gone, present or not
    if not any(wanted.values()):
        return "\n".join(lines) + "\n"
    lines.append(f"add table {t}")
    for direction, (hook, field, priority) in _MAPS.items():
        lines += [f"add map {t} {direction} {{ type ipv4_addr : limit; }}",
                  f"add chain {t} {hook} {{ type filter hook {hook} priority {priority}; policy accept; }}",
                  f"add rule {t} {hook} limit name ip {field} map @{direction} drop"]
        for address, name in sorted(wanted[direction].items()):
            rate, burst = name.rsplit("_", 2)[1:]
            lines += [f"add limit {t} {name} {{ rate over {rate} bytes/second burst {burst} bytes; }}",
                      f'add element {t} {direction} {{ {address} : "{name}" }}']
    return "\n".join(lines) + "\n"


def sync_fip_qos(ns: str, limits: Sequence[FipLimit]) -> None:
    """Make ``ns`` police its floating IPs' traffic as ``limits`` ask (none: no table)."""
    wanted = _wanted(limits)
    if not any(wanted.values()) and ns in _ABSENT:
        return
    with Nft(ns) as nft:
        objects = nft.list_table(FAMILY, TABLE)
        if objects is None and not any(wanted.values()):
            _ABSENT.add(ns)
            return
        if objects is None or _present(objects) != wanted:
            nft.run(_table_text(wanted))
    if any(wanted.values()):
        _ABSENT.discard(ns)
    else:
        _ABSENT.add(ns)


def forget(ns: str) -> None:
    """``ns`` is gone: what this process knew of it goes too."""
    _ABSENT.discard(ns)


__all__ = ["FipLimit", "fip_limits", "forget", "sync_fip_qos"]
