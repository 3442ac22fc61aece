"""Load balancers: a VIP port and the tree (listeners, pools, members, health
monitors) the dataplane realizes behind it.

Octavia's life cycle is kept: a new load balancer is ``PENDING_CREATE``, every
change to it or to its tree leaves it ``PENDING_UPDATE``, and while it is
``PENDING_*`` nothing in the tree may change (409). Only the realizer's status
report (``netbay.lbaas.status.report``) settles it to ``ACTIVE`` or ``ERROR``.

Deletes take effect at once (the row and its change go out in one
transaction) instead of lingering in ``PENDING_DELETE``: the realizer follows
the delete in the change stream.

The VIP port is an ordinary port made by ``create_port``: ``device_owner``
``Octavia`` and ``device_id`` ``lb-<id>`` as Octavia makes it, in the load
balancer's project (so it shows in the network API). Unlike Octavia's (which
is admin-down and reached through an amphora's address pairs), this port *is*
the load balancer's interface, so it is admin-up. It has no security groups
and port security off: Octavia guards the VIP with a security group of its
own that opens the listener ports; here the load balancer's namespace answers
on its listener ports only, so a group in the fabric would add nothing.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from sqlalchemy import false, select, true
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import BadRequest, Forbidden, NotFound
from netbay.lbaas.common import (
    IP,
    PENDING,
    PENDING_CREATE,
    PENDING_UPDATE,
    UUID,
    Bool,
    LBBody,
    LBResource,
    Str255,
    Tags,
    handle,
    immutable,
    invalid_subresource,
    pending_state,
    standard,
    validation,
)
from netbay.lbaas import providers
from netbay.network.portrows import NewPort
from netbay.network.ports import create_port, delete_port
from netbay.network.registry import NETWORKS, PORTS, SUBNETS
from netbay.network.resource import Filter, to_bool
from netbay.store.models import (
    LBListener,
    LBPool,
    LoadBalancer,
    Network,
    Port,
    Subnet,
    Tag,
)

VIP_OWNER = "Octavia"


class LoadBalancerCreate(LBBody):
    not_offered = {
        "pools": (None, []),  # top-level pools of a populated create (listeners' default_pool is offered)
        "vip_qos_policy_id": (None,),
        "additional_vips": (None, []),
        "vip_sg_ids": (None, []),
    }
    name: Str255 | None = None
    description: Str255 | None = None
    admin_state_up: Bool = True
    vip_address: IP | None = None
    vip_port_id: UUID | None = None
    vip_subnet_id: UUID | None = None
    vip_network_id: UUID | None = None
    project_id: Str255 | None = None
    tenant_id: Str255 | None = None
    provider: Str255 | None = None
    flavor_id: Str255 | None = None
    availability_zone: Str255 | None = None
    tags: Tags | None = None


class LoadBalancerUpdate(LBBody):
    not_offered = {"vip_qos_policy_id": (None,), "vip_sg_ids": (None, [])}
    name: Str255 | None = None
    description: Str255 | None = None
    admin_state_up: Bool | None = None
    tags: Tags | None = None


class LoadBalancers(LBResource):
    member = "loadbalancer"
    collection = "loadbalancers"
    title = "Load Balancer"
    model = LoadBalancer
    create_body = LoadBalancerCreate
    update_body = LoadBalancerUpdate
    filters = {
        "name": Filter(LoadBalancer.name),
        "description": Filter(LoadBalancer.description),
        "project_id": Filter(LoadBalancer.project_id),
        "provisioning_status": Filter(LoadBalancer.provisioning_status),
        "operating_status": Filter(LoadBalancer.operating_status),
        "admin_state_up": Filter(LoadBalancer.admin_state_up, to_bool),
        "vip_address": Filter(LoadBalancer.vip_address),
        "vip_port_id": Filter(LoadBalancer.vip_port_id),
        "vip_subnet_id": Filter(LoadBalancer.vip_subnet_id),
        "vip_network_id": Filter(LoadBalancer.vip_network_id),
        "provider": Filter(LoadBalancer.provider),
        "created_at": Filter(LoadBalancer.created_at),
        "updated_at": Filter(LoadBalancer.updated_at),
    }

    def extra_filter(self, name: str, values: list[str]):  # noqa: ANN201
        if name in {"flavor_id", "availability_zone", "vip_qos_policy_id"}:
            # Never set here: only "" (none) matches.
            return true() if all(v == "" for v in values) else false()
        return None

    def render(self, session: Session, obj: LoadBalancer, tags: list[str]) -> dict[str, Any]:
        listeners = session.scalars(select(LBListener.id).where(LBListener.loadbalancer_id == obj.id)
                                    .order_by(LBListener.created_at, LBListener.id))
        pools = session.scalars(select(LBPool.id).where(LBPool.loadbalancer_id == obj.id)
                                .order_by(LBPool.created_at, LBPool.id))
        return {
            **standard(obj, tags),
            "description": obj.description,
            "vip_address": obj.vip_address,
            "vip_port_id": obj.vip_port_id,
            "vip_subnet_id": obj.vip_subnet_id,
            "vip_network_id": obj.vip_network_id,
            "vip_qos_policy_id": None,
            "vip_sg_ids": [],
            "vip_vnic_type": "normal",
            "additional_vips": [],
            "listeners": [{"id": i} for i in listeners],
            "pools": [{"id": i} for i in pools],
            "provider": obj.provider,
            "flavor_id": None,
            "availability_zone": None,
        }

    # -- create ---------------------------------------------------------------------------

    def create(self, session: Session, ctx: Context, body: LoadBalancerCreate) -> LoadBalancer:
        given = body.given()
        tags = given.pop("tags", None) or []
        project_id = _owner(ctx, given)
        provider = providers.resolve(given.pop("provider", None))
        if given.pop("flavor_id", None):
            raise validation("Invalid flavor_id.")
        zone = given.pop("availability_zone", None)
        if zone:
            raise validation(f"Invalid availability zone {zone}.")
        network, subnet, port, address = self._vip(session, ctx, given)
        lb = LoadBalancer(
            project_id=project_id,
            name=given.get("name") or "",
            description=given.get("description") or "",
            admin_state_up=given.get("admin_state_up", True),
            provider=provider,
            provisioning_status=PENDING_CREATE,
            operating_status="OFFLINE",
            vip_network_id=network.id,
            vip_subnet_id=subnet.id,
        )
        session.add(lb)
        session.flush()
        vip: Port | NewPort
        if port is None:
            fixed = {"subnet_id": subnet.id, **({"ip_address": address} if address else {})}
            vip = create_port(
                session, project_id=project_id, network=network, fixed_ips=[fixed],
                security_groups=[], port_security_enabled=False, admin_state_up=True,
                name=f"octavia-lb-{lb.id}", device_owner=VIP_OWNER, device_id=f"lb-{lb.id}",
            )
            PORTS.record(session, vip, "create")
            lb.vip_port_owned = True
        else:
            vip = port
            port.device_owner, port.device_id = VIP_OWNER, f"lb-{lb.id}"
            PORTS.touch(port)
            PORTS.record(session, port, "update")
            lb.vip_port_owned = False
        lb.vip_port_id = vip.id
        lb.vip_address = next(a.ip_address for a in vip.fixed_ips if a.subnet_id == subnet.id)
        self.created(session, lb, tags)
        return lb

    def _vip(self, session: Session, ctx: Context,
             given: dict[str, Any]) -> tuple[Network, Subnet, Port | None, str | None]:
        """Octavia's VIP rules: a port, or a network (and maybe subnet), or a subnet."""
        port_id, network_id = given.get("vip_port_id"), given.get("vip_network_id")
        subnet_id, address = given.get("vip_subnet_id"), given.get("vip_address")
        if not (port_id or network_id or subnet_id):
            raise BadRequest("Validation failure: VIP must contain one of: vip_port_id, vip_network_id, "
                             "vip_subnet_id.")
        port = None
        if port_id:
            port = _visible(PORTS, session, ctx, port_id, "Port", for_update=True)
            if port.device_id or port.device_owner:
                raise validation(f"Port {port.id} already in use by device {port.device_id or port.device_owner}.")
            network = session.get_one(Network, port.network_id)
            if subnet_id:
                subnet = _visible(SUBNETS, session, ctx, subnet_id, "Subnet")
            elif address:
                match = next((a for a in port.fixed_ips if a.ip_address == address), None)
                if match is None:
                    raise validation("Specified VIP address not found on the specified VIP port.")
                subnet = session.get_one(Subnet, match.subnet_id)
            elif len(port.fixed_ips) == 1:
                subnet = session.get_one(Subnet, port.fixed_ips[0].subnet_id)
            else:
                raise validation("VIP port's subnet could not be determined. Please specify either a "
                                 "VIP subnet or address.")
            held = {a.subnet_id: a.ip_address for a in port.fixed_ips}
            if subnet.id not in held or (address and held[subnet.id] != address):
                raise validation("Specified VIP address not found on the specified VIP port.")
        elif network_id:
            network = _visible(NETWORKS, session, ctx, network_id, "Network")
            subnets = list(session.scalars(select(Subnet).where(Subnet.network_id == network.id)
                                           .order_by(Subnet.created_at, Subnet.id)))
            if subnet_id:
                subnet = next((s for s in subnets if s.id == subnet_id), None)
                if subnet is None:
                    raise validation("Supplied network does not contain the supplied subnet.")
            elif address:
                subnet = next((s for s in subnets if _contains(s, address)), None)
                if subnet is None:
                    raise validation("Supplied network does not contain a subnet for VIP address specified.")
            else:
                subnet = next((s for s in subnets if s.ip_version == 4), subnets[0] if subnets else None)
                if subnet is None:
                    raise validation("Supplied network does not contain a subnet.")
        else:
            subnet = _visible(SUBNETS, session, ctx, subnet_id, "Subnet")
            network = session.get_one(Network, subnet.network_id)
        return network, subnet, port, address

    # -- update / delete ----------------------------------------------------------------------

    def update(self, session: Session, ctx: Context, obj_id: str, body: LoadBalancerUpdate) -> LoadBalancer:
        lb = self.get(session, ctx, obj_id, for_update=True)
        if lb.provisioning_status in PENDING:
            raise pending_state(lb.provisioning_status, lb.id)
        given = body.given()
        tags = given.pop("tags", None)
        for key, value in given.items():
            if value is None and key in {"name", "description"}:
                value = ""
            elif value is None:
                raise BadRequest(f"Invalid input for field/attribute {key}. Value: 'None'. "
                                 "Value should not be null")
            setattr(lb, key, value)
        self.updated(session, lb, tags)
        return lb

    def delete(self, session: Session, ctx: Context, obj_id: str, *, cascade: bool = False) -> None:
        lb = self.get(session, ctx, obj_id, for_update=True)
        if lb.provisioning_status in PENDING:
            raise pending_state(lb.provisioning_status, lb.id)
        listeners = list(session.scalars(select(LBListener).where(LBListener.loadbalancer_id == lb.id)))
        pools = list(session.scalars(select(LBPool).where(LBPool.loadbalancer_id == lb.id)))
        if (listeners or pools) and not cascade:
            raise validation(f"Cannot delete Load Balancer {lb.id} - it has children")
        for listener in listeners:
            handle(LBListener).remove(session, listener)
        for pool in pools:
            handle(LBPool).remove(session, pool)
        self._release_vip(session, lb)
        session.execute(Tag.__table__.delete().where(Tag.resource_id == lb.id))
        self.record(session, lb, "delete", None)
        session.delete(lb)

    @staticmethod
    def _release_vip(session: Session, lb: LoadBalancer) -> None:
        """Delete the VIP port netbay made; hand back one the caller brought."""
        port = session.get(Port, lb.vip_port_id, with_for_update=True) if lb.vip_port_id else None
        if port is None or port.device_id != f"lb-{lb.id}":
            return  # deleted or taken over through the network API meanwhile
        if lb.vip_port_owned:
            delete_port(session, port)
        else:
            port.device_owner, port.device_id = "", ""
            PORTS.touch(port)
            PORTS.record(session, port, "update")

    # -- the tree's rules ---------------------------------------------------------------------

    def claim(self, session: Session, lb_id: str) -> LoadBalancer:
        """Octavia's test-and-set before a change in the tree: refuse while the load
        balancer is ``PENDING_*`` (409), else mark it ``PENDING_UPDATE``. The caller
        logs the load balancer's update after its own change."""
        lb = session.get(LoadBalancer, lb_id, with_for_update=True, populate_existing=True)
        if lb is None:
            raise NotFound(f"Load Balancer {lb_id} not found.")
        if lb.provisioning_status in PENDING:
            raise immutable(self.title, lb.id)
        lb.provisioning_status = PENDING_UPDATE
        self.touch(lb)
        return lb


def _owner(ctx: Context, given: dict[str, Any]) -> str:
    project, tenant = given.pop("project_id", None), given.pop("tenant_id", None)
    if project and tenant and project != tenant:
        raise validation("project_id and tenant_id do not match.")
    requested = project or tenant
    if requested and requested != ctx.project_id and not ctx.is_admin:
        raise Forbidden("Policy does not allow this request to be performed.")
    return requested or ctx.project_id


def _visible(resource: Any, session: Session, ctx: Context, obj_id: str, kind: str,
             *, for_update: bool = False) -> Any:
    """A network object the caller may use, or Octavia's 400 ``<Kind> X not found.``"""
    try:
        return resource.get(session, ctx, obj_id, for_update=for_update)
    except NotFound:
        raise invalid_subresource(kind, obj_id) from None


def _contains(subnet: Subnet, address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return ip.version == subnet.ip_version and ip in ipaddress.ip_network(subnet.cidr)


LOADBALANCERS = LoadBalancers()

__all__ = ["LOADBALANCERS", "LoadBalancers", "VIP_OWNER"]
