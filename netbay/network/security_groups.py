"""Security groups and their rules.

Every project has one ``default`` group, made with Neutron's four default
rules the first time the project uses security groups (a port, a group, or
just a GET of the collection). Rules are validated and worded as Neutron does;
a rule's change also bumps its group and logs an ``update`` of it, because the
dataplane follows groups (whose rendering carries every rule).

``remote_ip_prefix`` is kept as the client wrote it (host bits too), as Neutron
keeps it; ``normalized_cidr`` is its network, the form the dataplane matches.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import false, func, or_, select, true
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from netbay.context import Context
from netbay.errors import BadRequest, Conflict, not_found
from netbay.network import quotas, rbac, sgrows
from netbay.network.address_groups import ADDRESS_GROUPS
from netbay.network.resource import Filter, Resource, standard, timestamp, to_bool, to_int
from netbay.network.sgbodies import SecurityGroupCreate, SecurityGroupRuleCreate, SecurityGroupUpdate
from netbay.network.sgchecks import checked_rule, prefix_filter, rule_key, vars_of
from netbay.network.sgdefaults import (
    DEFAULT_DESCRIPTION, DEFAULT_NAME, default_group_key, is_default_group, rules_from_templates,
)
from netbay.store import changelog
from netbay.store.models import (
    CREATED_REVISION,
    DefaultSecurityGroup,
    PortSecurityGroup,
    Project,
    SecurityGroup,
    SecurityGroupRule,
    Tag,
)
from netbay.store.models.secgroups import normalized_cidr

if TYPE_CHECKING:
    from netbay.store.db import Store


# --- default groups ---------------------------------------------------------------


def ensure_default_group(session: Session, project_id: str) -> SecurityGroup:
    """The project's ``default`` group, made (with its rules) on first use."""
    known = session.get(DefaultSecurityGroup, project_id)
    if known is not None:
        return session.get_one(SecurityGroup, known.security_group_id)
    group = SecurityGroup(project_id=project_id, name=DEFAULT_NAME, description=DEFAULT_DESCRIPTION,
                          revision_number=CREATED_REVISION)
    session.add(group)
    session.flush()
    session.add(DefaultSecurityGroup(project_id=project_id, security_group_id=group.id))
    SECURITY_GROUPS.add_rules(session, group, rules_from_templates(session, group, default=True))
    return group


def _in_use(session: Session, group_id: str) -> bool:
    return bool(session.scalar(select(func.count()).select_from(PortSecurityGroup)
                               .where(PortSecurityGroup.security_group_id == group_id)))


def _in_use_error(group_id: str) -> Conflict:
    return Conflict(f"Security Group {group_id} in use.", kind="SecurityGroupInUse")


def _name_not_default(name: str | None) -> None:
    if name is not None and name.lower() == DEFAULT_NAME:
        raise Conflict("Default security group already exists.", kind="SecurityGroupDefaultAlreadyExists")


# --- security groups -----------------------------------------------------------------


