"""``/netbay/v1/sandboxes``: create, list, show and delete sandboxes.

Neutron conventions throughout (``{"sandbox": {...}}`` bodies, ``fields``,
filters, sorting and paging on lists, ``NeutronError`` bodies), so a client of
the network API needs nothing new to use it.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from netbay.api.collections import Collection, mount
from netbay.api.network import parse_list_query
from netbay.api.network.bodies import parse_member
from netbay.network.sandboxes import SANDBOXES

router = APIRouter(prefix="/netbay/v1", tags=["netbay"])


def _create(s: Any, ctx: Any, body: Any) -> dict[str, Any]:
    obj = SANDBOXES.create(s, ctx, body)
    s.flush()
    return SANDBOXES.render(s, obj, [])


mount(router, Collection(
    segment="sandboxes", member="sandbox", key="sandboxes", item_param="sandbox_id", query=parse_list_query,
    parse=lambda raw, method: parse_member(raw, SANDBOXES, method),
    list=SANDBOXES.list, show=SANDBOXES.show, create=_create, delete=SANDBOXES.delete))
