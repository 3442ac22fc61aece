"""Request bodies: JSON parsing and member validation with Neutron's wording."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Request
from pydantic import BaseModel

from netbay.errors import BadRequest
from netbay.network.bodies import validate
from netbay.network.resource import Resource

async def read_json(request: Request) -> Any:
    """The body as JSON; its size is capped while it is read (:mod:`netbay.bodylimit`)."""
    raw = await request.body()
    if not raw:
        raise BadRequest("Resource body required")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise BadRequest("Malformed request body") from None


def parse_member(raw: Any, resource: Resource, method: str) -> BaseModel:
    """``{"network": {...}}`` → the resource's create or update body."""
    if not isinstance(raw, dict) or resource.member not in raw:
        raise BadRequest(f"Unable to find '{resource.member}' in request body")
    return validate(raw[resource.member], resource, method)


def parse_members(raw: dict[str, Any], resource: Resource) -> list[BaseModel]:
    """Bulk create: ``{"networks": [{...}, ...]}``, each item bare or wrapped in its
    member key (``{"network": {...}}``), as Neutron's ``prepare_request_body`` reads it."""
    key = resource.collection.replace("-", "_")
    items = raw[key]
    if not items:
        raise BadRequest("Resources required")
    if not isinstance(items, list):
        raise BadRequest(f"Invalid input for {key}. Reason: expected a non-empty list.")
    if len(items) > 1000:
        raise BadRequest("Bulk requests are limited to 1000 resources")
    member = resource.member
    return [validate(item[member] if isinstance(item, dict) and member in item else item, resource, "POST")
            for item in items]


__all__ = ["parse_member", "parse_members", "read_json", "validate"]
