"""Two optional capabilities of a ``NetworkBackend``: bulk create and a batch of writes.

Neutron's bulk create (``POST /v2.0/ports`` with ``{"ports": [...]}``) and netbay's
``POST /v2.0/batch`` (several writes in one transaction — one commit, one wake-up of
the dataplane agent) are what make a hundred pods or a NetworkPolicy change cheap
on the embedded service. A backend that has them says so by a method
(``create_bulk``, ``batch``); for one that has not (a cloud's Neutron has no batch),
the functions here run the same operations one by one, in order, and undo what
they made or changed when one is refused — so the caller sees all or nothing on
every backend, only slower where the backend cannot do it in one request.

Operations are netbay's batch wire format (``{"method", "path", "body",
"missing_ok"}``, the path under ``/v2.0/``), results each call's own answer body
(``None`` for a delete). Deletions cannot be undone (a re-created object has a
new id); a sequential batch's deletions are therefore what the caller no longer
wants, and a refused batch leaves them deleted — ``missing_ok`` deletes them
"again" without error the next time.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from netbay import errors
from netbay.backends.seam import NetworkBackend
from netbay.backends.http import COLLECTIONS

log = logging.getLogger(__name__)

_MEMBER = {collection: member for member, collection in COLLECTIONS.items()}


def plural(member: str) -> str:
    """The list key of ``member``'s collection (``security_group_rules``)."""
    return COLLECTIONS[member].replace("-", "_")


def has_batch(net: NetworkBackend) -> bool:
    """Whether ``net`` runs a batch in one transaction of its own."""
    return callable(getattr(net, "batch", None))


def create_many(net: NetworkBackend, member: str, bodies: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Create ``bodies`` all or nothing: one bulk request where the backend has one,
    else one by one with the made ones deleted again on a refusal."""
    if not bodies:
        return []
    bulk = getattr(net, "create_bulk", None)
    if callable(bulk):
        return bulk(member, bodies)
    made: list[dict[str, Any]] = []
    try:
        for body in bodies:
            made.append(net.create(member, body))
    except Exception:
        _undo(net, [("create", member, obj["id"], None) for obj in made])
        raise
    return made


def run(net: NetworkBackend, ops: Sequence[Mapping[str, Any]]) -> list[Any]:
    """The batch ``ops``: the backend's own (one transaction) or, without one, in
    order through its CRUD calls, undone on a refusal (then re-raised)."""
    if has_batch(net):
        return net.batch(list(ops))  # type: ignore[attr-defined]
    done: list[tuple[str, str, str, Any]] = []   # (action, member, id, what to restore)
    results: list[Any] = []
    try:
        for op in ops:
            results.append(_one(net, op, done))
    except Exception:
        _undo(net, done)
        raise
    return results


def run_one(net: NetworkBackend, op: Mapping[str, Any]) -> Any:
    """One operation of the wire format, alone, through the backend's calls (nothing
    to undo: an update is not read first — a label change is this one PUT)."""
    return _one(net, op, None)


def _one(net: NetworkBackend, op: Mapping[str, Any], done: list[tuple[str, str, str, Any]] | None) -> Any:
    method, path = str(op.get("method", "")).upper(), str(op.get("path", "")).strip("/")
    collection, _, obj_id = path.partition("/")
    member = _MEMBER.get(collection)
    if member is None:
        raise errors.BadRequest(f"unknown collection in path {path!r}")
    body = op.get("body") or {}
    if method == "POST" and not obj_id:
        many = plural(member) in body
        items = create_many(net, member, body[plural(member)] if many else [body.get(member, {})])
        if done is not None:
            done.extend(("create", member, obj["id"], None) for obj in items)
        return {plural(member): items} if many else {member: items[0]}
    if method == "PUT" and obj_id:
        change = dict(body.get(member) or {})
        if done is None:
            return {member: net.update(member, obj_id, change)}
        before = net.show(member, obj_id)
        obj = net.update(member, obj_id, change)
        done.append(("update", member, obj_id, {k: before.get(k) for k in change}))
        return {member: obj}
    if method == "DELETE" and obj_id:
        try:
            net.delete(member, obj_id)
        except errors.NotFound:
            if not op.get("missing_ok"):
                raise
        return None
    raise errors.BadRequest(f"{method} {path} is not an operation of the network API")


def _undo(net: NetworkBackend, done: list[tuple[str, str, str, Any]]) -> None:
    """Reverse order; an undo that fails is logged (the original refusal is what the caller sees)."""
    for action, member, obj_id, before in reversed(done):
        try:
            if action == "create":
                net.delete(member, obj_id)
            else:
                net.update(member, obj_id, before)
        except errors.NotFound:
            pass
        except Exception as exc:  # noqa: BLE001 - keep undoing the rest
            log.warning("batch rollback: %s %s %s: %s", action, member, obj_id, exc)


__all__ = ["create_many", "has_batch", "plural", "run", "run_one"]
