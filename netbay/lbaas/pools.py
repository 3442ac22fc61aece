"""Pools: the members a listener forwards to, and how it picks one.

The load balancer's provider says what is realized (``netbay.lbaas.providers``):
nftables does ``ROUND_ROBIN``, ``SOURCE_IP`` (a source-address hash),
``SOURCE_IP_PORT`` (OVN's only algorithm: a hash of address and port) and
``LEAST_CONNECTIONS`` (LVS's ``lc``: live connections counted from conntrack) for TCP,
UDP, SCTP and HTTP pools; haproxy has ``LEAST_CONNECTIONS`` (its ``leastconn``), HTTPS
(passthrough), PROXY/PROXYV2 pools and session persistence, and refuses ``SOURCE_IP_PORT``
as Octavia's amphora does. UDP and SCTP pools stay in the kernel under either
provider and take ``LEAST_CONNECTIONS`` there too.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict
from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import Conflict
from netbay.lbaas.common import (
    PENDING_CREATE,
    UUID,
    Bool,
    LBBody,
    LBResource,
    Str255,
    Tags,
    handle,
    invalid_input,
    one_of,
    standard,
    validation,
)
from netbay.lbaas import providers
from netbay.lbaas.listeners import LISTENERS, check_pool_protocol
from netbay.lbaas.loadbalancers import LOADBALANCERS
from netbay.lbaas.tree import claim
from netbay.network.resource import Filter, to_bool
from netbay.store.models import LBHealthMonitor, LBL7Policy, LBListener, LBMember, LBPool

PROTOCOLS = ("HTTP", "HTTPS", "PROXY", "PROXYV2", "TCP", "UDP", "SCTP")
ALGORITHMS = ("ROUND_ROBIN", "LEAST_CONNECTIONS", "SOURCE_IP", "SOURCE_IP_PORT")
# RFC 6265's cookie-name characters (what Octavia accepts as cookie_name).
COOKIE_NAME = re.compile(r"^[\x21\x23-\x2B\x2D-\x3A\x3C-\x5B\x5D-\x7E]+$")

Protocol = Annotated[str, AfterValidator(one_of(*PROTOCOLS))]
Algorithm = Annotated[str, AfterValidator(one_of(*ALGORITHMS))]

_TLS = {
    "tls_enabled": (None, False),
    "tls_container_ref": (None, ""),
    "ca_tls_container_ref": (None, ""),
    "crl_container_ref": (None, ""),
    "tls_ciphers": (None, ""),
    "tls_versions": (None, []),
    "alpn_protocols": (None, []),
}


class SessionPersistence(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["SOURCE_IP", "HTTP_COOKIE", "APP_COOKIE"]
    cookie_name: Str255 | None = None
    persistence_timeout: int | None = None
    persistence_granularity: Str255 | None = None


def check_persistence(protocol: str, sp: SessionPersistence | dict | None) -> dict[str, Any] | None:
    """Octavia's rules for ``session_persistence``; the stored (rendered) form."""
    if sp is None:
        return None
    if isinstance(sp, dict):
        sp = SessionPersistence.model_validate(sp)
    if sp.type == "APP_COOKIE" and not sp.cookie_name:
        raise validation("Field `cookie_name` can not be empty for session persistence type APP_COOKIE.")
    if sp.cookie_name and sp.type != "APP_COOKIE":
        raise validation("Field `cookie_name` can only be specified with session persistence of type "
                         "`APP_COOKIE`.")
    if sp.cookie_name and not COOKIE_NAME.match(sp.cookie_name):
        raise validation("Supplied `cookie_name` is invalid.")
    if sp.type in ("HTTP_COOKIE", "APP_COOKIE") and protocol not in ("HTTP", "PROXY", "PROXYV2"):
        raise validation(f"Session persistence of type {sp.type} is not supported for {protocol} "
                         "protocol pools.")
    if (sp.persistence_timeout is not None or sp.persistence_granularity is not None) and \
            protocol not in ("UDP", "SCTP"):
        raise validation("persistence_timeout and persistence_granularity are only for UDP and SCTP pools.")
    return {"type": sp.type, "cookie_name": sp.cookie_name, "persistence_timeout": sp.persistence_timeout,
            "persistence_granularity": sp.persistence_granularity}


