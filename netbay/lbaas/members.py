"""Members: the backends of a pool, under ``/lbaas/pools/{pool_id}/members``.

A member's ``subnet_id`` says where the load balancer reaches it. The load
balancer's only leg is its VIP port, so a member subnet must be reachable from
the VIP network: the same network, or a network attached to a router that the
VIP network is attached to too (router interfaces and gateways count). Any
other subnet is refused (400) rather than accepted and silently unreachable.
Without ``subnet_id`` the member is reached through the VIP subnet, as in
Octavia.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator
from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import Conflict, NotFound
from netbay.lbaas.common import (
    IP,
    NO_MONITOR,
    OFFLINE,
    PENDING_CREATE,
    UUID,
    Bool,
    Int,
    LBBody,
    LBResource,
    PortNumber,
    Str255,
    Tags,
    between,
    invalid_input,
    invalid_subresource,
    not_found,
    standard,
    validation,
)
from netbay.lbaas.pools import POOLS
from netbay.lbaas.tree import claim
from netbay.network.ports import ROUTER_GATEWAY, ROUTER_INTERFACE_OWNERS
from netbay.network.registry import SUBNETS
from netbay.network.resource import Filter, ListQuery, Page, to_bool, to_int
from netbay.store.models import LBHealthMonitor, LBMember, LBPool, LoadBalancer, Port, Subnet

Weight = Annotated[Int, AfterValidator(between(0, 256))]
ROUTER_LEGS = (*ROUTER_INTERFACE_OWNERS, ROUTER_GATEWAY)


class MemberCreate(LBBody):
    not_offered = {"vnic_type": (None, "normal"), "request_sriov": (None, False)}
    name: Str255 | None = None
    admin_state_up: Bool = True
    address: IP
    protocol_port: PortNumber
    weight: Weight = 1
    backup: Bool = False
    subnet_id: UUID | None = None
    monitor_address: IP | None = None
    monitor_port: PortNumber | None = None
    project_id: Str255 | None = None
    tenant_id: Str255 | None = None
    tags: Tags | None = None


class MemberUpdate(LBBody):
    name: Str255 | None = None
    admin_state_up: Bool | None = None
    weight: Weight | None = None
    backup: Bool | None = None
    monitor_address: IP | None = None
    monitor_port: PortNumber | None = None
    tags: Tags | None = None


def routers_of(session: Session, network_id: str) -> set[str]:
    """Routers with a leg (interface or gateway) on a network."""
    return set(session.scalars(select(Port.device_id).where(
        Port.network_id == network_id, Port.device_owner.in_(ROUTER_LEGS))))


def reachable(session: Session, vip_network_id: str, network_id: str) -> bool:
    return network_id == vip_network_id or bool(
        routers_of(session, vip_network_id) & routers_of(session, network_id))


class Members(LBResource):
    member = "member"
    collection = "members"
    title = "Member"
    model = LBMember
    create_body = MemberCreate
    update_body = MemberUpdate
    filters = {
        "name": Filter(LBMember.name),
        "project_id": Filter(LBMember.project_id),
        "provisioning_status": Filter(LBMember.provisioning_status),
        "operating_status": Filter(LBMember.operating_status),
        "admin_state_up": Filter(LBMember.admin_state_up, to_bool),
        "address": Filter(LBMember.address),
        "protocol_port": Filter(LBMember.protocol_port, to_int),
        "subnet_id": Filter(LBMember.subnet_id),
        "weight": Filter(LBMember.weight, to_int),
        "backup": Filter(LBMember.backup, to_bool),
        "monitor_address": Filter(LBMember.monitor_address),
        "monitor_port": Filter(LBMember.monitor_port, to_int),
        "created_at": Filter(LBMember.created_at),
        "updated_at": Filter(LBMember.updated_at),
    }

    def render(self, session: Session, obj: LBMember, tags: list[str]) -> dict[str, Any]:
        return {
            **standard(obj, tags),
            "pool_id": obj.pool_id,
            "address": obj.address,
            "protocol_port": obj.protocol_port,
            "weight": obj.weight,
            "backup": obj.backup,
            "subnet_id": obj.subnet_id,
            "monitor_address": obj.monitor_address,
            "monitor_port": obj.monitor_port,
            "vnic_type": "normal",
        }

    # -- reading, within a pool -----------------------------------------------------------------

    def list_in(self, session: Session, ctx: Context, pool_id: str, query: ListQuery) -> Page:
        POOLS.get(session, ctx, pool_id)
        query.filters = {**query.filters, "pool_id": [pool_id]}
        return self.list(session, ctx, query)

    def extra_filter(self, name: str, values: list[str]):  # noqa: ANN201
        return LBMember.pool_id.in_(values) if name == "pool_id" else None

    def get_in(self, session: Session, ctx: Context, pool_id: str, obj_id: str,
               *, for_update: bool = False) -> LBMember:
        POOLS.get(session, ctx, pool_id)
        member = self.get(session, ctx, obj_id, for_update=for_update)
        if member.pool_id != pool_id:
            raise not_found(self.title, obj_id)
        return member

    def show_in(self, session: Session, ctx: Context, pool_id: str, obj_id: str,
                fields: list[str]) -> dict[str, Any]:
        self.get_in(session, ctx, pool_id, obj_id)
        return self.show(session, ctx, obj_id, fields)

    # -- writing --------------------------------------------------------------------------------

    def create_in(self, session: Session, ctx: Context, pool_id: str, body: MemberCreate) -> LBMember:
        given, tags = self.child_body(body)
        pool = POOLS.get(session, ctx, pool_id, for_update=True)
        lb = session.get_one(LoadBalancer, pool.loadbalancer_id)
        if given.get("subnet_id"):
            self._check_subnet(session, ctx, lb, given["subnet_id"])
        took = claim(session, lb.id, listeners=POOLS.listeners_of(session, pool), pool=pool,
                     pool_must_be_active=True)
        duplicate = session.scalar(select(LBMember.id).where(
            LBMember.pool_id == pool.id, LBMember.address == given["address"],
            LBMember.protocol_port == given["protocol_port"]))
        if duplicate:
            raise Conflict(f"Another member on this pool is already using ip {given['address']} "
                           f"on protocol_port {given['protocol_port']}")
        monitored = session.scalar(select(LBHealthMonitor.id).where(LBHealthMonitor.pool_id == pool.id))
        member = LBMember(project_id=pool.project_id, pool_id=pool.id, provisioning_status=PENDING_CREATE,
                          operating_status=OFFLINE if monitored else NO_MONITOR,
                          **{**given, "name": given.get("name") or ""})
        session.add(member)
        session.flush()
        self.created(session, member, tags)
        took.log(session)
        return member

    def update_in(self, session: Session, ctx: Context, pool_id: str, obj_id: str,
                  body: MemberUpdate) -> LBMember:
        member = self.get_in(session, ctx, pool_id, obj_id, for_update=True)
        pool = session.get_one(LBPool, member.pool_id)
        given = body.given()
        tags = given.pop("tags", None)
        took = claim(session, pool.loadbalancer_id, listeners=POOLS.listeners_of(session, pool), pool=pool,
                     pool_must_be_active=True)
        for key, value in given.items():
            if value is None and key == "name":
                value = ""
            elif value is None and key == "weight":
                value = 1
            elif value is None and key not in {"monitor_address", "monitor_port"}:
                raise invalid_input(key, None, "Value should not be null")
            setattr(member, key, value)
        self.updated(session, member, tags)
        took.log(session)
        return member

    def delete_in(self, session: Session, ctx: Context, pool_id: str, obj_id: str) -> None:
        member = self.get_in(session, ctx, pool_id, obj_id, for_update=True)
        pool = session.get_one(LBPool, member.pool_id)
        took = claim(session, pool.loadbalancer_id, listeners=POOLS.listeners_of(session, pool), pool=pool,
                     pool_must_be_active=True)
        self.remove(session, member)
        took.log(session)

    def remove(self, session: Session, member: LBMember) -> None:
        self.erase(session, member)

    @staticmethod
    def _check_subnet(session: Session, ctx: Context, lb: LoadBalancer, subnet_id: str) -> None:
        try:
            subnet: Subnet = SUBNETS.get(session, ctx, subnet_id)
        except NotFound:
            raise invalid_subresource("Subnet", subnet_id) from None
        if not reachable(session, lb.vip_network_id, subnet.network_id):
            raise validation(
                f"Member subnet {subnet_id} is not reachable from load balancer {lb.id}: it must be on "
                f"the VIP network {lb.vip_network_id} or on a network attached to a router that the "
                "VIP network is attached to as well.")


MEMBERS = Members()

__all__ = ["MEMBERS", "Members", "reachable"]
