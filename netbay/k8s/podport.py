"""Which port is a pod's: the one convention the mapping controller makes pods' ports
by and the CNI daemon finds them by, so the kubelet's CNI call plugs the port the
controller made (kuryr-kubernetes' CNI plugs the VIF its controller annotated the pod
with) instead of making a second one.

A pod's port is ``device_owner=compute:kuryr`` with ``device_id`` derived from the
cluster, namespace and name (stable across a controller's crashes, computable without
the pod's UID); when the controller knows the pod's UID (the API-server source) it
records it as the tag :func:`uid_tag`, so a CNI call for a newer pod of the same name
is told apart. kuryr-kubernetes' own ports have the pod's UID as ``device_id``: the
CNI daemon accepts those too (:func:`device_ids`). Standard library only.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

POD_OWNER = "compute:kuryr"
POD_NS = uuid.UUID("6c1e3f3a-8f0e-4b52-9a55-6b7572797200")  # device ids: uuid5(cluster/ns/pod)
UID_TAG = "netbay-k8s-uid="


def cluster_tag(cluster_id: str) -> str:
    """The tag on everything made for (or by the builder of) a kuryr cluster."""
    return f"netbay-cluster={cluster_id}"


def device_id(cluster_id: str, namespace: str, name: str) -> str:
    """The ``device_id`` of the port the controller makes for pod ``namespace/name``."""
    return str(uuid.uuid5(POD_NS, f"{cluster_id}/{namespace}/{name}"))


def uid_tag(uid: str) -> str:
    return f"{UID_TAG}{uid}"


def uid_of(port: Mapping[str, Any]) -> str | None:
    """The pod UID the controller recorded on the port (None: it knew none)."""
    return next((t[len(UID_TAG):] for t in port.get("tags") or () if t.startswith(UID_TAG)), None)


def with_uid(tags: list[str], uid: str) -> list[str]:
    """``tags`` with ``uid`` as the one recorded pod UID."""
    return sorted({t for t in tags if not t.startswith(UID_TAG)} | {uid_tag(uid)})


def device_ids(cluster_id: str, namespace: str, name: str, uid: str | None) -> list[str]:
    """The device ids a pod's port may have, in the order to look: the controller's,
    then (given the UID) kuryr-kubernetes' own."""
    return [device_id(cluster_id, namespace, name), *([uid] if uid else [])]


def other_pod(port: Mapping[str, Any], uid: str | None) -> str | None:
    """The UID of the pod the port was made for, when that is not ``uid`` (a pod
    deleted and made again under its name, before the controller caught up)."""
    recorded = uid_of(port)
    return recorded if uid and recorded and recorded != uid else None


__all__ = ["POD_NS", "POD_OWNER", "cluster_tag", "device_id", "device_ids", "other_pod", "uid_of", "uid_tag",
           "with_uid"]
