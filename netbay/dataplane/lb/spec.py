"""A load balancer's desired state as plain data, built from the API's JSON.

``from_api`` turns one load balancer's Octavia JSON (the agent's state tables:
listeners, pools, members, health monitors, L7 policies and rules) into a
frozen :class:`LoadBalancerSpec`; the realizers (nftables in
``netbay.dataplane.loadbalancer``, haproxy in ``netbay.dataplane.lb.haproxy``)
work from that alone.
"""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from netbay.dataplane.names import Names

NFTABLES = "nftables"
HAPROXY = "haproxy"
# Provider names (as the load balancer keeps them) realized by haproxy; every
# other name is nftables (netbay.lbaas.providers says the same for the API).
HAPROXY_PROVIDERS = frozenset({"haproxy", "amphora", "octavia"})


# --- desired state -----------------------------------------------------------------------


@dataclass(frozen=True)
class MonitorSpec:
    id: str
    type: str                      # TCP | HTTP | HTTPS | TLS-HELLO | PING | UDP-CONNECT | SCTP
    delay: float
    timeout: float
    max_retries: int               # rise: successes to come back
    max_retries_down: int          # fall: failures to go down
    enabled: bool = True
    http_method: str = "GET"
    url_path: str = "/"
    expected_codes: str = "200"


@dataclass(frozen=True)
class MemberSpec:
    id: str
    address: str
    port: int
    weight: int = 1
    enabled: bool = True
    monitor_address: str | None = None
    monitor_port: int | None = None
    backup: bool = False           # takes traffic only while no other member can (HAProxy's ``backup``)

    @property
    def probe_target(self) -> tuple[str, int]:
        return self.monitor_address or self.address, self.monitor_port or self.port


@dataclass(frozen=True)
class PoolSpec:
    id: str
    algorithm: str = "ROUND_ROBIN"
    enabled: bool = True
    members: tuple[MemberSpec, ...] = ()
    monitor: MonitorSpec | None = None
    protocol: str = "TCP"                    # Octavia's pool protocol (PROXY: send the header)
    persistence: str | None = None           # SOURCE_IP | HTTP_COOKIE | APP_COOKIE
    cookie_name: str | None = None

    @property
    def monitored(self) -> bool:
        return self.monitor is not None and self.monitor.enabled


@dataclass(frozen=True)
class L7RuleSpec:
    id: str
    type: str                      # PATH | HOST_NAME | HEADER | COOKIE | FILE_TYPE
    compare_type: str
    value: str
    key: str | None = None
    invert: bool = False
    enabled: bool = True


@dataclass(frozen=True)
class L7PolicySpec:
    id: str
    action: str                    # REJECT | REDIRECT_TO_URL | REDIRECT_PREFIX | REDIRECT_TO_POOL
    position: int = 1
    enabled: bool = True
    pool_id: str | None = None
    url: str | None = None         # the URL or prefix of a redirect
    code: int = 302
    rules: tuple[L7RuleSpec, ...] = ()


@dataclass(frozen=True)
class ListenerSpec:
    id: str
    protocol: str                  # tcp | udp | sctp (what the port is matched with)
    port: int
    enabled: bool = True
    pool_id: str | None = None
    kind: str = "TCP"              # Octavia's listener protocol (HTTP is parsed by haproxy)
    connection_limit: int = -1
    timeouts: tuple[int, int, int, int] = (50000, 5000, 50000, 0)  # client, connect, member, inspect (ms)
    allowed_cidrs: tuple[str, ...] = ()
    insert_headers: tuple[tuple[str, str], ...] = ()
    l7policies: tuple[L7PolicySpec, ...] = ()


@dataclass(frozen=True)
class LoadBalancerSpec:
    """Everything one load balancer's namespace holds, as plain data."""
    id: str
    ns: str
    vip_address: str
    enabled: bool = True
    driver: str = NFTABLES         # nftables | haproxy (from the provider)
    listeners: tuple[ListenerSpec, ...] = ()
    pools: tuple[PoolSpec, ...] = ()
    # (destination CIDR, next hop): the VIP subnet's default route and host routes
    routes: tuple[tuple[str, str], ...] = ()

    def pool(self, pool_id: str | None) -> PoolSpec | None:
        return next((p for p in self.pools if p.id == pool_id), None)


