"""Subnets: an address range of a network, its gateway, pools, DNS and routes.

A subnet's CIDR is given, or carved from a subnet pool. Every check Neutron
makes on a subnet is made with Neutron's wording, in Neutron's order
(:mod:`netbay.network.subnetchecks`): ``check_attrs`` for what a request says,
then what the network already holds (overlaps, pool affinity), then the
allocation pools against the gateway.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from sqlalchemy import delete, false, or_, select, true
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import Conflict, policy_refused
from netbay.network import ipam
from netbay.network.networks import NETWORKS, check_mtu
from netbay.network.ports import PORTS
from netbay.network.rbac import network_visible
from netbay.network.resource import Filter, Resource, standard, to_bool, to_int
from netbay.network.subnetbodies import SubnetCreate, SubnetUpdate
from netbay.network.subnetchecks import (
    AUTO_ADDRESS_MODES, ROUTER_INTERFACE_OWNERS, bad_request, check_affinity, check_attrs, check_gateway_free,
    check_overlap, required,
)
from netbay.network.subnetpools import SUBNETPOOLS
from netbay.store.models import IPAllocation, Network, Port, Subnet, SubnetPool, Tag


def _routes(routes: list[dict[str, str]]) -> list[dict[str, str]]:
    return [{"destination": r["destination"], "nexthop": r["nexthop"]} for r in routes]


class Subnets(Resource):
    member = "subnet"
    collection = "subnets"
    model = Subnet
    create_body = SubnetCreate
    update_body = SubnetUpdate
    # Rendered, but netbay has no segments.
    readonly = Resource.readonly | {"segment_id", "router:external"}
    filters = {
        "name": Filter(Subnet.name),
        "description": Filter(Subnet.description),
        "project_id": Filter(Subnet.project_id),
        "tenant_id": Filter(Subnet.project_id),
        "network_id": Filter(Subnet.network_id),
        "subnetpool_id": Filter(Subnet.subnetpool_id, lambda v: v),
        "ip_version": Filter(Subnet.ip_version, to_int),
        "cidr": Filter(Subnet.cidr),
        "gateway_ip": Filter(Subnet.gateway_ip, lambda v: v),
        "enable_dhcp": Filter(Subnet.enable_dhcp, to_bool),
        "ipv6_ra_mode": Filter(Subnet.ipv6_ra_mode, lambda v: v),
        "ipv6_address_mode": Filter(Subnet.ipv6_address_mode, lambda v: v),
        "revision_number": Filter(Subnet.revision_number, to_int),
        "created_at": Filter(Subnet.created_at),
        "updated_at": Filter(Subnet.updated_at),
    }

    def visible(self, ctx: Context):  # noqa: ANN201
        """Own subnets, and those on networks the caller sees (owns, shared with it or made
        external for it, by a policy or for everyone)."""
        networks = select(Network.id).where(network_visible(ctx.project_id))
        return or_(Subnet.project_id == ctx.project_id, Subnet.network_id.in_(networks))

    def extra_filter(self, name: str, values: list[str]):  # noqa: ANN201
        if name in ("shared", "router:external"):
            # Neither is a column of a subnet: both come from its network (Neutron's
            # ``shared`` filter, converted by its plugin: InvalidInput; and the
            # subnet-external-network extension's attribute).
            column = Network.shared if name == "shared" else Network.external
            wanted = {to_bool(v) for v in values}
            return Subnet.network_id.in_(select(Network.id).where(column.in_(wanted)))
        if name == "segment_id":  # netbay has no segments: every subnet has none
            return true() if all(v in {"", "None"} for v in values) else false()
        return None

    def get_owned(self, session: Session, ctx: Context, obj_id: str, action: str = "") -> Subnet:
        """The subnet's owner or its network's owner may change it (Neutron's admin_or_network_owner)."""
        subnet = self.get(session, ctx, obj_id, for_update=True)
        if ctx.is_admin or subnet.project_id == ctx.project_id:
            return subnet
        owner = session.scalar(select(Network.project_id).where(Network.id == subnet.network_id))
        if owner != ctx.project_id:
            raise policy_refused(action or "update_subnet")
        return subnet

    def fetch(self, session: Session, stmt: Any) -> list[Any]:
        """The rows, and their networks' ``router:external`` in one query for ``render``."""
        rows = list(session.scalars(stmt))
        known = session.info.setdefault("network_external", {})
        wanted = {r.network_id for r in rows} - known.keys()
        if wanted:
            flags = session.execute(select(Network.id, Network.external).where(Network.id.in_(wanted)))
            known.update((network_id, bool(external)) for network_id, external in flags)
        return rows

    def render(self, session: Session, obj: Subnet, tags: list[str]) -> dict[str, Any]:
        return {
            **standard(obj, tags),
            "network_id": obj.network_id,
            "subnetpool_id": obj.subnetpool_id,
            "ip_version": obj.ip_version,
            "cidr": obj.cidr,
            "gateway_ip": obj.gateway_ip,
            "allocation_pools": list(obj.allocation_pools or []),
            "dns_nameservers": list(obj.dns_nameservers or []),
            "host_routes": list(obj.host_routes or []),
            "enable_dhcp": obj.enable_dhcp,
            "ipv6_ra_mode": obj.ipv6_ra_mode,
            "ipv6_address_mode": obj.ipv6_address_mode,
            "service_types": list(obj.service_types or []),
            "segment_id": None,
            "router:external": _external(session, obj.network_id),
        }

    # -- writing -----------------------------------------------------------------------

    def create(self, session: Session, ctx: Context, body: SubnetCreate) -> Subnet:
        given = body.given()
        tags = given.pop("tags", None) or []
        project_id = self.owner_for_create(ctx, given)
        for attribute in ("network_id", "ip_version"):
            if given.get(attribute) is None:
                raise required(attribute)
        version: int = given["ip_version"]
        network = NETWORKS.get(session, ctx, given["network_id"], for_update=True)
        if not ctx.is_admin and network.project_id != ctx.project_id:
            raise policy_refused("create_subnet")
        cidr, prefixlen = given.get("cidr"), given.get("prefixlen")
        if cidr is not None and prefixlen is not None:
            raise bad_request("cidr and prefixlen must not be supplied together")
        pool = self._pool_for(session, ctx, given)
        if pool is None and cidr is None:
            raise bad_request("a subnetpool must be specified in the absence of a cidr")
        if pool is not None:
            if cidr is None and given.get("allocation_pools") is not None:
                raise bad_request("allocation_pools allowed only for specific subnet requests.")
            if version != pool.ip_version:
                raise bad_request(f"Cannot allocate IPv{version} subnet from IPv{pool.ip_version} subnet pool")
            check_affinity(session, network, version, pool.id)
            cidr = SUBNETPOOLS.allocate(session, pool, project_id, cidr=cidr, prefixlen=prefixlen,
                                        gateway_ip=given.get("gateway_ip"))
        else:
            check_affinity(session, network, version, None)
        assert cidr is not None
        enable_dhcp = given.get("enable_dhcp", True)
        check_attrs({**given, "enable_dhcp": enable_dhcp}, version, cidr)
        check_mtu(network, network.mtu, {version})
        check_overlap(session, network, cidr)
        gateway_ip = given["gateway_ip"] if "gateway_ip" in given else ipam.default_gateway(cidr)
        if given.get("allocation_pools") is not None:
            pools = ipam.validate_pools(cidr, gateway_ip, given["allocation_pools"])
        else:
            pools = ipam.default_pools(cidr, gateway_ip)
        subnet = Subnet(
            project_id=project_id, network_id=network.id, subnetpool_id=pool.id if pool else None,
            name=given.get("name", ""), description=given.get("description", ""), ip_version=version,
            cidr=cidr, gateway_ip=gateway_ip, allocation_pools=pools,
            dns_nameservers=given.get("dns_nameservers", []), host_routes=_routes(given.get("host_routes", [])),
            enable_dhcp=enable_dhcp, ipv6_ra_mode=given.get("ipv6_ra_mode"),
            ipv6_address_mode=given.get("ipv6_address_mode"), service_types=given.get("service_types") or None,
        )
        session.add(subnet)
        session.flush()
        if tags:
            self.set_tags(session, subnet, tags)
            subnet.revision_number = 0
        self.record(session, subnet, "create")
        _network_changed(session, network)
        return subnet

    def update(self, session: Session, ctx: Context, obj_id: str, body: SubnetUpdate) -> Subnet:
        subnet = self.get_owned(session, ctx, obj_id)
        given = body.given()
        for key in ("name", "description", "enable_dhcp", "dns_nameservers", "host_routes", "allocation_pools"):
            if key in given and given[key] is None:
                del given[key]  # null: leave as it is
        check_attrs(given, subnet.ip_version, subnet.cidr, current=subnet)
        gateway_ip = given.get("gateway_ip", subnet.gateway_ip)
        if gateway_ip != subnet.gateway_ip and subnet.gateway_ip:
            check_gateway_free(session, subnet)
        if "allocation_pools" in given:
            subnet.allocation_pools = ipam.validate_pools(subnet.cidr, gateway_ip, given["allocation_pools"])
        elif gateway_ip != subnet.gateway_ip and gateway_ip is not None:
            ipam.validate_pools(subnet.cidr, gateway_ip, list(subnet.allocation_pools or []))
        subnet.gateway_ip = gateway_ip
        for key in ("name", "description", "enable_dhcp", "dns_nameservers"):
            if key in given:
                setattr(subnet, key, given[key])
        if "service_types" in given:
            subnet.service_types = given["service_types"] or None
        if "host_routes" in given:
            subnet.host_routes = _routes(given["host_routes"])
        self.touch(subnet)
        self.record(session, subnet, "update")
        return subnet

    def delete(self, session: Session, ctx: Context, obj_id: str) -> None:
        subnet = self.get_owned(session, ctx, obj_id, f"delete_{self.member}")
        network = session.get(Network, subnet.network_id)
        self.remove(session, subnet)
        if network is not None:
            _network_changed(session, network)

    def remove(self, session: Session, subnet: Subnet) -> None:
        """Drop a subnet nothing holds an address of (also used when its network goes).

        Neutron's ``_remove_subnet_ip_allocations_from_ports``: a router interface
        always holds a subnet; other ports hold it unless their addresses are
        automatic (SLAAC, DHCPv6-stateless), which then go with the subnet.
        """
        holders = select(IPAllocation.port_id).where(IPAllocation.subnet_id == subnet.id)
        automatic = subnet.ipv6_address_mode in AUTO_ADDRESS_MODES or subnet.ipv6_ra_mode in AUTO_ADDRESS_MODES
        if automatic:
            holders = holders.join(Port, Port.id == IPAllocation.port_id).where(
                Port.device_owner.in_(ROUTER_INTERFACE_OWNERS))
        if session.scalar(holders.limit(1)):
            raise Conflict(f"Unable to complete operation on subnet {subnet.id}: One or more ports have an IP "
                           "allocation from this subnet.", kind="SubnetInUse")
        if automatic:
            _release_addresses(session, subnet)
        session.execute(delete(Tag).where(Tag.resource_id == subnet.id))
        self.record(session, subnet, "delete", None)
        session.delete(subnet)
        session.flush()
        network = session.get(Network, subnet.network_id)
        if network is not None:
            session.expire(network, ["subnets"])

    def _pool_for(self, session: Session, ctx: Context, given: dict[str, Any]) -> SubnetPool | None:
        """The pool a request names, or the default one it asks for (Neutron's _get_subnetpool_id)."""
        pool_id, use_default = given.get("subnetpool_id"), given.get("use_default_subnetpool")
        if pool_id and use_default:
            raise bad_request("subnetpool_id and use_default_subnetpool cannot both be specified")
        if pool_id:
            return SUBNETPOOLS.get(session, ctx, pool_id)
        if not use_default:
            return None
        cidr = given.get("cidr")
        version = ipaddress.ip_network(cidr).version if cidr else given["ip_version"]
        pool = SUBNETPOOLS.default_for(session, ctx, version)
        if pool is None:
            raise bad_request(f"No default subnetpool found for IPv{version}")
        return pool


def _release_addresses(session: Session, subnet: Subnet) -> None:
    """The ports' automatic addresses on a subnet being deleted: gone, each port updated."""
    held = select(IPAllocation.port_id).where(IPAllocation.subnet_id == subnet.id)
    for port in list(session.scalars(select(Port).where(Port.id.in_(held)).with_for_update())):
        for alloc in [a for a in port.fixed_ips if a.subnet_id == subnet.id]:
            port.fixed_ips.remove(alloc)
        PORTS.touch(port)
        PORTS.record(session, port, "update")
    session.flush()


def _external(session: Session, network_id: str) -> bool:
    """Whether a subnet's network is external (the subnet-external-network extension)."""
    known = session.info.setdefault("network_external", {})
    if network_id not in known:
        known[network_id] = bool(session.scalar(select(Network.external).where(Network.id == network_id)))
    return known[network_id]


def _network_changed(session: Session, network: Network) -> None:
    """The network body lists its subnets, so a subnet coming or going is a network update."""
    session.flush()
    session.expire(network, ["subnets"])
    NETWORKS.touch(network)
    NETWORKS.record(session, network, "update")


SUBNETS = Subnets()


def _remove_all(session: Session, network: Network) -> None:
    for subnet in list(network.subnets):
        SUBNETS.remove(session, subnet)


NETWORKS.on_delete.append(_remove_all)   # the subnets go with their network

__all__ = ["SUBNETS", "SubnetCreate", "SubnetUpdate", "Subnets"]
