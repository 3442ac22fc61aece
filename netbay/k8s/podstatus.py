"""A pod's status as a kubelet writes it, from its containers as the runtime has them.

``phase`` (Pending / Running / Succeeded / Failed), ``initContainerStatuses`` and
``containerStatuses`` with each container's ``state`` — ``running``, ``terminated``
(reason ``Completed``, ``Error`` or ``OOMKilled``, the exit code) or ``waiting``
(``PodInitializing``, ``ContainerCreating``, ``CrashLoopBackOff``) — and
:func:`display`, kubectl's STATUS column (``Init:0/1``, ``Init:Error``, ``Completed``…).
A pod of the ``sandbox`` runtime runs no process: its status says so (reason
``NetworkOnly``) instead of pretending containers. A Job's status counts its pods
(:func:`job`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from netbay.k8s import objects
from netbay.k8s.objects import Desired, PodWant
from netbay.k8s.podrun import INIT_RETRIES, Found, container_name
from netbay.runtime.labels import K8S_ATTEMPT as ATTEMPT

NETWORK_ONLY = ("the sandbox runtime runs no process: the pod is a network namespace on its port "
                "(annotation netbay.io/runtime: docker runs its containers)")


def container(name: str, image: str, inspect: Mapping[str, Any] | None, waiting: str = "PodInitializing") -> dict:
    """One ``containerStatuses`` entry (``inspect``: Docker's; None: not made yet)."""
    if inspect is None:
        return {"name": name, "image": image, "ready": False, "restartCount": 0,
                "state": {"waiting": {"reason": waiting}}}
    state, labels = inspect["State"], (inspect.get("Config") or {}).get("Labels") or {}
    restarts = int(inspect.get("RestartCount") or 0) + int(labels.get(ATTEMPT) or 0)
    out = {"name": name, "image": image, "containerID": f"docker://{inspect['Id']}", "restartCount": restarts,
           "ready": bool(state["Running"] and not state["Restarting"])}
    if state["Restarting"]:
        out["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
        out["lastState"] = {"terminated": _terminated(state)}
    elif state["Running"]:
        out["state"] = {"running": {"startedAt": state.get("StartedAt")}}
    elif state["Status"] == "created":
        out["state"] = {"waiting": {"reason": "ContainerCreating"}}
    else:
        out["state"] = {"terminated": _terminated(state)}
    return out


def _terminated(state: Mapping[str, Any]) -> dict:
    code = int(state.get("ExitCode") or 0)
    reason = "OOMKilled" if state.get("OOMKilled") else "Completed" if code == 0 else "Error"
    return {"exitCode": code, "reason": reason, "startedAt": state.get("StartedAt"),
            "finishedAt": state.get("FinishedAt")}


def docker_pod(pod: PodWant, found: Found, inspect: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The status of a Docker-runtime pod (``inspect``: its containers', by id)."""
    if pod.refused:
        return {"phase": "Pending", "reason": "Unsupported", "message": "; ".join(pod.refused),
                "containerStatuses": []}
    of = {**{("init", n): inspect.get(c["Id"]) for n, c in found.inits.items()},
          **{("app", n): inspect.get(c["Id"]) for n, c in found.apps.items()}}
    inits = [container(container_name(c, i), c.image, of.get(("init", container_name(c, i))))
             for i, c in enumerate(pod.init)]
    waiting = "PodInitializing" if pod.init else "ContainerCreating"
    apps = [container(container_name(c, i), c.image, of.get(("app", container_name(c, i))), waiting)
            for i, c in enumerate(pod.containers)]
    out: dict[str, Any] = {"initContainerStatuses": inits, "containerStatuses": apps}
    if found.sandbox is None:
        return {**out, "phase": "Pending"}
    failed = [s for s in inits if _code(s) not in (None, 0)]
    if failed:
        out["phase"] = "Failed" if pod.restart == "Never" else "Pending"
        exhausted = pod.restart != "Never" and failed[0]["restartCount"] >= INIT_RETRIES
        out["initReason"] = "Init:CrashLoopBackOff" if exhausted else "Init:Error"
        return out
    if any(_code(s) != 0 for s in inits):
        return {**out, "phase": "Pending"}
    codes = [_code(s) for s in apps]
    if any("waiting" in s["state"] and s["state"]["waiting"]["reason"] != "CrashLoopBackOff" for s in apps):
        out["phase"] = "Pending"
    elif any(c is None for c in codes):
        out["phase"] = "Running"
    elif all(c == 0 for c in codes):
        out["phase"] = "Succeeded" if pod.restart != "Always" else "Running"
    else:
        out["phase"] = "Failed" if pod.restart != "Always" else "Running"
    return out


def _code(status: Mapping[str, Any]) -> int | None:
    """The exit code of a terminated container (None: not terminated)."""
    term = status["state"].get("terminated")
    return None if term is None else int(term["exitCode"])


def sandbox_pod(plugged: bool) -> dict[str, Any]:
    """A ``sandbox``-runtime pod: Running once its namespace is plugged; no containers."""
    return {"phase": "Running" if plugged else "Pending", "reason": "NetworkOnly", "message": NETWORK_ONLY,
            "containerStatuses": []}


def display(status: Mapping[str, Any]) -> str:
    """kubectl's STATUS column for a pod's status."""
    if status.get("initReason"):
        return str(status["initReason"])
    if status.get("reason") and status.get("reason") != "NetworkOnly":
        return str(status["reason"])
    inits = status.get("initContainerStatuses") or []
    done = sum(_code(s) == 0 for s in inits)
    if done < len(inits):
        return f"Init:{done}/{len(inits)}"
    apps = status.get("containerStatuses") or []
    for s in apps:
        reason = (s["state"].get("waiting") or {}).get("reason")
        if reason:
            return str(reason)
    terminated = [s["state"]["terminated"]["reason"] for s in apps if "terminated" in s["state"]]
    if apps and len(terminated) == len(apps):
        return next((r for r in terminated if r != "Completed"), "Completed")
    return str(status.get("phase") or "Unknown")


def job(want: Desired, owner: str, statuses: Mapping[tuple[str, str], Mapping[str, Any]]) -> dict[str, Any]:
    """A Job's status (``owner``: ``Job/<name>``; ``statuses``: its pods'): ``succeeded``,
    ``failed`` (pods whose failures reached ``backoffLimit``), ``active`` (unfinished, at
    most ``parallelism``: the rest are not made yet), and the condition
    ``Complete`` once every completion succeeded or ``Failed`` (``BackoffLimitExceeded``)."""
    pods = [(pod, statuses.get(key) or {}) for key, pod in sorted(want.pods.items()) if pod.owner == owner]
    succeeded = sum(s.get("phase") == "Succeeded" for _, s in pods)
    failed = sum(s.get("phase") == "Failed" and max((c["restartCount"] for c in s.get("containerStatuses") or []),
                                                     default=0) >= (p.backoff_limit or 0) for p, s in pods)
    left = len(pods) - succeeded - failed   # at most ``parallelism`` of them made and running at once
    parallelism = pods[0][0].parallelism if pods and pods[0][0].parallelism is not None else left
    out: dict[str, Any] = {"succeeded": succeeded, "failed": failed, "active": min(left, parallelism)}
    if failed:
        out["conditions"] = [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]
    elif pods and succeeded == len(pods):
        out["conditions"] = [{"type": "Complete", "status": "True"}]
    return out


def of_cluster(ctrl: Any) -> dict[tuple[str, str], dict[str, Any]]:
    """Every pod of a controller's cluster (a :class:`netbay.k8s.controller.Controller`; a
    flannel or calico cluster's controller answers for its own pods)."""
    from netbay.k8s import desired

    if hasattr(ctrl, "pod_statuses"):   # netbay.k8s.nodecluster.NodeController
        return dict(ctrl.pod_statuses())

    want = objects.desired(desired.load(ctrl.store, ctrl.refs.cluster_id), ctrl.refs.nodes)
    out = ctrl.dockerpods.statuses(want)
    ports = {p["name"]: p for p in ctrl.net.list("port", tags=f"{ctrl.refs.tag},netbay-k8s=pod")}
    for (ns, name), pod in sorted(want.pods.items()):
        if (ns, name) in out:
            continue
        port = ports.get(f"{ns}/{name}")
        if pod.by_cni:
            out[(ns, name)] = {"phase": "Pending" if port is None else "Running", "reason": "NetworkOnly",
                               "message": "runtime cni: the node's kubelet runs its containers",
                               "containerStatuses": []}
        else:
            out[(ns, name)] = sandbox_pod(port is not None and ctrl.sandboxes.local
                                          and ctrl.sandboxes.plugged(port["id"]))
    return out


__all__ = ["NETWORK_ONLY", "container", "display", "docker_pod", "job", "of_cluster", "sandbox_pod"]
