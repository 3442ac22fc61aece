"""Kubernetes objects as the controller needs them, parsed with lightkube's models.

Manifests are read with ``lightkube.codecs.load_all_yaml`` (real API types, so a
misspelt field or kind is refused as the API server would), kept in the store as
the dict the model serializes to, and turned here into the few facts the mapping
uses: namespaces and their labels, pods (every workload kind expanded into its
pods, :mod:`.workloads`; a pod's containers read by :mod:`.podspec`), Services, Endpoints and NetworkPolicies, and the ConfigMaps and
Secrets pods' environments read (:mod:`.podenv`).
"""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from netbay.k8s import workloads
from netbay.k8s.podenv import EnvError, secret_data
from netbay.k8s.podspec import ContainerWant, SpecError
from netbay.k8s.podspec import parse as parse_spec

RUNTIME_ANNOTATION = "netbay.io/runtime"   # a pod's runtime, over its cluster's kuryr_pod_runtime
CNI_RUNTIME = "cni"   # the node's CNI (netbay-cni, called by the kubelet) plugs the pod's port
RUNTIMES = ("sandbox", "docker", CNI_RUNTIME)
KINDS = ("Namespace", "Pod", *workloads.KINDS, "Service", "Endpoints", "NetworkPolicy", "ConfigMap", "Secret")
CLUSTER_SCOPED = {"Namespace"}
DEFAULT_NAMESPACE = "default"
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
MAX_MANIFEST_BYTES = 16 << 20   # one file (or stdin): far above any real manifest, bounded all the same
# A Service port's protocols, Kubernetes' own: every driver's dataplane carries them (kube-proxy's
# maps key on ``meta l4proto . th dport``; Octavia has SCTP listeners and pools)
SERVICE_PROTOCOLS = ("TCP", "UDP", "SCTP")


class ManifestError(ValueError):
    """A manifest the controller refuses; ``str()`` is the whole message."""


@dataclass(frozen=True, order=True)
class Key:
    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}" if self.namespace else f"{self.kind}/{self.name}"


def key_of(body: Mapping[str, Any]) -> Key:
    kind = body.get("kind") or ""
    meta = body.get("metadata") or {}
    namespace = "" if kind in CLUSTER_SCOPED else (meta.get("namespace") or DEFAULT_NAMESPACE)
    return Key(kind, namespace, meta.get("name") or "")


def parse(text: str, origin: str = "<input>") -> list[dict[str, Any]]:
    """The objects of one YAML (or JSON) stream as plain dicts, checked by lightkube."""
    from lightkube import codecs
    from lightkube.core.exceptions import LoadResourceError

    try:
        objs = codecs.load_all_yaml(text)
    except (LoadResourceError, ValueError, TypeError, AttributeError) as exc:
        raise ManifestError(f"{origin}: {exc}") from None
    out = []
    for obj in objs:
        body = obj.to_dict()
        key = key_of(body)
        if key.kind not in KINDS:
            raise ManifestError(f"{origin}: kind {key.kind} is not mapped (supported: {', '.join(KINDS)})")
        if not key.name:
            raise ManifestError(f"{origin}: a {key.kind} without metadata.name")
        try:
            desired([body])   # the mapping's own checks, before the object is stored
        except ManifestError as exc:
            raise ManifestError(f"{origin}: {exc}") from None
        out.append(body)
    return out


def load_paths(paths: Iterable[str | Path], stdin: BinaryIO | None = None) -> list[dict[str, Any]]:
    """Every object in the files named, a directory's manifests in name order; ``-`` is
    ``stdin`` (kubectl's ``-f -``), read once."""
    out: list[dict[str, Any]] = []
    read_stdin = False
    for raw in paths:
        if str(raw) == "-":
            if read_stdin:
                raise ManifestError("-: standard input can be given once")
            read_stdin = True
            out += parse(_bounded(stdin if stdin is not None else sys.stdin.buffer, "<stdin>"), "<stdin>")
            continue
        path = Path(raw)
        files = sorted(p for p in path.iterdir() if p.suffix in MANIFEST_SUFFIXES) if path.is_dir() else [path]
        for f in files:
            try:
                with f.open("rb") as stream:
                    text = _bounded(stream, str(f))
            except OSError as exc:
                raise ManifestError(f"{f}: {exc.strerror}") from None
            out += parse(text, str(f))
    return out


