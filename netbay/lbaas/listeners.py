"""Listeners: a protocol and port on the VIP, forwarding to a default pool.

What a listener may ask for depends on its load balancer's provider
(``netbay.lbaas.providers``): the nftables provider realizes TCP, UDP and SCTP and
forwards HTTP as TCP; the haproxy provider parses HTTP (``insert_headers``, L7
policies), passes HTTPS through, filters clients by ``allowed_cidrs`` and serves
its own metrics on PROMETHEUS listeners (which take no pool or policy). HSTS
(API 2.27) is shown off and refused, as Octavia refuses it off TERMINATED_HTTPS. Two
listeners of a load balancer may share a port number only across transports
(a TCP and a UDP listener on 53; not TCP and HTTP on 80). UDP and SCTP listeners are
forwarded by nftables under either provider, as the amphora hands them to LVS.
"""

from __future__ import annotations

import ipaddress
from typing import Annotated, Any

from pydantic import AfterValidator
from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import BadRequest, Conflict
from netbay.lbaas.common import (
    PENDING_CREATE,
    PENDING_UPDATE,
    UUID,
    Bool,
    Int,
    LBBody,
    LBResource,
    PortNumber,
    Str255,
    Tags,
    between,
    handle,
    invalid_input,
    not_found,
    one_of,
    standard,
    validation,
)
from netbay.lbaas import providers
from netbay.lbaas.loadbalancers import LOADBALANCERS
from netbay.lbaas.tree import claim
from netbay.network.resource import Filter, to_bool, to_int
from netbay.store.models import LBL7Policy, LBListener, LBPool

# Octavia's listener protocols, and the ones realized here.
PROTOCOLS = ("HTTP", "HTTPS", "TCP", "TERMINATED_HTTPS", "UDP", "SCTP", "PROMETHEUS")
# Octavia's VALID_LISTENER_POOL_PROTOCOL_MAP: the pools a listener may forward to.
POOL_PROTOCOLS_FOR = {
    "TCP": ("HTTP", "HTTPS", "PROXY", "PROXYV2", "TCP"),
    "HTTP": ("HTTP", "PROXY", "PROXYV2"),
    "HTTPS": ("HTTPS", "PROXY", "PROXYV2", "TCP"),
    "UDP": ("UDP",),
    "SCTP": ("SCTP",),
}
TIMEOUT_MAX = 24 * 60 * 60 * 1000
DEFAULTS = {"connection_limit": -1, "timeout_client_data": 50000, "timeout_member_connect": 5000,
            "timeout_member_data": 50000, "timeout_tcp_inspect": 0}

Protocol = Annotated[str, AfterValidator(one_of(*PROTOCOLS))]
HstsMaxAge = Annotated[Int, AfterValidator(between(0, None))]
ConnectionLimit = Annotated[Int, AfterValidator(between(-1, None))]
Timeout = Annotated[Int, AfterValidator(between(0, TIMEOUT_MAX))]
# Octavia's insert_headers for an HTTP listener (values "true"/"false" or, for the
# port and protocol, what to send).
HTTP_HEADERS = ("X-Forwarded-For", "X-Forwarded-Port", "X-Forwarded-Proto")


def _cidr(value: str) -> str:
    try:
        return str(ipaddress.ip_network(value, strict=False))
    except (ValueError, TypeError):
        raise ValueError("Value should be a valid CIDR") from None


Cidr = Annotated[str, AfterValidator(_cidr)]

_TLS_AND_L7 = {
    "default_tls_container_ref": (None, ""),
    "sni_container_refs": (None, []),
    "l7policies": (None, []),
    "client_ca_tls_container_ref": (None, ""),
    "client_authentication": (None, "NONE"),
    "client_crl_container_ref": (None, ""),
    "tls_ciphers": (None, ""),
    "tls_versions": (None, []),
    "alpn_protocols": (None, []),
}
HSTS = ("hsts_max_age", "hsts_include_subdomains", "hsts_preload")


class ListenerCreate(LBBody):
    not_offered = {**_TLS_AND_L7, "default_pool": (None,)}
    name: Str255 | None = None
    description: Str255 | None = None
    admin_state_up: Bool = True
    protocol: Protocol
    protocol_port: PortNumber
    connection_limit: ConnectionLimit = -1
    default_pool_id: UUID | None = None
    loadbalancer_id: UUID
    timeout_client_data: Timeout = DEFAULTS["timeout_client_data"]
    timeout_member_connect: Timeout = DEFAULTS["timeout_member_connect"]
    timeout_member_data: Timeout = DEFAULTS["timeout_member_data"]
    timeout_tcp_inspect: Timeout = DEFAULTS["timeout_tcp_inspect"]
    allowed_cidrs: list[Cidr] | None = None
    insert_headers: dict[str, str] | None = None
    hsts_max_age: HstsMaxAge | None = None
    hsts_include_subdomains: Bool | None = None
    hsts_preload: Bool | None = None
    project_id: Str255 | None = None
    tenant_id: Str255 | None = None
    tags: Tags | None = None


