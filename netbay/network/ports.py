"""Ports: a network attachment with a MAC, fixed IPs and security groups.

``create_port`` and ``delete_port`` are the one way any part of netbay makes or
removes a port (the Port API, router interfaces and gateways, floating IPs,
load balancer VIPs, cluster nodes, containers), so IPAM and default security
groups apply everywhere alike. ``Ports`` is the Neutron Port API on top of them:
it adds what only an API caller needs (visibility, policy, validation of
security group ids) and keeps the create path to a handful of statements.
"""

from __future__ import annotations

import ipaddress
import secrets
from dataclasses import dataclass
from types import SimpleNamespace
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from pydantic import AfterValidator, Field, StringConstraints
from sqlalchemy import Select, and_, bindparam, false, or_, select, true
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from netbay.context import Context
from netbay.errors import BadRequest, Conflict, Forbidden, invalid_operation, not_found, policy_refused
from netbay.network import dhcp_opts, ipam, portgroups, quotas
from netbay.network.dhcp_opts import ExtraDhcpOpts
from netbay.network.rbac import EXTERNAL_NETWORK_IDS, SHARED_NETWORK_IDS, visible_to
from netbay.network.trunks import check_port_deletable
from netbay.network.portrows import Allocation, NewPort, PortWriter, new_port, port_row
from netbay.network.qos import check_policy
from netbay.network.resource import Filter, Resource, standard, to_bool, to_int
from netbay.network.security_groups import default_group_key, ensure_default_group
from netbay.network.taas import forget_port
from netbay.network.types import MAC, UUID, Body, Bool, DNSName, IPAddress, Name, ProjectID, Tags, Text
from netbay.store.models import (
    CREATED_REVISION,
    DefaultSecurityGroup,
    FloatingIP,
    IPAllocation,
    Network,
    Port,
    PortSecurityGroup,
    Router,
    SecurityGroup,
    Subnet,
    Tag,
    new_id,
)

MAC_PREFIX = "fa:16:3e"
# Neutron's default ``max_allowed_address_pair``.
MAX_ADDRESS_PAIRS = 10
STATUSES = {"ACTIVE", "DOWN", "BUILD", "ERROR"}
# Ports a router or floating IP owns: removed through their own API, not the Port API.
ROUTER_INTERFACE_OWNERS = {
    "network:router_interface",
    "network:router_interface_distributed",
    "network:ha_router_replicated_interface",
    "network:router_centralized_snat",
}
ROUTER_GATEWAY = "network:router_gateway"
FLOATINGIP_OWNER = "network:floatingip"
AUTO_ADDRESS_MODES = ("slaac", "dhcpv6-stateless")
# binding:vif_type of a port bound to a host ("unbound" otherwise).
VIF_TYPE = "other"


def generate_mac() -> str:
    return MAC_PREFIX + "".join(f":{b:02x}" for b in secrets.token_bytes(3))


def _subnets_of(session: Session, network_id: str) -> list[Subnet]:
    return list(session.scalars(select(Subnet).where(Subnet.network_id == network_id).order_by(Subnet.created_at)))


def assign_ips(
    session: Session,
    port: Port,
    requests: list[dict[str, Any]] | None,
    *,
    allow_gateway: bool = False,
    start_seq: int = 0,
) -> None:
    """Give an existing (ORM) port more fixed IPs (see ``assign_addresses``)."""
    session.flush()
    if assign_addresses(session, port.id, port.network_id, port.mac_address, port.device_owner, requests,
                        allow_gateway=allow_gateway, start_seq=start_seq):
        session.expire(port, ["fixed_ips"])  # the rows were written with Core: load them again


