"""Amphorae: Octavia's admin view of what runs a load balancer, over netbay's namespaces.

A load balancer of the haproxy provider (``amphora``, ``octavia``, ``haproxy``)
is realized by haproxy in one network namespace on this machine: that namespace
is its one amphora (topology ``SINGLE``, role ``STANDALONE``, status
``ALLOCATED``, or ``ERROR`` while its load balancer is). Nothing is stored for it;
each field is derived:

- ``id``: a name-based UUID of the load balancer and its last failover, so a
  failover (which rebuilds the namespace) brings a new amphora id, as Octavia's
  replacement amphora has one; ``created_at`` is when that amphora was built;
- ``ha_ip``/``vrrp_ip`` are the VIP, ``ha_port_id``/``vrrp_port_id`` the VIP port
  (the namespace's one leg); ``compute_id`` names the namespace as a UUID;
- management, certificate and VRRP fields are null: there is no management
  network, no agent certificate and no VRRP pair here.

Load balancers of the nftables provider (``ovn``…) have no amphora, as OVN's have none.

``DELETE`` (API 2.20) removes an amphora in ``ERROR`` only, as Octavia 2025.1 does
(any other status: 409 ``ImmutableObject``). The deleted amphora is recorded as an
``amphora_delete`` change of its load balancer and is listed no more; the load
balancer's next failover brings a new one. The dataplane is not told: the namespace
of a load balancer in ``ERROR`` is whatever its failed realization left.
Octavia's default policy gives the amphora API to load-balancer admins only.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import BadRequest, Conflict
from netbay.lbaas.common import ERROR, not_found, octavia_time
from netbay.lbaas.failover import failover
from netbay.lbaas.loadbalancers import LOADBALANCERS
from netbay.lbaas.providers import HAPROXY, PROVIDERS
from netbay.store.models import Change, LBListener, LBListenerStats, LoadBalancer

# The namespace of amphora UUIDs (uuid5 of "<load balancer id>:<failover revision>").
AMPHORA_NS = uuid.UUID("0c3f5a52-6d7e-4b36-9a55-6f0e3b6f2d10")
HAPROXY_NAMES = tuple(name for name, (p, _) in PROVIDERS.items() if p.driver == HAPROXY)
FIELDS = ("id", "loadbalancer_id", "compute_id", "lb_network_ip", "vrrp_ip", "ha_ip", "vrrp_port_id",
          "ha_port_id", "cert_expiration", "cert_busy", "role", "status", "vrrp_interface", "vrrp_id",
          "vrrp_priority", "cached_zone", "created_at", "updated_at", "image_id", "compute_flavor")


# The load balancer's changes that end its amphora: a failover replaces it, a delete removes it.
AMPHORA_ACTIONS = ("failover", "amphora_delete")


def _failovers(session: Session, lb_ids: list[str]) -> dict[str, tuple[int, datetime, str]]:
    """Each load balancer's last failover or amphora delete: the change's revision, time, action."""
    if not lb_ids:
        return {}
    last = (select(Change.resource_id, func.max(Change.revision).label("rev"))
            .where(Change.resource == "loadbalancer", Change.action.in_(AMPHORA_ACTIONS),
                   Change.resource_id.in_(lb_ids))
            .group_by(Change.resource_id).subquery())
    rows = session.execute(select(Change.resource_id, Change.revision, Change.at, Change.action)
                           .join(last, Change.revision == last.c.rev))
    return {rid: (rev, at, action) for rid, rev, at, action in rows}


def _render(lb: LoadBalancer, last_failover: tuple[int, datetime, str] | None) -> dict[str, Any]:
    revision, built, _ = last_failover or (0, lb.created_at, "")
    amp_id = str(uuid.uuid5(AMPHORA_NS, f"{lb.id}:{revision}"))
    return {
        "id": amp_id,
        "loadbalancer_id": lb.id,
        "compute_id": str(uuid.uuid5(AMPHORA_NS, f"compute:{amp_id}")),
        "lb_network_ip": None,
        "vrrp_ip": lb.vip_address,
        "ha_ip": lb.vip_address,
        "vrrp_port_id": lb.vip_port_id,
        "ha_port_id": lb.vip_port_id,
        "cert_expiration": None,
        "cert_busy": False,
        "role": "STANDALONE",
        "status": "ERROR" if lb.provisioning_status == ERROR else "ALLOCATED",
        "vrrp_interface": None,
        "vrrp_id": None,
        "vrrp_priority": None,
        "cached_zone": None,
        "created_at": octavia_time(built),
        "updated_at": octavia_time(max(built, lb.updated_at) if lb.updated_at else built),
        "image_id": None,
        "compute_flavor": None,
    }


def _amphorae(session: Session, lb_ids: list[str] | None = None) -> list[tuple[LoadBalancer, dict[str, Any]]]:
    stmt = select(LoadBalancer).where(LoadBalancer.provider.in_(HAPROXY_NAMES))
    if lb_ids is not None:
        stmt = stmt.where(LoadBalancer.id.in_(lb_ids))
    lbs = list(session.scalars(stmt.order_by(LoadBalancer.created_at, LoadBalancer.id)))
    last = _failovers(session, [lb.id for lb in lbs])
    return [(lb, _render(lb, last.get(lb.id))) for lb in lbs
            if last.get(lb.id, (0, None, ""))[2] != "amphora_delete"]


def _pick(amp: dict[str, Any], fields: list[str]) -> dict[str, Any]:
    return {k: v for k, v in amp.items() if k in fields} if fields else amp


def listing(session: Session, filters: dict[str, list[str]], fields: list[str],
            limit: int | None = None, marker: str | None = None) -> list[dict[str, Any]]:
    """Every amphora whose fields equal the filters (``?loadbalancer_id=…``), after ``marker``."""
    unknown = sorted(set(filters) - set(FIELDS))
    if unknown:
        raise BadRequest(f"Invalid filter: {', '.join(unknown)}")
    lb_ids = filters.get("loadbalancer_id")
    amps = [amp for _, amp in _amphorae(session, lb_ids)]
    amps = [a for a in amps if all(str(a[k]) in v or (a[k] is None and "" in v) for k, v in filters.items())]
    if marker is not None:
        ids = [a["id"] for a in amps]
        if marker not in ids:
            raise BadRequest(f"Supplied pagination marker '{marker}' is not valid.")
        amps = amps[ids.index(marker) + 1:]
    if limit:
        amps = amps[:limit]
    return [_pick(a, fields) for a in amps]


def find(session: Session, amphora_id: str) -> tuple[LoadBalancer, dict[str, Any]]:
    for lb, amp in _amphorae(session):
        if amp["id"] == amphora_id:
            return lb, amp
    raise not_found("Amphora", amphora_id)


def show(session: Session, amphora_id: str, fields: list[str]) -> dict[str, Any]:
    return _pick(find(session, amphora_id)[1], fields)


def fail_over(session: Session, ctx: Context, amphora_id: str) -> None:
    """Replace the amphora: its load balancer's failover (the namespace is rebuilt)."""
    lb, _ = find(session, amphora_id)
    failover(session, ctx, lb.id)


