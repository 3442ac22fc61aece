"""The haproxy provider: one haproxy per load balancer, inside its namespace.

The configuration is rendered from the :class:`LoadBalancerSpec` alone (as
Octavia's amphora renders its template from the tree): a frontend per enabled
listener bound to the VIP (``mode http`` for HTTP, ``mode tcp`` for TCP and
HTTPS passthrough; PROMETHEUS listeners serve haproxy's exporter on ``/metrics``),
a backend per (listener, pool) it can reach (its default
pool and its L7 policies' pools, in the frontend's mode), a server per member
that takes traffic (enabled, weight > 0, not found down by the health monitor:
netbay's monitors decide, as for nftables, so statuses come from one place).

UDP and SCTP listeners are not haproxy's: the realizer hands them to the nftables
table beside it, as the amphora hands them to LVS.

An IPv6 VIP is bound as ``[addr]:port`` and its members reached as ``[addr]:port``;
as for nftables, a backend holds the members of the VIP's family only (the namespace
has an address of that family alone), and SOURCE_IP persistence keys an ``ipv6``
stick table.

The processes that run it are ``netbay.dataplane.lb.process.Haproxy``
(re-exported here with ``state_dir``).
"""

from __future__ import annotations

import resource
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from netbay.dataplane.lb.process import Haproxy, state_dir

if TYPE_CHECKING:
    from netbay.dataplane.lb.spec import (
        ListenerSpec,
        LoadBalancerSpec,
        MemberSpec,
        PoolSpec,
    )