class PoolCreate(LBBody):
    not_offered = {**_TLS, "healthmonitor": (None,), "members": (None, [])}
    name: Str255 | None = None
    description: Str255 | None = None
    admin_state_up: Bool = True
    listener_id: UUID | None = None
    loadbalancer_id: UUID | None = None
    protocol: Protocol
    lb_algorithm: Algorithm
    session_persistence: SessionPersistence | None = None
    project_id: Str255 | None = None
    tenant_id: Str255 | None = None
    tags: Tags | None = None


class PoolUpdate(LBBody):
    not_offered = _TLS
    name: Str255 | None = None
    description: Str255 | None = None
    admin_state_up: Bool | None = None
    lb_algorithm: Algorithm | None = None
    session_persistence: SessionPersistence | None = None
    tags: Tags | None = None


class Pools(LBResource):
    member = "pool"
    collection = "pools"
    title = "Pool"
    model = LBPool
    create_body = PoolCreate
    update_body = PoolUpdate
    filters = {
        "name": Filter(LBPool.name),
        "description": Filter(LBPool.description),
        "project_id": Filter(LBPool.project_id),
        "provisioning_status": Filter(LBPool.provisioning_status),
        "operating_status": Filter(LBPool.operating_status),
        "admin_state_up": Filter(LBPool.admin_state_up, to_bool),
        "protocol": Filter(LBPool.protocol),
        "lb_algorithm": Filter(LBPool.lb_algorithm),
        "loadbalancer_id": Filter(LBPool.loadbalancer_id),
        "load_balancer_id": Filter(LBPool.loadbalancer_id),
        "created_at": Filter(LBPool.created_at),
        "updated_at": Filter(LBPool.updated_at),
    }

    def extra_filter(self, name: str, values: list[str]):  # noqa: ANN201
        if name == "listener_id":
            return LBPool.id.in_(select(LBListener.default_pool_id).where(LBListener.id.in_(values)))
        if name in {"healthmonitor_id", "health_monitor_id"}:
            return LBPool.id.in_(select(LBHealthMonitor.pool_id).where(LBHealthMonitor.id.in_(values)))
        return None

    def render(self, session: Session, obj: LBPool, tags: list[str]) -> dict[str, Any]:
        listeners = session.scalars(select(LBListener.id).where(LBListener.default_pool_id == obj.id)
                                    .order_by(LBListener.created_at, LBListener.id))
        members = session.scalars(select(LBMember.id).where(LBMember.pool_id == obj.id)
                                  .order_by(LBMember.created_at, LBMember.id))
        monitor = session.scalar(select(LBHealthMonitor.id).where(LBHealthMonitor.pool_id == obj.id))
        return {
            **standard(obj, tags),
            "description": obj.description,
            "protocol": obj.protocol,
            "lb_algorithm": obj.lb_algorithm,
            "session_persistence": obj.session_persistence or None,
            "loadbalancers": [{"id": obj.loadbalancer_id}],
            "listeners": [{"id": i} for i in listeners],
            "members": [{"id": i} for i in members],
            "healthmonitor_id": monitor,
            "tls_enabled": False,
            "tls_container_ref": None,
            "ca_tls_container_ref": None,
            "crl_container_ref": None,
            "tls_ciphers": None,
            "tls_versions": None,
            "alpn_protocols": None,
        }

    def create(self, session: Session, ctx: Context, body: PoolCreate) -> LBPool:
        given, tags = self.child_body(body)
        lb_id, listener_id = given.pop("loadbalancer_id", None), given.pop("listener_id", None)
        listener = LISTENERS.get(session, ctx, listener_id, for_update=True) if listener_id else None
        if lb_id:
            lb = LOADBALANCERS.get(session, ctx, lb_id)
            if listener is not None and listener.loadbalancer_id != lb.id:
                raise validation(f"Listener {listener.id} is not on Load Balancer {lb.id}.")
        elif listener is not None:
            lb = LOADBALANCERS.get(session, ctx, listener.loadbalancer_id)
        else:
            raise validation("Must provide at least one of: loadbalancer_id, listener_id")
        providers.check_pool(lb.provider, given["protocol"], given["lb_algorithm"], given.get("session_persistence"))
        given["session_persistence"] = check_persistence(given["protocol"], given.get("session_persistence"))
        if listener is not None:
            check_pool_protocol(listener.protocol, given["protocol"])
            if listener.default_pool_id:
                raise Conflict("This listener already has a default pool")
        took = claim(session, lb.id, listeners=[listener] if listener is not None else [])
        pool = LBPool(project_id=lb.project_id, loadbalancer_id=lb.id, provisioning_status=PENDING_CREATE,
                      operating_status="OFFLINE",
                      **{**given, "name": given.get("name") or "", "description": given.get("description") or ""})
        session.add(pool)
        session.flush()
        if listener is not None:
            listener.default_pool_id = pool.id
        self.created(session, pool, tags)
        took.log(session)
        return pool

    def update(self, session: Session, ctx: Context, obj_id: str, body: PoolUpdate) -> LBPool:
        pool = self.get(session, ctx, obj_id, for_update=True)
        given = body.given()
        tags = given.pop("tags", None)
        provider = LOADBALANCERS.get(session, ctx, pool.loadbalancer_id).provider
        providers.check_pool(provider, pool.protocol, given.get("lb_algorithm"), given.get("session_persistence"),
                             new=False)
        if "session_persistence" in given:
            given["session_persistence"] = check_persistence(pool.protocol, given["session_persistence"])
        took = claim(session, pool.loadbalancer_id, listeners=self.listeners_of(session, pool))
        for key, value in given.items():
            if value is None and key in {"name", "description"}:
                value = ""
            elif value is None and key != "session_persistence":
                raise invalid_input(key, None, "Value should not be null")
            setattr(pool, key, value)
        self.updated(session, pool, tags)
        took.log(session)
        return pool

    def delete(self, session: Session, ctx: Context, obj_id: str) -> None:
        pool = self.get(session, ctx, obj_id, for_update=True)
        policy = session.scalar(select(LBL7Policy.id).where(LBL7Policy.redirect_pool_id == pool.id))
        if policy is not None:
            raise Conflict(f"Pool {pool.id} is in use by L7 policy {policy}")
        listeners = self.listeners_of(session, pool)
        took = claim(session, pool.loadbalancer_id, listeners=listeners)
        for listener in listeners:  # Octavia leaves them without a default pool
            listener.default_pool_id = None
        self.remove(session, pool)
        took.log(session)

    def remove(self, session: Session, pool: LBPool) -> None:
        """Delete a pool with its members and monitor, logging each (no claim)."""
        monitor = session.scalars(select(LBHealthMonitor).where(LBHealthMonitor.pool_id == pool.id)).first()
        if monitor is not None:
            handle(LBHealthMonitor).remove(session, monitor)
        for member in session.scalars(select(LBMember).where(LBMember.pool_id == pool.id)).all():
            handle(LBMember).remove(session, member)
        for listener in session.scalars(select(LBListener).where(LBListener.default_pool_id == pool.id)):
            listener.default_pool_id = None
        # A cascade removes the listeners (and their policies) first; anything left goes too.
        for policy in session.scalars(select(LBL7Policy).where(LBL7Policy.redirect_pool_id == pool.id)).all():
            handle(LBL7Policy).remove(session, policy)
        session.flush()
        self.erase(session, pool)

    @staticmethod
    def listeners_of(session: Session, pool: LBPool) -> list[LBListener]:
        return list(session.scalars(select(LBListener).where(LBListener.default_pool_id == pool.id)
                                    .order_by(LBListener.created_at, LBListener.id)))


POOLS = Pools()

__all__ = ["POOLS", "Pools"]
