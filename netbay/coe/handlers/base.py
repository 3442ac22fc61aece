"""What every handler shares: the base ``Handler`` and the one rule for errors.

A handler maps one Heat type onto a service. Network handlers call the
``NetworkBackend`` (``st.net``), load-balancer handlers the ``LoadBalancerBackend``
(``st.lb``), and sandboxes netbay's own API (``st.api``). Both kinds of refusal — ``netbay.errors`` from the seam,
``ApiError`` from the HTTP client — carry a ``status`` and a ``message``, so a
404 means "already gone" whichever answered (:data:`netbay.client.Refused`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from netbay.client import Refused, gone_ok, or_none  # noqa: F401 - re-exported for the handlers

if TYPE_CHECKING:
    from netbay.coe.handlers.context import StackContext
    from netbay.coe.stackrecord import Row


class Handler:
    """How one Heat type maps onto a service. ``create`` returns (physical id,
    attributes for get_attr); ``finish`` completes an adopted or new resource;
    ``exists`` re-reads attributes (None when gone); ``find`` looks up by tag."""

    def create(self, st: StackContext, name: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError

    def finish(self, st: StackContext, pid: str, attrs: dict[str, Any], props: dict[str, Any]) -> dict[str, Any]:
        return attrs

    def exists(self, st: StackContext, row: Row) -> dict[str, Any] | None:
        raise NotImplementedError

    def find(self, st: StackContext, name: str) -> tuple[str, dict[str, Any]] | None:
        return None

    def delete(self, st: StackContext, pid: str, attrs: dict[str, Any]) -> None:
        raise NotImplementedError


class ValueHandler(Handler):
    """``OS::Heat::Value``: nothing to make; the resolved value is its attribute."""

    def create(self, st: StackContext, name: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return f"value:{name}", {"value": props.get("value")}

    def exists(self, st: StackContext, row: Row) -> dict[str, Any] | None:
        return row.attributes

    def delete(self, st: StackContext, pid: str, attrs: dict[str, Any]) -> None:
        return None


class Unavailable(Handler):
    """A type the backend's cloud cannot make (no such service, or not driven yet):
    refused by name before anything is made, so the reason is the first thing said."""

    def __init__(self, why: str) -> None:
        self.why = why

    def create(self, st: StackContext, name: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        raise RuntimeError(self.why)

    def exists(self, st: StackContext, row: Row) -> dict[str, Any] | None:
        return None

    def delete(self, st: StackContext, pid: str, attrs: dict[str, Any]) -> None:
        return None