# Octavia's default connection limit, within what this host lets a process open
# (haproxy needs two descriptors per connection and refuses to start otherwise).
MAXCONN = max(100, min(50000, (resource.getrlimit(resource.RLIMIT_NOFILE)[1] - 200) // 2))

_BALANCE = {"ROUND_ROBIN": "roundrobin", "LEAST_CONNECTIONS": "leastconn", "SOURCE_IP": "source"}
_MATCH = {"REGEX": "reg", "STARTS_WITH": "beg", "ENDS_WITH": "end", "CONTAINS": "sub", "EQUAL_TO": "str"}
_PROXY = {"PROXY": " send-proxy", "PROXYV2": " send-proxy-v2"}


# --- the configuration ---------------------------------------------------------------------------


def haproxy_listeners(spec: LoadBalancerSpec) -> list[ListenerSpec]:
    """The listeners haproxy serves (enabled, TCP-borne) of an enabled load balancer."""
    if not spec.enabled:
        return []
    return [li for li in spec.listeners if li.enabled and li.protocol == "tcp"]


def _acl(rule_id: str, rule_type: str, compare: str, key: str | None, value: str) -> str:
    m = _MATCH.get(compare, "str")
    if rule_type == "PATH":
        fetch = f"path -m {m}"
    elif rule_type == "HOST_NAME":
        fetch = f"req.hdr(host),field(1,:) -i -m {m}"
    elif rule_type == "HEADER":
        fetch = f"req.hdr({key}) -m {m}"
    elif rule_type == "COOKIE":
        fetch = f"req.cook({key}) -m {m}"
    elif rule_type == "FILE_TYPE":
        if compare == "EQUAL_TO":
            return f"    acl r_{rule_id} path_end -i .{value}"
        fetch = "path -m reg"
    else:
        raise ValueError(f"L7 rule type {rule_type} cannot be realized")
    return f"    acl r_{rule_id} {fetch} {value}"


def _hostport(address: str, port: int) -> str:
    """haproxy's ``addr:port``, an IPv6 address bracketed."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def _backend_name(listener: ListenerSpec, pool_id: str) -> str:
    return f"{listener.id}:{pool_id}"


def _frontend(spec: LoadBalancerSpec, li: ListenerSpec) -> tuple[list[str], list[str]]:
    """The frontend's lines and the pools its backends must exist for."""
    http = li.kind == "HTTP"
    client, _, _, inspect = li.timeouts
    out = [f"frontend {li.id}",
           f"    bind {_hostport(spec.vip_address, li.port)}",
           f"    mode {'http' if http or li.kind == 'PROMETHEUS' else 'tcp'}",
           f"    maxconn {min(li.connection_limit, MAXCONN) if li.connection_limit > 0 else MAXCONN}",
           f"    timeout client {client}"]
    if li.kind == "PROMETHEUS":   # haproxy's exporter on /metrics, as the amphora serves it
        if li.allowed_cidrs:
            out.append(f"    tcp-request connection reject unless {{ src {' '.join(li.allowed_cidrs)} }}")
        return out + ["    http-request use-service prometheus-exporter if { path /metrics }",
                      "    http-request reject"], []
    if li.allowed_cidrs:
        out.append(f"    tcp-request connection reject unless {{ src {' '.join(li.allowed_cidrs)} }}")
    if inspect > 0 and not http:
        out.append(f"    tcp-request inspect-delay {inspect}")
    headers = dict(li.insert_headers)
    if http:
        if str(headers.get("X-Forwarded-For", "")).lower() == "true":
            out.append("    option forwardfor")
        if str(headers.get("X-Forwarded-Port", "")).lower() == "true":
            out.append(f"    http-request set-header X-Forwarded-Port {li.port}")
        if str(headers.get("X-Forwarded-Proto", "")).lower() == "true":
            out.append("    http-request set-header X-Forwarded-Proto http")
    pools: list[str] = []
    deny, redirects, uses = [], [], []
    if http:
        for policy in sorted(li.l7policies, key=lambda p: p.position):
            rules = [r for r in policy.rules if r.enabled]
            if not policy.enabled or not rules:
                continue  # Octavia: a policy without rules matches nothing
            for r in rules:
                out.append(_acl(r.id, r.type, r.compare_type, r.key, r.value))
            cond = " ".join(("!" if r.invert else "") + f"r_{r.id}" for r in rules)
            if policy.action == "REJECT":
                deny.append(f"    http-request deny if {cond}")
            elif policy.action == "REDIRECT_TO_URL" and policy.url:
                redirects.append(f"    redirect location {policy.url} code {policy.code} if {cond}")
            elif policy.action == "REDIRECT_PREFIX" and policy.url:
                redirects.append(f"    redirect prefix {policy.url} code {policy.code} if {cond}")
            elif policy.action == "REDIRECT_TO_POOL" and policy.pool_id and spec.pool(policy.pool_id):
                uses.append(f"    use_backend {_backend_name(li, policy.pool_id)} if {cond}")
                pools.append(policy.pool_id)
    out += deny + redirects + uses
    if li.pool_id and spec.pool(li.pool_id) is not None:
        out.append(f"    default_backend {_backend_name(li, li.pool_id)}")
        pools.append(li.pool_id)
    return out, list(dict.fromkeys(pools))


def _backend(li: ListenerSpec, pool: PoolSpec, servers: Iterable[MemberSpec], v6: bool = False) -> list[str]:
    http = li.kind == "HTTP"
    _, connect, member, _ = li.timeouts
    out = [f"backend {_backend_name(li, pool.id)}",
           f"    mode {'http' if http else 'tcp'}",
           f"    balance {_BALANCE.get(pool.algorithm, 'roundrobin')}",
           f"    timeout connect {connect}",
           f"    timeout server {member}"]
    cookie = ""
    if pool.persistence == "SOURCE_IP":
        out += [f"    stick-table type {'ipv6' if v6 else 'ip'} size 10k", "    stick on src"]
    elif pool.persistence == "HTTP_COOKIE" and http:
        out.append("    cookie SRV insert indirect nocache")
    elif pool.persistence == "APP_COOKIE" and http and pool.cookie_name:
        out += ["    stick-table type string len 64 size 10k",
                f"    stick store-response res.cook({pool.cookie_name})",
                f"    stick match req.cook({pool.cookie_name})"]
    proxy = _PROXY.get(pool.protocol, "")
    for m in servers:
        if pool.persistence == "HTTP_COOKIE" and http:
            cookie = f" cookie {m.id}"
        backup = " backup" if m.backup else ""
        out.append(f"    server {m.id} {_hostport(m.address, m.port)} weight {min(m.weight, 256)}"
                   f"{cookie}{proxy}{backup}")
    return out


def render(spec: LoadBalancerSpec, run_dir: Path, in_map: Callable[[PoolSpec, MemberSpec], bool]) -> str:
    """The whole configuration; ``in_map(pool, member)`` says whether a member takes traffic."""
    lines = ["# netbay: rendered from the load balancer's tree; rewritten on every change",
             "global",
             f"    maxconn {MAXCONN}",
             f"    stats socket {run_dir / 'stats.sock'} mode 600 level admin",
             "    hard-stop-after 60s",
             "",
             "defaults",
             "    retries 3",
             "    option redispatch",
             "    timeout queue 5s",
             "    timeout http-request 10s",
             ""]
    v6 = ":" in spec.vip_address
    for li in haproxy_listeners(spec):
        front, pool_ids = _frontend(spec, li)
        lines += front + [""]
        for pool_id in pool_ids:
            pool = spec.pool(pool_id)
            if pool is None:
                continue
            servers = [m for m in pool.members if pool.enabled and in_map(pool, m) and (":" in m.address) == v6]
            lines += _backend(li, pool, servers, v6) + [""]
    return "\n".join(lines)


__all__ = ["Haproxy", "haproxy_listeners", "render", "state_dir"]
