"""Health monitors: one per pool; the realizer probes members and reports
their ``operating_status`` (``ONLINE``/``ERROR``), taking dead ones out.

``TCP`` (connect), ``HTTP`` and ``HTTPS`` (a request, expecting
``expected_codes``; HTTPS does not verify the member's certificate, as the
amphora's ``check-ssl verify none``), ``TLS-HELLO`` (a TLS handshake), ``PING``,
``UDP-CONNECT`` (a datagram, down on ICMP port unreachable) and ``SCTP`` (an INIT,
up on the member's INIT ACK: ``netbay.dataplane.sctp``) are realized. ``http_method``, ``url_path`` and
``expected_codes`` belong to HTTP(S) monitors (defaults ``GET``, ``/``, ``200``)
and are refused on the others. Octavia's pool rules: UDP pools take
UDP-CONNECT, SCTP, TCP and HTTP monitors, UDP-CONNECT no faster than every
3 seconds (its ``udp_connect_min_interval_health_monitor``); UDP-CONNECT and
SCTP monitor only UDP/SCTP pools.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator
from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import Conflict
from netbay.lbaas.common import (
    PENDING_CREATE,
    UUID,
    Bool,
    Int,
    LBBody,
    LBResource,
    Str255,
    Tags,
    between,
    invalid_input,
    one_of,
    standard,
    validation,
)
from netbay.lbaas.pools import POOLS
from netbay.lbaas.tree import claim
from netbay.network.resource import Filter, to_bool, to_int
from netbay.store.models import LBHealthMonitor, LBPool

TYPES = ("HTTP", "HTTPS", "PING", "TCP", "TLS-HELLO", "UDP-CONNECT", "SCTP")
HTTP_TYPES = ("HTTP", "HTTPS")
HTTP_METHODS = ("CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE")
HTTP_DEFAULTS = {"http_method": "GET", "url_path": "/", "expected_codes": "200"}
HTTP_FIELDS = tuple(HTTP_DEFAULTS)
# Octavia's pattern: "200", "200,202", "200-204".
EXPECTED_CODES = re.compile(r"^(\d{3}(\s*,\s*\d{3})*)$|^(\d{3}-\d{3})$")
# Monitors a UDP pool can use (Octavia's order, as its message lists them).
UDP_POOL_TYPES = ("UDP-CONNECT", "SCTP", "TCP", "HTTP")
L4_ONLY_TYPES = ("UDP-CONNECT", "SCTP")
UDP_CONNECT_MIN_DELAY = 3


def _expected_codes(value: str) -> str:
    if not EXPECTED_CODES.match(value):
        raise ValueError(f"Value should match the pattern {EXPECTED_CODES.pattern}")
    return value


def _url_path(value: str) -> str:
    if not value.startswith("/") or len(value) > 2048 or any(c.isspace() or ord(c) < 32 for c in value):
        raise ValueError("Value should be a valid URL path starting with /")
    return value


MonitorType = Annotated[str, AfterValidator(one_of(*TYPES))]
Retries = Annotated[Int, AfterValidator(between(1, 10))]
Seconds = Annotated[Int, AfterValidator(between(0, None))]
HTTPMethod = Annotated[str, AfterValidator(one_of(*HTTP_METHODS))]
URLPath = Annotated[str, AfterValidator(_url_path)]
ExpectedCodes = Annotated[str, AfterValidator(_expected_codes)]


class HealthMonitorCreate(LBBody):
    not_offered = {"http_version": (None,), "domain_name": (None, "")}
    name: Str255 | None = None
    type: MonitorType
    delay: Seconds
    timeout: Seconds
    max_retries: Retries
    max_retries_down: Retries = 3
    http_method: HTTPMethod | None = None
    url_path: URLPath | None = None
    expected_codes: ExpectedCodes | None = None
    admin_state_up: Bool = True
    pool_id: UUID
    project_id: Str255 | None = None
    tenant_id: Str255 | None = None
    tags: Tags | None = None


class HealthMonitorUpdate(LBBody):
    not_offered = {"http_version": (None,), "domain_name": (None, "")}
    name: Str255 | None = None
    delay: Seconds | None = None
    timeout: Seconds | None = None
    max_retries: Retries | None = None
    max_retries_down: Retries | None = None
    http_method: HTTPMethod | None = None
    url_path: URLPath | None = None
    expected_codes: ExpectedCodes | None = None
    admin_state_up: Bool | None = None
    tags: Tags | None = None


def _check_http_fields(kind: str, given: dict[str, Any]) -> None:
    if kind not in HTTP_TYPES:
        sent = [f for f in HTTP_FIELDS if given.get(f) is not None]
        if sent:
            raise validation(f"{', '.join(sent)} can only be set on HTTP health monitors, not {kind}.")


def _check_pool_type(pool_protocol: str, kind: str, delay: int | None) -> None:
    """Octavia's rules between a pool's protocol and its monitor's type (400s)."""
    if pool_protocol in ("UDP", "SCTP"):
        if kind not in UDP_POOL_TYPES:
            raise validation(f"The associated pool protocol is {pool_protocol}, so only a "
                             f"{'/'.join(UDP_POOL_TYPES)} health monitor is supported.")
        if kind == "UDP-CONNECT" and delay is not None and delay < UDP_CONNECT_MIN_DELAY:
            raise validation(f"The request delay value {delay} should be larger than {UDP_CONNECT_MIN_DELAY} "
                             "for UDP-CONNECT health monitor type.")
    elif kind in L4_ONLY_TYPES:
        raise validation(f"The {kind} type is only supported for pools of type UDP/SCTP.")


