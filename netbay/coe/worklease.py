"""Cluster work leases: exactly one process builds, scales or deletes a cluster.

Several netbay processes may share one PostgreSQL. A process claims a cluster's work
by writing a lease row (its owner id and an expiry) and renews it while it works; the
lease goes in the transaction that writes the outcome. A process that dies (SIGKILL)
stops renewing: once its lease lapses, another process finds the cluster still
``*_IN_PROGRESS`` with no live lease and takes the work over; the executor's persisted
stack state lets it adopt what was made instead of making it twice.

Expiries are read from each process's own UTC clock: the processes share a host (or
NTP-synchronised hosts; a skew shortens or lengthens the takeover by as much).
"""

from __future__ import annotations

import logging
import os
import socket
import uuid
from datetime import timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from netbay.store.db import Store
from netbay.store.models import Cluster, WorkLease, utcnow_precise

log = logging.getLogger("netbay.conductor")

TTL = 6.0      # seconds a lease lasts unrenewed: a dead owner's work is taken over after at most TTL + SCAN
RENEW = 2.0    # how often an owner renews (three chances before the lease lapses)
SCAN = 1.0     # how often a process looks for work nobody holds


def owner_id() -> str:
    """This process, unique even when a PID is reused after a crash."""
    return f"{socket.gethostname()[:64]}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def claim(store: Store, cluster_id: str, owner: str, action: str, ttl: float = TTL) -> bool:
    """Take (or keep) the cluster's work for ``owner``; False while another owner's lease is live."""

    def take(s: Session) -> bool:
        now = utcnow_precise()
        expires = now + timedelta(seconds=ttl)
        lease = s.get(WorkLease, cluster_id, with_for_update=True)
        if lease is None:
            s.add(WorkLease(cluster_id=cluster_id, owner=owner, action=action, expires_at=expires, taken_at=now))
            s.flush()  # two first claims at once: the unique key decides, the loser retries and sees the row
            return True
        if lease.owner != owner:
            if lease.expires_at > now:
                return False
            log.warning("conductor: taking over the %s of cluster %s from %s (lease lapsed %.1f s ago)",
                        lease.action, cluster_id, lease.owner, (now - lease.expires_at).total_seconds())
            lease.takeovers += 1
            lease.taken_at = now
        lease.owner, lease.action, lease.expires_at = owner, action, expires
        return True

    return bool(store.retrying(take))


def renew(store: Store, owner: str, cluster_ids: list[str], ttl: float = TTL) -> None:
    """Push back the expiry of the leases ``owner`` holds on ``cluster_ids`` (its running work)."""
    if not cluster_ids:
        return

    def push(s: Session) -> None:
        s.execute(update(WorkLease).where(WorkLease.owner == owner, WorkLease.cluster_id.in_(cluster_ids))
                  .values(expires_at=utcnow_precise() + timedelta(seconds=ttl)))

    store.retrying(push)


def holds(session: Session, cluster_id: str, owner: str) -> bool:
    """Whether ``owner`` still holds the cluster's lease (in the caller's transaction, row locked)."""
    lease = session.get(WorkLease, cluster_id, with_for_update=True)
    return lease is not None and lease.owner == owner


def release(session: Session, cluster_id: str, owner: str) -> None:
    session.execute(delete(WorkLease).where(WorkLease.cluster_id == cluster_id, WorkLease.owner == owner))


def unclaimed(store: Store) -> list[tuple[str, str]]:
    """``(cluster id, action)`` of every cluster ``*_IN_PROGRESS`` that no live lease covers:
    work just asked for elsewhere, or left by a process that died."""
    now = utcnow_precise()
    with store.read() as s:
        rows = s.execute(
            select(Cluster.id, Cluster.status)
            .outerjoin(WorkLease, WorkLease.cluster_id == Cluster.id)
            .where(Cluster.status.like("%\\_IN\\_PROGRESS", escape="\\"))
            .where((WorkLease.cluster_id.is_(None)) | (WorkLease.expires_at <= now))
        )
        return [(cluster_id, status.split("_", 1)[0].lower()) for cluster_id, status in rows]


__all__ = ["RENEW", "SCAN", "TTL", "claim", "holds", "owner_id", "release", "renew", "unclaimed"]