class SecurityGroups(Resource):
    member = "security_group"
    collection = "security-groups"
    model = SecurityGroup
    create_body = SecurityGroupCreate
    update_body = SecurityGroupUpdate
    readonly = Resource.readonly | {"security_group_rules", "shared"}
    filters = {
        "name": Filter(SecurityGroup.name),
        "description": Filter(SecurityGroup.description),
        "project_id": Filter(SecurityGroup.project_id),
        "tenant_id": Filter(SecurityGroup.project_id),
        "stateful": Filter(SecurityGroup.stateful, to_bool),
        "revision_number": Filter(SecurityGroup.revision_number, to_int),
        "created_at": Filter(SecurityGroup.created_at),
        "updated_at": Filter(SecurityGroup.updated_at),
    }

    def visible(self, ctx: Context) -> ColumnElement[bool]:
        """Own groups and those an RBAC policy shares with the project (rbac-security-groups)."""
        return rbac.visible_to("security_group", ctx.project_id)

    def extra_filter(self, name: str, values: list[str]) -> ColumnElement[bool] | None:
        if name == "shared":  # no RBAC sharing: no group is shared
            return true() if not any(to_bool(v) for v in values) else false()
        return None

    def before_read(self, store: Store, ctx: Context, filters: dict[str, list[str]]) -> None:
        ensure_default_for_reader(store, ctx, filters)

    def render(self, session: Session, obj: SecurityGroup, tags: list[str]) -> dict[str, Any]:
        is_default = is_default_group(session, obj.id, obj.project_id)
        return {
            **standard(obj, tags),
            "stateful": obj.stateful,
            "shared": False,
            "security_group_rules": [render_rule(r, is_default) for r in obj.rules],
        }

    def create(self, session: Session, ctx: Context, body: SecurityGroupCreate) -> SecurityGroup:
        given = body.given()
        tags = given.pop("tags", None) or []
        _name_not_default(given.get("name"))
        project_id = self.owner_for_create(ctx, given)
        ensure_default_group(session, project_id)
        group = SecurityGroup(project_id=project_id, revision_number=CREATED_REVISION, **given)
        session.add(group)
        session.flush()
        if tags:
            self.set_tags(session, group, tags)
            group.revision_number = CREATED_REVISION
        self.add_rules(session, group, rules_from_templates(session, group, default=False))
        return group

    def add_rules(self, session: Session, group: SecurityGroup, rules: list[SecurityGroupRule]) -> None:
        """Attach a new group's initial rules and log the group and each rule."""
        group.rules.extend(rules)
        session.flush()
        self.record(session, group, "create")
        for rule in rules:
            SECURITY_GROUP_RULES.record(session, rule, "create")

    def must_see(self, session: Session, ctx: Context, group_id: str) -> None:
        """A group the caller may name (a rule's remote group), else 404: its id only,
        not its rules (a remote group may have many). An admin's through a statement
        built once (:func:`sgrows.exists`): a policy's rules all name one."""
        if ctx.is_admin:
            if not sgrows.exists(session, group_id):
                raise not_found(self.member, group_id)
            return
        stmt = self.scoped(ctx).with_only_columns(SecurityGroup.id).where(SecurityGroup.id == group_id)
        if session.scalar(stmt) is None:
            raise not_found(self.member, group_id)

    def update(self, session: Session, ctx: Context, obj_id: str, body: SecurityGroupUpdate) -> SecurityGroup:
        group = self.get_owned(session, ctx, obj_id)
        given = body.given()
        _name_not_default(given.get("name"))
        if "name" in given and is_default_group(session, group.id, group.project_id):
            raise Conflict("Updating default security group not allowed.",
                           kind="SecurityGroupCannotUpdateDefault")
        if "stateful" in given and given["stateful"] != group.stateful and _in_use(session, group.id):
            raise _in_use_error(group.id)
        for key, value in given.items():
            setattr(group, key, value)
        self.touch(group)
        self.record(session, group, "update")
        return group

    def delete(self, session: Session, ctx: Context, obj_id: str) -> None:
        group = self.get_owned(session, ctx, obj_id, f"delete_{self.member}")
        if _in_use(session, group.id):
            raise _in_use_error(group.id)
        is_default = is_default_group(session, group.id, group.project_id)
        if is_default and not ctx.is_admin:
            raise Conflict("Insufficient rights for removing default security group.",
                           kind="SecurityGroupCannotRemoveDefault")
        sgrows.forget(session, group.id)
        _drop_rules_referencing(session, group)
        for rule in list(group.rules):
            SECURITY_GROUP_RULES.record(session, rule, "delete", None)
        session.execute(Tag.__table__.delete().where(Tag.resource_id == group.id))
        if is_default:
            session.info.get("cache", {}).pop(default_group_key(group.project_id), None)
            session.delete(session.get(DefaultSecurityGroup, group.project_id))
            session.flush()
        self.record(session, group, "delete", None)
        session.delete(group)
        session.flush()


def _drop_rules_referencing(session: Session, group: SecurityGroup) -> None:
    """Other groups' rules naming ``group`` as remote go with it (as in Neutron)."""
    rules = session.scalars(select(SecurityGroupRule).where(
        SecurityGroupRule.remote_group_id == group.id,
        SecurityGroupRule.security_group_id != group.id,
    )).all()
    touched: dict[str, SecurityGroup] = {}
    for rule in rules:
        owner = touched.get(rule.security_group_id) or session.get_one(SecurityGroup, rule.security_group_id)
        touched[owner.id] = owner
        SECURITY_GROUP_RULES.record(session, rule, "delete", None)
        owner.rules.remove(rule)
    session.flush()
    for owner in touched.values():
        SECURITY_GROUPS.touch(owner)
        sgrows.forget(session, owner.id)
        SECURITY_GROUPS.record(session, owner, "update")


