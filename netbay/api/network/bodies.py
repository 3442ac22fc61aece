"""Request bodies: JSON parsing and member validation with Neutron's wording."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Request
from pydantic import BaseModel, ValidationError

from netbay.errors import BadRequest
from netbay.network.resource import Resource

MAX_BODY = 1 << 20


async def read_json(request: Request) -> Any:
    raw = await request.body()
    if len(raw) > MAX_BODY:
        raise BadRequest("Request body is too large")
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


def validate(member: Any, resource: Resource, method: str) -> BaseModel:
    model = resource.create_body if method == "POST" else resource.update_body
    if not isinstance(member, dict):
        raise BadRequest(f"Invalid input for {resource.member}. Reason: expected a JSON object.")
    allowed = {f.alias or name for name, f in model.model_fields.items()}
    unknown = sorted(k for k in member if k not in allowed)
    if unknown:
        known = resource.readonly | set(resource.create_body.model_fields) | {
            f.alias for f in resource.create_body.model_fields.values() if f.alias
        }
        readonly = [k for k in unknown if k in known]
        if readonly and method == "POST":
            raise BadRequest(f"Attribute '{readonly[0]}' not allowed in POST")
        if readonly:
            raise BadRequest(f"Cannot update read-only attribute {readonly[0]}")
        raise BadRequest(f"Unrecognized attribute(s) '{', '.join(unknown)}'")
    if method == "PUT":
        _refuse_nulls(member, resource)
    try:
        return model.model_validate(member)
    except ValidationError as exc:
        raise BadRequest(neutron_reason(exc)) from None


# Neutron's refusal of ``null`` for a scalar attribute, by the attribute's type.
_NULL_REASON = {str: "'None' is not a valid string", bool: "'None' cannot be converted to boolean",
                int: "'None' is not an integer"}


def _refuse_nulls(member: dict[str, Any], resource: Resource) -> None:
    """PUT ``"attr": null`` where the attribute can never be null (a plain string,
    boolean or integer when created) is a 400, as in Neutron - not "leave as is",
    and not a NOT NULL violation in the database."""
    scalar = {f.alias or name: f.annotation for name, f in resource.create_body.model_fields.items()}
    for key, value in member.items():
        if value is None and scalar.get(key) in _NULL_REASON:
            raise BadRequest(f"Invalid input for {key}. Reason: {_NULL_REASON[scalar[key]]}.")


def neutron_reason(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = [str(p) for p in err.get("loc", ())]
    attr = loc[0] if loc else "body"
    msg = str(err.get("msg", "invalid value"))
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
    if len(loc) > 1:
        msg = f"{msg} (at {'.'.join(loc[1:])})"
    return f"Invalid input for {attr}. Reason: {msg}."
