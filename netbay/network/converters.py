"""neutron-lib's converters and validators of single values, in Neutron's words: a
filter value of a query string as its column takes it (booleans, integers, timestamps)
and a tag as Neutron accepts it. Moved out of :mod:`netbay.network.resource`, which
still offers them under their old names."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, UTC
from typing import Any

from netbay.errors import BadRequest, invalid_operation

# How a filter value in a query string becomes a column value.
Converter = Callable[[str], Any]


def to_bool(value: str) -> bool:
    """neutron-lib's ``convert_to_boolean``, refusing as Neutron 29 does (``InvalidInput``)."""
    lowered = value.lower()
    if lowered in {"true", "1", "yes"}:
        return True
    if lowered in {"false", "0", "no"}:
        return False
    raise invalid_operation(f"'{value}' cannot be converted to boolean")


def to_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise invalid_operation(f"'{value}' is not an integer") from None
    if not -(2**31) <= number < 2**31:
        raise invalid_operation(f"'{value}' is out of range")
    return number


def to_timestamp(value: str) -> datetime:
    """A filter value for a timestamp column (naive UTC, as stored); else 400, not a 500."""
    try:
        parsed = datetime.fromisoformat(value.removesuffix("Z"))
    except ValueError:
        raise BadRequest(f"'{value}' is not a valid timestamp") from None
    if parsed.tzinfo is not None:
        parsed = parsed.astimezone(UTC).replace(tzinfo=None)
    return parsed


MAX_TAG = 255


def valid_tag(tag: object) -> str:
    """A tag as Neutron accepts it: a non-empty string of ≤ 255 characters, no comma."""
    if not isinstance(tag, str) or not tag or len(tag) > MAX_TAG or "\x00" in tag or "," in tag:
        raise BadRequest(f"Invalid input for tags. Reason: '{tag}' is not a valid tag.")
    return tag


__all__ = ["MAX_TAG", "Converter", "to_bool", "to_int", "to_timestamp", "valid_tag"]
