"""Request bodies: JSON parsing and member validation with Neutron's wording."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from netbay.api.collections import read_json  # one reader of JSON bodies for every API
from netbay.errors import BadRequest
from netbay.network.bodies import validate
from netbay.network.resource import Resource


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
