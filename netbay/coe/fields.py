"""Attribute types of Magnum's API objects, refusing bad input in WSME's words.

Magnum declares its bodies with WSME types (``StringType(min_length=1,
max_length=255)``, ``IntegerType(minimum=1)``, ``Enum``, its ``boolean`` and
``dns_list``); clients and people see those messages, so netbay words its 400s
the same way: ``Invalid input for field/attribute X. Value: 'V'. <reason>``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from netbay.errors import BadRequest
from netbay.store.labels import MAX_KEY, limit_problem

_TRUE = {"1", "t", "true", "on", "y", "yes"}
_FALSE = {"0", "f", "false", "off", "n", "no"}
INT_MAX = 2**31 - 1
SHOWN = 200  # characters of a refused value echoed back (a 900 kB label is not)


def invalid(attr: str, value: Any, reason: str) -> BadRequest:
    shown = "Unset" if value is _MISSING else str(value)
    if len(shown) > SHOWN:
        shown = f"{shown[:SHOWN]}… ({len(shown)} characters)"
    return BadRequest(f"Invalid input for field/attribute {attr}. Value: '{shown}'. {reason}")


_MISSING = object()


@dataclass(frozen=True)
class Attr:
    """One attribute: its kind and limits, whether it must be given, its default."""

    kind: str  # str | text | int | bool | enum | labels | dns_list | ipv4
    min: int | None = None
    max: int | None = None
    choices: tuple[str, ...] = ()
    pattern: str | None = None
    mandatory: bool = False
    default: Any = None
    scalar_labels: bool = True  # labels: str|int|bool|float values (False: strings only)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def convert(self, name: str, value: Any) -> Any:
        """The value as stored, or a 400 in WSME's words; ``None`` passes (unset)."""
        if value is None:
            if self.mandatory:
                raise invalid(name, _MISSING, "Mandatory field missing.")
            return None
        return getattr(self, "_" + self.kind)(name, value)

    def _str(self, name: str, value: Any) -> str:
        if not isinstance(value, str):
            raise invalid(name, value, f"Wrong type. Expected '{str}', got '{type(value)}'")
        if "\x00" in value:
            raise invalid(name, value, "Value should not contain NUL characters")
        if self.min is not None and len(value) < self.min:
            raise invalid(name, value, f"Value should have a minimum character requirement of {self.min}")
        if self.max is not None and len(value) > self.max:
            raise invalid(name, value, f"Value should have a maximum character requirement of {self.max}")
        if self.pattern and not re.match(self.pattern, value):
            raise invalid(name, value, f"Value should match the pattern {self.pattern}")
        return value

    def _text(self, name: str, value: Any) -> str:
        return self._str(name, value)

    def _int(self, name: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise invalid(name, value, f"Wrong type. Expected '{int}', got '{type(value)}'")
        if isinstance(value, str):
            try:
                value = int(value.strip(), 10)
            except ValueError:
                raise invalid(name, value, f"Wrong type. Expected '{int}', got '{str}'") from None
        low = self.min if self.min is not None else -INT_MAX - 1
        high = self.max if self.max is not None else INT_MAX
        if value < low:
            raise invalid(name, value, f"Value should be greater or equal to {low}")
        if value > high:
            raise invalid(name, value, f"Value should be lower or equal to {high}")
        return value

    def _bool(self, name: str, value: Any) -> bool:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower() if isinstance(value, (str, int)) else None
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        accepted = ", ".join(f"'{v}'" for v in sorted(_TRUE | _FALSE))
        raise invalid(name, value, f"Unrecognized value '{value}', acceptable values are: {accepted}")

    def _enum(self, name: str, value: Any) -> str:
        if not isinstance(value, str) or value not in self.choices:
            raise invalid(name, value, f"Value should be one of: {', '.join(sorted(self.choices))}")
        return value

    def _labels(self, name: str, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise invalid(name, value, f"Wrong type. Expected '{dict}', got '{type(value)}'")
        allowed = (str, int, float, bool) if self.scalar_labels else (str,)
        for key, item in value.items():
            if not isinstance(key, str) or not key or len(key) > MAX_KEY or "\x00" in key:
                raise invalid(name, value, f"Label keys should be non-empty strings of at most {MAX_KEY} characters")
            if not isinstance(item, allowed) or (isinstance(item, str) and "\x00" in item):
                kinds = "string, integer, boolean or float" if self.scalar_labels else "string"
                raise invalid(name, value, f"Label {key} should have a {kinds} value")
        too_big = limit_problem(value)
        if too_big:
            raise invalid(name, value, too_big + ".")
        return dict(value)

    def _dns_list(self, name: str, value: Any) -> str:
        text = self._str(name, value)
        for part in text.split(","):
            try:
                ipaddress.ip_address(part.strip())
            except ValueError:
                raise BadRequest("Expected a single dns address or comma separated dns list, "
                                 f"but received {text}.") from None
        return text

    def _ipv4(self, name: str, value: Any) -> str:
        text = self._str(name, value)
        try:
            ipaddress.IPv4Address(text)
        except ValueError:
            raise invalid(name, value, "Value should be IPv4 format") from None
        return text


def parse(body: Any, schema: Mapping[str, Attr], argument: str, readonly: frozenset[str]) -> dict[str, Any]:
    """A request object → its converted attributes (defaults for those not given).

    Read-only attributes a client echoes back are dropped, as WSME drops them;
    attributes the API does not have are refused."""
    if not isinstance(body, dict):
        raise BadRequest(f"Invalid input for field/attribute {argument}. Value: '{body}'. "
                         "Wrong type. Expected a JSON object.")
    unknown = sorted(k for k in body if k not in schema and k not in readonly)
    if unknown:
        raise BadRequest(f"Unknown attribute for argument {argument}: {', '.join(unknown)}")
    out: dict[str, Any] = {}
    for name, attr in schema.items():
        given = body.get(name)
        value = attr.convert(name, given)
        out[name] = attr.default if value is None else value
    return out


def recheck(doc: Mapping[str, Any], schema: Mapping[str, Attr]) -> dict[str, Any]:
    """Values after a patch, converted again (a patch may set any JSON value)."""
    out = dict(doc)
    for name, attr in schema.items():
        if name in doc:
            value = attr.convert(name, doc[name])
            out[name] = attr.default if value is None else value
    return out