def _bounded(stream: BinaryIO, origin: str) -> str:
    """A manifest stream's text, refused past :data:`MAX_MANIFEST_BYTES` or not UTF-8."""
    data = stream.read(MAX_MANIFEST_BYTES + 1)
    if len(data) > MAX_MANIFEST_BYTES:
        raise ManifestError(f"{origin}: larger than {MAX_MANIFEST_BYTES >> 20} MiB")
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise ManifestError(f"{origin}: not UTF-8 ({exc.reason} at byte {exc.start})") from None


# --- the facts the mapping uses -------------------------------------------------------------------


@dataclass(frozen=True)
class PodWant:
    namespace: str
    name: str
    labels: Mapping[str, str]
    ports: Mapping[str, int]          # named container ports
    node: str | None = None           # spec.nodeName
    runtime: str | None = None        # annotation netbay.io/runtime (None: the cluster's)
    containers: tuple[ContainerWant, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    uid: str | None = None            # metadata.uid (an API server's pod; None: netbay's own)
    service_account: str = "default"  # spec.serviceAccountName
    ready: bool = True                # its Ready condition (:func:`ready`)
    init: tuple[ContainerWant, ...] = ()   # spec.initContainers, run in order to completion first
    restart: str = "Always"           # spec.restartPolicy
    volumes: tuple[str, ...] = ()     # its emptyDir volumes
    refused: tuple[str, ...] = ()     # why a runtime cannot run it as written (:mod:`.podspec`)
    ignored: tuple[str, ...] = ()     # fields it runs without (a warning when it is made)
    owner: str | None = None          # "StatefulSet/web": the workload it is a pod of (:mod:`.workloads`)
    after: str | None = None          # a StatefulSet's previous pod: started once that one runs
    backoff_limit: int | None = None  # a Job's pod: failed runs before it is Failed
    parallelism: int | None = None    # a Job's pod: how many of the Job's pods run at once

    @property
    def container(self) -> ContainerWant | None:
        """The first container, when it names an image (what the pod's sandbox image falls back to)."""
        return self.containers[0] if self.containers and self.containers[0].image else None

    @property
    def by_cni(self) -> bool:
        """Plugged by its node's CNI (:mod:`netbay.k8s.podport`), not by the controller."""
        return self.runtime == CNI_RUNTIME


@dataclass(frozen=True)
class ServicePort:
    name: str
    protocol: str
    port: int
    target: int | str
    node_port: int | None = None


@dataclass(frozen=True)
class ServiceWant:
    namespace: str
    name: str
    type: str
    cluster_ip: str | None            # None: allocate; "None": headless
    ports: tuple[ServicePort, ...]
    selector: Mapping[str, str] | None
    external_ips: tuple[str, ...] = ()
    load_balancer_ip: str | None = None
    publish_not_ready: bool = False   # spec.publishNotReadyAddresses: not-ready pods are endpoints too
    # Dual-stack (resolved against the cluster's families by netbay.k8s.families):
    ip_families: tuple[str, ...] = ()     # spec.ipFamilies as written
    ip_family_policy: str | None = None   # spec.ipFamilyPolicy as written
    cluster_ips: tuple[str, ...] = ()     # spec.clusterIPs (clusterIP first)

    @property
    def headless(self) -> bool:
        return self.cluster_ip == "None"


@dataclass
class Desired:
    namespaces: dict[str, Mapping[str, str]] = field(default_factory=dict)
    pods: dict[tuple[str, str], PodWant] = field(default_factory=dict)
    services: dict[tuple[str, str], ServiceWant] = field(default_factory=dict)
    # (ns, name) -> [(ip, {port name: port})]
    endpoints: dict[tuple[str, str], list[tuple[str, dict[str, int]]]] = field(default_factory=dict)
    policies: list[dict[str, Any]] = field(default_factory=list)
    # (ns, name) -> data; a Secret's decoded
    configmaps: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)
    secrets: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)


