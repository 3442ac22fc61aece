"""A container's environment as a kubelet builds it: ``env``, ``envFrom``, ``valueFrom``
and ``$(VAR)`` expansion (kubelet's ``makeEnvironmentVariables`` and the expansion
package it forks from Go's ``os.Expand``).

Parsed once from the manifest (:func:`parse_env`: what the API server's validation
refuses is refused here, before the object is stored) and resolved when the
container is created (:func:`launch`): the pod's address exists only once its port
does, and a ConfigMap changed later reaches new pods, not running ones — as in
Kubernetes. What cannot be resolved (a ConfigMap, Secret or key missing and not
``optional``) is a :class:`ConfigError`: that pod's ``CreateContainerConfigError``,
its neighbours unaffected.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*\Z")   # validation.IsEnvVarName
CONFIG_KEY = re.compile(r"[-._a-zA-Z0-9]+\Z")            # validation.IsConfigMapKey
ENV_NAME_HELP = ("a valid environment variable name must consist of alphabetic characters, digits, '_', '-', "
                 "or '.', and must not start with a digit")
# The fieldRef paths the API server accepts in a container's env (validEnvDownwardAPIFieldPathExpressions).
FIELD_PATHS = ("metadata.name", "metadata.namespace", "metadata.uid", "spec.nodeName", "spec.serviceAccountName",
               "status.hostIP", "status.hostIPs", "status.podIP", "status.podIPs")
SUBSCRIPTED = re.compile(r"metadata\.(labels|annotations)\['([^']+)'\]\Z")
UNSUPPORTED_SOURCES = ("resourceFieldRef", "fileKeyRef")
KINDS = {"configMapKeyRef": "ConfigMap", "secretKeyRef": "Secret", "configMapRef": "ConfigMap",
         "secretRef": "Secret"}


class EnvError(ValueError):
    """An env entry the API server would refuse; ``str()`` names its field path."""


class ConfigError(RuntimeError):
    """A container whose environment cannot be made (kubelet: CreateContainerConfigError);
    ``str()`` is kubelet's message."""


@dataclass(frozen=True)
class KeyRef:
    """A ConfigMap or Secret (``kind``) by name; ``key``: one of its keys (None: all, envFrom)."""
    kind: str
    name: str
    key: str | None = None
    optional: bool = False


@dataclass(frozen=True)
class EnvVar:
    """One ``env`` entry: a plain value (expanded), a ``fieldRef`` path, or a key reference."""
    name: str
    value: str = ""
    field_path: str | None = None
    ref: KeyRef | None = None


@dataclass(frozen=True)
class EnvFrom:
    ref: KeyRef
    prefix: str = ""


@dataclass(frozen=True)
class PodFacts:
    """What a ``fieldRef`` can read of a pod, known at container start."""
    name: str
    namespace: str
    uid: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    node: str = ""
    service_account: str = "default"
    host_ips: tuple[str, ...] = ()
    pod_ips: tuple[str, ...] = ()


@dataclass(frozen=True)
class Launch:
    """What the container is created with; ``warnings``: kubelet's Warning events."""
    environment: dict[str, str]
    command: list[str] | None
    args: list[str] | None
    warnings: tuple[str, ...] = ()


# --- $(VAR) expansion ---------------------------------------------------------------------------