# --- from the API's JSON ---------------------------------------------------------------------


#: Listener protocols the kernel forwards under either provider (the amphora hands them
#: to LVS, not haproxy); anything else is matched as TCP (HTTP is forwarded as TCP).
KERNEL_PROTOCOLS = {"UDP": "udp", "SCTP": "sctp"}


def l4_protocol(listener_protocol: str | None) -> str:
    """What a listener's port is matched with in nftables (``tcp``, ``udp`` or ``sctp``)."""
    return KERNEL_PROTOCOLS.get(str(listener_protocol), "tcp")


def _first_id(refs: Any) -> str | None:
    if isinstance(refs, list) and refs and isinstance(refs[0], dict):
        return refs[0].get("id")
    return None


@dataclass
class Tree:
    """Children by parent, built once per batch from the state's flat tables."""
    listeners: dict[str, list[dict]] = field(default_factory=lambda: defaultdict(list))
    pools: dict[str, list[dict]] = field(default_factory=lambda: defaultdict(list))
    members: dict[str, list[dict]] = field(default_factory=lambda: defaultdict(list))
    monitors: dict[str, dict] = field(default_factory=dict)
    l7policies: dict[str, list[dict]] = field(default_factory=lambda: defaultdict(list))
    l7rules: dict[str, dict] = field(default_factory=dict)

    @classmethod
    def build(cls, tables: Mapping[str, Mapping[str, dict]]) -> Tree:
        tree = cls()
        for listener in (tables.get("listeners") or {}).values():
            lb = _first_id(listener.get("loadbalancers"))
            if lb:
                tree.listeners[lb].append(listener)
        for pool in (tables.get("pools") or {}).values():
            lb = _first_id(pool.get("loadbalancers"))
            if lb:
                tree.pools[lb].append(pool)
        for member in (tables.get("members") or {}).values():
            if member.get("pool_id"):
                tree.members[member["pool_id"]].append(member)
        for monitor in (tables.get("healthmonitors") or {}).values():
            pool_id = _first_id(monitor.get("pools"))
            if pool_id:
                tree.monitors[pool_id] = monitor
        for policy in (tables.get("l7policies") or {}).values():
            if policy.get("listener_id"):
                tree.l7policies[policy["listener_id"]].append(policy)
        tree.l7rules = dict(tables.get("l7rules") or {})
        return tree

    def policies(self, listener_id: str) -> tuple[L7PolicySpec, ...]:
        out = []
        for p in sorted(self.l7policies.get(listener_id, ()), key=lambda p: (p.get("position") or 0, p["id"])):
            rules = tuple(
                L7RuleSpec(id=r["id"], type=str(r.get("type")), compare_type=str(r.get("compare_type")),
                           value=str(r.get("value") or ""), key=r.get("key"), invert=bool(r.get("invert")),
                           enabled=bool(r.get("admin_state_up", True)))
                for r in (self.l7rules.get(ref.get("id")) for ref in p.get("rules") or ()) if r is not None)
            out.append(L7PolicySpec(
                id=p["id"], action=str(p.get("action")), position=int(p.get("position") or 1),
                enabled=bool(p.get("admin_state_up", True)), pool_id=p.get("redirect_pool_id"),
                url=p.get("redirect_url") or p.get("redirect_prefix"), code=int(p.get("redirect_http_code") or 302),
                rules=rules))
        return tuple(out)


def _order(objs: Iterable[dict]) -> list[dict]:
    return sorted(objs, key=lambda o: (o.get("created_at") or "", o["id"]))


def _monitor(m: dict | None) -> MonitorSpec | None:
    if m is None:
        return None
    return MonitorSpec(
        id=m["id"], type=str(m.get("type") or "TCP"), delay=float(m.get("delay") or 0),
        timeout=float(m.get("timeout") or 0), max_retries=int(m.get("max_retries") or 1),
        max_retries_down=int(m.get("max_retries_down") or 3), enabled=bool(m.get("admin_state_up", True)),
        http_method=str(m.get("http_method") or "GET"), url_path=str(m.get("url_path") or "/"),
        expected_codes=str(m.get("expected_codes") or "200"))


