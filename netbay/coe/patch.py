"""JSON patch (RFC 6902) as Magnum takes it: ``add``, ``replace`` and ``remove`` on
top-level attributes and on ``/labels/<key>``, with Magnum's refusals.

The document is the resource as a dict of its API attributes. ``remove`` of an
attribute resets it to its default (WSME's Unset); ``add`` of an attribute that
already has a value is refused (use ``replace``); a ``/labels`` replace value
may be the ``str()`` of a dict, which is what python-magnumclient sends.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Mapping
from typing import Any


from netbay.coe.labels import from_patch_value
from netbay.errors import BadRequest

OPS = ("add", "replace", "remove")
SHOWN = 1000  # characters of a refused patch echoed back
_PATH = re.compile(r"^(/[\w-]+)+$")
# Magnum's JsonPatchType.internal_attrs: never patchable.
INTERNAL = frozenset({"/created_at", "/id", "/links", "/updated_at", "/uuid", "/project_id", "/user_id"})


def _invalid(attr: str, value: Any, reason: str) -> BadRequest:
    return BadRequest(f"Invalid input for field/attribute {attr}. Value: '{value}'. {reason}")


def _patch_error(patch: Any, reason: str) -> BadRequest:
    text = json.dumps(patch, default=str)
    if len(text) > SHOWN:  # a refused value is not echoed back whole
        text = f"{text[:SHOWN]}… ({len(text)} characters)"
    return BadRequest(f"Couldn't apply patch '{text}'. Reason: {reason}")


def parse(raw: Any, *, internal: frozenset[str], mandatory: frozenset[str]) -> list[dict[str, Any]]:
    """Check the patch document's shape as WSME and Magnum's JsonPatchType do."""
    if not isinstance(raw, list):
        raise BadRequest("Invalid input for field/attribute patch. Value: "
                         f"'{raw}'. Wrong type. Expected a JSON list of patch operations.")
    ops: list[dict[str, Any]] = []
    for item in raw:
        if not isinstance(item, dict):
            raise _invalid("patch", item, "Wrong type. Expected a JSON object.")
        unknown = sorted(set(item) - {"op", "path", "value"})
        if unknown:
            raise BadRequest(f"Unknown attribute for argument patch: {', '.join(unknown)}")
        path, op = item.get("path"), item.get("op")
        if path is None:
            raise _invalid("path", "Unset", "Mandatory field missing.")
        if op is None:
            raise _invalid("op", "Unset", "Mandatory field missing.")
        if not isinstance(path, str) or not _PATH.match(path):
            raise _invalid("path", path, "Invalid path: must be /attribute or /labels/<key>.")
        if op not in OPS:
            raise _invalid("op", op, f"Value should be one of: {', '.join(OPS)}")
        if path in internal:
            raise _invalid("patch", path, f"'{path}' is an internal attribute and can not be updated")
        if op == "remove" and path in mandatory:
            raise _invalid("patch", path, f"'{path}' is a mandatory attribute and can not be removed")
        if op != "remove" and "value" not in item:
            raise _invalid("patch", path, "'add' and 'replace' operations need a value")
        ops.append({"op": op, "path": path, **({"value": item["value"]} if op != "remove" else {})})
    return ops


def apply(doc: Mapping[str, Any], ops: list[dict[str, Any]], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The document after ``ops``, or a 400 worded as Magnum's PatchError."""
    out = copy.deepcopy(dict(doc))
    for op in ops:
        parts = op["path"].lstrip("/").split("/")
        attr = parts[0]
        if attr not in out:
            if op["op"] == "add" and len(parts) == 1:
                raise BadRequest(f"Adding a new attribute {op['path']} to the root of the resource "
                                 "is not allowed.")
            raise _patch_error(ops, f"can't {op['op']} a non-existent object '{attr}'")
        if len(parts) == 1:
            _apply_attr(out, attr, op, ops, defaults)
        else:
            _apply_nested(out, parts, op, ops)
    return out


def _apply_attr(out: dict[str, Any], attr: str, op: dict[str, Any], ops: list, defaults: Mapping[str, Any]) -> None:
    if op["op"] == "remove":
        out[attr] = copy.deepcopy(defaults.get(attr))
        return
    value = op["value"]
    if op["op"] == "add" and out[attr] not in (None, {}):
        raise BadRequest(f"The attribute {op['path']} has existed, please use 'replace' operation instead.")
    if attr == "labels":
        try:
            value = from_patch_value(value)
        except ValueError as exc:
            raise _patch_error(ops, str(exc)) from None
    out[attr] = value


def _apply_nested(out: dict[str, Any], parts: list[str], op: dict[str, Any], ops: list) -> None:
    container = out
    for part in parts[:-1]:
        if not isinstance(container, dict) or part not in container:
            raise _patch_error(ops, f"can't {op['op']} a non-existent object '{part}'")
        if container[part] is None and op["op"] == "add":
            container[part] = {}
        container = container[part]
    key = parts[-1]
    if not isinstance(container, dict):
        raise _patch_error(ops, f"'{'/'.join(parts[:-1])}' is not an object")
    if op["op"] == "remove":
        if key not in container:
            raise _patch_error(ops, f"can't remove a non-existent object '{key}'")
        del container[key]
    elif op["op"] == "replace":
        if key not in container:
            raise _patch_error(ops, f"can't replace a non-existent object '{key}'")
        container[key] = op["value"]
    else:
        container[key] = op["value"]
