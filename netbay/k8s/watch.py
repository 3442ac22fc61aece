"""The API-server source: list + watch through lightkube, the port written back onto the pod.

Per watched kind: a list (its items applied, what the desired state holds of that
kind and the list lacks deleted, then a full ``resync``), then a watch from the
list's resourceVersion — ADDED/MODIFIED → ``apply``, DELETED → ``delete``, BOOKMARK
→ only the resourceVersion remembered, so a reconnect resumes from it. ``410 Gone``
(an HTTP 410 or an ERROR event with code 410: the history was compacted) → a
re-list, which is how deletions missed meanwhile are found. Other errors →
reconnect from the last resourceVersion after a bounded exponential backoff.

Events are handed to the controller in batches (one pass for a burst), and only
when what the controller uses changed: of a pod's status only its conditions
(readiness: a pod turning NotReady leaves its Services' pools) cause a pass, and
the annotation this source writes (:mod:`.annotate`) none, so the write-back does not loop.

Workloads (Deployments, ReplicaSets, StatefulSets, DaemonSets, Jobs…) are not watched:
on a real API server their pods are real Pod objects, which are watched (the manifest
source expands them itself, :mod:`.workloads`).
Pods on the host network, and pods that finished (Succeeded / Failed), have no port;
ExternalName Services no load balancer.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from lightkube import AsyncClient
from lightkube.resources.core_v1 import ConfigMap, Endpoints, Namespace, Pod, Secret, Service
from lightkube.resources.networking_v1 import NetworkPolicy

from netbay.k8s import objects
from netbay.k8s.objects import Key, key_of
from netbay.k8s.annotate import PortAnnotator, describe
from netbay.k8s.portinfo import ANNOTATION
from netbay.k8s.source import Sink

log = logging.getLogger(__name__)

# ConfigMaps and Secrets: what Docker-runtime pods' env reads (netbay.k8s.podenv).
WATCHED = (Namespace, Pod, Service, Endpoints, NetworkPolicy, ConfigMap, Secret)
ALL_NAMESPACES = "*"
# (``uid`` is kept: a pod's port records it, netbay.k8s.podport; a pod made again is a change)
VOLATILE_META = ("resourceVersion", "managedFields", "generation", "creationTimestamp", "selfLink")
PortsHook = Callable[[Mapping[tuple[str, str], dict], Mapping[str, dict]], None]   # the controller's on_ports


class WatchSink(Sink, Protocol):
    """The controller as the watch source needs it: the keys it holds (a re-list
    deletes those the API server no longer has) and a hook after each pass."""

    on_ports: PortsHook | None

    def keys(self) -> list[Key]: ...


@dataclass
class Limits:
    """Every wait is bounded: a watch request ends after ``server_timeout`` s (the
    server's doing, else ours ``grace`` s later) and is renewed from its
    resourceVersion; failures back off up to ``backoff_max``; the event queue holds
    ``queue_max`` (then the watches wait for the controller)."""
    server_timeout: int = 300
    grace: float = 30.0              # a watch silent this long past server_timeout is renewed
    backoff_first: float = 0.2
    backoff_max: float = 10.0
    batch_window: float = 0.0        # wait this long for more events before a pass (a burst
                                     # queued while a pass ran is one pass anyway)
    batch_max: int = 1000
    queue_max: int = 10000
    list_chunk: int = 500            # a list is read in pages of this many objects


@dataclass
class _Kind:
    res: type
    version: str | None = None   # where a reconnect resumes; None: list first
    relists: int = 0
    renewals: int = 0            # watches ended by our own bound (the server went silent)


@dataclass
class Stats:
    passes: int = 0
    relists: int = 0
    patches: int = 0
    last_pass: float = 0.0          # loop time when the last hand-over finished
    errors: list[str] = field(default_factory=list)


def trimmed(body: Mapping[str, Any]) -> dict[str, Any]:
    """What the controller is handed: no server bookkeeping, not our annotation, and of a
    status only a pod's conditions (type and status: readiness, :func:`objects.ready`) —
    so a pod's other status changes (IPs, timestamps, phase) cause no pass."""
    out = {k: v for k, v in body.items() if k != "status"}
    conditions = ((body.get("status") or {}).get("conditions") or []) if body.get("kind") == "Pod" else []
    if conditions:
        out["status"] = {"conditions": [{"type": c.get("type"), "status": c.get("status")} for c in conditions]}
    meta = {k: v for k, v in (body.get("metadata") or {}).items() if k not in VOLATILE_META}
    notes = {k: v for k, v in (meta.get("annotations") or {}).items()
             if k not in (ANNOTATION, "kubectl.kubernetes.io/last-applied-configuration")}
    meta.pop("annotations", None)
    if notes:
        meta["annotations"] = notes
    out["metadata"] = meta
    return out


def mapped(body: Mapping[str, Any]) -> bool:
    """Whether the mapping has anything to make for the object: not for a pod on the
    host's network or one that finished, nor for an ExternalName Service (a DNS alias,
    no cluster IP)."""
    spec = body.get("spec") or {}
    if body.get("kind") == "Pod":
        return not spec.get("hostNetwork") and (body.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    if body.get("kind") == "Service":
        return spec.get("type") != "ExternalName"
    return True


def gone(exc: BaseException) -> bool:
    """``410 Gone``: as an ERROR event (lightkube's ApiError) or as the HTTP status."""
    status = getattr(exc, "status", None)
    response = getattr(exc, "response", None)
    return getattr(status, "code", None) == 410 or getattr(response, "status_code", None) == 410


class WatchSource:
    """List + watch the API server behind ``client`` into ``sink`` until :meth:`stop`."""

    def __init__(self, client: AsyncClient, limits: Limits | None = None, annotate: bool = True) -> None:
        self.client, self.limits = client, limits or Limits()
        self.kinds = {res.__name__: _Kind(res) for res in WATCHED}
        self.stats = Stats()
        self.ready = asyncio.Event()               # every kind listed and handed over once
        self._stop = asyncio.Event()
        self._events: asyncio.Queue = asyncio.Queue(maxsize=self.limits.queue_max)  # full: the watches wait
        self._applied: dict[Key, str] = {}          # key → the trimmed body last handed over (JSON)
        self._held: set[Key] = set()                # what the sink's desired state holds
        self.annotator = PortAnnotator(client, self.limits, self.stats, self._stop, self._error) if annotate else None
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- lifecycle -----------------------------------------------------------------------------

    async def run(self, sink: WatchSink) -> Stats:
        self._loop = asyncio.get_running_loop()
        tasks = [asyncio.create_task(self._follow(kind), name=f"watch-{name}") for name, kind in self.kinds.items()]
        tasks.append(asyncio.create_task(self._hand_over(sink), name="hand-over"))
        if self.annotator is not None:
            self.annotator.bind(self._loop)
            sink.on_ports = self.annotator.realized
            tasks.append(asyncio.create_task(self.annotator.run(), name="write-back"))
        stopping = asyncio.create_task(self._stop.wait())
        try:   # every task loops until stopped: one that ends early is a fault, and ends the source
            await asyncio.wait([stopping, *tasks], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in [stopping, *tasks]:
                t.cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
            if self.annotator is not None:
                sink.on_ports = None
        for result in results:
            if isinstance(result, Exception):
                raise result
        return self.stats

    def stop(self) -> None:
        """Ends :meth:`run` (from any thread)."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        else:
            self._stop.set()

    # -- one kind: list, then watch ------------------------------------------------------------

    async def _follow(self, kind: _Kind) -> None:
        delay = self.limits.backoff_first
        while not self._stop.is_set():
            try:
                if kind.version is None:
                    await self._list(kind)
                try:
                    # lightkube renews a watch the server ended; this bounds a silent one
                    # (its read timeout is off for watches): renewed from the last version.
                    async with asyncio.timeout(self.limits.server_timeout + self.limits.grace):
                        async for type_, obj in self._watch(kind):
                            kind.version = obj.metadata.resourceVersion or kind.version
                            if type_ in ("ADDED", "MODIFIED", "DELETED"):
                                await self._events.put((type_, obj.to_dict()))
                            delay = self.limits.backoff_first
                except TimeoutError:
                    kind.renewals += 1
                    continue
            except Exception as exc:  # noqa: BLE001 - transport and API errors: reconnect from where we were
                if gone(exc):
                    log.info("%s: 410 Gone (%s); listing again", kind.res.__name__, exc)
                    kind.version = None
                    continue
                self._error(f"{kind.res.__name__}: {describe(exc)}")
            await self._sleep(delay)
            delay = min(delay * 2, self.limits.backoff_max)

    async def _list(self, kind: _Kind) -> None:
        listed = self.client.list(kind.res, chunk_size=self.limits.list_chunk, **self._scope(kind))
        bodies = [o.to_dict() for o in [o async for o in listed]]
        for b in bodies:   # list items carry no kind (as the API server sends them)
            b.setdefault("kind", kind.res.__name__)
            b.setdefault("apiVersion", kind.res._api_info.resource.api_version)
        kind.version = listed.resourceVersion
        kind.relists += 1
        self.stats.relists += 1
        await self._events.put(("LIST", (kind.res.__name__, bodies)))

    def _watch(self, kind: _Kind) -> AsyncIterator[tuple[str, Any]]:
        """lightkube's watch with ``allowWatchBookmarks`` (its public ``watch`` lacks the
        parameter; the same request through the same client)."""
        params = {"timeoutSeconds": self.limits.server_timeout, "allowWatchBookmarks": "true",
                  "resourceVersion": kind.version}
        br = self.client._client.prepare_request("list", res=kind.res, watch=True, params=params,
                                                 **self._scope(kind))
        return self.client._client.watch(br)

    @staticmethod
    def _scope(kind: _Kind) -> dict[str, str]:
        return {"namespace": ALL_NAMESPACES} if kind.res is not Namespace else {}

    # -- the controller side: batches of changes -----------------------------------------------

    async def _hand_over(self, sink: WatchSink) -> None:
        """Batches of events → at most a delete, an apply and a full pass (after a
        list); what failed stays pending and is handed over with the next batch."""
        listed: set[str] = set()
        pending: dict[Key, dict | None] = {}
        resync = False
        delay = self.limits.backoff_first
        while not self._stop.is_set():
            batch = [] if pending or resync else [await self._events.get()]
            if self.limits.batch_window:
                await asyncio.sleep(self.limits.batch_window)
            while len(batch) < self.limits.batch_max and not self._events.empty():
                batch.append(self._events.get_nowait())   # what queued up during the last pass: one more
            if any(type_ == "LIST" for type_, _ in batch):   # what the store holds now (any source's)
                try:
                    self._held = {k for k in await asyncio.to_thread(sink.keys) if k.kind in self.kinds}
                except Exception as exc:  # noqa: BLE001 - then from what this source handed over
                    self._error(f"controller: {type(exc).__name__}: {exc}")
            changes, relisted = self._changes(batch)
            pending.update(changes)
            listed |= relisted
            resync = resync or bool(relisted)
            changed = {k: b for k, b in pending.items() if self._differs(k, b)}
            gone = [k for k, b in changed.items() if b is None]
            bodies = [b for b in changed.values() if b is not None]
            try:
                if gone:
                    await asyncio.to_thread(sink.delete, gone)
                    self.stats.passes += 1
                    for k in gone:
                        self._held.discard(k)
                        self._applied.pop(k, None)
                if bodies:
                    await asyncio.to_thread(sink.apply, bodies)
                    self.stats.passes += 1
                    for k, b in changed.items():
                        if b is not None:
                            self._held.add(k)
                            self._applied[k] = json.dumps(b, sort_keys=True)
                if resync:
                    await asyncio.to_thread(sink.resync)
                    self.stats.passes += 1
                pending, resync, delay = {}, False, self.limits.backoff_first
                self.stats.last_pass = time.monotonic()
                if listed >= set(self.kinds):
                    self.ready.set()
            except Exception as exc:  # noqa: BLE001 - the desired state is written first: a full pass catches up
                self._error(f"controller: {type(exc).__name__}: {exc}")
                resync = True
                await self._sleep(delay)
                delay = min(delay * 2, self.limits.backoff_max)

    def _differs(self, key: Key, body: dict | None) -> bool:
        if body is None:
            return key in self._held or key in self._applied
        return self._applied.get(key) != json.dumps(body, sort_keys=True)

    def _changes(self, batch: Iterable[tuple[str, Any]]) -> tuple[dict[Key, dict | None], set[str]]:
        """key → trimmed body (or None: gone) for each event, and the kinds listed."""
        out: dict[Key, dict | None] = {}
        relisted: set[str] = set()
        for type_, payload in batch:
            if type_ == "LIST":
                kind, bodies = payload
                relisted.add(kind)
                present = {key_of(b) for b in bodies}
                for k in [k for k in self._held | set(self._applied) if k.kind == kind and k not in present]:
                    out[k] = None
                for b in bodies:
                    self._note(b)
                    out[key_of(b)] = self._usable(b)
            elif type_ == "DELETED":
                key = key_of(payload)
                if self.annotator is not None and key.kind == "Pod":
                    self.annotator.forget(key.namespace, key.name)
                out[key] = None
            else:
                self._note(payload)
                out[key_of(payload)] = self._usable(payload)
        return out, relisted

    def _note(self, body: Mapping[str, Any]) -> None:
        if self.annotator is not None and body.get("kind") == "Pod":
            self.annotator.seen(body, mapped(body))

    def _usable(self, body: Mapping[str, Any]) -> dict | None:
        """The body to hand over, or None: no port wanted, or an object the mapping
        refuses (one such object must not stop every pass, as it would in the store)."""
        if not mapped(body):
            return None
        out = trimmed(body)
        try:
            objects.desired([out])
        except objects.ManifestError as exc:
            self._error(f"{key_of(body)} ignored: {exc}")
            return None
        return out

    # -- helpers -------------------------------------------------------------------------------

    def _error(self, message: str) -> None:
        log.warning("%s", message)
        self.stats.errors = (self.stats.errors + [message])[-50:]

    async def _sleep(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._stop.wait(), seconds)
        except TimeoutError:
            pass


__all__ = ["ANNOTATION", "Limits", "WatchSink", "WatchSource", "WATCHED", "mapped", "trimmed"]