def _vip_routes(lb: dict, ports: Mapping[str, dict], subnets: Mapping[str, dict]) -> tuple[tuple[str, str], ...]:
    """The VIP subnet's gateway as default route (of its family), and its host routes."""
    subnet = subnets.get(lb.get("vip_subnet_id") or "")
    if subnet is None:
        port = ports.get(lb.get("vip_port_id") or "") or {}
        fixed = next((f for f in port.get("fixed_ips") or () if f.get("ip_address") == lb.get("vip_address")), None)
        subnet = subnets.get((fixed or {}).get("subnet_id") or "")
    if subnet is None:
        return ()
    out: list[tuple[str, str]] = []
    family = ipaddress.ip_network(subnet["cidr"], strict=False).version if subnet.get("cidr") else 4
    gw = subnet.get("gateway_ip")
    if gw and ipaddress.ip_address(gw).version == family:
        out.append(("0.0.0.0/0" if family == 4 else "::/0", gw))
    for hr in subnet.get("host_routes") or ():
        dst = ipaddress.ip_network(hr["destination"], strict=False)
        if dst.version == family:
            out.append((str(dst), hr["nexthop"]))
    return tuple(dict.fromkeys(out))


def from_api(lb: dict, tree: Tree, ports: Mapping[str, dict], subnets: Mapping[str, dict],
             names: Names) -> LoadBalancerSpec:
    """A load balancer's :class:`LoadBalancerSpec` from Octavia JSON (the state's tables)."""
    pools = []
    for pool in _order(tree.pools.get(lb["id"], ())):
        members = tuple(
            MemberSpec(id=m["id"], address=m["address"], port=int(m["protocol_port"]),
                       weight=int(m.get("weight", 1) if m.get("weight") is not None else 1),
                       enabled=bool(m.get("admin_state_up", True)),
                       monitor_address=m.get("monitor_address") or None,
                       monitor_port=m.get("monitor_port") or None,
                       backup=bool(m.get("backup", False)))
            for m in _order(tree.members.get(pool["id"], ())))
        sp = pool.get("session_persistence") or {}
        pools.append(PoolSpec(id=pool["id"], algorithm=str(pool.get("lb_algorithm") or "ROUND_ROBIN"),
                              enabled=bool(pool.get("admin_state_up", True)), members=members,
                              monitor=_monitor(tree.monitors.get(pool["id"])),
                              protocol=str(pool.get("protocol") or "TCP"), persistence=sp.get("type"),
                              cookie_name=sp.get("cookie_name")))
    listeners = tuple(
        ListenerSpec(id=li["id"], protocol=l4_protocol(li.get("protocol")),
                     port=int(li["protocol_port"]), enabled=bool(li.get("admin_state_up", True)),
                     pool_id=li.get("default_pool_id"), kind=str(li.get("protocol") or "TCP"),
                     connection_limit=int(li.get("connection_limit") if li.get("connection_limit") is not None
                                          else -1),
                     timeouts=tuple(int(li.get(k) or d) for k, d in (
                         ("timeout_client_data", 50000), ("timeout_member_connect", 5000),
                         ("timeout_member_data", 50000), ("timeout_tcp_inspect", 0))),
                     allowed_cidrs=tuple(li.get("allowed_cidrs") or ()),
                     insert_headers=tuple(sorted((li.get("insert_headers") or {}).items())),
                     l7policies=tree.policies(li["id"]))
        for li in _order(tree.listeners.get(lb["id"], ())))
    driver = HAPROXY if lb.get("provider") in HAPROXY_PROVIDERS else NFTABLES
    return LoadBalancerSpec(id=lb["id"], ns=names.loadbalancer(lb["id"]), vip_address=str(lb.get("vip_address") or ""),
                            enabled=bool(lb.get("admin_state_up", True)), listeners=listeners,
                            pools=tuple(pools), routes=_vip_routes(lb, ports, subnets), driver=driver)


__all__ = ["HAPROXY", "NFTABLES", "L7PolicySpec", "L7RuleSpec", "ListenerSpec", "LoadBalancerSpec",
           "MemberSpec", "MonitorSpec", "PoolSpec", "Tree", "from_api"]
