"""Workload kinds → the pods they want, as their Kubernetes controllers name them.

Each is expanded from its template (read once, checked even at 0 replicas):
Deployment, ReplicaSet and ReplicationController → ``<name>-<i>`` for ``replicas``;
StatefulSet → ``<name>-<ordinal>``, stable, each (``OrderedReady``, the default)
started only once its predecessor runs (:attr:`PodWant.after`); DaemonSet → one pod
per node of the cluster, ``<name>-<node>`` on that node (masters only where there
are no workers, as their taint keeps DaemonSets off them); Job → ``<name>-<i>`` for
``completions`` (unset: ``parallelism`` pods, a work queue), at most ``parallelism``
(default 1) of them made and unfinished at once (:attr:`PodWant.parallelism`: the
runtime holds back the rest until earlier ones finish), restartPolicy ``Never`` or
``OnFailure`` (the API server's rule), a pod's failures bounded by ``backoffLimit``
(:attr:`PodWant.backoff_limit`).

Scaling is this expansion done again: the pods beyond the new count are no longer
wanted, and the controller's pass deletes them as it deletes any pod.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

KINDS = ("Deployment", "ReplicaSet", "ReplicationController", "StatefulSet", "DaemonSet", "Job")
JOB_BACKOFF_LIMIT = 6   # Kubernetes' default backoffLimit


class WorkloadError(ValueError):
    """A workload the API server would refuse; ``str()`` says why."""


def expand(kind: str, namespace: str, name: str, spec: Mapping[str, Any], nodes: Sequence[str],
           make_pod: Callable[..., Any]) -> list[Any]:
    """The PodWants of one workload; ``make_pod(namespace, name, meta, spec, default_restart=)``
    parses the template (:func:`netbay.k8s.objects._pod`)."""
    template = spec.get("template") or {}
    meta, pod_spec = template.get("metadata") or {}, template.get("spec") or {}
    owner = f"{kind}/{name}"
    if kind == "Job":
        if pod_spec.get("restartPolicy") not in ("Never", "OnFailure"):
            raise WorkloadError(f"spec.template.spec.restartPolicy: Required value: a Job's pods restart "
                                f"Never or OnFailure, not {pod_spec.get('restartPolicy') or 'Always'}")
        first = make_pod(namespace, f"{name}-0", meta, pod_spec)
        limit = JOB_BACKOFF_LIMIT if spec.get("backoffLimit") is None else int(spec["backoffLimit"])
        parallelism = 1 if spec.get("parallelism") is None else int(spec["parallelism"])
        if parallelism < 0 or (spec.get("completions") is not None and int(spec["completions"]) < 0):
            raise WorkloadError("spec.parallelism, spec.completions: Invalid value: must be greater than or "
                                "equal to 0")
        # completions unset: a work queue, its ``parallelism`` pods at once (each one's success counted)
        count = parallelism if spec.get("completions") is None else int(spec["completions"])
        return [dataclasses.replace(first, name=f"{name}-{i}", owner=owner, backoff_limit=limit,
                                    parallelism=parallelism)
                for i in range(count)]
    first = make_pod(namespace, f"{name}-0", meta, pod_spec)
    if first.restart != "Always":
        raise WorkloadError(f"spec.template.spec.restartPolicy: Unsupported value: {first.restart!r}: "
                            f"a {kind}'s pods restart Always")
    if kind == "DaemonSet":
        workers = [n for n in nodes if "master" not in n] or list(nodes)
        return [dataclasses.replace(first, name=f"{name}-{node}", node=node, owner=owner) for node in workers]
    replicas = 1 if spec.get("replicas") is None else int(spec["replicas"])
    ordered = kind == "StatefulSet" and (spec.get("podManagementPolicy") or "OrderedReady") == "OrderedReady"
    return [dataclasses.replace(first, name=f"{name}-{i}", owner=owner,
                                after=f"{name}-{i - 1}" if ordered and i else None)
            for i in range(replicas)]


__all__ = ["KINDS", "WorkloadError", "expand"]