# id(body) → (body, its key, its parsed Pod or Service, its key as a tuple: the order)
Memo = dict[int, tuple[Mapping[str, Any], Key, Any, tuple[str, str, str]]]


def desired(bodies: Iterable[Mapping[str, Any]], nodes: tuple[str, ...] = (), memo: Memo | None = None) -> Desired:
    """What the objects ask for; every namespace an object lives in exists implicitly
    (as ``kubectl apply`` of a namespaced object needs it, made here for convenience).
    ``nodes``: the cluster's (a DaemonSet's pods, one per node). ``memo``, kept by a
    caller between passes over the same (unchanged, not mutated) body objects, spares
    parsing again each Pod and Service seen before — a pass then costs what changed."""
    seen: Memo = {}
    old = memo if memo is not None else {}
    keyed = []
    for body in bodies:
        hit = old.get(id(body))
        if hit is None or hit[0] is not body:
            key = key_of(body)
            hit = (body, key, None, (key.kind, key.namespace, key.name))
        seen[id(body)] = hit
        keyed.append(hit)
    keyed.sort(key=lambda h: h[3])   # Key's order, compared in C
    out = Desired()
    for body, key, parsed, _ in keyed:
        if parsed is not None and key.kind == "Service":   # seen before: nothing to read again
            out.namespaces.setdefault(key.namespace, {})
            out.services[(key.namespace, key.name)] = parsed
            continue
        meta, spec = body.get("metadata") or {}, body.get("spec") or {}
        if key.namespace:
            out.namespaces.setdefault(key.namespace, {})
        if key.kind == "Namespace":
            out.namespaces[key.name] = dict(meta.get("labels") or {})
        elif key.kind == "Pod":
            if parsed is None:
                parsed = _pod(key.namespace, key.name, meta, spec, body.get("status"))
                seen[id(body)] = (body, key, parsed, seen[id(body)][3])
            out.pods[(key.namespace, key.name)] = parsed
        elif key.kind in workloads.KINDS:
            try:
                pods = workloads.expand(key.kind, key.namespace, key.name, spec, nodes, _pod)
            except workloads.WorkloadError as exc:
                raise ManifestError(f"{key}: {exc}") from None
            for pod in pods:
                out.pods[(key.namespace, pod.name)] = pod
        elif key.kind == "Service":
            if parsed is None:
                parsed = _service(key, spec)
                seen[id(body)] = (body, key, parsed, seen[id(body)][3])
            out.services[(key.namespace, key.name)] = parsed
        elif key.kind == "Endpoints":   # only ``addresses``: ``notReadyAddresses`` are no endpoints
            out.endpoints[(key.namespace, key.name)] = [
                (addr["ip"], {p.get("name") or "": int(p["port"]) for p in subset.get("ports") or []})
                for subset in body.get("subsets") or [] for addr in subset.get("addresses") or []]
        elif key.kind == "NetworkPolicy":
            out.policies.append(dict(body))
        elif key.kind == "ConfigMap":
            out.configmaps[(key.namespace, key.name)] = {k: str(v) for k, v in (body.get("data") or {}).items()}
        elif key.kind == "Secret":
            try:
                out.secrets[(key.namespace, key.name)] = secret_data(body)
            except EnvError as exc:
                raise ManifestError(f"{key}: {exc}") from None
    if memo is not None:
        memo.clear()
        memo.update(seen)
    return out