def ensure_default_for_reader(store: Store, ctx: Context, filters: dict[str, list[str]]) -> None:
    """Neutron makes a project's default group on its first read of groups or rules.

    A single primary-key lookup when it exists; a write transaction only when not.
    For admins filtering on one existing project, that project gets its group too.
    """
    projects = {ctx.project_id}
    wanted = filters.get("project_id") or filters.get("tenant_id") or []
    if ctx.is_admin and len(wanted) == 1 and wanted[0]:
        projects.add(wanted[0])
    with store.read() as session:
        missing = [p for p in sorted(projects) if session.get(DefaultSecurityGroup, p) is None]
        missing = [p for p in missing if p == ctx.project_id or session.get(Project, p) is not None]
    for project_id in missing:
        store.retrying(lambda s: ensure_default_group(s, project_id))


# --- security group rules ---------------------------------------------------------------


def render_rule(rule: SecurityGroupRule, belongs_to_default: bool) -> dict[str, Any]:
    return {
        "id": rule.id,
        "project_id": rule.project_id,
        "tenant_id": rule.project_id,
        "security_group_id": rule.security_group_id,
        "direction": rule.direction,
        "ethertype": rule.ethertype,
        "protocol": rule.protocol,
        "port_range_min": rule.port_range_min,
        "port_range_max": rule.port_range_max,
        "remote_ip_prefix": rule.remote_ip_prefix,
        "normalized_cidr": rule.normalized_cidr,
        "remote_group_id": rule.remote_group_id,
        "remote_address_group_id": rule.remote_address_group_id,
        "description": rule.description,
        "created_at": timestamp(rule.created_at),
        "updated_at": timestamp(rule.updated_at),
        "revision_number": rule.revision_number,
        "belongs_to_default_sg": belongs_to_default,
    }


