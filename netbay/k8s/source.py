"""Sources of Kubernetes objects: what hands objects to the controller.

A source only says what exists (``apply``) and what no longer does (``delete``);
the controller stores it and converges. The manifest source reads files; the watch
source (:mod:`.watch`, API server list + watch) calls the same two methods from its
events and ``resync`` after a (re-)list.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol

from netbay.k8s import objects
from netbay.k8s.objects import Key


class Sink(Protocol):
    """The controller, as a source sees it."""

    def apply(self, bodies: Iterable[dict[str, Any]]) -> Any: ...
    def delete(self, keys: Iterable[Key]) -> Any: ...
    def resync(self) -> Any: ...


class ManifestSource:
    """``netbay k8s apply|delete -f FILE|DIR``: real manifests parsed by lightkube."""

    def __init__(self, paths: Iterable[str | Path]) -> None:
        self.bodies = objects.load_paths(paths)

    def apply(self, sink: Sink) -> Any:
        refuse = getattr(sink, "refuse", None)   # what the sink's backends cannot map: before any change
        if callable(refuse):
            refuse(self.bodies)
        return sink.apply(self.bodies)

    def delete(self, sink: Sink) -> Any:
        return sink.delete(objects.key_of(b) for b in self.bodies)
