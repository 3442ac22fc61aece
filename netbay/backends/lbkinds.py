"""Octavia's kinds of object and their collections, as every load-balancer backend
names them (below :mod:`netbay.backends.loadbalancers`, which opens the backends)."""

from __future__ import annotations

from netbay.errors import BadRequest

LB_KINDS = ("loadbalancer", "listener", "pool", "member", "healthmonitor")
# Octavia's kind -> its collection in the URL and in list bodies.
COLLECTIONS = {"loadbalancer": "loadbalancers", "listener": "listeners", "pool": "pools", "member": "members",
               "healthmonitor": "healthmonitors"}


def checked(kind: str, parent: str | None) -> str:
    """``kind``'s collection; a member needs its pool as ``parent``."""
    if kind not in COLLECTIONS:
        raise BadRequest(f"unknown load-balancer resource {kind!r}")
    if kind == "member" and not parent:
        raise BadRequest("a member lives under its pool: give the pool id as parent")
    return COLLECTIONS[kind]


__all__ = ["COLLECTIONS", "LB_KINDS", "checked"]