def assign_addresses(
    session: Session,
    port_id: str,
    network_id: str,
    mac: str,
    owner: str,
    requests: list[dict[str, Any]] | None,
    *,
    allow_gateway: bool = False,
    subnets: Sequence[ipam.SubnetLike] | None = None,
    start_seq: int = 0,
    writer: PortWriter | None = None,
) -> list[tuple[str, str]]:
    """Allocate a port's addresses as Neutron's IPAM does; returns ``(subnet_id, address)``.

    ``requests=None``: one address from the IPv4 subnets and one from the
    stateful IPv6 subnets (the first with room), plus the EUI-64 address on
    every SLAAC / DHCPv6-stateless subnet. Otherwise one address per request;
    a request for an automatic-address subnet gets the EUI-64 address. The
    ``ip_allocations`` rows are written here (``ipam.assign``): the port's row must
    exist, or be written by ``writer`` with the first address. ``subnets`` are the
    network's, when the caller has them already.
    """
    if requests == []:
        return []
    if session.deleted or any(isinstance(obj, IPAllocation) for obj in session.new):
        session.flush()  # pending allocations and releases must be seen by IPAM
    given: list[tuple[str, str]] = []

    def give(subnet: ipam.SubnetLike, requested: str | None = None, gateway_ok: bool = False) -> None:
        holder = ipam.Holder(port_id, network_id, start_seq + len(given),
                             writer.write_address if writer else ipam.insert_allocation)
        given.append((subnet.id, ipam.assign(session, subnet, holder, requested, allow_gateway=gateway_ok)))

    auto = owner not in ROUTER_INTERFACE_OWNERS
    with session.no_autoflush:
        if subnets is None:
            subnets = _subnets_of(session, network_id)
        if requests is None and any(s.service_types for s in subnets):
            serving = [s for s in subnets if ipam.serves(s, owner)]
            if not serving:
                raise BadRequest(f"No valid service subnet for the given device owner, network {network_id}, "
                                 f"service type {owner}.", kind="IpAddressGenerationFailureNoMatchingSubnet")
            subnets = serving
        if requests is None:
            for candidates in (
                [s for s in subnets if s.ip_version == 4],
                [s for s in subnets if s.ip_version == 6 and not (auto and is_auto_address(s))],
            ):
                if candidates:
                    _from_any(candidates, give)
            for subnet in subnets:
                if auto and is_auto_address(subnet):
                    give(subnet, eui64(subnet.cidr, mac))
            return given
        by_id = {s.id: s for s in subnets}
        for req in requests:
            subnet = _subnet_for(network_id, req, by_id, subnets)
            requested = req.get("ip_address")
            if auto and is_auto_address(subnet):
                derived = eui64(subnet.cidr, mac)
                if requested is not None and requested != derived:
                    raise invalid_operation(
                        f"IPv6 address {requested} cannot be directly assigned to a port on subnet {subnet.id} "
                        "since the subnet is configured for automatic addresses")
                requested = derived
            # A second request on a subnet finds the first one's row: another address, or a 409.
            give(subnet, requested, allow_gateway)
    return given


def is_auto_address(subnet: ipam.SubnetLike) -> bool:
    """SLAAC and DHCPv6-stateless subnets: hosts derive their address from the MAC."""
    return subnet.ip_version == 6 and (
        subnet.ipv6_address_mode in AUTO_ADDRESS_MODES or subnet.ipv6_ra_mode in AUTO_ADDRESS_MODES)


def eui64(cidr: str, mac: str) -> str:
    """The modified EUI-64 address of ``mac`` in a /64 (RFC 4291 appendix A)."""
    octets = bytes.fromhex(mac.replace(":", ""))
    iid = bytes([octets[0] ^ 0x02]) + octets[1:3] + b"\xff\xfe" + octets[3:]
    return str(ipaddress.ip_network(cidr).network_address + int.from_bytes(iid, "big"))


def _subnet_for(network_id: str, req: dict[str, Any], by_id: dict[str, ipam.SubnetLike],
                subnets: Sequence[ipam.SubnetLike]) -> ipam.SubnetLike:
    subnet_id, address = req.get("subnet_id"), req.get("ip_address")
    if subnet_id:
        subnet = by_id.get(subnet_id)
        if subnet is None:
            raise invalid_operation(f"Failed to create port on network {network_id}, "
                                    f"because fixed_ips included invalid subnet {subnet_id}")
        return subnet
    if address:
        subnet = next((s for s in subnets if ipam.in_subnet(s, address)), None)
        if subnet is None:
            raise BadRequest(
                f"IP address {address} is not a valid IP for any of the subnets on the specified network.",
                kind="InvalidIpForNetwork")
        return subnet
    raise BadRequest("Invalid input for fixed_ips. Reason: each entry needs subnet_id or ip_address.")


def _from_any(subnets: Sequence[ipam.SubnetLike], give: Callable[[ipam.SubnetLike], None]) -> None:
    """An address from the first subnet of one IP version that has room."""
    for subnet in subnets[:-1]:
        try:
            return give(subnet)
        except Conflict as exc:
            if exc.kind != "IpAddressGenerationFailure":
                raise
    give(subnets[-1])


def _mac_taken(session: Session, network_id: str, mac: str) -> bool:
    return session.scalar(select(Port.id).where(Port.network_id == network_id, Port.mac_address == mac)) is not None


def _check_mac_free(session: Session, network_id: str, mac: str) -> None:
    if _mac_taken(session, network_id, mac):
        raise Conflict(f"Unable to complete operation for network {network_id}. "
                       f"The mac address {mac} is in use.", kind="MacAddressInUse")


def address_pairs(pairs: list[dict[str, Any]], port_mac: str) -> list[dict[str, str]]:
    """Neutron's stored form: every pair has a MAC (the port's unless given), no duplicates."""
    if len(pairs) > MAX_ADDRESS_PAIRS:
        raise BadRequest(f"The number of allowed address pair exceeds the maximum {MAX_ADDRESS_PAIRS}.",
                         kind="AllowedAddressPairExhausted")
    seen: set[tuple[str | None, str]] = set()
    result = []
    for pair in pairs:
        key = (pair.get("mac_address"), pair["ip_address"])
        if key in seen:
            raise BadRequest(f"Request contains duplicate address pair: mac_address {key[0]} "
                             f"ip_address {key[1]}.", kind="DuplicateAddressPairInRequest")
        seen.add(key)
        result.append({"ip_address": pair["ip_address"], "mac_address": pair.get("mac_address") or port_mac})
    return result


