"""A stand-in for a Kubernetes API server (no API server can run on this machine).

It serves the real API paths the watch source uses — list and watch of
``/api/v1/namespaces``, ``/api/v1/pods``, ``/api/v1/services``, ``/api/v1/endpoints``,
``/apis/networking.k8s.io/v1/networkpolicies``, ``/api/v1/configmaps``, ``/api/v1/secrets``
and a merge-patch of a pod — over HTTP on 127.0.0.1, with the API server's own framing: a ``*List`` with
``metadata.resourceVersion`` (paged by ``limit`` / ``continue``); a watch answered as newline-delimited JSON events
``{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": ...}``; one increasing
resourceVersion over all objects; bookmarks only to watches that asked
(``allowWatchBookmarks=true``); ``timeoutSeconds`` honoured; and a compaction that
answers older resourceVersions with ``410 Gone`` (an ERROR event carrying a
``Status`` with code 410, as kube-apiserver sends it, or an HTTP 410 on request).

Objects are fed in as real API objects (lightkube models or manifests parsed by
:func:`netbay.k8s.objects.parse`); the test drives it from its own thread with
:meth:`create`, :meth:`update`, :meth:`delete`, :meth:`bookmark`, :meth:`compact`
and :meth:`close_watches`. Every request is recorded in :attr:`requests`.
"""

from __future__ import annotations

import asyncio
import copy
import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from netbay import keepalive

# plural → (kind, apiVersion, list path prefix, namespaced)
RESOURCES = {
    "namespaces": ("Namespace", "v1", "/api/v1", False),
    "pods": ("Pod", "v1", "/api/v1", True),
    "services": ("Service", "v1", "/api/v1", True),
    "endpoints": ("Endpoints", "v1", "/api/v1", True),
    "networkpolicies": ("NetworkPolicy", "networking.k8s.io/v1", "/apis/networking.k8s.io/v1", True),
    "configmaps": ("ConfigMap", "v1", "/api/v1", True),
    "secrets": ("Secret", "v1", "/api/v1", True),
}
PLURAL = {kind: plural for plural, (kind, *_rest) in RESOURCES.items()}


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


@dataclass
class Watch:
    plural: str
    bookmarks: bool
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue = field(default_factory=asyncio.Queue)

    def push(self, item: dict[str, Any] | None) -> None:
        self.loop.call_soon_threadsafe(self.queue.put_nowait, item)


