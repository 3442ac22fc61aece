"""A security group rule created as rows, and the group it changes kept as rows.

WHY: a rule create is the largest operation of a NetworkPolicy change's batch (a new
policy is a rule and two port moves). Through the ORM it loads the group and every
rule as instances, flushes a unit of work for the INSERT and the group's revision,
and renders the group again from the instances when the transaction ends. Here the
group and its rules are read once as rows, in one statement built once that also
counts a rule create's quota and finds its remote group (:func:`for_rule`), the rule
is one INSERT, the group's revision one UPDATE, and the group's change record (the group
with all its rules: what the dataplane agent realizes) is rendered from those rows —
the same checks, errors, answer and change records as before, for less CPU. A rule
delete is the same in reverse (a policy update is a rule made and one deleted)
(``bench/policy_ops.py``; BENCHMARKS.md).

The rows live in the transaction's ``session.info`` and stay true by two rules: a
rows write expires any ORM copy of the group (it is read again when next used), and
an ORM write to a group's rules (a rule or group delete) drops the rows (:func:`forget`);
the next rows read then flushes and reads the database again.
"""

from __future__ import annotations

from functools import cache
from types import SimpleNamespace
from typing import Any

from sqlalchemy import Select, Table, bindparam, delete, insert, inspect, select, update
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from netbay.network import quotas
from netbay.store.models import SecurityGroup, SecurityGroupRule, new_id, utcnow

GROUPS: Table = SecurityGroup.__table__
RULES: Table = SecurityGroupRule.__table__
_GROUP_NAMES = [c.name for c in GROUPS.columns]
_RULE_NAMES = [c.name for c in RULES.columns]
# What a rule create reads with its group, in the same statement: its project's rule
# limit and count (quotas.limit_and_held), and whether its remote group exists.
_COUNTED = [c.label(f"quota_{n}") for c, n in zip(quotas.limit_and_held(SecurityGroupRule, "q_"), ("limit", "held"))]
_REMOTE = GROUPS.alias("remote")
_REMOTE_FOUND = select(_REMOTE.c.id).where(_REMOTE.c.id == bindparam("remote")).scalar_subquery().label("remote")
_GROUP_ID = select(GROUPS.c.id).where(GROUPS.c.id == bindparam("id"))
_RULE = select(*RULES.columns).where(RULES.c.id == bindparam("id")).with_for_update()
_INSERT = insert(RULES)
_DELETE = delete(RULES).where(RULES.c.id == bindparam("id"))
_TOUCH = update(GROUPS).where(GROUPS.c.id == bindparam("gid")).values(
    updated_at=bindparam("at"), revision_number=bindparam("rev"))
_KEY = "sgrows.groups"  # session.info: group id -> its rows (a SimpleNamespace with ``rules``)


@cache
def _read(counted: bool, remote: bool, rules: bool) -> Select:
    """The group's row (locked), with the columns asked for, and with its rules (one row
    each, joined: one round trip) unless this transaction holds them already. Built once."""
    stmt = select(*GROUPS.columns, *(_COUNTED if counted else ()), *([_REMOTE_FOUND] if remote else ()))
    if rules:
        stmt = stmt.add_columns(*RULES.columns).select_from(
            GROUPS.outerjoin(RULES, RULES.c.security_group_id == GROUPS.c.id)).order_by(RULES.c.created_at)
    return stmt.where(GROUPS.c.id == bindparam("id")).with_for_update(of=GROUPS)


def group(session: Session, group_id: str, visible: ColumnElement[bool] | None = None) -> Any:
    """The group (locked for the change) with its rules, as rows; None when it does not
    exist or ``visible`` (a non-admin's scope) does not hold for it."""
    return for_rule(session, group_id, visible)[0]


