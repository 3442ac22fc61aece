"""Neutron request members validated with Neutron's wording, for any caller.

The HTTP routes (``netbay.api.network``) and the in-process backend
(``netbay.backends.embedded``) both hand a member dict here, so the two paths
refuse the same input with the same message.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from netbay.errors import BadRequest, invalid_operation
from netbay.network.resource import Resource
from netbay.network.types import Unconvertible


def validate(member: Any, resource: Resource, method: str) -> BaseModel:
    model = resource.create_body if method == "POST" else resource.update_body
    assert model is not None, "no PUT route without an update_body"
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
        raise _refusal(exc) from None


# Neutron's refusal of ``null`` for a scalar attribute, by the attribute's type.
_NULL_REASON = {str: "'None' is not a valid string", bool: "'None' cannot be converted to boolean",
                int: "'None' is not an integer"}
# Those neutron-lib refuses in a converter, not a validator (see ``types.Unconvertible``).
_NULL_UNCONVERTIBLE = {bool}


def _refuse_nulls(member: dict[str, Any], resource: Resource) -> None:
    """PUT ``"attr": null`` where the attribute can never be null (a plain string,
    boolean or integer when created) is a 400, as in Neutron - not "leave as is",
    and not a NOT NULL violation in the database."""
    scalar: dict[str, Any] = {f.alias or name: f.annotation for name, f in resource.create_body.model_fields.items()}
    for key, value in member.items():
        if value is None and scalar.get(key) in _NULL_UNCONVERTIBLE:
            raise invalid_operation(_NULL_REASON[scalar[key]])
        if value is None and scalar.get(key) in _NULL_REASON:
            raise BadRequest(f"Invalid input for {key}. Reason: {_NULL_REASON[scalar[key]]}.")


def _refusal(exc: ValidationError) -> BadRequest:
    cause = (exc.errors()[0].get("ctx") or {}).get("error")
    if isinstance(cause, Unconvertible):
        return invalid_operation(str(cause))
    return BadRequest(neutron_reason(exc))


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