def create_port(
    session: Session,
    *,
    project_id: str,
    network: Network | PortTarget,
    fixed_ips: list[dict[str, Any]] | None = None,
    mac_address: str | None = None,
    security_groups: list[str] | None = None,
    port_security_enabled: bool | None = None,
    allow_gateway: bool = False,
    subnets: Sequence[ipam.SubnetLike] | None = None,
    **attrs: Any,
) -> NewPort:
    """Make a port with addresses and security groups, inside the caller's transaction.

    ``security_groups=None`` means the project's default group for ordinary
    ports and none for ports netbay owns (``device_owner`` ``network:*``).
    ``attrs`` are plain columns: name, description, device_id, device_owner,
    binding_host_id, admin_state_up, allowed_address_pairs. ``subnets``: the
    network's, when the caller loaded them already. The port is written with
    Core INSERTs (``portrows``); what comes back is read-only.
    """
    owner = attrs.get("device_owner", "") or ""
    if port_security_enabled is None:  # the network's default (the port-security extension)
        port_security_enabled = getattr(network, "port_security_enabled", True)
    if security_groups is None:
        security_groups = (
            [_default_group_id(session, project_id)]
            if port_security_enabled and not owner.startswith("network:") else []
        )
    if security_groups and not port_security_enabled:
        raise BadRequest("Port security must be enabled and port must have an IP address in order "
                         "to use security groups.", kind="PortSecurityAndIPRequiredForSecurityGroups")
    if attrs.get("allowed_address_pairs") and not port_security_enabled:
        raise Conflict("Port Security must be enabled in order to have allowed address pairs on a port.",
                       kind="AddressPairAndPortSecurityRequired")
    if mac_address is not None:
        _check_mac_free(session, network.id, mac_address)
    # A generated MAC is not looked up first: the unique key (network, MAC) refuses the
    # rare clash (one in 16M per port already there) and ``Store.retrying`` draws again.
    mac = mac_address or generate_mac()
    if attrs.get("allowed_address_pairs"):
        attrs["allowed_address_pairs"] = address_pairs(attrs["allowed_address_pairs"], mac)
    row = port_row(id=new_id(), project_id=project_id, network_id=network.id, mac_address=mac,
                   port_security_enabled=port_security_enabled, **attrs)
    groups = list(dict.fromkeys(security_groups))
    writer = PortWriter(row, groups)
    addresses = assign_addresses(session, row["id"], network.id, mac, owner, fixed_ips,
                                 allow_gateway=allow_gateway, subnets=subnets, writer=writer)
    writer.finish(session)
    return new_port(row, addresses, groups)


def _default_group_id(session: Session, project_id: str) -> str:
    """The project's default group id: from the store's cache once it exists."""
    cache = session.info.get("cache", {})
    key = default_group_key(project_id)
    known = cache.get(key) or session.execute(
        select(DefaultSecurityGroup.security_group_id).where(DefaultSecurityGroup.project_id == project_id)
    ).scalar()
    if known is not None:
        cache[key] = known
        return known
    return ensure_default_group(session, project_id).id


# What refers to a port by id and must let go before it is deleted: modules built on
# this one subscribe (floating IPs disassociate, as Neutron does), so it need not
# import them; TaaS, below it, is subscribed here (its ``handle_delete_port``).
on_delete: list[Callable[[Session, str], None]] = [forget_port]


def delete_port(session: Session, port: Port, resource: Resource | None = None) -> None:
    """Remove a port, its addresses and tags, and log the change.

    What refers to the port lets go first (``on_delete``): its floating IPs are
    disassociated, as Neutron does, and its tap services and flows go.
    """
    for release in on_delete:
        release(session, port.id)
    (resource or PORTS).record(session, port, "delete", None)
    session.execute(Tag.__table__.delete().where(Tag.resource_id == port.id))
    session.delete(port)
    session.flush()


def set_status(session: Session, port_id: str, status: str) -> Port:
    """Set a port's status (ACTIVE/DOWN/...): the dataplane's report, not a user's request."""
    if status not in STATUSES:
        raise BadRequest(f"Invalid input for status. Reason: '{status}' is not in {sorted(STATUSES)}.")
    port = session.get(Port, port_id, with_for_update=True)
    if port is None:
        raise not_found("port", port_id)
    if port.status != status:
        port.status = status
        PORTS.touch(port)
        PORTS.record(session, port, "update")
    return port


# --- request bodies -----------------------------------------------------------------


def _ip_or_cidr(value: str) -> str:
    try:
        return str(ipaddress.ip_interface(value)) if "/" in value else str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError(f"'{value}' is neither a valid IP address, nor is it a valid IP subnet") from None