def expand(text: str, lookup: Callable[[str], str | None]) -> str:
    """Kubernetes' ``$(VAR)`` expansion: a known name is replaced, an unknown one stays as
    written, ``$$`` is one ``$`` (so ``$$(VAR)`` is the literal ``$(VAR)``), a ``$``
    followed by anything else is kept, an unclosed ``$(`` too."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch != "$" or i + 1 == n:
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            close = text.find(")", i + 2)
            if close < 0:
                out.append("$(")
                i += 2
            else:
                name = text[i + 2:close]
                value = lookup(name)
                out.append(f"$({name})" if value is None else value)
                i = close + 1
        else:
            out.append("$" + nxt)
            i += 2
    return "".join(out)


def escape(text: str) -> str:
    """``text`` as a value :func:`expand` gives back unchanged."""
    return text.replace("$", "$$")


# --- parsing (the API server's validation of env and envFrom) -----------------------------------


def parse_env(container: Mapping[str, Any], where: str) -> tuple[tuple[EnvVar, ...], tuple[EnvFrom, ...]]:
    """A container's ``env`` and ``envFrom``; ``where``: its field path
    (``spec.containers[0]``), for the messages."""
    env = tuple(_env_var(e, f"{where}.env[{i}]") for i, e in enumerate(container.get("env") or []))
    env_from = tuple(_env_from(e, f"{where}.envFrom[{i}]") for i, e in enumerate(container.get("envFrom") or []))
    return env, env_from


def _env_var(e: Mapping[str, Any], path: str) -> EnvVar:
    name = e.get("name") or ""
    if not name:
        raise EnvError(f"{path}.name: Required value")
    if not ENV_NAME.match(name):
        raise EnvError(f"{path}.name: Invalid value: {name!r}: {ENV_NAME_HELP}")
    value, source = e.get("value") or "", e.get("valueFrom")
    if source is None:
        return EnvVar(name, str(value))
    path += ".valueFrom"
    if value:
        raise EnvError(f"{path}: Invalid value: may not be specified when `value` is not empty")
    given = [k for k, v in source.items() if v is not None]
    for k in given:
        if k in UNSUPPORTED_SOURCES:
            raise EnvError(f"{path}.{k}: not supported by netbay's pods (fieldRef, configMapKeyRef and "
                           "secretKeyRef are)")
    if len(given) != 1:
        raise EnvError(f"{path}: Invalid value: " + ("may not have more than one field specified at a time"
                       if given else "must specify one of: `fieldRef`, `configMapKeyRef` or `secretKeyRef`"))
    kind = given[0]
    if kind == "fieldRef":
        return EnvVar(name, field_path=_field_path(source[kind], f"{path}.fieldRef"))
    if kind not in ("configMapKeyRef", "secretKeyRef"):
        raise EnvError(f"{path}.{kind}: not a source of an environment variable")
    return EnvVar(name, ref=_key_ref(source[kind], kind, f"{path}.{kind}", keyed=True))


def _field_path(ref: Mapping[str, Any], path: str) -> str:
    version = ref.get("apiVersion") or "v1"
    if version != "v1":
        raise EnvError(f"{path}.apiVersion: Unsupported value: {version!r}: supported values: \"v1\"")
    fp = ref.get("fieldPath") or ""
    if not fp:
        raise EnvError(f"{path}.fieldPath: Required value")
    if fp not in FIELD_PATHS and not SUBSCRIPTED.match(fp):
        supported = ", ".join(f'"{p}"' for p in ("metadata.annotations", "metadata.labels", *FIELD_PATHS))
        raise EnvError(f"{path}.fieldPath: Unsupported value: {fp!r}: supported values: {supported} "
                       "(metadata.labels and metadata.annotations with a ['key'] subscript)")
    return fp


def _key_ref(ref: Mapping[str, Any], kind: str, path: str, keyed: bool) -> KeyRef:
    name = ref.get("name") or ""
    if not name:
        raise EnvError(f"{path}.name: Required value")
    key = None
    if keyed:
        key = ref.get("key") or ""
        if not key:
            raise EnvError(f"{path}.key: Required value")
        if not CONFIG_KEY.match(key):
            raise EnvError(f"{path}.key: Invalid value: {key!r}: a valid config key must consist of "
                           "alphanumeric characters, '-', '_' or '.'")
    return KeyRef(KINDS[kind], name, key, bool(ref.get("optional")))


def _env_from(e: Mapping[str, Any], path: str) -> EnvFrom:
    given = [k for k in ("configMapRef", "secretRef") if e.get(k) is not None]
    if len(given) != 1:
        raise EnvError(f"{path}: Invalid value: " + ("may not have more than one field specified at a time"
                       if given else "must specify one of: `configMapRef` or `secretRef`"))
    prefix = e.get("prefix") or ""
    if prefix and not ENV_NAME.match(prefix):
        raise EnvError(f"{path}.prefix: Invalid value: {prefix!r}: {ENV_NAME_HELP}")
    return EnvFrom(_key_ref(e[given[0]], given[0], f"{path}.{given[0]}", keyed=False), prefix)


def secret_data(body: Mapping[str, Any]) -> dict[str, str]:
    """A Secret's keys as its consumers read them: ``data`` base64-decoded, ``stringData``
    over it (the API server merges it into ``data`` on write)."""
    out = {}
    for k, v in (body.get("data") or {}).items():
        try:
            out[k] = base64.b64decode(str(v), validate=True).decode("utf-8", errors="replace")
        except (binascii.Error, ValueError):
            raise EnvError(f"data[{k}]: Invalid value: not base64") from None
    out.update({k: str(v) for k, v in (body.get("stringData") or {}).items()})
    return out


# --- resolution at container start ---------------------------------------------------------------


def field_value(path: str, pod: PodFacts) -> str:
    sub = SUBSCRIPTED.match(path)
    if sub:
        return (pod.labels if sub.group(1) == "labels" else pod.annotations).get(sub.group(2), "")
    return {"metadata.name": pod.name, "metadata.namespace": pod.namespace, "metadata.uid": pod.uid,
            "spec.nodeName": pod.node, "spec.serviceAccountName": pod.service_account,
            "status.hostIP": pod.host_ips[0] if pod.host_ips else "", "status.hostIPs": ",".join(pod.host_ips),
            "status.podIP": pod.pod_ips[0] if pod.pod_ips else "", "status.podIPs": ",".join(pod.pod_ips)}[path]


def launch(env: Iterable[EnvVar], env_from: Iterable[EnvFrom], command: Iterable[str] | None,
           args: Iterable[str] | None, pod: PodFacts, configmaps: Mapping[tuple[str, str], Mapping[str, str]],
           secrets: Mapping[tuple[str, str], Mapping[str, str]], service_env: Mapping[str, str]) -> Launch:
    """The container's environment, command and args (kubelet's order: envFrom, then env
    over it, each value expanded with what came before and the Service variables; then
    the Service variables nothing set; command and args expanded with all of it)."""
    stores = {"ConfigMap": configmaps, "Secret": secrets}
    noun = {"ConfigMap": "configmap", "Secret": "secret"}

    def source(ref: KeyRef) -> Mapping[str, str] | None:
        found = stores[ref.kind].get((pod.namespace, ref.name))
        if found is None and not ref.optional:
            raise ConfigError(f'{noun[ref.kind]} "{ref.name}" not found')
        return found

    values: dict[str, str] = {}
    warnings = []
    for ef in env_from:
        data = source(ef.ref)
        if data is None:
            continue
        invalid = []
        for k, v in data.items():
            name = ef.prefix + k
            if ENV_NAME.match(name):
                values[name] = v
            else:
                invalid.append(name)
        if invalid:
            warnings.append(f"InvalidEnvironmentVariableNames: Keys {', '.join(sorted(invalid))} from the EnvFrom "
                            f"{noun[ef.ref.kind]} {pod.namespace}/{ef.ref.name} were skipped since they are "
                            "considered invalid environment variable names.")

    def lookup(name: str) -> str | None:
        return values.get(name, service_env.get(name))

    for e in env:
        if e.field_path is not None:
            values[e.name] = field_value(e.field_path, pod)
        elif e.ref is not None:
            data = source(e.ref)
            if data is None:
                continue
            if e.ref.key not in data:
                if e.ref.optional:
                    continue
                raise ConfigError(f"couldn't find key {e.ref.key} in {e.ref.kind} {pod.namespace}/{e.ref.name}")
            values[e.name] = data[e.ref.key]
        else:
            values[e.name] = expand(e.value, lookup)
    environment = {**service_env, **values}

    def expanded(items: Iterable[str] | None) -> list[str] | None:
        return None if items is None else [expand(s, environment.get) for s in items]
    return Launch(environment, expanded(command), expanded(args), tuple(warnings))


__all__ = ["ConfigError", "EnvError", "EnvFrom", "EnvVar", "KeyRef", "Launch", "PodFacts", "escape", "expand",
           "launch", "parse_env", "secret_data"]
