"""What a cluster is made of, for people and for Heat: the HOT export of its graph and
the executor's record of each resource (the CLI's live progress view reads it)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.coe.common import timestamp
from netbay.store.models import Cluster, ClusterTemplate, CoeStack, CoeStackResource


def export(session: Session, cluster: Cluster) -> dict[str, Any]:
    """The cluster's graph as a Heat template and its parameter values, composed from
    what is stored now (so a real Heat can build the same cluster)."""
    from netbay.coe.compose import build
    from netbay.coe.conductor import composition_inputs
    from netbay.coe.hot import to_hot

    inputs = composition_inputs(session, cluster, session.get(ClusterTemplate, cluster.cluster_template_id))
    template, parameters = to_hot(build(inputs["template"], inputs["cluster"]))
    return {"template": template, "parameters": parameters}


def resources(session: Session, cluster: Cluster) -> dict[str, Any]:
    """The stack's operation and every resource as the executor last recorded it."""
    stack = session.scalars(select(CoeStack).where(CoeStack.cluster_id == cluster.id)
                            .order_by(CoeStack.created_at.desc())).first()
    if stack is None:
        return {"stack": None, "resources": []}
    rows = session.scalars(select(CoeStackResource).where(CoeStackResource.stack_id == stack.id)
                           .order_by(CoeStackResource.seq, CoeStackResource.name))
    return {
        "stack": {"id": stack.id, "action": stack.action, "status": stack.status,
                  "status_reason": stack.status_reason, "updated_at": timestamp(stack.updated_at)},
        "resources": [{"name": r.name, "type": r.type, "physical_id": r.physical_id, "status": r.status,
                       "status_reason": r.status_reason, "depends_on": list(r.depends_on or [])}
                      for r in rows],
    }