def _no_duplicate_ips(items: list[FixedIP]) -> list[FixedIP]:
    seen: set[str] = set()
    for item in items:
        if item.ip_address is not None:
            if item.ip_address in seen:
                raise ValueError(f"Duplicate IP address '{item.ip_address}'")
            seen.add(item.ip_address)
    return items


IPOrCIDR = Annotated[str, StringConstraints(max_length=64), AfterValidator(_ip_or_cidr)]


class FixedIP(Body):
    subnet_id: UUID | None = None
    ip_address: IPAddress | None = None


class AddressPair(Body):
    ip_address: IPOrCIDR
    mac_address: MAC | None = None


FixedIPs = Annotated[list[FixedIP], AfterValidator(_no_duplicate_ips)]


def _no_duplicate_ids(ids: list[str]) -> list[str]:
    """Neutron's ``type:uuid_list``: a group named twice is a 400, not silently one."""
    dups = [i for i in dict.fromkeys(ids) if ids.count(i) > 1]
    if dups:
        raise ValueError(f"Duplicate items in the list: '{', '.join(dups)}'")
    return ids


SecurityGroupIds = Annotated[list[UUID], AfterValidator(_no_duplicate_ids)]

# Fields below default to None without allowing an explicit null (pydantic does
# not validate defaults): absent means "not given", null is refused as Neutron does.


class PortCreate(Body):
    name: Name = ""
    description: Text = ""
    network_id: UUID = None  # type: ignore[assignment]  # required: refused in create with Neutron's words
    admin_state_up: Bool = True
    mac_address: MAC = None  # type: ignore[assignment]
    fixed_ips: FixedIPs = None  # type: ignore[assignment]
    device_id: Name = ""
    device_owner: Name = ""
    binding_host_id: Name = Field("", alias="binding:host_id")
    security_groups: SecurityGroupIds | None = None
    allowed_address_pairs: list[AddressPair] | None = None
    port_security_enabled: Bool = None  # type: ignore[assignment]
    extra_dhcp_opts: ExtraDhcpOpts | None = None
    qos_policy_id: UUID | None = None
    dns_name: DNSName = ""
    project_id: ProjectID | None = None
    tenant_id: ProjectID | None = None
    tags: Tags | None = None


class PortUpdate(Body):
    name: Name = None  # type: ignore[assignment]
    description: Text = None  # type: ignore[assignment]
    admin_state_up: Bool = None  # type: ignore[assignment]
    mac_address: MAC = None  # type: ignore[assignment]
    fixed_ips: FixedIPs = None  # type: ignore[assignment]
    device_id: Name = None  # type: ignore[assignment]
    device_owner: Name = None  # type: ignore[assignment]
    binding_host_id: Name = Field(None, alias="binding:host_id")  # type: ignore[assignment]
    security_groups: SecurityGroupIds | None = None
    allowed_address_pairs: list[AddressPair] | None = None
    port_security_enabled: Bool = None  # type: ignore[assignment]
    extra_dhcp_opts: ExtraDhcpOpts | None = None
    qos_policy_id: UUID | None = None
    dns_name: DNSName = None  # type: ignore[assignment]


# dns-integration's domain of names without one of their network's (Neutron's default ``dns_domain``).
DNS_DOMAIN = "openstacklocal."


def dns_assignment(dns_name: str, addresses: list[str]) -> list[dict[str, str]]:
    """Neutron's ``dns_assignment``: each fixed IP's hostname (the port's ``dns_name``,
    else one made of the address) and FQDN in the deployment's domain."""
    out = []
    for ip in addresses:
        hostname = dns_name.removesuffix(".").split(".")[0] if dns_name else \
            "host-" + ip.replace(".", "-").replace(":", "-")
        out.append({"hostname": hostname, "ip_address": ip, "fqdn": f"{hostname}.{DNS_DOMAIN}"})
    return out


# --- the Port API -------------------------------------------------------------------

@dataclass(frozen=True)
class PortTarget:
    """The network a new port goes on, as far as creating the port reads it."""

    id: str
    project_id: str
    shared: bool
    port_security_enabled: bool = True  # what a new port on it defaults to


def _target_statements() -> tuple[Select, Select]:
    """The look-up of a port's network and its subnets, built once: (admin, scoped to a project).

    Plain table columns and bound parameters: no ORM compile step and no statement
    to build (or cache key to compute) per request.
    """
    networks, subnets = Network.__table__, Subnet.__table__
    facts = [subnets.c[column.key].label(f"subnet_{column.key}") for column in ipam.FACT_COLUMNS]
    # The port quota of the new port's project, in the same round trip (``quotas``).
    quota = quotas.limit_and_held(Port, "quota_")

    def target(shared: Any) -> Select:
        return (select(networks.c.id, networks.c.project_id, shared, networks.c.port_security_enabled,
                       *quota, *facts)
                .select_from(networks.outerjoin(subnets, subnets.c.network_id == networks.c.id))
                .where(networks.c.id == bindparam("network_id")).order_by(subnets.c.created_at))

    # What ``Networks.visible`` lets a project see; an RBAC policy shares a network with it.
    by_rbac = networks.c.id.in_(SHARED_NETWORK_IDS)
    scoped = target(or_(networks.c.shared, by_rbac).label("shared")).where(
        or_(networks.c.project_id == bindparam("project_id"), networks.c.shared, by_rbac,
            networks.c.id.in_(EXTERNAL_NETWORK_IDS)))
    return target(networks.c.shared), scoped


