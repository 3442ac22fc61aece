"""The desired state: the Kubernetes objects a source handed over, per cluster.

Written before anything is realized, in one transaction per apply or delete, so a
controller killed mid-apply resumes from here (``resync``) instead of from what
happened to be made.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import delete, select

from netbay.k8s.objects import Key, key_of
from netbay.store.db import Store
from netbay.store.models import K8sObject, utcnow


def put(store: Store, cluster_id: str, bodies: Iterable[Mapping[str, Any]]) -> list[Key]:
    """Insert or replace each object; returns their keys."""
    items = [(key_of(b), dict(b)) for b in bodies]

    def write(s: Any) -> None:
        for key, body in items:
            row = s.get(K8sObject, (cluster_id, key.kind, key.namespace, key.name))
            if row is None:
                s.add(K8sObject(cluster_id=cluster_id, kind=key.kind, namespace=key.namespace,
                                name=key.name, body=body, updated_at=utcnow()))
            else:
                row.body, row.updated_at = body, utcnow()
    store.retrying(write)
    return [k for k, _ in items]


def drop(store: Store, cluster_id: str, keys: Iterable[Key]) -> None:
    keys = list(keys)

    def write(s: Any) -> None:
        for k in keys:
            s.execute(delete(K8sObject).where(K8sObject.cluster_id == cluster_id, K8sObject.kind == k.kind,
                                              K8sObject.namespace == k.namespace, K8sObject.name == k.name))
    store.retrying(write)


def drop_cluster(store: Store, cluster_id: str) -> None:
    store.retrying(lambda s: s.execute(delete(K8sObject).where(K8sObject.cluster_id == cluster_id)))


def load(store: Store, cluster_id: str) -> list[dict[str, Any]]:
    with store.read() as s:
        rows = s.scalars(select(K8sObject).where(K8sObject.cluster_id == cluster_id)).all()
        return [dict(r.body) for r in rows]
