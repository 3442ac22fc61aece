"""Keystone's roles: the seeded set and the implied-role chain admin → member → reader."""

from __future__ import annotations

from collections.abc import Iterable

# Keystone's bootstrap roles and Octavia's (migration 0003 seeds them; bootstrap makes sure).
ROLES = ("admin", "member", "reader", "load-balancer_member", "load-balancer_observer",
         "load-balancer_global_observer", "load-balancer_admin")

# Keystone's default implied roles: a token for an admin also carries member and reader.
IMPLIES: dict[str, tuple[str, ...]] = {"admin": ("member",), "member": ("reader",)}


def effective(names: Iterable[str]) -> tuple[str, ...]:
    """The assigned roles and every role they imply, sorted."""
    out: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name not in out:
            out.add(name)
            todo.extend(IMPLIES.get(name, ()))
    return tuple(sorted(out))