_TARGET_ADMIN, _TARGET_SCOPED = _target_statements()


def _target_network(session: Session, ctx: Context, network_id: str,
                    owner: str) -> tuple[PortTarget, list[ipam.SubnetFacts], tuple[int, int]]:
    """The network (if the caller may see it), its subnets for IPAM and the port quota of
    ``owner`` (limit, held): one query, plain rows."""
    params = {"network_id": network_id, **quotas.parameters("port", owner, "quota_")}
    if ctx.is_admin:
        rows = session.connection().execute(_TARGET_ADMIN, params).all()
    else:
        rows = session.connection().execute(_TARGET_SCOPED, {**params, "project_id": ctx.project_id}).all()
    if not rows:
        raise not_found("network", network_id)
    network = PortTarget(*rows[0][:4])
    return network, [ipam.SubnetFacts(*row[6:]) for row in rows if row[6] is not None], rows[0][4:6]


def _deny(action: str, attribute: str, subs: tuple[str, ...] = ()) -> Forbidden:
    return policy_refused(action, attribute, subs)


_GROUPS_STATEFUL = select(SecurityGroup.id, SecurityGroup.stateful) \
    .where(SecurityGroup.id.in_(bindparam("ids", expanding=True)))  # built once: every groups update


class Ports(Resource):
    member = "port"
    collection = "ports"
    admin_only = frozenset({"binding:host_id", "binding:vif_type", "binding:vif_details", "binding:profile"})
    readonly = Resource.readonly | {"qos_network_policy_id"}
    model = Port
    create_body = PortCreate
    update_body = PortUpdate
    filters = {
        "name": Filter(Port.name),
        "description": Filter(Port.description),
        "project_id": Filter(Port.project_id),
        "tenant_id": Filter(Port.project_id),
        "network_id": Filter(Port.network_id),
        "mac_address": Filter(Port.mac_address, str.lower),
        "admin_state_up": Filter(Port.admin_state_up, to_bool),
        "status": Filter(Port.status),
        "device_id": Filter(Port.device_id),
        "device_owner": Filter(Port.device_owner),
        "binding:host_id": Filter(Port.binding_host_id),
        "port_security_enabled": Filter(Port.port_security_enabled, to_bool),
        "revision_number": Filter(Port.revision_number, to_int),
        "created_at": Filter(Port.created_at),
        "updated_at": Filter(Port.updated_at),
    }

    def visible(self, ctx: Context) -> ColumnElement[bool]:
        """Own ports, and every port on a network the caller's project owns."""
        owned_networks = select(Network.id).where(Network.project_id == ctx.project_id)
        return or_(Port.project_id == ctx.project_id, Port.network_id.in_(owned_networks))

    def extra_filter(self, name: str, values: list[str]) -> ColumnElement[bool] | None:
        if name == "fixed_ips":
            return _fixed_ips_clause(values)
        if name == "security_groups":
            return Port.id.in_(select(PortSecurityGroup.port_id)
                               .where(PortSecurityGroup.security_group_id.in_(values)))
        if name == "binding:vif_type":
            wanted = set(values)
            clauses = [Port.binding_host_id == ""] if "unbound" in wanted else []
            clauses += [Port.binding_host_id != ""] if VIF_TYPE in wanted else []
            return or_(false(), *clauses)
        if name == "binding:vnic_type":
            return true() if "normal" in values else false()
        return None

    def fetch(self, session: Session, stmt: Select) -> list[Any]:
        """Plain rows with their addresses and groups: three queries per 500 ports.

        Listing thousands of ports as ORM objects (a port, its allocations and
        group bindings each an instance with its bookkeeping) costs several
        times more than rendering them, so ``render`` takes either.
        """
        rows = session.execute(stmt.with_only_columns(*Port.__table__.columns)).all()
        addresses: dict[str, list[Any]] = {}
        groups: dict[str, list[Any]] = {}
        ids = [row.id for row in rows]
        for start in range(0, len(ids), 500):
            chunk = ids[start:start + 500]
            for alloc in session.execute(
                select(IPAllocation.port_id, IPAllocation.subnet_id, IPAllocation.ip_address, IPAllocation.seq)
                .where(IPAllocation.port_id.in_(chunk))
            ):
                addresses.setdefault(alloc.port_id, []).append(alloc)
            for binding in session.execute(
                select(PortSecurityGroup.port_id, PortSecurityGroup.security_group_id)
                .where(PortSecurityGroup.port_id.in_(chunk))
            ):
                groups.setdefault(binding.port_id, []).append(binding)
        net_ids = sorted({row.network_id for row in rows})
        policies: dict[str, str | None] = {}
        for start in range(0, len(net_ids), 500):
            chunk = net_ids[start:start + 500]
            nets = select(Network.id, Network.qos_policy_id).where(Network.id.in_(chunk))
            policies.update((row.id, row.qos_policy_id) for row in session.execute(nets))
        return [SimpleNamespace(**row._asdict(), fixed_ips=addresses.get(row.id, []),
                                security_groups=groups.get(row.id, []),
                                network_qos_policy_id=policies.get(row.network_id)) for row in rows]

    @staticmethod
    def _network_policy(session: Session, obj: Any) -> str | None:
        """``qos_network_policy_id`` (``qos-port-network-policy``): the network's policy,
        read-only on the port; listed rows carry it, single ports look it up."""
        if hasattr(obj, "network_qos_policy_id"):
            return obj.network_qos_policy_id
        network = session.get(Network, obj.network_id)
        return network.qos_policy_id if network is not None else None

    def render(self, session: Session, obj: Port | NewPort, tags: list[str]) -> dict[str, Any]:
        host = obj.binding_host_id
        return {
            **standard(obj, tags),
            "network_id": obj.network_id,
            "mac_address": obj.mac_address,
            "admin_state_up": obj.admin_state_up,
            "status": obj.status,
            "device_id": obj.device_id,
            "device_owner": obj.device_owner,
            "fixed_ips": [{"subnet_id": a.subnet_id, "ip_address": a.ip_address}
                          for a in sorted(obj.fixed_ips, key=_by_seq)],
            "security_groups": [g.security_group_id for g in obj.security_groups],
            "allowed_address_pairs": [
                {"ip_address": p["ip_address"], "mac_address": p.get("mac_address") or obj.mac_address}
                for p in obj.allowed_address_pairs or []
            ],
            "port_security_enabled": obj.port_security_enabled,
            "binding:host_id": host,
            "binding:vif_type": VIF_TYPE if host else "unbound",
            "binding:vif_details": {},
            "binding:vnic_type": "normal",
            "binding:profile": {},
            "extra_dhcp_opts": dhcp_opts.rendered(obj.extra_dhcp_opts),
            "qos_policy_id": obj.qos_policy_id,
            "qos_network_policy_id": self._network_policy(session, obj),
            "dns_name": obj.dns_name,
            "dns_assignment": dns_assignment(obj.dns_name, [a.ip_address for a in obj.fixed_ips]),
        }

    # -- writing ---------------------------------------------------------------------------

    def create(self, session: Session, ctx: Context, body: PortCreate) -> NewPort:
        given = body.given()
        tags = sorted(set(given.pop("tags", None) or []))
        project_id = self.owner_for_create(ctx, given)
        network_id = given.pop("network_id", None)
        if network_id is None:
            raise BadRequest("Failed to parse request. Required attribute 'network_id' not specified")
        network, subnets, (limit, held) = _target_network(session, ctx, network_id, project_id)
        quotas.refuse_over("port", limit, held)
        if not ctx.is_admin:
            if not network.shared and network.project_id != project_id:
                raise policy_refused("create_port")  # Neutron 29: the network_owner rule
            _check_create_policy(ctx, network, given)
        check_policy(session, ctx, given.get("qos_policy_id"))
        explicit_groups = "security_groups" in given
        groups = given.pop("security_groups", None)
        if explicit_groups:
            groups = list(dict.fromkeys(groups or []))  # null means none, as in Neutron
            self._check_groups(session, ctx, project_id, groups)
        port = create_port(
            session,
            project_id=project_id,
            network=network,
            fixed_ips=given.pop("fixed_ips", None),
            mac_address=given.pop("mac_address", None),
            security_groups=groups,
            port_security_enabled=given.pop("port_security_enabled", None),
            allowed_address_pairs=given.pop("allowed_address_pairs", None) or [],
            extra_dhcp_opts=dhcp_opts.for_create(given.pop("extra_dhcp_opts", None)),
            subnets=subnets,
            # Neutron 29 tags a new port in an update of its own: one more revision.
            revision_number=CREATED_REVISION + bool(tags),
            **given,
        )
        if tags:
            session.add_all([Tag(resource_id=port.id, tag=t) for t in tags])
        self.record(session, port, "create", self.render(session, port, tags))
        return port

    def update(self, session: Session, ctx: Context, obj_id: str, body: PortUpdate) -> Port:
        given = body.given()
        if given.keys() == {"security_groups"}:  # a policy change's write: as rows (portgroups.py)
            return portgroups.move(self, session, ctx, obj_id, given["security_groups"] or [],
                                   check_port_security=_check_port_security, check_groups=self._check_groups)
        port = self.get_owned(session, ctx, obj_id)
        if not ctx.is_admin:
            self._check_update_policy(session, ctx, port, given)
        if "allowed_address_pairs" in given:
            given["allowed_address_pairs"] = given["allowed_address_pairs"] or []
        if "security_groups" in given:
            given["security_groups"] = list(dict.fromkeys(given["security_groups"] or []))
        _check_port_security(port, given)
        check_policy(session, ctx, given.get("qos_policy_id"))
        mac = given.pop("mac_address", None)
        mac_changed = mac is not None and mac != port.mac_address
        if mac_changed:
            if port.binding_host_id:
                raise Conflict(f"Unable to complete operation on port {port.id}, port is already bound, "
                               f"port type: {VIF_TYPE}, old_mac {port.mac_address}, new_mac {mac}.",
                               kind="PortBound")
            _check_mac_free(session, port.network_id, mac)
            port.mac_address = mac
        if "security_groups" in given:
            groups = given.pop("security_groups")
            self._check_groups(session, ctx, port.project_id, groups)
            _replace_groups(port, groups)
        if "fixed_ips" in given:
            _replace_ips(session, port, given.pop("fixed_ips"))
        if mac_changed:
            _rederive_auto_addresses(session, port)
        if "allowed_address_pairs" in given:
            port.allowed_address_pairs = address_pairs(given.pop("allowed_address_pairs"), port.mac_address)
        if "extra_dhcp_opts" in given:
            port.extra_dhcp_opts = dhcp_opts.merged(port.extra_dhcp_opts, given.pop("extra_dhcp_opts"))
        for key, value in given.items():
            setattr(port, key, value)
        self.touch(port)
        session.flush()
        self.record(session, port, "update", self.render(session, port, self.tags_of(session, [port.id])[port.id]))
        return port

    def delete(self, session: Session, ctx: Context, obj_id: str) -> None:
        port = self.get(session, ctx, obj_id, for_update=True)
        check_port_deletable(session, port.id)
        if _owned_by_service(session, port):
            raise Conflict(f"Port {port.id} cannot be deleted directly via the port API: "
                           f"has device owner {port.device_owner}.", kind="ServicePortInUse")
        delete_port(session, port, self)

    # -- rules -------------------------------------------------------------------------------

    @staticmethod
    def _check_groups(session: Session, ctx: Context, project_id: str, groups: list[str]) -> None:
        """Every group exists and belongs to the port's project (any project for admins)."""
        if not groups:
            return
        stmt = _GROUPS_STATEFUL
        if not ctx.is_admin:  # the port's project's own groups, and those shared with it
            stmt = stmt.where(visible_to("security_group", project_id))
        found = {gid: stateful for gid, stateful in session.execute(stmt, {"ids": groups})}
        missing = [g for g in groups if g not in found]
        if missing:
            raise not_found("security_group", ", ".join(missing))
        if len(set(found.values())) > 1:  # one port is tracked by conntrack or not, not both
            raise Conflict("Error Cannot apply both stateful and stateless security groups on the same port "
                           "at the same time while attempting the operation.", kind="SecurityGroupConflict")

    @staticmethod
    def _check_update_policy(session: Session, ctx: Context, port: Port, given: dict[str, Any]) -> None:
        """Neutron's attribute policies for a non-admin port owner."""
        if "binding_host_id" in given:
            raise _deny("update_port", "binding:host_id")
        if "mac_address" in given:
            raise _deny("update_port", "mac_address")
        needs_owner: list[str] = [k for k in ("fixed_ips", "port_security_enabled", "allowed_address_pairs")
                                  if k in given]
        if str(given.get("device_owner") or "").startswith("network:"):
            needs_owner.append("device_owner")
        if needs_owner:
            owner = session.scalar(select(Network.project_id).where(Network.id == port.network_id))
            if owner != ctx.project_id:
                raise _deny("update_port", needs_owner[0])