class ListenerUpdate(LBBody):
    not_offered = _TLS_AND_L7
    name: Str255 | None = None
    description: Str255 | None = None
    admin_state_up: Bool | None = None
    connection_limit: ConnectionLimit | None = None
    default_pool_id: UUID | None = None
    timeout_client_data: Timeout | None = None
    timeout_member_connect: Timeout | None = None
    timeout_member_data: Timeout | None = None
    timeout_tcp_inspect: Timeout | None = None
    allowed_cidrs: list[Cidr] | None = None
    insert_headers: dict[str, str] | None = None
    hsts_max_age: HstsMaxAge | None = None
    hsts_include_subdomains: Bool | None = None
    hsts_preload: Bool | None = None
    tags: Tags | None = None


def check_hsts(protocol: str, given: dict[str, Any]) -> None:
    """Octavia's HSTS rules (API 2.27): the flags need ``hsts_max_age``, and HSTS needs a
    TERMINATED_HTTPS listener, which netbay does not realize (no key manager), so no
    listener here ever has HSTS on; the fields are taken out of ``given``."""
    hsts = {k: given.pop(k) for k in HSTS if k in given}
    if (hsts.get("hsts_include_subdomains") or hsts.get("hsts_preload")) and hsts.get("hsts_max_age") is None:
        raise validation("HSTS configuration options hsts_include_subdomains and hsts_preload only make "
                         "sense if hsts_max_age is set as well.")
    if hsts.get("hsts_max_age") is not None and protocol != "TERMINATED_HTTPS":
        raise validation("The HSTS feature can only be used for listeners using the TERMINATED_HTTPS protocol.")


def transport(protocol: str) -> str:
    """The L4 protocol a listener occupies its port with."""
    return protocol if protocol in providers.KERNEL_PROTOCOLS else "TCP"


def check_options(lb: Any, protocol: str, given: dict[str, Any]) -> None:
    """The provider's offer, then Octavia's rules for the L7 options."""
    providers.check_listener(lb.provider, protocol, given)
    headers = given.get("insert_headers") or {}
    wrong = sorted(h for h in headers if protocol != "HTTP" or h not in HTTP_HEADERS)
    if wrong:
        raise validation(f"The following headers are not supported for {protocol} listeners: "
                         f"{', '.join(wrong)}")
    vip = ipaddress.ip_address(lb.vip_address) if lb.vip_address else None
    for cidr in given.get("allowed_cidrs") or ():
        if vip is not None and ipaddress.ip_network(cidr).version != vip.version:
            raise validation(f"CIDR {cidr} IP version incompatible with VIP {lb.vip_address} IP version.")


def no_children(listener_protocol: str) -> None:
    """Octavia's ``ListenerNoChildren``: a PROMETHEUS listener serves haproxy's metrics
    itself, so it takes no pool and no L7 policy (400)."""
    if listener_protocol == "PROMETHEUS":
        raise BadRequest("Protocol PROMETHEUS listeners cannot have child objects.")


def check_pool_protocol(listener_protocol: str, pool_protocol: str) -> None:
    no_children(listener_protocol)
    if pool_protocol not in POOL_PROTOCOLS_FOR.get(listener_protocol, ()):
        raise validation(f"The pool protocol '{pool_protocol}' is invalid while the listener protocol "
                         f"is '{listener_protocol}'.")