class SecurityGroupRules(Resource):
    member = "security_group_rule"
    collection = "security-group-rules"
    model = SecurityGroupRule
    has_tags = False
    create_body = SecurityGroupRuleCreate
    readonly = Resource.readonly | {"normalized_cidr", "belongs_to_default_sg"}
    filters = {
        "security_group_id": Filter(SecurityGroupRule.security_group_id),
        "direction": Filter(SecurityGroupRule.direction),
        "ethertype": Filter(SecurityGroupRule.ethertype),
        "protocol": Filter(SecurityGroupRule.protocol),
        "port_range_min": Filter(SecurityGroupRule.port_range_min, to_int),
        "port_range_max": Filter(SecurityGroupRule.port_range_max, to_int),
        "remote_ip_prefix": Filter(SecurityGroupRule.remote_ip_prefix, prefix_filter),
        "normalized_cidr": Filter(SecurityGroupRule.normalized_cidr),
        "remote_group_id": Filter(SecurityGroupRule.remote_group_id),
        "project_id": Filter(SecurityGroupRule.project_id),
        "tenant_id": Filter(SecurityGroupRule.project_id),
        "description": Filter(SecurityGroupRule.description),
        "revision_number": Filter(SecurityGroupRule.revision_number, to_int),
        "created_at": Filter(SecurityGroupRule.created_at),
        "updated_at": Filter(SecurityGroupRule.updated_at),
    }

    def visible(self, ctx: Context) -> ColumnElement[bool]:
        """Own rules, and every rule in an own group (Neutron's ``sg_owner``): an admin
        may file a rule in a member's group under another project."""
        own_groups = select(SecurityGroup.id).where(SecurityGroup.project_id == ctx.project_id)
        return or_(SecurityGroupRule.project_id == ctx.project_id,
                   SecurityGroupRule.security_group_id.in_(own_groups))

    def get_owned(self, session: Session, ctx: Context, obj_id: str, action: str = "") -> Any:
        rule = self.get(session, ctx, obj_id, for_update=True)  # visible: own rule or own group
        return rule

    def extra_filter(self, name: str, values: list[str]) -> ColumnElement[bool] | None:
        if name == "remote_address_group_id":
            named = [v for v in values if v]
            clauses = [SecurityGroupRule.remote_address_group_id.in_(named)] if named else []
            if len(named) < len(values):
                clauses.append(SecurityGroupRule.remote_address_group_id.is_(None))
            return or_(*clauses)
        if name == "belongs_to_default_sg":
            defaults = select(DefaultSecurityGroup.security_group_id)
            member = SecurityGroupRule.security_group_id.in_(defaults)
            wanted = {to_bool(v) for v in values}
            if wanted == {True}:
                return member
            return ~member if wanted == {False} else true()
        return None

    def before_read(self, store: Store, ctx: Context, filters: dict[str, list[str]]) -> None:
        ensure_default_for_reader(store, ctx, filters)

    def render(self, session: Session, obj: SecurityGroupRule, tags: list[str]) -> dict[str, Any]:
        return render_rule(obj, is_default_group(session, obj.security_group_id, obj.project_id))

    def create(self, session: Session, ctx: Context, body: SecurityGroupRuleCreate) -> SecurityGroupRule:
        given = body.given()
        # Read first, in one statement: the group, the quota (refused first, as any create's)
        # and an admin's remote group (any project's: no scope to apply).
        counted, group_id = quotas.deferred(session, body), given.get("security_group_id")
        remote = given.get("remote_group_id") or None
        group, remote_seen = (None, None) if group_id is None else sgrows.for_rule(
            session, group_id, None if ctx.is_admin else SECURITY_GROUPS.visible(ctx), counted,
            remote if ctx.is_admin and remote != group_id else None)
        if group_id is None and counted is not None:
            quotas.enforce(session, self.member, counted)
        for required in ("security_group_id", "direction"):
            if given.get(required) is None:
                raise BadRequest(f"Failed to parse request. Required attribute '{required}' not specified")
        asked_project = given.get("project_id") or given.get("tenant_id")
        self.owner_for_create(ctx, given)  # refuses a member naming another project
        rule = checked_rule(given)
        if group is None:
            raise not_found(SECURITY_GROUPS.member, group_id)
        if rule["remote_address_group_id"]:
            ADDRESS_GROUPS.get(session, ctx, rule["remote_address_group_id"])
        # The rule belongs to the group's project, unless an admin names another one:
        # Neutron then files it under that project, still in the group.
        rule_project = asked_project if asked_project and ctx.is_admin else group.project_id
        if remote_seen is False:
            raise not_found(SECURITY_GROUPS.member, remote)
        if remote_seen is None and remote and remote != group_id:  # the group itself: seen above
            SECURITY_GROUPS.must_see(session, ctx, remote)
        key = rule_key(rule)
        for existing in group.rules:
            if rule_key(vars_of(existing)) == key:
                raise Conflict(f"Security group rule already exists. Rule id is {existing.id}.",
                               kind="SecurityGroupRuleExists")
        new = sgrows.add_rule(session, group, {"project_id": rule_project,
                                               "description": given.get("description", ""),
                                               "normalized_cidr": normalized_cidr(rule["remote_ip_prefix"]), **rule})
        self.record(session, new, "create", render_rule(new, is_default_group(session, group.id, group.project_id)))
        _rules_changed(session, group)
        return new

    def delete(self, session: Session, ctx: Context, obj_id: str) -> None:
        rule = sgrows.rule(session, obj_id, None if ctx.is_admin else self.visible(ctx))
        if rule is None:  # visible: own rule or own group
            raise not_found(self.member, obj_id)
        group = sgrows.group(session, rule.security_group_id)
        self.record(session, rule, "delete", None)
        sgrows.remove_rule(session, group, rule.id)
        _rules_changed(session, group)


_CHANGED = "security_groups.rules_changed"


def _rules_changed(session: Session, group: Any) -> None:
    """A group whose rules changed is a new revision at once (the rows path,
    :mod:`netbay.network.sgrows`, has bumped it already); its change record (the group
    rendered with ALL its rules: what the dataplane agent realizes) is written once per
    transaction, when it ends — not once per rule of a bulk create or of a policy
    change's batch."""
    if isinstance(group, SecurityGroup):
        SECURITY_GROUPS.touch(group)
        sgrows.forget(session, group.id)  # its rules changed through the ORM
    changed = session.info.setdefault(_CHANGED, {})
    if not changed:
        changelog.before_seal(session, _record_changed)
    changed[group.id] = True


def _record_changed(session: Session) -> None:
    for group_id in session.info.pop(_CHANGED, {}):
        group = sgrows.current(session, group_id)
        if group is not None:  # a group deleted later in the transaction has its own record
            SECURITY_GROUPS.record(session, group, "update")


SECURITY_GROUPS = SecurityGroups()
SECURITY_GROUP_RULES = SecurityGroupRules()
