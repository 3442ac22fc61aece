"""Pools: the members a listener forwards to, and how it picks one.

``ROUND_ROBIN`` and ``SOURCE_IP`` (a source-address hash) are realized;
``LEAST_CONNECTIONS`` and ``SOURCE_IP_PORT`` need connection tracking the
dataplane does not do yet and are refused as not offered. Session
persistence is not offered (``null`` only).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator
from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import Conflict
from netbay.lbaas.common import (
    PENDING_CREATE,
    PENDING_UPDATE,
    UUID,
    Bool,
    LBBody,
    LBResource,
    Str255,
    Tags,
    invalid_input,
    not_offered,
    one_of,
    standard,
    validation,
)
from netbay.lbaas.listeners import LISTENERS, check_pool_protocol
from netbay.lbaas.loadbalancers import LOADBALANCERS
from netbay.lbaas.tree import claim
from netbay.network.resource import Filter, to_bool
from netbay.store.models import LBHealthMonitor, LBListener, LBMember, LBPool, Tag

PROTOCOLS = ("HTTP", "HTTPS", "PROXY", "PROXYV2", "TCP", "UDP", "SCTP")
OFFERED = ("TCP", "UDP", "HTTP")
ALGORITHMS = ("ROUND_ROBIN", "LEAST_CONNECTIONS", "SOURCE_IP", "SOURCE_IP_PORT")
OFFERED_ALGORITHMS = ("ROUND_ROBIN", "SOURCE_IP")

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
    "session_persistence": (None, {}),
}


class PoolCreate(LBBody):
    not_offered = {**_TLS, "healthmonitor": (None,), "members": (None, [])}
    name: Str255 | None = None
    description: Str255 | None = None
    admin_state_up: Bool = True
    listener_id: UUID | None = None
    loadbalancer_id: UUID | None = None
    protocol: Protocol
    lb_algorithm: Algorithm
    project_id: Str255 | None = None
    tenant_id: Str255 | None = None
    tags: Tags | None = None


class PoolUpdate(LBBody):
    not_offered = _TLS
    name: Str255 | None = None
    description: Str255 | None = None
    admin_state_up: Bool | None = None
    lb_algorithm: Algorithm | None = None
    tags: Tags | None = None


def check_algorithm(algorithm: str) -> None:
    if algorithm not in OFFERED_ALGORITHMS:
        raise not_offered(f"lb_algorithm {algorithm} is not offered yet; use ROUND_ROBIN or SOURCE_IP")


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
            "session_persistence": None,
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
        if given["protocol"] not in OFFERED:
            raise not_offered(f"protocol {given['protocol']} is not offered yet; use TCP, UDP or HTTP")
        check_algorithm(given["lb_algorithm"])
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
        if tags:
            self.set_tags(session, pool, tags)
            pool.revision_number = 0
        self.record(session, pool, "create")
        took.log(session)
        return pool

    def update(self, session: Session, ctx: Context, obj_id: str, body: PoolUpdate) -> LBPool:
        pool = self.get(session, ctx, obj_id, for_update=True)
        given = body.given()
        tags = given.pop("tags", None)
        if given.get("lb_algorithm"):
            check_algorithm(given["lb_algorithm"])
        took = claim(session, pool.loadbalancer_id, listeners=self.listeners_of(session, pool))
        for key, value in given.items():
            if value is None and key in {"name", "description"}:
                value = ""
            elif value is None:
                raise invalid_input(key, None, "Value should not be null")
            setattr(pool, key, value)
        if tags is not None:
            self.set_tags(session, pool, tags)
        pool.provisioning_status = PENDING_UPDATE
        self.touch(pool)
        self.record(session, pool, "update")
        took.log(session)
        return pool

    def delete(self, session: Session, ctx: Context, obj_id: str) -> None:
        pool = self.get(session, ctx, obj_id, for_update=True)
        listeners = self.listeners_of(session, pool)
        took = claim(session, pool.loadbalancer_id, listeners=listeners)
        for listener in listeners:  # Octavia leaves them without a default pool
            listener.default_pool_id = None
        self.remove(session, pool)
        took.log(session)

    def remove(self, session: Session, pool: LBPool) -> None:
        """Delete a pool with its members and monitor, logging each (no claim)."""
        from netbay.lbaas.healthmonitors import HEALTHMONITORS
        from netbay.lbaas.members import MEMBERS

        monitor = session.scalars(select(LBHealthMonitor).where(LBHealthMonitor.pool_id == pool.id)).first()
        if monitor is not None:
            HEALTHMONITORS.remove(session, monitor)
        for member in session.scalars(select(LBMember).where(LBMember.pool_id == pool.id)).all():
            MEMBERS.remove(session, member)
        for listener in session.scalars(select(LBListener).where(LBListener.default_pool_id == pool.id)):
            listener.default_pool_id = None
        session.flush()
        session.execute(Tag.__table__.delete().where(Tag.resource_id == pool.id))
        self.record(session, pool, "delete", None)
        session.delete(pool)
        session.flush()

    @staticmethod
    def listeners_of(session: Session, pool: LBPool) -> list[LBListener]:
        return list(session.scalars(select(LBListener).where(LBListener.default_pool_id == pool.id)
                                    .order_by(LBListener.created_at, LBListener.id)))


POOLS = Pools()

__all__ = ["POOLS", "Pools"]