class Listeners(LBResource):
    member = "listener"
    collection = "listeners"
    title = "Listener"
    model = LBListener
    create_body = ListenerCreate
    update_body = ListenerUpdate
    filters = {
        "name": Filter(LBListener.name),
        "description": Filter(LBListener.description),
        "project_id": Filter(LBListener.project_id),
        "provisioning_status": Filter(LBListener.provisioning_status),
        "operating_status": Filter(LBListener.operating_status),
        "admin_state_up": Filter(LBListener.admin_state_up, to_bool),
        "protocol": Filter(LBListener.protocol),
        "protocol_port": Filter(LBListener.protocol_port, to_int),
        "connection_limit": Filter(LBListener.connection_limit, to_int),
        "default_pool_id": Filter(LBListener.default_pool_id),
        "loadbalancer_id": Filter(LBListener.loadbalancer_id),
        "load_balancer_id": Filter(LBListener.loadbalancer_id),
        "timeout_client_data": Filter(LBListener.timeout_client_data, to_int),
        "timeout_member_connect": Filter(LBListener.timeout_member_connect, to_int),
        "timeout_member_data": Filter(LBListener.timeout_member_data, to_int),
        "timeout_tcp_inspect": Filter(LBListener.timeout_tcp_inspect, to_int),
        "created_at": Filter(LBListener.created_at),
        "updated_at": Filter(LBListener.updated_at),
    }

    def render(self, session: Session, obj: LBListener, tags: list[str]) -> dict[str, Any]:
        return {
            **standard(obj, tags),
            "description": obj.description,
            "protocol": obj.protocol,
            "protocol_port": obj.protocol_port,
            "connection_limit": obj.connection_limit,
            "default_pool_id": obj.default_pool_id,
            "loadbalancers": [{"id": obj.loadbalancer_id}],
            "timeout_client_data": obj.timeout_client_data,
            "timeout_member_connect": obj.timeout_member_connect,
            "timeout_member_data": obj.timeout_member_data,
            "timeout_tcp_inspect": obj.timeout_tcp_inspect,
            "default_tls_container_ref": None,
            "sni_container_refs": [],
            "l7policies": [{"id": i} for i in session.scalars(
                select(LBL7Policy.id).where(LBL7Policy.listener_id == obj.id)
                .order_by(LBL7Policy.position, LBL7Policy.created_at))],
            "insert_headers": obj.insert_headers or {},
            "client_ca_tls_container_ref": None,
            "client_authentication": "NONE",
            "client_crl_container_ref": None,
            "allowed_cidrs": obj.allowed_cidrs or None,
            "tls_ciphers": None,
            "tls_versions": None,
            "alpn_protocols": None,
            "hsts_max_age": None,
            "hsts_include_subdomains": False,
            "hsts_preload": False,
        }

    def create(self, session: Session, ctx: Context, body: ListenerCreate) -> LBListener:
        given, tags = self.child_body(body)
        lb = LOADBALANCERS.get(session, ctx, given.pop("loadbalancer_id"), for_update=True)
        protocol = given["protocol"]
        check_hsts(protocol, given)
        check_options(lb, protocol, given)
        if given.get("default_pool_id"):
            self._default_pool(session, lb.id, given["default_pool_id"], protocol)
        took = claim(session, lb.id)
        self._check_port_free(session, lb.id, protocol, given["protocol_port"])
        listener = LBListener(
            project_id=lb.project_id, loadbalancer_id=lb.id,
            provisioning_status=PENDING_CREATE, operating_status="OFFLINE",
            **{**given, "name": given.get("name") or "", "description": given.get("description") or ""},
        )
        session.add(listener)
        session.flush()
        self.created(session, listener, tags)
        took.log(session)
        return listener

    def update(self, session: Session, ctx: Context, obj_id: str, body: ListenerUpdate) -> LBListener:
        listener = self.get(session, ctx, obj_id, for_update=True)
        given = body.given()
        tags = given.pop("tags", None)
        check_hsts(listener.protocol, given)
        if given.get("allowed_cidrs") or given.get("insert_headers"):
            check_options(LOADBALANCERS.get(session, ctx, listener.loadbalancer_id), listener.protocol, given)
        if given.get("default_pool_id"):
            self._default_pool(session, listener.loadbalancer_id, given["default_pool_id"], listener.protocol)
        took = claim(session, listener.loadbalancer_id)
        listener.provisioning_status = PENDING_UPDATE
        for key, value in given.items():
            if value is None and key in DEFAULTS:
                value = DEFAULTS[key]
            elif value is None and key in {"name", "description"}:
                value = ""
            elif value is None and key not in {"default_pool_id", "allowed_cidrs", "insert_headers"}:
                raise invalid_input(key, None, "Value should not be null")
            setattr(listener, key, value)
        if tags is not None:
            self.set_tags(session, listener, tags)
        self.touch(listener)
        self.record(session, listener, "update")
        took.log(session)
        return listener

    def delete(self, session: Session, ctx: Context, obj_id: str) -> None:
        listener = self.get(session, ctx, obj_id, for_update=True)
        took = claim(session, listener.loadbalancer_id)
        self.remove(session, listener)
        took.log(session)

    def remove(self, session: Session, listener: LBListener) -> None:
        """Delete a listener (and its L7 policies) and log it (no claim: for callers that hold one)."""
        for policy in session.scalars(select(LBL7Policy).where(LBL7Policy.listener_id == listener.id)).all():
            handle(LBL7Policy).remove(session, policy)
        self.erase(session, listener)

    @staticmethod
    def _default_pool(session: Session, lb_id: str, pool_id: str, protocol: str) -> LBPool:
        pool = session.scalars(select(LBPool).where(LBPool.id == pool_id, LBPool.loadbalancer_id == lb_id)
                               ).one_or_none()
        if pool is None:
            raise not_found("Pool", pool_id)
        check_pool_protocol(protocol, pool.protocol)
        return pool

    @staticmethod
    def _check_port_free(session: Session, lb_id: str, protocol: str, port: int) -> None:
        taken = session.scalars(select(LBListener.protocol).where(
            LBListener.loadbalancer_id == lb_id, LBListener.protocol_port == port))
        if any(transport(p) == transport(protocol) for p in taken):
            raise Conflict(f"Another Listener on this Load Balancer is already using protocol "
                           f"{transport(protocol)} and protocol_port {port}")


LISTENERS = Listeners()

__all__ = ["LISTENERS", "Listeners", "check_options", "check_pool_protocol", "no_children", "transport"]
