"""Ownership tags: how a container-port service finds again what it made or claimed.

The Docker driver and the CNI daemon keep no state of their own: each tags the
networks, subnets and ports it makes or claims in the network backend, so that a
restarted process — and its garbage collection — knows everything again. Each
service owns one namespace of tags (:class:`Owner`, e.g. ``netbay.cni``):

- ``<ns>.made`` on what it made, deleted when released (what it was given is only
  given back, its tags stripped);
- families of keyed tags ``<ns>.<key>:<value>`` (:class:`Family`), e.g. the
  container a port serves; a value is a URL path segment in the tag API, so a
  family may encode it (no ``/``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, UTC
from typing import Any


def tags_of(obj: Mapping[str, Any]) -> list[str]:
    return list(obj.get("tags") or ())


@dataclass(frozen=True)
class Family:
    """Tags ``<prefix><value>``: ``family(value)`` makes one, the rest read them back."""

    prefix: str
    encode: Callable[[str], str] = str

    def __call__(self, value: str) -> str:
        return f"{self.prefix}{self.encode(value)}"

    def values(self, obj: Mapping[str, Any]) -> list[str]:
        """The (encoded) values of this family's tags on ``obj``."""
        return [t[len(self.prefix):] for t in tags_of(obj) if t.startswith(self.prefix)]

    def value(self, obj: Mapping[str, Any]) -> str:
        """The first value on ``obj`` ("" if none)."""
        return next(iter(self.values(obj)), "")

    def on(self, obj: Mapping[str, Any]) -> bool:
        return any(t.startswith(self.prefix) for t in tags_of(obj))


class Owner:
    """One service's namespace of tags."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.made = self.flag("made")

    def flag(self, name: str) -> str:
        """A tag that is there or not: ``<ns>.<name>``."""
        return f"{self.namespace}.{name}"

    def family(self, key: str, encode: Callable[[str], str] = str) -> Family:
        return Family(f"{self.namespace}.{key}:", encode)

    def made_it(self, obj: Mapping[str, Any]) -> bool:
        return self.made in tags_of(obj)

    def without_ours(self, tags: Iterable[str]) -> list[str]:
        """``tags`` less this service's: what an object given back keeps."""
        return [t for t in tags if not t.startswith(f"{self.namespace}.")]


def on_host_or_unbound(port: Mapping[str, Any], host: str) -> bool:
    """A port a collector on ``host`` may take back: bound here, or not bound at all (a
    claim cut short before its binding)."""
    return port.get("binding:host_id") in ("", host)


def age(obj: Mapping[str, Any], key: str = "updated_at") -> float:
    """Seconds since ``obj``'s ``key`` stamp (else its creation; 0 if it has none): a
    collector leaves what is younger than its grace alone (a call may be in flight)."""
    stamp = obj.get(key) or obj.get("created_at")
    if not stamp:
        return 0.0
    when = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (datetime.now(UTC) - when).total_seconds()


__all__ = ["Family", "Owner", "age", "on_host_or_unbound", "tags_of"]
