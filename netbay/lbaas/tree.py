"""Claiming a load balancer's tree before a change in it, as Octavia does.

A change to a listener, pool, member or health monitor first claims the load
balancer (409 while it is ``PENDING_*``) and marks it, the listeners the
change reaches and the pool it is in ``PENDING_UPDATE``; the realizer's status
report settles them again. ``Claim.log`` records those updates after the
child's own change, so a follower of the change stream sees the child first.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from netbay.lbaas.common import ACTIVE, PENDING_UPDATE, handle, immutable
from netbay.lbaas.loadbalancers import LOADBALANCERS
from netbay.store.models import LBListener, LBPool, LoadBalancer

# session.info key: the load balancer being populated (its children skip the claim).
POPULATING = "netbay.lbaas.populating"


def populating(session: Session, lb_id: str) -> bool:
    """Inside :func:`netbay.lbaas.populate.populate` of ``lb_id``: the whole tree is new."""
    return session.info.get(POPULATING) == lb_id



@dataclass
class Claim:
    lb: LoadBalancer
    listeners: list[LBListener] = field(default_factory=list)
    pool: LBPool | None = None
    logged: bool = True

    def log(self, session: Session) -> None:
        if not self.logged:
            return
        for listener in self.listeners:
            handle(LBListener).record(session, listener, "update")
        if self.pool is not None:
            handle(LBPool).record(session, self.pool, "update")
        LOADBALANCERS.record(session, self.lb, "update")


def claim(session: Session, lb_id: str, *, listeners: Iterable[LBListener] = (),
          pool: LBPool | None = None, pool_must_be_active: bool = False) -> Claim:
    """Refuse (409) unless the load balancer (and, for members and monitors, the pool)
    is settled; then mark what the change reaches ``PENDING_UPDATE``. Pass only
    objects that survive the change (not the one being deleted). Inside a fully
    populated create the whole tree is new and ``PENDING_CREATE``: nothing to claim."""
    if populating(session, lb_id):
        return Claim(session.get_one(LoadBalancer, lb_id), [], None, logged=False)
    if pool is not None and pool_must_be_active and pool.provisioning_status != ACTIVE:
        raise immutable("Pool", pool.id)
    lb = LOADBALANCERS.claim(session, lb_id)
    touched = []
    for listener in listeners:
        listener.provisioning_status = PENDING_UPDATE
        LOADBALANCERS.touch(listener)
        touched.append(listener)
    if pool is not None:
        pool.provisioning_status = PENDING_UPDATE
        LOADBALANCERS.touch(pool)
    return Claim(lb, touched, pool)
