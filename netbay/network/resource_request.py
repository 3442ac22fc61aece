"""A port's ``resource_request`` (``port-resource-request`` and
``port-resource-request-groups``): what Placement would be asked to guarantee for it,
from the minimum-bandwidth rules of its QoS policy (the port's, else its network's).

Shaped as Neutron's QoS plugin shapes it (``_extend_port_resource_request``): null
without such rules; else one request group whose id is uuid5 of the port's id and the
rules' ids, requiring the tunnel trait (netbay's networks are VXLAN: no physnet) and
the port's vnic type, with one ``NET_BW_*_KILOBIT_PER_SEC`` resource per direction.
netbay has no minimum-packet-rate rules, so that group never appears. Read-only, and
shown to admins only (Neutron's ``get_port:resource_request``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.store.models import QosRule

TUNNEL_TRAIT = "CUSTOM_NETWORK_TUNNEL_PROVIDER"   # neutron-lib's TRAIT_NETWORK_TUNNEL
_RESOURCE_CLASS = {"egress": "NET_BW_EGR_KILOBIT_PER_SEC", "ingress": "NET_BW_IGR_KILOBIT_PER_SEC"}
_MINIMUM = select(QosRule.policy_id, QosRule.id, QosRule.direction, QosRule.min_kbps).where(
    QosRule.type == "minimum_bandwidth").order_by(QosRule.id)


def minimum_rules(session: Session, policy_ids: Iterable[str]) -> dict[str, list[Any]]:
    """Each policy's minimum-bandwidth rules (id order), one query per 500 policies:
    what a list of ports renders its ``resource_request`` from, not one query a port."""
    wanted = sorted(set(policy_ids))
    found: dict[str, list[Any]] = {p: [] for p in wanted}
    for start in range(0, len(wanted), 500):
        rows = session.execute(_MINIMUM.where(QosRule.policy_id.in_(wanted[start:start + 500])))
        for row in rows:
            found[row.policy_id].append(row)
    return found


def resource_request(session: Session, port_id: str, policy_id: str | None,
                     vnic_type: str = "normal", rules: list[Any] | None = None) -> dict[str, Any] | None:
    """The port's resource request under ``policy_id`` (its own policy, else its network's);
    ``rules``: that policy's minimum-bandwidth rules when already read (:func:`minimum_rules`)."""
    if policy_id is None:
        return None
    if rules is None:
        rules = minimum_rules(session, [policy_id])[policy_id]
    if not rules:
        return None
    group_id = str(uuid.uuid5(uuid.UUID(port_id), ":".join(r.id for r in rules)))
    group = {"id": group_id, "required": [TUNNEL_TRAIT, f"CUSTOM_VNIC_TYPE_{vnic_type.upper()}"],
             "resources": {_RESOURCE_CLASS[r.direction]: r.min_kbps for r in rules}}
    return {"request_groups": [group], "same_subtree": [group_id]}