def delete(session: Session, amphora_id: str) -> None:
    """Octavia's amphora delete: an amphora in ``ERROR`` goes, any other is immutable (409)."""
    lb, amp = find(session, amphora_id)
    if amp["status"] != ERROR:
        raise Conflict(f"amphora {amphora_id} is immutable and cannot be updated.")
    LOADBALANCERS.record(session, lb, "amphora_delete")


def stats(session: Session, amphora_id: str) -> list[dict[str, Any]]:
    """Octavia's ``amphora_stats``: per listener, what this amphora counted (the current
    namespace's counters; what an earlier one counted stays in the listener's totals)."""
    lb, amp = find(session, amphora_id)
    listeners = session.scalars(select(LBListener.id).where(LBListener.loadbalancer_id == lb.id)
                                .order_by(LBListener.created_at, LBListener.id))
    rows = {r.listener_id: r for r in session.scalars(
        select(LBListenerStats).where(LBListenerStats.loadbalancer_id == lb.id))}
    out = []
    for listener_id in listeners:
        row = rows.get(listener_id)
        out.append({"id": amp["id"], "loadbalancer_id": lb.id, "listener_id": listener_id,
                    **{k: getattr(row, k) if row is not None else 0 for k in
                       ("active_connections", "bytes_in", "bytes_out", "request_errors", "total_connections")}})
    return out


__all__ = ["FIELDS", "delete", "fail_over", "find", "listing", "show", "stats"]