def _check_create_policy(ctx: Context, network: PortTarget, given: dict[str, Any]) -> None:
    """Neutron's attribute policies on create for a non-admin caller."""
    if given.get("binding_host_id"):
        raise _deny("create_port", "binding:host_id")
    if network.project_id == ctx.project_id:
        return
    if str(given.get("device_owner") or "").startswith("network:"):
        raise _deny("create_port", "device_owner")
    if "mac_address" in given:
        raise _deny("create_port", "mac_address")
    if any(ip.get("ip_address") for ip in given.get("fixed_ips") or []):
        raise _deny("create_port", "fixed_ips", ("ip_address",))
    if "port_security_enabled" in given:
        raise _deny("create_port", "port_security_enabled")
    if "allowed_address_pairs" in given:
        raise _deny("create_port", "allowed_address_pairs")


def _check_port_security(port: Port, given: dict[str, Any]) -> None:
    """Port security off excludes security groups and address pairs (ml2's update rules)."""
    enabled = given.get("port_security_enabled", port.port_security_enabled)
    if enabled:
        return
    pairs = given.get("allowed_address_pairs", port.allowed_address_pairs)
    if pairs:
        raise Conflict("Port Security must be enabled in order to have allowed address pairs on a port.",
                       kind="AddressPairAndPortSecurityRequired")
    if given.get("security_groups"):
        raise BadRequest("Port security must be enabled and port must have an IP address in order "
                         "to use security groups.", kind="PortSecurityAndIPRequiredForSecurityGroups")
    if "security_groups" not in given and port.security_groups:
        raise Conflict("Port has security group associated. Cannot disable port security or ip address "
                       "until security group is removed", kind="PortSecurityPortHasSecurityGroup")