class StandinApiServer:
    """A stand-in for a Kubernetes API server; ``url`` once started."""

    def __init__(self) -> None:
        self.rv = 100
        self.compacted = 0                       # resourceVersions below this answer 410
        self.gone_as_http = False                # 410 as an HTTP status instead of an ERROR event
        self.partitioned = False                 # every request answers 503 (the source cannot reach it)
        self.silent = False                      # watches opened now send nothing and never end
        self.fail_patches = 0                    # the next N patches answer 500
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}   # (plural, ns, name) → object
        self.history: list[tuple[int, str, str, dict[str, Any]]] = []  # (rv, plural, type, object)
        self.watches: list[Watch] = []
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        self.patches: list[tuple[str, str, dict[str, Any]]] = []
        self._pages: dict[str, tuple[int, list[dict[str, Any]]]] = {}   # continue token → rest of a list
        self.pages_served = 0
        self._lock = threading.Lock()
        routes = [Route(f"{prefix}/{plural}", self._collection, methods=["GET"])
                  for plural, (_, _, prefix, _) in RESOURCES.items()]
        routes.append(Route("/api/v1/namespaces/{ns}/pods/{name}", self._pod, methods=["GET", "PATCH"]))
        self.app = Starlette(routes=routes)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.url = ""

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> StandinApiServer:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        config = uvicorn.Config(self.app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1,
                                timeout_keep_alive=keepalive.SERVER)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        assert self._server.started, "the stand-in API server did not start"
        return self

    def stop(self) -> None:
        self.close_watches()
        if self._server is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)

    def kubeconfig(self) -> str:
        """A kubeconfig (as kubectl reads it) pointing at this stand-in."""
        return (f"apiVersion: v1\nkind: Config\ncurrent-context: standin\n"
                f"clusters: [{{name: standin, cluster: {{server: '{self.url}'}}}}]\n"
                f"users: [{{name: standin, user: {{token: standin-token}}}}]\n"
                f"contexts: [{{name: standin, context: {{cluster: standin, user: standin}}}}]\n")

    # -- what a test does ------------------------------------------------------------------------

    def create(self, obj: Any) -> dict[str, Any]:
        return self._write("ADDED", obj)

    def update(self, obj: Any) -> dict[str, Any]:
        return self._write("MODIFIED", obj)

    def delete(self, kind: str, namespace: str, name: str) -> None:
        plural = PLURAL[kind]
        with self._lock:
            obj = self.objects.pop((plural, namespace if RESOURCES[plural][3] else "", name))
            self.rv += 1
            obj = copy.deepcopy(obj)
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self._event(plural, "DELETED", obj)

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            obj = self.objects.get((PLURAL[kind], namespace, name))
            return copy.deepcopy(obj) if obj else None

    def bookmark(self) -> int:
        """A BOOKMARK with the current resourceVersion to every watch that allows them."""
        with self._lock:
            for w in self.watches:
                if w.bookmarks:
                    kind, api_version, _, _ = RESOURCES[w.plural]
                    w.push({"type": "BOOKMARK", "object": {"kind": kind, "apiVersion": api_version,
                                                           "metadata": {"resourceVersion": str(self.rv)}}})
            return self.rv

    def compact(self) -> int:
        """Forget the history (as etcd compaction does): open watches get an ERROR 410
        event and end; any watch or list from an older resourceVersion is Gone."""
        with self._lock:
            self.compacted = self.rv
            self.history.clear()
            for w in self.watches:
                w.push({"type": "ERROR", "object": status(
                    410, "Expired", f"too old resource version: compacted to {self.compacted}")})
                w.push(None)
            return self.compacted

    def close_watches(self) -> None:
        """End every open watch stream (as the server's watch timeout does)."""
        with self._lock:
            for w in self.watches:
                w.push(None)

    def partition(self) -> None:
        """Unreachable until :meth:`heal`: open watches end, requests answer 503."""
        self.partitioned = True
        self.close_watches()

    def heal(self) -> None:
        self.partitioned = False

    def watch_requests(self, plural: str) -> list[dict[str, str]]:
        return [q for _, path, q in self.requests if path.endswith(f"/{plural}") and q.get("watch") in ("true", "1")]

    # -- internals -------------------------------------------------------------------------------

    def _write(self, type_: str, obj: Any) -> dict[str, Any]:
        body = obj.to_dict() if hasattr(obj, "to_dict") else copy.deepcopy(dict(obj))
        plural = PLURAL[body["kind"]]
        namespaced = RESOURCES[plural][3]
        meta = body.setdefault("metadata", {})
        if namespaced:
            meta.setdefault("namespace", "default")
        key = (plural, meta.get("namespace", "") if namespaced else "", meta["name"])
        with self._lock:
            old = self.objects.get(key)
            if (old is None) != (type_ == "ADDED"):
                raise KeyError(f"{type_} of {key}: {'absent' if old is None else 'exists'}")
            self.rv += 1
            meta["uid"] = old["metadata"]["uid"] if old else str(uuid.uuid4())
            meta["creationTimestamp"] = old["metadata"]["creationTimestamp"] if old else \
                time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            meta["resourceVersion"] = str(self.rv)
            if plural == "pods":
                body.setdefault("status", {"phase": "Pending"})
            self.objects[key] = body
            self._event(plural, type_, body)
            return copy.deepcopy(body)

    def _event(self, plural: str, type_: str, obj: dict[str, Any]) -> None:
        self.history.append((self.rv, plural, type_, copy.deepcopy(obj)))
        for w in self.watches:
            if w.plural == plural:
                w.push({"type": type_, "object": copy.deepcopy(obj)})

    async def _collection(self, request: Request) -> Response:
        plural = request.url.path.rsplit("/", 1)[1]
        query = dict(request.query_params)
        self.requests.append(("GET", request.url.path, query))
        kind, api_version, _, _ = RESOURCES[plural]
        if self.partitioned:
            return JSONResponse(status(503, "ServiceUnavailable", "the stand-in is partitioned"), status_code=503)
        if query.get("watch") not in ("true", "1"):
            with self._lock:
                token = query.get("continue")
                if token:   # the next page of the snapshot the first page was cut from
                    if token not in self._pages:
                        return JSONResponse(status(410, "Expired", "the continue token expired"), status_code=410)
                    rv, items = self._pages.pop(token)
                else:
                    rv = self.rv
                    items = [copy.deepcopy(o) for (p, _, _), o in sorted(self.objects.items()) if p == plural]
                    for item in items:   # items of a list carry no kind/apiVersion, as the API server sends them
                        item.pop("kind", None)
                        item.pop("apiVersion", None)
                limit = int(query.get("limit") or 0)
                meta: dict[str, Any] = {"resourceVersion": str(rv)}
                if limit and len(items) > limit:
                    meta["continue"] = token = uuid.uuid4().hex
                    self._pages[token] = (rv, items[limit:])
                    items = items[:limit]
                    self.pages_served += 1
                return JSONResponse({"kind": f"{kind}List", "apiVersion": api_version, "metadata": meta,
                                     "items": items})
        since = int(query.get("resourceVersion") or 0)
        timeout = min(float(query.get("timeoutSeconds") or 1800), 1800)
        if self.silent:   # a half-dead connection: headers sent, then nothing, ever (bounded: 1 h)
            return StreamingResponse(self._silence(), media_type="application/json")
        watch = Watch(plural, query.get("allowWatchBookmarks") == "true", asyncio.get_running_loop())
        with self._lock:
            if since and since < self.compacted:
                if self.gone_as_http:
                    return JSONResponse(status(410, "Expired", f"too old resource version: {since} "
                                                               f"({self.compacted})"), status_code=410)
                watch.queue.put_nowait({"type": "ERROR", "object": status(
                    410, "Expired", f"too old resource version: {since} ({self.compacted})")})
                watch.queue.put_nowait(None)
            else:
                if not since:   # no resourceVersion: a synthetic ADDED per existing object, then changes
                    for (p, _, _), o in sorted(self.objects.items()):
                        if p == plural:
                            watch.queue.put_nowait({"type": "ADDED", "object": copy.deepcopy(o)})
                else:
                    for rv, p, type_, o in self.history:
                        if p == plural and rv > since:
                            watch.queue.put_nowait({"type": type_, "object": copy.deepcopy(o)})
                self.watches.append(watch)
        return StreamingResponse(self._stream(watch, timeout), media_type="application/json")

    async def _stream(self, watch: Watch, timeout: float) -> Iterator[bytes]:
        deadline = time.monotonic() + timeout
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    item = await asyncio.wait_for(watch.queue.get(), left)
                except TimeoutError:
                    break
                if item is None:
                    break
                yield (json.dumps(item) + "\n").encode()
        finally:
            with self._lock:
                if watch in self.watches:
                    self.watches.remove(watch)

    async def _silence(self) -> Iterator[bytes]:
        await asyncio.sleep(3600)
        yield b""

    async def _pod(self, request: Request) -> Response:
        ns, name = request.path_params["ns"], request.path_params["name"]
        self.requests.append((request.method, request.url.path, dict(request.query_params)))
        if self.partitioned:
            return JSONResponse(status(503, "ServiceUnavailable", "the stand-in is partitioned"), status_code=503)
        if request.method == "GET":
            obj = self.get("Pod", ns, name)
            return JSONResponse(obj) if obj else JSONResponse(
                status(404, "NotFound", f'pods "{name}" not found'), status_code=404)
        if request.headers.get("content-type") != "application/merge-patch+json":
            return JSONResponse(status(415, "UnsupportedMediaType", "the watch source sends merge patches"),
                                status_code=415)
        if self.fail_patches > 0:
            self.fail_patches -= 1
            return JSONResponse(status(500, "InternalError", "etcdserver: request timed out"), status_code=500)
        patch = await request.json()
        self.patches.append((ns, name, patch))
        with self._lock:
            obj = self.objects.get(("pods", ns, name))
            if obj is None:
                return JSONResponse(status(404, "NotFound", f'pods "{name}" not found'), status_code=404)
            obj = _merge(copy.deepcopy(obj), patch)
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self.objects[("pods", ns, name)] = obj
            self._event("pods", "MODIFIED", obj)
            return JSONResponse(copy.deepcopy(obj))


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    if not isinstance(target, dict):
        target = {}
    for k, v in patch.items():
        if v is None:
            target.pop(k, None)
        else:
            target[k] = _merge(target.get(k), v)
    return target
