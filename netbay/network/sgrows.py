"""A security group rule created as rows, and the group it changes kept as rows.

WHY: a rule create is the largest operation of a NetworkPolicy change's batch (a new
policy is a rule and two port moves). Through the ORM it loads the group and every
rule as instances, flushes a unit of work for the INSERT and the group's revision,
and renders the group again from the instances when the transaction ends. Here the
group and its rules are read once as rows (statements built once), the rule is one
INSERT, the group's revision one UPDATE, and the group's change record (the group
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

from types import SimpleNamespace
from typing import Any

from sqlalchemy import Table, bindparam, delete, insert, inspect, select, update
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from netbay.network import quotas
from netbay.store.models import SecurityGroup, SecurityGroupRule, new_id, utcnow

GROUPS: Table = SecurityGroup.__table__  # type: ignore[assignment]
RULES: Table = SecurityGroupRule.__table__  # type: ignore[assignment]
_GROUP = select(*GROUPS.columns).where(GROUPS.c.id == bindparam("id")).with_for_update()
# A rule create's: the group with its project's rule limit and count (quotas.limit_and_held).
_COUNTED = [c.label(f"quota_{n}") for c, n in zip(quotas.limit_and_held(SecurityGroupRule, "q_"), ("limit", "held"))]
_GROUP_COUNTED = select(*GROUPS.columns, *_COUNTED).where(GROUPS.c.id == bindparam("id")).with_for_update()
_RULES_OF = select(*RULES.columns).where(RULES.c.security_group_id == bindparam("id")) \
    .order_by(RULES.c.created_at)
_GROUP_ID = select(GROUPS.c.id).where(GROUPS.c.id == bindparam("id"))
_RULE = select(*RULES.columns).where(RULES.c.id == bindparam("id")).with_for_update()
_INSERT = insert(RULES)
_DELETE = delete(RULES).where(RULES.c.id == bindparam("id"))
_TOUCH = update(GROUPS).where(GROUPS.c.id == bindparam("gid")).values(
    updated_at=bindparam("at"), revision_number=bindparam("rev"))
_KEY = "sgrows.groups"  # session.info: group id -> its rows (a SimpleNamespace with ``rules``)


def group(session: Session, group_id: str, visible: ColumnElement[bool] | None = None,
          counted: str | None = None) -> Any:
    """The group (locked for the change) with its rules, as rows; None when it does not
    exist or ``visible`` (a non-admin's scope) does not hold for it. With ``counted`` (a
    project: :func:`quotas.deferred`), refuses first (409 OverQuota) a rule more than the
    project's limit, counted in the group's statement."""
    known = session.info.get(_KEY, {}).get(group_id)
    if known is not None and visible is None:
        _count(session, counted)
        return known
    if session.new or session.dirty or session.deleted:
        session.flush()  # an earlier operation of the batch may have pending ORM changes
    conn = session.connection()
    params = {"id": group_id} if counted is None else \
        {"id": group_id, **quotas.parameters("security_group_rule", counted, "q_")}
    if visible is None:
        row = conn.execute(_GROUP if counted is None else _GROUP_COUNTED, params).one_or_none()
    else:
        row = conn.execute(select(*GROUPS.columns, *(_COUNTED if counted else ())).where(
            GROUPS.c.id == bindparam("id"), visible).with_for_update(), params).one_or_none()
    if row is None:
        _count(session, counted)
        return None
    values = row._asdict()
    if counted is not None:
        quotas.refuse_over("security_group_rule", values.pop("quota_limit"), values.pop("quota_held"))
    if known is not None:
        return known
    found = SimpleNamespace(**values, rules=[SimpleNamespace(**r._asdict())
                                                    for r in conn.execute(_RULES_OF, {"id": group_id})])
    session.info.setdefault(_KEY, {})[group_id] = found
    return found


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


__all__ = ["add_rule", "current", "exists", "forget", "group", "remove_rule", "rule"]