def _replace_groups(port: Port, groups: list[str]) -> None:
    """Keep the association rows of groups asked for again (no delete+insert of one key)."""
    current = {g.security_group_id: g for g in port.security_groups}
    port.security_groups = [current.get(g) or PortSecurityGroup(port_id=port.id, security_group_id=g)
                            for g in groups]


def _replace_ips(session: Session, port: Port, requests: list[dict[str, Any]]) -> None:
    """The port's addresses become exactly ``requests``, in one transaction.

    An address asked for again keeps its allocation; the others are released
    before new ones are allocated (so they can be handed out again at once).
    """
    kept: list[IPAllocation] = []
    new: list[dict[str, Any]] = []
    for req in requests:
        ip, subnet_id = req.get("ip_address"), req.get("subnet_id")
        match = next((a for a in port.fixed_ips if ip is not None and a.ip_address == ip
                      and subnet_id in (None, a.subnet_id) and a not in kept), None)
        if match is not None:
            kept.append(match)
        else:
            new.append(req)
    released = [a for a in port.fixed_ips if a not in kept]
    for alloc in released:
        port.fixed_ips.remove(alloc)
    if released:
        session.flush()
    start = max((a.seq for a in kept), default=-1) + 1
    if new:
        assign_ips(session, port, new, start_seq=start)


