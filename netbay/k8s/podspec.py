"""A pod spec's containers as a runtime runs them: every container and initContainer,
their volumes, and what a runtime cannot run as written.

Kubernetes' ``command`` is Docker's entrypoint and ``args`` its command; ``env`` and
``envFrom`` are kept as written and resolved when a container is made
(:func:`netbay.k8s.podenv.launch`). Of the volumes only ``emptyDir`` exists on the
Docker runtime (a Docker volume of the pod's, shared by the containers that mount
it): any other source is *refused* — the pod is not run and the report says why
(:func:`refusals`) — never silently dropped. Fields that change behaviour but that no
netbay runtime acts on (probes, lifecycle hooks, resource limits, security context…)
are *reported* as a warning when the pod's containers are made (:func:`ignored`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from netbay.k8s.podenv import EnvFrom, EnvVar, parse_env

RESTART_POLICIES = ("Always", "OnFailure", "Never")
# What the Docker runtime does as the manifest says; the rest is refused or reported.
CONTAINER_FIELDS = {"name", "image", "command", "args", "env", "envFrom", "ports", "imagePullPolicy",
                    "volumeMounts", "workingDir", "terminationMessagePath", "terminationMessagePolicy"}
POD_FIELDS = {"containers", "initContainers", "restartPolicy", "volumes", "nodeName", "serviceAccountName",
              "serviceAccount", "terminationGracePeriodSeconds", "dnsPolicy", "enableServiceLinks",
              "schedulerName", "automountServiceAccountToken", "priority"}
REFUSED_POD_FIELDS = ("hostNetwork", "hostPID", "hostIPC")   # a pod without its own namespace: no netbay pod


class SpecError(ValueError):
    """A pod spec the API server would refuse; ``str()`` names the field."""


@dataclass(frozen=True)
class Mount:
    volume: str          # an emptyDir of the pod
    path: str
    read_only: bool = False


@dataclass(frozen=True)
class ContainerWant:
    """One container of a pod, as a Docker-runtime pod runs it."""
    image: str
    command: tuple[str, ...] | None = None
    args: tuple[str, ...] | None = None
    env: tuple[EnvVar, ...] = ()
    env_from: tuple[EnvFrom, ...] = ()
    pull: str = "IfNotPresent"        # imagePullPolicy
    restart: str = "Always"           # the pod's restartPolicy
    name: str = ""
    working_dir: str | None = None
    mounts: tuple[Mount, ...] = ()


@dataclass(frozen=True)
class PodSpec:
    init: tuple[ContainerWant, ...]
    containers: tuple[ContainerWant, ...]
    restart: str
    volumes: tuple[str, ...]          # the emptyDir volumes' names
    refused: tuple[str, ...]          # why a runtime cannot run it as written (empty: it can)
    ignored: tuple[str, ...]          # what it runs without (reported)


def parse(spec: Mapping[str, Any], default_restart: str = "Always") -> PodSpec:
    """The spec's containers (raises :class:`SpecError` / ``EnvError`` as the API server would)."""
    restart = spec.get("restartPolicy") or default_restart
    if restart not in RESTART_POLICIES:
        raise SpecError(f"spec.restartPolicy: Unsupported value: {restart!r}: supported values: "
                        f"{', '.join(RESTART_POLICIES)}")
    refused: list[str] = []
    volumes: list[str] = []
    for i, v in enumerate(spec.get("volumes") or []):
        sources = sorted(k for k, val in v.items() if k != "name" and val is not None)
        if sources == ["emptyDir"]:
            volumes.append(v["name"])
        else:
            refused.append(f"spec.volumes[{i}] ({v.get('name')}): {'/'.join(sources) or 'no source'} is not "
                           "supported (emptyDir only)")
    refused += [f"spec.{f} is not supported (a pod has a network namespace of its own)"
                for f in REFUSED_POD_FIELDS if spec.get(f)]
    ignored = [f"spec.{f}" for f in sorted(spec) if f not in POD_FIELDS and f not in REFUSED_POD_FIELDS
               and spec[f] not in (None, [], {})]
    init = tuple(_container(c, f"spec.initContainers[{i}]", restart, volumes, refused, ignored)
                 for i, c in enumerate(spec.get("initContainers") or []))
    apps = tuple(_container(c, f"spec.containers[{i}]", restart, volumes, refused, ignored)
                 for i, c in enumerate(spec.get("containers") or []))
    names = [c.name for c in init + apps if c.name]
    if len(set(names)) != len(names):
        raise SpecError("spec.containers: Duplicate value: container names must be unique across "
                        "containers and initContainers")
    return PodSpec(init, apps, restart, tuple(volumes), tuple(refused), tuple(ignored))


def _container(c: Mapping[str, Any], where: str, restart: str, volumes: list[str], refused: list[str],
               ignored: list[str]) -> ContainerWant:
    env, env_from = parse_env(c, where)
    mounts = []
    for j, m in enumerate(c.get("volumeMounts") or []):
        if m.get("name") in volumes:
            mounts.append(Mount(m["name"], m["mountPath"], bool(m.get("readOnly"))))
        elif not any(m.get("name") in r for r in refused):   # an unknown volume: the API server's error
            raise SpecError(f"{where}.volumeMounts[{j}].name: Not found: {m.get('name')!r}")
    ignored += [f"{where}.{f}" for f in sorted(c) if f not in CONTAINER_FIELDS and c[f] not in (None, [], {})]
    return ContainerWant(c.get("image") or "", _strings(c.get("command")), _strings(c.get("args")), env, env_from,
                         c.get("imagePullPolicy") or "IfNotPresent", restart, c.get("name") or "",
                         c.get("workingDir"), tuple(mounts))


def _strings(value: Any) -> tuple[str, ...] | None:
    return None if value is None else tuple(str(v) for v in value)


__all__ = ["ContainerWant", "Mount", "PodSpec", "SpecError", "parse"]