def _pod(namespace: str, name: str, meta: Mapping[str, Any], spec: Mapping[str, Any],
         status: Mapping[str, Any] | None = None) -> PodWant:
    ports = {p["name"]: int(p["containerPort"]) for c in spec.get("containers") or []
             for p in c.get("ports") or [] if p.get("name")}
    runtime = (meta.get("annotations") or {}).get(RUNTIME_ANNOTATION)
    if runtime is not None and runtime not in RUNTIMES:
        raise ManifestError(f"Pod/{namespace}/{name}: annotation {RUNTIME_ANNOTATION}={runtime!r} is not one of "
                            f"{', '.join(RUNTIMES)}")
    try:
        pod = parse_spec(spec)
    except (EnvError, SpecError, KeyError) as exc:
        raise ManifestError(f"Pod/{namespace}/{name}: {exc}") from None
    return PodWant(namespace, name, dict(meta.get("labels") or {}), ports, spec.get("nodeName"), runtime,
                   pod.containers, dict(meta.get("annotations") or {}), meta.get("uid"),
                   spec.get("serviceAccountName") or spec.get("serviceAccount") or "default", ready(status),
                   pod.init, pod.restart, pod.volumes, pod.refused, pod.ignored)


def ready(status: Mapping[str, Any] | None) -> bool:
    """Whether a pod is a ready endpoint. A pod whose status has conditions (a kubelet
    reports on it: the API server's pods) is ready while its ``Ready`` condition is
    ``True``, as Kubernetes' endpoints controller has it. One without any (netbay runs it
    itself, from a manifest; or none reported yet) is ready: its port plugged into its
    sandbox is all netbay knows of it, and no port, no endpoint."""
    conditions = (status or {}).get("conditions") or []
    if not conditions:
        return True
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _service(key: Key, spec: Mapping[str, Any]) -> ServiceWant:
    cluster_ips = tuple(str(ip) for ip in spec.get("clusterIPs") or ())
    cluster_ip = spec.get("clusterIP") or (cluster_ips[0] if cluster_ips else None)
    if cluster_ips and cluster_ips[0] != cluster_ip:
        raise ManifestError(f"{key}: spec.clusterIPs[0] {cluster_ips[0]!r} must be spec.clusterIP {cluster_ip!r}")
    for ip in cluster_ips or ((cluster_ip,) if cluster_ip else ()):
        if ip != "None":
            try:
                ipaddress.ip_address(ip)
            except ValueError:
                raise ManifestError(f"{key}: spec.clusterIP {ip!r} is not an IPv4 or IPv6 address") from None
    ports = tuple(ServicePort(p.get("name") or "", (p.get("protocol") or "TCP").upper(), int(p["port"]),
                              p.get("targetPort") if p.get("targetPort") is not None else int(p["port"]),
                              p.get("nodePort"))
                  for p in spec.get("ports") or [])
    for p in ports:
        if p.protocol not in SERVICE_PROTOCOLS:
            raise ManifestError(f"{key}: protocol {p.protocol} is not supported ({', '.join(SERVICE_PROTOCOLS)})")
    selector = spec.get("selector")
    return ServiceWant(key.namespace, key.name, spec.get("type") or "ClusterIP", cluster_ip, ports,
                       dict(selector) if selector else None, tuple(spec.get("externalIPs") or ()),
                       spec.get("loadBalancerIP"), bool(spec.get("publishNotReadyAddresses")),
                       tuple(str(f) for f in spec.get("ipFamilies") or ()), spec.get("ipFamilyPolicy"),
                       cluster_ips or ((cluster_ip,) if cluster_ip else ()))


def selects(selector: Mapping[str, str] | None, labels: Mapping[str, str]) -> bool:
    """A Service's equality selector (an empty or absent one selects nothing)."""
    return bool(selector) and all(labels.get(k) == v for k, v in (selector or {}).items())


def endpoint(svc: ServiceWant, pod: PodWant) -> bool:
    """Whether the pod is one of the Service's endpoints (given a port): selected, and
    ready unless the Service publishes not-ready addresses."""
    return pod.namespace == svc.namespace and selects(svc.selector, pod.labels) and \
        (pod.ready or svc.publish_not_ready)
