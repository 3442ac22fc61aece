"""Ports: a network attachment with a MAC, fixed IPs and security groups.

``create_port`` and ``delete_port`` are the one way any part of netbay makes or
removes a port (the Port API, router interfaces and gateways, floating IPs,
load balancer VIPs, cluster nodes, containers), so IPAM and default security
groups apply everywhere alike. ``Ports`` is the Neutron Port API on top of them:
it adds what only an API caller needs (visibility, policy, validation of
security group ids) and keeps the create path to a handful of statements; how a
port reads is ``portview``'s, what a list sees and filters ``portlisting``'s.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from netbay.context import Context
from netbay.errors import BadRequest, Conflict, not_found, policy_refused
from netbay.network import dhcp_opts, ipam, portgroups, quotas
from netbay.network.portaddresses import assign_addresses, rederive_auto_addresses, replace_ips
from netbay.network.portbodies import PortCreate, PortUpdate
from netbay.network.portlisting import FILTERS, extra_clause, fetch_rows, visible_clause
from netbay.network.portowners import owned_by_service
from netbay.network.portpolicy import check_create_policy, check_groups, check_port_security, check_update_policy
from netbay.network.portrows import NewPort, PortWriter, new_port, port_row
from netbay.network.porttarget import PortTarget, target_network
from netbay.network.portview import VIF_TYPE, render_port
from netbay.network.qos import check_policy
from netbay.network.resource import Resource
from netbay.network.security_groups import default_group_key, ensure_default_group
from netbay.network.taas import forget_port
from netbay.network.trunks import check_port_deletable
from netbay.store.models import (
    CREATED_REVISION,
    DefaultSecurityGroup,
    Network,
    Port,
    PortSecurityGroup,
    Tag,
    new_id,
)

# Imported from here by routers and load balancers (from before they had modules of their own).
from netbay.network.portaddresses import assign_ips as assign_ips
from netbay.network.portowners import ROUTER_GATEWAY as ROUTER_GATEWAY
from netbay.network.portowners import ROUTER_INTERFACE_OWNERS as ROUTER_INTERFACE_OWNERS

MAC_PREFIX = "fa:16:3e"
# Neutron's default ``max_allowed_address_pair``.
MAX_ADDRESS_PAIRS = 10
STATUSES = {"ACTIVE", "DOWN", "BUILD", "ERROR"}


def generate_mac() -> str:
    return MAC_PREFIX + "".join(f":{b:02x}" for b in secrets.token_bytes(3))


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
    return new_port(row, addresses, groups, network.qos_policy_id)


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


# --- the Port API -------------------------------------------------------------------

class Ports(Resource):
    member = "port"
    collection = "ports"
    admin_only = frozenset({"binding:host_id", "binding:vif_type", "binding:vif_details", "binding:profile",
                            "resource_request"})
    readonly = Resource.readonly | {"qos_network_policy_id", "resource_request"}
    model = Port
    create_body = PortCreate
    update_body = PortUpdate
    filters = FILTERS

    def visible(self, ctx: Context) -> ColumnElement[bool]:
        """Own ports, and every port on a network the caller's project owns."""
        return visible_clause(ctx)

    def extra_filter(self, name: str, values: list[str]) -> ColumnElement[bool] | None:
        """``fixed_ips``, ``security_groups`` and the bindings (``portlisting.extra_clause``)."""
        return extra_clause(name, values)

    def fetch(self, session: Session, stmt: Select) -> list[Any]:
        """Plain rows with their addresses and groups (``portlisting.fetch_rows``): listing
        thousands of ports as ORM objects costs several times more than rendering them,
        so ``render`` takes either."""
        return fetch_rows(session, stmt)

    def render(self, session: Session, obj: Port | NewPort, tags: list[str]) -> dict[str, Any]:
        """Neutron's port body (``portview.render_port``)."""
        return render_port(session, obj, tags)

    # -- writing ---------------------------------------------------------------------------

    def create(self, session: Session, ctx: Context, body: PortCreate) -> NewPort:
        given = body.given()
        tags = sorted(set(given.pop("tags", None) or []))
        project_id = self.owner_for_create(ctx, given)
        network_id = given.pop("network_id", None)
        if network_id is None:
            raise BadRequest("Failed to parse request. Required attribute 'network_id' not specified")
        network, subnets, (limit, held) = target_network(session, ctx, network_id, project_id)
        quotas.refuse_over("port", limit, held)
        if not ctx.is_admin:
            if not network.shared and network.project_id != project_id:
                raise policy_refused("create_port")  # Neutron 29: the network_owner rule
            check_create_policy(ctx, network, given)
        check_policy(session, ctx, given.get("qos_policy_id"))
        explicit_groups = "security_groups" in given
        groups = given.pop("security_groups", None)
        if explicit_groups:
            groups = list(dict.fromkeys(groups or []))  # null means none, as in Neutron
            check_groups(session, ctx, project_id, groups)
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
        self.add_tags(session, port.id, tags)
        self.record(session, port, "create", self.render(session, port, tags))
        return port

    def update(self, session: Session, ctx: Context, obj_id: str, body: PortUpdate) -> Port:
        given = body.given()
        if given.keys() == {"security_groups"}:  # a policy change's write: as rows (portgroups.py)
            return portgroups.move(self, session, ctx, obj_id, given["security_groups"] or [],
                                   check_port_security=check_port_security, check_groups=check_groups)
        port = self.get_owned(session, ctx, obj_id)
        if not ctx.is_admin:
            check_update_policy(session, ctx, port, given)
        if "allowed_address_pairs" in given:
            given["allowed_address_pairs"] = given["allowed_address_pairs"] or []
        if "security_groups" in given:
            given["security_groups"] = list(dict.fromkeys(given["security_groups"] or []))
        check_port_security(port, given)
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
            check_groups(session, ctx, port.project_id, groups)
            _replace_groups(port, groups)
        if "fixed_ips" in given:
            replace_ips(session, port, given.pop("fixed_ips"))
        if mac_changed:
            rederive_auto_addresses(session, port)
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
        if owned_by_service(session, port):
            raise Conflict(f"Port {port.id} cannot be deleted directly via the port API: "
                           f"has device owner {port.device_owner}.", kind="ServicePortInUse")
        delete_port(session, port, self)


def _replace_groups(port: Port, groups: list[str]) -> None:
    """Keep the association rows of groups asked for again (no delete+insert of one key)."""
    current = {g.security_group_id: g for g in port.security_groups}
    port.security_groups = [current.get(g) or PortSecurityGroup(port_id=port.id, security_group_id=g)
                            for g in groups]


PORTS = Ports()
