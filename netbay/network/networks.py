"""Networks: the L2 domains everything else hangs off."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Annotated, Any
from collections.abc import Callable

from pydantic import Field, StringConstraints
from sqlalchemy import Select, bindparam, func, literal, select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import BadRequest, Conflict, invalid_operation, policy_refused
from netbay.network import rbac
from netbay.network.qos import check_policy
from netbay.network.resource import Filter, Resource, standard, to_bool, to_int
from netbay.network.types import UUID, Body, Bool, DNSName, Name, ProjectID, Tags, Text
from netbay.store.models import CREATED_REVISION, IPAllocation, Network, Port, RbacPolicy, Subnet, SubnetPool, Tag

DEFAULT_MTU = 1500
IPV4_MIN_MTU, IPV6_MIN_MTU = 68, 1280
MAX_VNI = 2**24 - 1
# The provider attributes: admin-only to set and to see (Neutron's policy).
PROVIDER_ALIAS = {"network_type": "provider:network_type", "physical_network": "provider:physical_network",
                  "segmentation_id": "provider:segmentation_id"}
PROVIDER = frozenset(PROVIDER_ALIAS.values())
_SUBNET_IDS = (select(Subnet.__table__.c.network_id, Subnet.__table__.c.id)
               .where(Subnet.__table__.c.network_id.in_(bindparam("ids", expanding=True)))
               .order_by(Subnet.__table__.c.created_at))
_POOLS = SubnetPool.__table__
_SCOPES = (select(Subnet.__table__.c.network_id, _POOLS.c.ip_version, _POOLS.c.address_scope_id)
           .join(_POOLS, _POOLS.c.id == Subnet.__table__.c.subnetpool_id)
           .where(Subnet.__table__.c.network_id.in_(bindparam("ids", expanding=True)),
                  _POOLS.c.address_scope_id.is_not(None)))


class NetworkCreate(Body):
    name: Name = ""
    description: Text = ""
    admin_state_up: Bool = True
    shared: Bool = False
    external: Bool = Field(False, alias="router:external")
    # Neutron's net-mtu-writable: any non-negative value, 0 meaning the default; what a
    # subnet needs is checked when there is one (``check_mtu``).
    mtu: int = Field(DEFAULT_MTU, ge=0, le=9000)
    port_security_enabled: Bool = True
    is_default: Bool | None = None
    network_type: Annotated[str, StringConstraints(max_length=32)] | None = Field(
        None, alias="provider:network_type")
    physical_network: Annotated[str, StringConstraints(max_length=64)] | None = Field(
        None, alias="provider:physical_network")
    segmentation_id: int | None = Field(None, alias="provider:segmentation_id")
    qos_policy_id: UUID | None = None
    dns_domain: DNSName = ""
    vlan_transparent: Bool = False
    qinq: Bool = False
    project_id: ProjectID | None = None
    tenant_id: ProjectID | None = None
    tags: Tags | None = None


class NetworkUpdate(Body):
    name: Name | None = None
    description: Text | None = None
    admin_state_up: Bool | None = None
    shared: Bool | None = None
    external: Bool | None = Field(None, alias="router:external")
    mtu: int | None = Field(None, ge=0, le=9000)
    port_security_enabled: Bool | None = None
    is_default: Bool | None = None
    qos_policy_id: UUID | None = None
    dns_domain: DNSName | None = None


class Networks(Resource):
    """Networks. What hangs off a network is built on this module, so it cannot be
    imported here: it subscribes its part of a network's deletion instead —
    ``before_delete`` runs before the ports-in-use check, ``on_delete`` after it."""

    def __init__(self) -> None:
        self.before_delete: list[Callable[[Session, Network], None]] = []
        self.on_delete: list[Callable[[Session, Network], None]] = []

    member = "network"
    collection = "networks"
    model = Network
    create_body = NetworkCreate
    update_body = NetworkUpdate
    admin_only = PROVIDER
    readonly = Resource.readonly | {"vlan_transparent", "qinq"}
    filters = {
        "name": Filter(Network.name),
        "description": Filter(Network.description),
        "project_id": Filter(Network.project_id),
        "tenant_id": Filter(Network.project_id),
        "shared": Filter(Network.shared, to_bool),
        "router:external": Filter(Network.external, to_bool),
        "is_default": Filter(Network.is_default, to_bool),
        "mtu": Filter(Network.mtu, to_int),
        "admin_state_up": Filter(Network.admin_state_up, to_bool),
        "status": Filter(Network.status),
        "revision_number": Filter(Network.revision_number, to_int),
        "created_at": Filter(Network.created_at, sortable=True),
        "updated_at": Filter(Network.updated_at, sortable=True),
        "provider:segmentation_id": Filter(Network.segmentation_id, to_int),
        "provider:network_type": Filter(Network.network_type),
        "provider:physical_network": Filter(Network.physical_network),
        # never true here (_check_vlan_features): a filter on the constant
        "vlan_transparent": Filter(literal(False), to_bool, sortable=False),
        "qinq": Filter(literal(False), to_bool, sortable=False),
    }

    def visible(self, ctx: Context):  # noqa: ANN201
        return rbac.network_visible(ctx.project_id)

    def for_caller(self, ctx: Context, item: dict[str, Any]) -> dict[str, Any]:
        """A network a project sees neither as owner, nor shared, nor external is shared
        with it by an RBAC policy: ``shared`` is true for it, as Neutron computes it.
        The admin-only attributes (``provider:*``) are left out first, as for any resource."""
        item = super().for_caller(ctx, item)
        if (not ctx.is_admin and item.get("project_id") not in (None, ctx.project_id)
                and item.get("shared") is False and not item.get("router:external")):
            return {**item, "shared": True}
        return item

    def fetch(self, session: Session, stmt: Select) -> list[Any]:
        """Plain rows with their subnets' ids: two queries per 500 networks.

        As ORM instances every network would bring its subnets as instances too
        (``Network.subnets`` loads eagerly), three times the CPU of the rows.
        """
        rows = session.execute(stmt.with_only_columns(*Network.__table__.columns)).all()
        subnets: dict[str, list[Any]] = {}
        scopes: dict[str, dict[int, str]] = {}
        ids = [row.id for row in rows]
        for start in range(0, len(ids), 500):
            chunk = {"ids": ids[start:start + 500]}
            for subnet in session.execute(_SUBNET_IDS, chunk):
                subnets.setdefault(subnet.network_id, []).append(subnet)
            for network_id, version, scope in session.execute(_SCOPES, chunk):
                scopes.setdefault(network_id, {})[version] = scope
        return [SimpleNamespace(**row._asdict(), subnets=subnets.get(row.id, []), address_scopes=scopes.get(row.id, {}))
                for row in rows]

    @staticmethod
    def _address_scopes(session: Session, obj: Any) -> dict[int, str]:
        """{IP version: scope} of the pools the network's subnets came from (Neutron's
        ``_extend_network_dict_address_scope``); a listed network brings its own."""
        known = getattr(obj, "address_scopes", None)
        if known is not None:
            return known
        if not any(getattr(s, "subnetpool_id", None) for s in obj.subnets):
            return {}
        return {version: scope for _, version, scope in session.execute(_SCOPES, {"ids": [obj.id]})}

    def render(self, session: Session, obj: Network, tags: list[str]) -> dict[str, Any]:
        scopes = self._address_scopes(session, obj)
        return {
            **standard(obj, tags),
            "admin_state_up": obj.admin_state_up,
            "status": obj.status,
            "shared": obj.shared,
            "router:external": obj.external,
            "mtu": obj.mtu,
            "subnets": [s.id for s in obj.subnets],
            "provider:network_type": obj.network_type,
            "provider:physical_network": obj.physical_network,
            "provider:segmentation_id": obj.segmentation_id,
            "port_security_enabled": obj.port_security_enabled,
            "qos_policy_id": obj.qos_policy_id,
            "dns_domain": obj.dns_domain,
            "availability_zone_hints": [],
            "availability_zones": ["nova"],
            "ipv4_address_scope": scopes.get(4),
            "ipv6_address_scope": scopes.get(6),
            # only an external network has it (Neutron's _extend_external_network_default)
            **({"is_default": bool(obj.is_default)} if obj.external else {}),
            "l2_adjacency": True,
            "vlan_transparent": False,   # refused when asked for: _check_vlan_features
            "qinq": False,
        }

    def create(self, session: Session, ctx: Context, body: NetworkCreate) -> Network:
        given = body.given()
        tags = given.pop("tags", None) or []
        project_id = self.owner_for_create(ctx, given)
        if (given.get("shared") or given.get("external")) and not ctx.is_admin:
            raise policy_refused("create_network", "shared" if given.get("shared") else "router:external")
        if "is_default" in given and not ctx.is_admin:
            raise policy_refused("create_network", "is_default")
        is_default = given.pop("is_default", None)
        segment = _provider_segment(session, ctx, given)
        _check_vlan_features(given.pop("vlan_transparent", False), given.pop("qinq", False))
        check_policy(session, ctx, given.get("qos_policy_id"))
        if not given.get("mtu"):  # 0: the largest the deployment allows
            given["mtu"] = DEFAULT_MTU
        net = Network(project_id=project_id, revision_number=CREATED_REVISION, **segment, **given)
        session.add(net)
        session.flush()
        _set_default(session, net, is_default)
        if net.external:
            rbac.add_external(session, net)
        if tags:
            self.set_tags(session, net, tags)
            net.revision_number = CREATED_REVISION
        self.record(session, net, "create")
        return net

    def update(self, session: Session, ctx: Context, obj_id: str, body: NetworkUpdate) -> Network:
        net = self.get_owned(session, ctx, obj_id)
        given = body.given()
        if ("shared" in given or "external" in given) and not ctx.is_admin:
            raise policy_refused("update_network", "shared" if "shared" in given else "router:external")
        if "is_default" in given and not ctx.is_admin:
            raise policy_refused("update_network", "is_default")
        if given.get("mtu") is not None:
            given["mtu"] = given["mtu"] or DEFAULT_MTU  # 0: the largest the deployment allows
            check_mtu(net, given["mtu"], {s.ip_version for s in net.subnets})
        check_policy(session, ctx, given.get("qos_policy_id"))
        if given.get("shared") is False and net.shared:
            others = session.scalar(
                select(func.count()).select_from(Port).where(
                    Port.network_id == net.id, Port.project_id != net.project_id
                )
            )
            if others:
                raise Conflict(
                    f"Unable to reconfigure sharing settings for network {net.id}. "
                    "Multiple tenants are using it.",
                    kind="InvalidSharedSetting",
                )
        is_default = given.pop("is_default", None)
        if given.get("external") is False and net.external:
            rbac.remove_external(session, net)
            net.is_default = False
        elif given.get("external") and not net.external:
            rbac.add_external(session, net)
        for key, value in given.items():
            setattr(net, key, value)
        _set_default(session, net, is_default)
        self.touch(net)
        self.record(session, net, "update")
        return net

    def policy_changed(self, session: Session, net: Network) -> None:
        """An RBAC policy on ``net`` came, went or moved: a change of the network."""
        self.touch(net)
        self.record(session, net, "update")

    def delete(self, session: Session, ctx: Context, obj_id: str) -> None:
        net = self.get_owned(session, ctx, obj_id, f"delete_{self.member}")
        for release in self.before_delete:   # e.g. an external network's spare floating IPs
            release(session, net)
        in_use = session.scalar(select(func.count()).select_from(Port).where(Port.network_id == net.id))
        if in_use:
            raise Conflict(
                f"Unable to complete operation on network {net.id}. "
                "There are one or more ports still in use on the network.",
                kind="NetworkInUse",
            )
        for cascade in self.on_delete:   # the subnets go with their network
            cascade(session, net)
        session.execute(Tag.__table__.delete().where(Tag.resource_id == net.id))
        session.execute(RbacPolicy.__table__.delete().where(RbacPolicy.object_id == net.id))  # Neutron's cascade
        self.record(session, net, "delete", None)
        session.delete(net)


def _set_default(session: Session, net: Network, is_default: bool | None) -> None:
    """``is_default`` as Neutron's auto-allocation keeps it: only on an external network
    (ignored on others), and one default per cloud (409 ``DefaultExternalNetworkExists``)."""
    if is_default is None or not net.external:
        return
    if is_default:
        other = session.scalar(select(Network.id).where(Network.is_default.is_(True), Network.id != net.id))
        if other is not None:
            raise Conflict(f"A default external network already exists: {other}.",
                           kind="DefaultExternalNetworkExists")
    net.is_default = is_default


def _check_vlan_features(vlan_transparent: bool, qinq: bool) -> None:
    """``vlan-transparent`` and ``qinq`` as ML2 answers them with a mechanism driver
    that cannot carry them: netbay's networks are VXLAN segments on Linux bridges whose
    security groups (nftables, bridge family) see untagged frames only, and QinQ needs
    VLAN segments (OVN's driver allows it on those alone) — 400 ``VlanTransparencyDriverError``
    / ``VlanQinqDriverError``, after the check that the two are not both asked for."""
    if vlan_transparent and qinq:
        raise BadRequest("Bad network request: Attributes 'vlan_transparent' and 'qinq' can not be set to True "
                         "for the same network..", kind="BadRequest")
    if vlan_transparent:
        raise BadRequest("Backend does not support VLAN Transparency.", kind="VlanTransparencyDriverError")
    if qinq:
        raise BadRequest("Backend does not support VLAN QinQ.", kind="VlanQinqDriverError")


def check_mtu(network: Network, mtu: int, ip_versions: set[int]) -> None:
    """The minimum MTU of each IP version a network carries (Neutron's
    ``_validate_change_network_mtu`` and ``_validate_subnet_network_mtu``)."""
    if not ip_versions or mtu >= IPV6_MIN_MTU:
        return
    needed = IPV4_MIN_MTU if mtu < IPV4_MIN_MTU else IPV6_MIN_MTU if 6 in ip_versions else None
    if needed:
        raise Conflict(f"MTU of {network.id} is not valid, subnet requires a minimum of {needed}",
                       kind="NetworkMTUSubnetConflict")


def _provider_segment(session: Session, ctx: Context, given: dict[str, Any]) -> dict[str, Any]:
    """The network's segment (taken out of ``given``): as an admin asks (the provider
    extension), else the next VNI.

    netbay's dataplane carries networks over VXLAN only, so ``vxlan`` is the one
    type it accepts; the checks and words are ML2's tunnel type driver's.
    """
    asked = {key: value for key in PROVIDER_ALIAS if (value := given.pop(key, None)) is not None}
    if not asked:  # none given, or all null: as Neutron's ``is_attr_set``
        return {"segmentation_id": _next_segment(session), "network_type": "vxlan"}
    if not ctx.is_admin:
        raise policy_refused("create_network", PROVIDER_ALIAS[next(iter(asked))])
    kind = asked.get("network_type")
    if kind is None:
        raise invalid_operation("network_type required")
    if kind != "vxlan":
        raise invalid_operation(f"network_type value '{kind}' not supported")
    if asked.get("physical_network"):
        raise invalid_operation("provider:physical_network specified for vxlan network")
    vni = asked.get("segmentation_id")
    if vni is None:
        return {"segmentation_id": _next_segment(session), "network_type": kind}
    if not 1 <= vni <= MAX_VNI:
        raise invalid_operation(f"segmentation_id out of range (1 through {MAX_VNI})")
    if session.scalar(select(Network.id).where(Network.segmentation_id == vni)):
        raise Conflict(f"Unable to create the network. The tunnel ID {vni} is in use.", kind="TunnelIdInUse")
    return {"segmentation_id": vni, "network_type": kind}


def _next_segment(session: Session) -> int:
    """The lowest free VNI above those in use (VNI 1 is flannel's; start at 100)."""
    highest = session.scalar(select(func.max(Network.segmentation_id)))
    return max(highest or 99, 99) + 1


NETWORKS = Networks()
rbac.network_changed.append(NETWORKS.policy_changed)

__all__ = ["NETWORKS", "Networks", "NetworkCreate", "NetworkUpdate", "IPAllocation", "Subnet"]
