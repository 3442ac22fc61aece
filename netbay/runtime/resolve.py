"""A network-backend object named by id or by unique name, as every container path names one.

Docker's ``-o netbay.network=``, a CNI config's ``network`` and Zun's ``nets`` entries
each name a network (or a subnet, a subnet pool) either way. The rule is one: the
object with that id, else the one object with that name. An id is asked for only when
``ref`` is shaped as one (a UUID): a cloud's Neutron answers any other with a 404, one
round trip for nothing. Each caller words the refusal in its own API's format, from
:class:`Unresolved`.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import TYPE_CHECKING, Any

from netbay.errors import NotFound

if TYPE_CHECKING:
    from netbay.backends import NetworkBackend
    from netbay.backends.aio import AsyncNetworkBackend


class Unresolved(LookupError):
    """No object, or several, answer to ``ref`` (``count``: how many are named so)."""

    def __init__(self, member: str, ref: str, count: int) -> None:
        self.member, self.ref, self.count = member, ref, count
        super().__init__(f"{count} {member}s are named {ref!r}" if count else f"no {member} with id or name {ref!r}")


def id_shaped(ref: str) -> bool:
    try:
        uuid.UUID(ref)
    except ValueError:
        return False
    return True


def one(member: str, ref: str, named: list[dict[str, Any]]) -> dict[str, Any]:
    """The one object of ``named`` (those listed by ``name=ref``)."""
    if len(named) != 1:
        raise Unresolved(member, ref, len(named))
    return named[0]


def find(backend: NetworkBackend, member: str, ref: str) -> dict[str, Any]:
    """By id, else by unique name; :class:`Unresolved` else."""
    if id_shaped(ref):
        with contextlib.suppress(NotFound):
            return backend.show(member, ref)
    return one(member, ref, backend.list(member, name=ref))


async def find_async(backend: AsyncNetworkBackend, member: str, ref: str) -> dict[str, Any]:
    """:func:`find`, awaited."""
    if id_shaped(ref):
        with contextlib.suppress(NotFound):
            return await backend.show(member, ref)
    return one(member, ref, await backend.list(member, name=ref))


__all__ = ["Unresolved", "find", "find_async", "id_shaped", "one"]
