"""A subnet pool's prefixes grown and shrunk in place (Neutron's ``subnetpool-prefix-ops``:
``PUT /subnetpools/{id}/add_prefixes`` and ``remove_prefixes``, bare ``{"prefixes": [...]}``
bodies answered with the pool's prefixes after the change).

Adding goes through the pool's update, so its checks hold (one IP version, bounds);
removing refuses a prefix a subnet of the pool was carved from (400
``IllegalSubnetPoolPrefixUpdate``) and is a no-op for prefixes the pool lacks.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import BadRequest
from netbay.network.subnetpools import SUBNETPOOLS, SubnetPoolUpdate, available, compact
from netbay.store.models import Subnet


def add_prefixes(session: Session, ctx: Context, pool_id: str, info: Any) -> dict[str, Any]:
    wanted = _prefixes(info)
    pool = SUBNETPOOLS.get_owned(session, ctx, pool_id, "add_prefixes")
    if not wanted:
        return {"prefixes": list(pool.prefixes)}
    pool = SUBNETPOOLS.update(session, ctx, pool.id, SubnetPoolUpdate(prefixes=[*pool.prefixes, *wanted]))
    return {"prefixes": list(pool.prefixes)}


def remove_prefixes(session: Session, ctx: Context, pool_id: str, info: Any) -> dict[str, Any]:
    unwanted = _prefixes(info)
    pool = SUBNETPOOLS.get_owned(session, ctx, pool_id, "remove_prefixes")
    removal = compact(unwanted)
    held = compact(pool.prefixes)
    if not any(r.version == h.version and r.overlaps(h) for r in removal for h in held):
        return {"prefixes": list(pool.prefixes)}
    carved = [ipaddress.ip_network(c) for c in session.scalars(select(Subnet.cidr).where(
        Subnet.subnetpool_id == pool.id))]
    if any(r.version == c.version and r.overlaps(c) for r in removal for c in carved):
        raise BadRequest("Illegal update to prefixes: One or more the prefixes to be removed is in use by a "
                         "subnet.", kind="IllegalSubnetPoolPrefixUpdate")
    pool.prefixes = [str(p) for p in available(held, removal)]
    SUBNETPOOLS.touch(pool)
    SUBNETPOOLS.record(session, pool, "update")
    return {"prefixes": list(pool.prefixes)}


def _prefixes(info: Any) -> list[str]:
    """The body's prefixes, each a CIDR (neutron-lib's ``get_operation_request_body``)."""
    if not isinstance(info, dict) or not isinstance(info.get("prefixes"), list):
        raise BadRequest("Invalid input for operation: Body contains invalid data: a list of prefixes is "
                         "expected in the 'prefixes' key.", kind="InvalidInput")
    result = []
    for prefix in info["prefixes"]:
        try:
            result.append(str(ipaddress.ip_network(prefix, strict=False)))
        except (TypeError, ValueError):
            raise BadRequest(f"Invalid input for prefixes. Reason: '{prefix}' is not a valid IP subnet.",
                             kind="InvalidInput") from None
    return result


__all__ = ["add_prefixes", "remove_prefixes"]
