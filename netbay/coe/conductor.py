"""The seam between the cluster API and whatever builds clusters.

The API stores the wish and a ``*_IN_PROGRESS`` status, commits, then tells the
conductor which cluster changed. The conductor makes the world match (compose
the resource graph, apply it with the embedded executor or hand it to Heat) and
writes the outcome back with :func:`netbay.coe.clusters.set_status`.

TODO(issue 4, composition/executor): a real conductor. It must also resume on
start: every cluster still ``*_IN_PROGRESS`` after a restart is unfinished work.
Until it exists, clusters stay ``CREATE_IN_PROGRESS`` and an admin (or a test)
plays its part through ``PUT /netbay/v1/status {"clusters": {id: "CREATE_COMPLETE"}}``.
"""

from __future__ import annotations

from typing import Protocol


class Conductor(Protocol):
    def cluster_changed(self, cluster_id: str, action: str) -> None:
        """``action`` is ``create``, ``update`` or ``delete``; called after the commit."""


class NoConductor:
    """No builder yet: changes are recorded in the store and wait there."""

    def cluster_changed(self, cluster_id: str, action: str) -> None:
        return None
