"""Octavia's load balancer failover: rebuild what realizes it, keep what it is.

Octavia replaces a load balancer's amphorae; here the dataplane agent deletes the
load balancer's namespace (with its VIP leg) and builds it again from the stored
tree: same id, same VIP address and port. The request leaves the load balancer
``PENDING_UPDATE`` and records a ``failover`` change, which the agent follows;
its status report settles it ``ACTIVE`` again. Octavia's default policy allows it
to admins only.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.lbaas.common import PENDING, PENDING_UPDATE, forbidden, pending_state
from netbay.lbaas.loadbalancers import LOADBALANCERS
from netbay.store.models import LoadBalancer


def failover(session: Session, ctx: Context, lb_id: str) -> LoadBalancer:
    lb = LOADBALANCERS.get(session, ctx, lb_id, for_update=True)
    if not ctx.is_admin:
        raise forbidden()
    if lb.provisioning_status in PENDING:
        raise pending_state(lb.provisioning_status, lb.id)
    lb.provisioning_status = PENDING_UPDATE
    LOADBALANCERS.touch(lb)
    LOADBALANCERS.record(session, lb, "failover")
    return lb


__all__ = ["failover"]
