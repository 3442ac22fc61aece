"""Octavia's fully populated create: a load balancer with its listeners, their default
pools, members and health monitors in one request and one transaction.

A client that builds a load balancer call by call waits for ``ACTIVE`` after each
one (the tree is immutable while ``PENDING_*``); one populated create is one
realization, one change row per object (rendered once, as the tree ends up), and
one answer with the whole tree (:func:`full`, as Octavia answers a create). Every child is parsed and checked exactly as its own ``POST`` would
be (``parse`` is the API's body parser, so refusals are worded the same), and any
refusal rolls the whole tree back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.lbaas.common import NEW_TREE, LBResource, Made, invalid_input
from netbay.lbaas.healthmonitors import HEALTHMONITORS
from netbay.lbaas.listeners import LISTENERS
from netbay.lbaas.members import MEMBERS
from netbay.lbaas.pools import POOLS
from netbay.lbaas.tree import POPULATING
from netbay.store.models import LoadBalancer

Parse = Callable[[Any, LBResource, str], Any]  # the resource's own LBBody subclass


def populate(session: Session, ctx: Context, lb: LoadBalancer, listeners: Any, parse: Parse) -> None:
    """Create ``listeners`` (Octavia's graph: each with an optional ``default_pool``
    holding ``members`` and a ``healthmonitor``) under the new ``lb``, inside the
    :func:`netbay.lbaas.common.new_tree` that made ``lb``: nothing is claimed (the tree
    is new), and each object's change row shows it as the whole tree ends up."""
    assert session.info.get(NEW_TREE) is not None, "populate() runs inside new_tree()"
    if not isinstance(listeners, list) or not all(isinstance(item, dict) for item in listeners):
        raise invalid_input("listeners", listeners, "Value should be a list of objects")
    session.info[POPULATING] = lb.id
    try:
        for spec in listeners:
            spec = dict(spec)
            pool_spec = spec.pop("default_pool", None)
            listener = LISTENERS.create(session, ctx, parse(
                {"listener": {**spec, "loadbalancer_id": lb.id}}, LISTENERS, "POST"))
            if pool_spec is None:
                continue
            if not isinstance(pool_spec, dict):
                raise invalid_input("default_pool", pool_spec, "Value should be an object")
            pool_spec = dict(pool_spec)
            members = pool_spec.pop("members", None) or []
            monitor = pool_spec.pop("healthmonitor", None)
            pool = POOLS.create(session, ctx, parse({"pool": {**pool_spec, "listener_id": listener.id}},
                                                    POOLS, "POST"))
            if not isinstance(members, list):
                raise invalid_input("members", members, "Value should be a list of objects")
            for member in members:
                MEMBERS.create_in(session, ctx, pool.id, parse({"member": member}, MEMBERS, "POST"))
            if monitor is not None:
                if not isinstance(monitor, dict):
                    raise invalid_input("healthmonitor", monitor, "Value should be an object")
                HEALTHMONITORS.create(session, ctx, parse({"healthmonitor": {**monitor, "pool_id": pool.id}},
                                                          HEALTHMONITORS, "POST"))
    finally:
        session.info.pop(POPULATING, None)


def full(lb: dict[str, Any], made: list[Made]) -> dict[str, Any]:
    """Octavia's answer to a load balancer's create (``LoadBalancerFullResponse``): its
    listeners and pools whole, each pool with its members and health monitor whole,
    from what :func:`netbay.lbaas.common.new_tree` rendered (no further reads)."""
    def of(resource: LBResource) -> dict[str, dict[str, Any]]:
        return {m.obj.id: m.data for m in made if m.resource is resource}
    listeners, pools, members = of(LISTENERS), of(POOLS), of(MEMBERS)
    monitors = {h["pools"][0]["id"]: h for h in of(HEALTHMONITORS).values()}
    return {**lb, "listeners": [listeners[ref["id"]] for ref in lb["listeners"]],   # in the order lb lists them
            "pools": [{**pools[ref["id"]], "healthmonitor": monitors.get(ref["id"]),
                       "members": [members[m["id"]] for m in pools[ref["id"]]["members"]]} for ref in lb["pools"]]}