def _rederive_auto_addresses(session: Session, port: Port) -> None:
    """After a MAC change, SLAAC addresses follow the new MAC (as in Neutron)."""
    if port.device_owner in ROUTER_INTERFACE_OWNERS or not port.fixed_ips:
        return
    subnets = {s.id: s for s in _subnets_of(session, port.network_id)}
    stale = [(a, subnets[a.subnet_id]) for a in port.fixed_ips
             if is_auto_address(subnets[a.subnet_id])
             and a.ip_address != eui64(subnets[a.subnet_id].cidr, port.mac_address)]
    if not stale:
        return
    for alloc, _ in stale:
        port.fixed_ips.remove(alloc)
    session.flush()
    for alloc, subnet in stale:
        ipam.assign(session, subnet, ipam.Holder(port.id, port.network_id, alloc.seq),
                    eui64(subnet.cidr, port.mac_address))
    session.expire(port, ["fixed_ips"])


def _by_seq(alloc: IPAllocation | Allocation) -> int:
    return alloc.seq


def _owned_by_service(session: Session, port: Port) -> bool:
    """A router interface/gateway of a router, or a floating IP's port, that still exists."""
    owner = port.device_owner
    if owner in ROUTER_INTERFACE_OWNERS or owner == ROUTER_GATEWAY:
        return session.scalar(select(Router.id).where(Router.id == port.device_id)) is not None
    if owner == FLOATINGIP_OWNER:
        return session.scalar(select(FloatingIP.id).where(
            or_(FloatingIP.id == port.device_id, FloatingIP.floating_port_id == port.id))) is not None
    return False


def _fixed_ips_clause(values: list[str]) -> ColumnElement[bool]:
    """``fixed_ips=ip_address=X`` / ``subnet_id=Y`` / ``ip_address_substr=Z`` as Neutron takes them."""
    wanted: dict[str, list[str]] = {}
    for value in values:
        key, sep, item = value.partition("=")
        if not sep:
            raise invalid_operation(f"'{value}' is not of the form <key>=[value]")
        if key not in {"ip_address", "subnet_id", "ip_address_substr"}:  # Neutron 29 ignores it
            raise BadRequest(f"Invalid input for operation: '{value}' is not of the form "
                             "ip_address=<ip>, subnet_id=<id> or ip_address_substr=<text>.", kind="InvalidInput")
        if key == "ip_address":
            try:
                item = str(ipaddress.ip_address(item))
            except ValueError:
                pass  # matches nothing, as in Neutron
        wanted.setdefault(key, []).append(item)
    clauses = []
    for key, items in wanted.items():
        cond: ColumnElement[bool]
        if key == "ip_address":
            cond = IPAllocation.ip_address.in_(items)
        elif key == "subnet_id":
            cond = IPAllocation.subnet_id.in_(items)
        else:
            cond = or_(*[IPAllocation.ip_address.contains(i, autoescape=True) for i in items])
        clauses.append(Port.id.in_(select(IPAllocation.port_id).where(cond)))
    return and_(true(), *clauses)


PORTS = Ports()
