"""``/netbay/v1/pods``: create, list, show and delete pods on cluster nodes.

Neutron conventions as for sandboxes (``{"pod": {...}}`` bodies, filters such as
``?cluster_id=``, ``NeutronError`` bodies). Pods are also a status kind of
``PUT /netbay/v1/status`` (the agent reports them ``ACTIVE`` or ``ERROR``).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from netbay.api import status
from netbay.api.collections import Collection, mount
from netbay.api.network import parse_list_query
from netbay.api.network.bodies import parse_member
from netbay.coe import pods
from netbay.coe.pods import PODS

router = APIRouter(prefix="/netbay/v1", tags=["netbay"])
status.register("pods", pods.set_status)


def _create(s: Any, ctx: Any, body: Any) -> dict[str, Any]:
    return PODS.rendered(s, PODS.create(s, ctx, body))


mount(router, Collection(
    segment="pods", member="pod", key="pods", item_param="pod_id", query=parse_list_query,
    parse=lambda raw, method: parse_member(raw, PODS, method),
    list=PODS.list, show=PODS.show, create=_create, delete=PODS.delete))
