"""What a port request may do beyond its body's shape: Neutron's attribute policies for
a non-admin caller, the security groups a port may have (visible to its project, all
stateful or all stateless), and port security's exclusions."""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import BadRequest, Conflict, Forbidden, not_found, policy_refused
from netbay.network.porttarget import PortTarget
from netbay.network.rbac import visible_to
from netbay.store.models import Network, Port, SecurityGroup


def _deny(action: str, attribute: str, subs: tuple[str, ...] = ()) -> Forbidden:
    return policy_refused(action, attribute, subs)


_GROUPS_STATEFUL = select(SecurityGroup.id, SecurityGroup.stateful) \
    .where(SecurityGroup.id.in_(bindparam("ids", expanding=True)))  # built once: every groups update


def check_groups(session: Session, ctx: Context, project_id: str, groups: list[str]) -> None:
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


def check_create_policy(ctx: Context, network: PortTarget, given: dict[str, Any]) -> None:
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


def check_update_policy(session: Session, ctx: Context, port: Port, given: dict[str, Any]) -> None:
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


def check_port_security(port: Port, given: dict[str, Any]) -> None:
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
