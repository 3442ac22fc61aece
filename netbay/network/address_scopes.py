"""Address scopes (Neutron's ``address-scope``): subnet pools grouped so that their
prefixes never overlap. In the dataplane a router does not forward between legs of
different scopes (netbay/dataplane/l3/nat.py, as Neutron's L3 agent). What the API
shows of a scope holds: the pools of one scope have
unique prefixes (409), a pool joins a scope of its IP version only (400), a scope in
use by a pool is not deleted (409), a shared scope stays shared, and a network shows
the scope of its subnets' pools (``ipv4_address_scope``/``ipv6_address_scope``).
"""

from __future__ import annotations

import ipaddress
from typing import Any

from pydantic import Field
from sqlalchemy import ColumnElement, or_, select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import BadRequest, Conflict, NotFound, invalid_input, policy_refused
from netbay.network.resource import Filter, Resource, to_bool, to_int
from netbay.network.types import Body, Bool, Name, ProjectID
from netbay.store.models import AddressScope, SubnetPool

IP_VERSIONS = (4, 6)


class AddressScopeCreate(Body):
    name: Name = ""
    shared: Bool = False
    ip_version: Any = Field(None)
    project_id: ProjectID | None = None
    tenant_id: ProjectID | None = None


class AddressScopeUpdate(Body):
    name: Name | None = None
    shared: Bool | None = None


class AddressScopes(Resource):
    member = "address_scope"
    collection = "address-scopes"
    model = AddressScope
    has_tags = False
    create_body = AddressScopeCreate
    update_body = AddressScopeUpdate
    readonly = {"id"}
    filters = {
        "name": Filter(AddressScope.name),
        "project_id": Filter(AddressScope.project_id),
        "tenant_id": Filter(AddressScope.project_id),
        "shared": Filter(AddressScope.shared, to_bool),
        "ip_version": Filter(AddressScope.ip_version, to_int),
    }

    def visible(self, ctx: Context) -> ColumnElement[bool]:
        return or_(AddressScope.project_id == ctx.project_id, AddressScope.shared)

    def render(self, session: Session, obj: AddressScope, tags: list[str]) -> dict[str, Any]:
        return {"id": obj.id, "name": obj.name, "project_id": obj.project_id, "tenant_id": obj.project_id,
                "shared": obj.shared, "ip_version": obj.ip_version}

    def create(self, session: Session, ctx: Context, body: AddressScopeCreate) -> AddressScope:
        given = body.given()
        project_id = self.owner_for_create(ctx, given)
        if given.get("ip_version") is None:
            raise BadRequest("Failed to parse request. Required attribute 'ip_version' not specified")
        version = _ip_version(given["ip_version"])
        if given.get("shared") and not ctx.is_admin:
            raise policy_refused("create_address_scope", "shared")
        scope = AddressScope(project_id=project_id, name=given.get("name", ""), shared=given.get("shared", False),
                             ip_version=version)
        session.add(scope)
        session.flush()
        self.record(session, scope, "create")
        return scope

    def update(self, session: Session, ctx: Context, obj_id: str, body: AddressScopeUpdate) -> AddressScope:
        scope = self.get_owned(session, ctx, obj_id)
        given = body.given()
        if "shared" in given and not ctx.is_admin:
            raise policy_refused("update_address_scope", "shared")
        if scope.shared and given.get("shared") is False:
            raise BadRequest(f"Unable to update address scope {scope.id} : Shared address scope can't be "
                             "unshared.", kind="AddressScopeUpdateError")
        for key, value in given.items():
            if value is not None:
                setattr(scope, key, value)
        self.record(session, scope, "update")
        return scope

    def delete(self, session: Session, ctx: Context, obj_id: str) -> None:
        scope = self.get_owned(session, ctx, obj_id, f"delete_{self.member}")
        if session.scalar(select(SubnetPool.id).where(SubnetPool.address_scope_id == scope.id).limit(1)):
            raise Conflict(f"Unable to complete operation on address scope {scope.id}. There are one or more "
                           "subnet pools in use on the address scope.", kind="AddressScopeInUse")
        self.record(session, scope, "delete", None)
        session.delete(scope)


def _ip_version(value: Any) -> int:
    try:
        version = int(value)
    except (TypeError, ValueError):
        raise invalid_input("ip_version", f"'{value}' is not an integer") from None
    if version not in IP_VERSIONS:
        raise invalid_input("ip_version", f"{version} is not in valid_values")   # neutron-lib's words
    return version


ADDRESS_SCOPES = AddressScopes()


def check_association(session: Session, ctx: Context, scope_id: str | None, pool_id: str | None,
                      version: int, prefixes: list[str]) -> None:
    """A pool may join ``scope_id`` (Neutron's ``_validate_address_scope_id``): the scope
    is visible, the caller's own or shared, of the pool's IP version, and no other pool
    of it holds an overlapping prefix."""
    if scope_id is None:
        return
    scope = session.get(AddressScope, scope_id)
    if scope is None or not (ctx.is_admin or scope.shared or scope.project_id == ctx.project_id):
        raise NotFound(f"Address scope {scope_id} could not be found.", kind="AddressScopeNotFound")
    if scope.ip_version != version:
        raise BadRequest(f"Illegal subnetpool association: subnetpool {pool_id} cannot associate with address "
                         f"scope {scope_id} because subnetpool ip_version is not {scope.ip_version}.",
                         kind="IllegalSubnetPoolIpVersionAssociationToAddressScope")
    mine = [ipaddress.ip_network(p, strict=False) for p in prefixes]
    for other in session.scalars(select(SubnetPool).where(SubnetPool.address_scope_id == scope_id,
                                                          SubnetPool.id != (pool_id or ""))):
        theirs = [ipaddress.ip_network(p, strict=False) for p in other.prefixes]
        if any(a.version == b.version and a.overlaps(b) for a in mine for b in theirs):
            raise Conflict("Failed to associate address scope: subnetpools within an address scope must have "
                           "unique prefixes.", kind="AddressScopePrefixConflict")


__all__ = ["ADDRESS_SCOPES", "AddressScopes", "check_association"]
