"""The write-back: each pod's port merge-patched onto it (annotation :data:`.portinfo.ANNOTATION`).

The controller hands over every pod's port after each pass (its ``on_ports`` hook);
a pod whose annotation, as the API server last showed it, differs is patched — once:
the MODIFIED event the patch causes shows the new value, and the watch source does
not make a pass for it. A pod that loses the annotation (re-created, overwritten) is
patched again when its event is seen, without waiting for a pass. A failed patch is
tried again after a bounded backoff; a pod gone meanwhile (404) is dropped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

from netbay.k8s.portinfo import ANNOTATION, vif_annotation

PodKey = tuple[str, str]   # (namespace, name)


class PortAnnotator:
    def __init__(self, client: AsyncClient, limits: Any, stats: Any, stop: asyncio.Event,
                 on_error: Callable[[str], None]) -> None:
        self.client, self.limits, self.stats, self._stop, self._error = client, limits, stats, stop, on_error
        self._notes: dict[PodKey, str | None] = {}   # the annotation as the API server last showed it
        self._want: dict[PodKey, str] = {}           # to patch
        self._last_want: dict[PodKey, str] = {}      # every pod's, after the last pass
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    # -- what the watch source tells it (its event loop) ----------------------------------------

    def seen(self, body: Mapping[str, Any], has_port: bool) -> None:
        meta = body.get("metadata") or {}
        pod = (meta.get("namespace") or "default", meta.get("name") or "")
        self._notes[pod] = (meta.get("annotations") or {}).get(ANNOTATION)
        if has_port and pod in self._last_want and self._notes[pod] != self._last_want[pod]:
            self._want[pod] = self._last_want[pod]
            self._wake.set()

    def forget(self, namespace: str, name: str) -> None:
        self._notes.pop((namespace, name), None)

    # -- what the controller tells it (its thread) ---------------------------------------------

    def realized(self, ports: Mapping[PodKey, dict], subnets: Mapping[str, dict]) -> None:
        """The controller's ``on_ports`` hook: every pod's port after a pass."""
        want = {key: vif_annotation(port, subnets.get(port["network_id"])) for key, port in ports.items()}
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._queue, want)

    def _queue(self, want: dict[PodKey, str]) -> None:
        self._last_want = want
        self._want = {k: v for k, v in want.items() if k in self._notes and self._notes[k] != v}
        self._wake.set()

    # -- the patches -----------------------------------------------------------------------------

    async def run(self) -> None:
        delay = self.limits.backoff_first
        while not self._stop.is_set():
            await self._wake.wait()
            self._wake.clear()
            todo, self._want = self._want, {}
            failed = {}
            for (ns, name), note in sorted(todo.items()):
                if self._notes.get((ns, name)) == note:
                    continue
                try:
                    await self.client.patch(Pod, name, {"metadata": {"annotations": {ANNOTATION: note}}},
                                            namespace=ns, patch_type=PatchType.MERGE)
                    self._notes[(ns, name)] = note
                    self.stats.patches += 1
                except Exception as exc:  # noqa: BLE001
                    if isinstance(exc, ApiError) and exc.status.code == 404:
                        continue   # a pod deleted meanwhile needs no annotation
                    self._error(f"annotate {ns}/{name}: {describe(exc)}")
                    failed[(ns, name)] = note
            if failed:
                self._want = {**failed, **self._want}
                self._wake.set()
                try:
                    await asyncio.wait_for(self._stop.wait(), delay)
                except TimeoutError:
                    pass
                delay = min(delay * 2, self.limits.backoff_max)
            else:
                delay = self.limits.backoff_first


def describe(exc: BaseException) -> str:
    """An API error as ``code reason message``; anything else by its type."""
    status: Any = getattr(exc, "status", None)
    if getattr(status, "code", None):
        return f"{status.code} {status.reason or ''} {status.message or ''}".replace("  ", " ").strip()
    return f"{type(exc).__name__}: {exc}"