class HealthMonitors(LBResource):
    member = "healthmonitor"
    collection = "healthmonitors"
    title = "Health Monitor"
    model = LBHealthMonitor
    create_body = HealthMonitorCreate
    update_body = HealthMonitorUpdate
    filters = {
        "name": Filter(LBHealthMonitor.name),
        "project_id": Filter(LBHealthMonitor.project_id),
        "provisioning_status": Filter(LBHealthMonitor.provisioning_status),
        "operating_status": Filter(LBHealthMonitor.operating_status),
        "admin_state_up": Filter(LBHealthMonitor.admin_state_up, to_bool),
        "type": Filter(LBHealthMonitor.type),
        "delay": Filter(LBHealthMonitor.delay, to_int),
        "timeout": Filter(LBHealthMonitor.timeout, to_int),
        "max_retries": Filter(LBHealthMonitor.max_retries, to_int),
        "max_retries_down": Filter(LBHealthMonitor.max_retries_down, to_int),
        "http_method": Filter(LBHealthMonitor.http_method),
        "url_path": Filter(LBHealthMonitor.url_path),
        "expected_codes": Filter(LBHealthMonitor.expected_codes),
        "pool_id": Filter(LBHealthMonitor.pool_id),
        "created_at": Filter(LBHealthMonitor.created_at),
        "updated_at": Filter(LBHealthMonitor.updated_at),
    }

    def render(self, session: Session, obj: LBHealthMonitor, tags: list[str]) -> dict[str, Any]:
        return {
            **standard(obj, tags),
            "type": obj.type,
            "delay": obj.delay,
            "timeout": obj.timeout,
            "max_retries": obj.max_retries,
            "max_retries_down": obj.max_retries_down,
            "http_method": obj.http_method,
            "url_path": obj.url_path,
            "expected_codes": obj.expected_codes,
            "pools": [{"id": obj.pool_id}],
            "http_version": None,
            "domain_name": None,
        }

    def create(self, session: Session, ctx: Context, body: HealthMonitorCreate) -> LBHealthMonitor:
        given, tags = self.child_body(body)
        pool = POOLS.get(session, ctx, given.pop("pool_id"), for_update=True)
        kind = given["type"]
        _check_pool_type(pool.protocol, kind, given.get("delay"))
        _check_http_fields(kind, given)
        if kind in HTTP_TYPES:
            given = {**HTTP_DEFAULTS, **{k: v for k, v in given.items() if v is not None}}
        if session.scalar(select(LBHealthMonitor.id).where(LBHealthMonitor.pool_id == pool.id)):
            raise Conflict("This pool already has a health monitor")
        took = claim(session, pool.loadbalancer_id, listeners=POOLS.listeners_of(session, pool), pool=pool,
                     pool_must_be_active=True)
        monitor = LBHealthMonitor(project_id=pool.project_id, pool_id=pool.id,
                                  provisioning_status=PENDING_CREATE, operating_status="OFFLINE",
                                  **{**given, "name": given.get("name") or ""})
        session.add(monitor)
        session.flush()
        self.created(session, monitor, tags)
        took.log(session)
        return monitor

    def update(self, session: Session, ctx: Context, obj_id: str, body: HealthMonitorUpdate) -> LBHealthMonitor:
        monitor = self.get(session, ctx, obj_id, for_update=True)
        pool = session.get_one(LBPool, monitor.pool_id)
        given = body.given()
        tags = given.pop("tags", None)
        _check_http_fields(monitor.type, given)
        if given.get("delay") is not None:
            _check_pool_type(pool.protocol, monitor.type, given["delay"])
        took = claim(session, pool.loadbalancer_id, listeners=POOLS.listeners_of(session, pool), pool=pool,
                     pool_must_be_active=True)
        for key, value in given.items():
            if value is None and key == "name":
                value = ""
            elif value is None and key in HTTP_DEFAULTS:
                value = HTTP_DEFAULTS[key] if monitor.type in HTTP_TYPES else None
            elif value is None and key == "max_retries_down":
                value = 3
            elif value is None:
                raise invalid_input(key, None, "Value should not be null")
            setattr(monitor, key, value)
        self.updated(session, monitor, tags)
        took.log(session)
        return monitor

    def delete(self, session: Session, ctx: Context, obj_id: str) -> None:
        monitor = self.get(session, ctx, obj_id, for_update=True)
        pool = session.get_one(LBPool, monitor.pool_id)
        took = claim(session, pool.loadbalancer_id, listeners=POOLS.listeners_of(session, pool), pool=pool,
                     pool_must_be_active=True)
        self.remove(session, monitor)
        took.log(session)

    def remove(self, session: Session, monitor: LBHealthMonitor) -> None:
        self.erase(session, monitor)


HEALTHMONITORS = HealthMonitors()

__all__ = ["HEALTHMONITORS", "HealthMonitors"]