def for_rule(session: Session, group_id: str, visible: ColumnElement[bool] | None = None,
             counted: str | None = None, remote: str | None = None) -> tuple[Any, bool | None]:
    """:func:`group` for a rule create, and whether the group ``remote`` exists (None:
    not read, no such ask or no group row to read it with). With ``counted`` (a project:
    :func:`quotas.deferred`), refuses first (409 OverQuota) a rule more than the
    project's limit; both read in the group's statement."""
    known = session.info.get(_KEY, {}).get(group_id)
    if known is not None and visible is None:
        _count(session, counted)
        return known, None
    if session.new or session.dirty or session.deleted:
        session.flush()  # an earlier operation of the batch may have pending ORM changes
    params: dict[str, Any] = {"id": group_id}
    if counted is not None:
        params.update(quotas.parameters("security_group_rule", counted, "q_"))
    if remote is not None:
        params["remote"] = remote
    stmt = _read(counted is not None, remote is not None, known is None)
    rows = session.connection().execute(stmt if visible is None else stmt.where(visible), params).all()
    if not rows:
        _count(session, counted)
        return None, None
    first, at = rows[0], len(_GROUP_NAMES)
    if counted is not None:
        quotas.refuse_over("security_group_rule", first[at], first[at + 1])
        at += 2
    seen = None
    if remote is not None:
        seen, at = first[at] is not None, at + 1
    if known is not None:
        return known, seen
    found = SimpleNamespace(**dict(zip(_GROUP_NAMES, first)), rules=[
        SimpleNamespace(**dict(zip(_RULE_NAMES, r[at:]))) for r in rows if r[at] is not None])
    session.info.setdefault(_KEY, {})[group_id] = found
    return found, seen


def _count(session: Session, counted: str | None) -> None:
    if counted is not None:  # no group row to read it with
        quotas.enforce(session, "security_group_rule", counted)


def exists(session: Session, group_id: str) -> bool:
    """Whether the group exists (for an admin naming a rule's remote group): its id
    only, not its rules (a remote group may have many); no read for a group this
    transaction has read already."""
    if group_id in session.info.get(_KEY, {}):
        return True
    if session.new or session.dirty or session.deleted:
        session.flush()
    return session.connection().execute(_GROUP_ID, {"id": group_id}).first() is not None


def rule(session: Session, rule_id: str, visible: ColumnElement[bool] | None = None) -> Any:
    """The rule (locked), as rows; None when it does not exist or is not ``visible``."""
    if session.new or session.dirty or session.deleted:
        session.flush()
    stmt = _RULE if visible is None else \
        select(*RULES.columns).where(RULES.c.id == rule_id, visible).with_for_update()
    row = session.connection().execute(stmt, {"id": rule_id}).one_or_none()
    return None if row is None else SimpleNamespace(**row._asdict())


def add_rule(session: Session, grp: Any, values: dict[str, Any]) -> Any:
    """INSERT the rule ``values`` (its columns but id and times) into ``grp`` and bump the
    group's revision; returns the rule as rows."""
    now = utcnow()
    new = SimpleNamespace(id=new_id(), security_group_id=grp.id, created_at=now, updated_at=now,
                          revision_number=0, **values)
    session.connection().execute(_INSERT, vars(new))
    grp.rules.append(new)
    _touch(session, grp, now)
    return new


def remove_rule(session: Session, grp: Any, rule_id: str) -> None:
    """DELETE the rule ``rule_id`` of ``grp`` and bump the group's revision."""
    session.connection().execute(_DELETE, {"id": rule_id})
    grp.rules[:] = [r for r in grp.rules if r.id != rule_id]
    orm = session.identity_map.get(session.identity_key(SecurityGroupRule, rule_id))
    if orm is not None:
        session.expunge(orm)  # gone from the database: the session must not write it back
    _touch(session, grp, utcnow())


def _touch(session: Session, grp: Any, now: Any) -> None:
    grp.updated_at, grp.revision_number = now, (grp.revision_number or 0) + 1
    session.connection().execute(_TOUCH, {"gid": grp.id, "at": now, "rev": grp.revision_number})
    orm = session.identity_map.get(session.identity_key(SecurityGroup, grp.id))
    if orm is not None:
        session.expire(orm)  # loaded earlier in the batch: its rules and revision are stale now


def forget(session: Session, group_id: str) -> None:
    """The group's rules changed through the ORM (or it was deleted): its rows are stale."""
    session.info.get(_KEY, {}).pop(group_id, None)


def current(session: Session, group_id: str) -> Any:
    """The group as it stands now in this transaction, to render its change record: the
    ORM instance where one is loaded, else its rows; None once deleted."""
    orm = session.identity_map.get(session.identity_key(SecurityGroup, group_id))
    if orm is not None:
        state = inspect(orm)
        return None if state.deleted or state.detached or orm in session.deleted else orm
    return session.info.get(_KEY, {}).get(group_id)


__all__ = ["add_rule", "current", "exists", "for_rule", "forget", "group", "remove_rule", "rule"]
