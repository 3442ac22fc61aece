"""A label a network driver reads: its type, allowed values, default, and the one check
that turns what a user gave into the string the driver reads.

Each driver package declares its labels with :class:`LabelSpec` once
(:mod:`netbay.drivers.registry`); the API checks with them, the HOT export and the
agent read the values they return, the docs and ``GET /v1/network-drivers`` print them.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from netbay.drivers.cidrs import unusable

# "cidr": an IPv4 network; "cidr6": an IPv6 network or "" (the empty default: no IPv6,
# the cluster stays single-stack IPv4).
LabelType = Literal["cidr", "cidr6", "int", "enum", "string"]


class LabelError(ValueError):
    """A label value the API refuses; ``str()`` is the whole message."""


@dataclass(frozen=True)
class LabelSpec:
    """One label a driver reads: its type, allowed values and default."""

    key: str
    type: LabelType
    default: str
    help: str
    allowed: tuple[str, ...] = ()
    # Values a user might expect (Magnum accepted them) that netbay refuses, and why.
    refused: Mapping[str, str] = field(default_factory=dict)
    minimum: int | None = None
    maximum: int | None = None

    def check(self, value: Any) -> str:
        """The value as the driver will read it (a string), or ``LabelError``."""
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise LabelError(self._bad(value, f"expecting {self.expectation()}"))
        text = str(value).strip() if isinstance(value, str) else str(value)
        if self.type == "cidr6" and text == "":
            return ""
        if self.type in ("cidr", "cidr6"):
            return self._cidr(value, text)
        if self.type == "int":
            return self._int(value, text)
        if self.type == "enum":
            if text in self.refused:
                raise LabelError(f"Label {self.key}={text} is not supported: {self.refused[text]}")
            if text not in self.allowed:
                raise LabelError(self._bad(value, f"expecting one of {self.expectation()}"))
        return text

    def expectation(self) -> str:
        if self.type == "cidr":
            return "an IPv4 network in CIDR notation, e.g. " + self.default
        if self.type == "cidr6":
            return "an IPv6 network in CIDR notation, e.g. fd00:10::/56, or empty (no IPv6)"
        if self.type == "int":
            low = "" if self.minimum is None else f" >= {self.minimum}"
            high = "" if self.maximum is None else f" <= {self.maximum}"
            return "an integer" + (low + ("," if low and high else "") + high if low or high else "")
        if self.type == "enum":
            return "|".join(self.allowed)
        return "a string"

    def _bad(self, value: Any, why: str) -> str:
        return f"Invalid value {value!r} for label {self.key}: {why}."

    def _cidr(self, value: Any, text: str) -> str:
        try:
            net = ipaddress.ip_network(text, strict=True)
        except ValueError:
            raise LabelError(self._bad(value, f"expecting {self.expectation()}")) from None
        if net.version != (6 if self.type == "cidr6" else 4) or "/" not in text:
            raise LabelError(self._bad(value, f"expecting {self.expectation()}"))
        problem = unusable(net)
        if problem:
            raise LabelError(self._bad(value, problem))
        return str(net)

    def _int(self, value: Any, text: str) -> str:
        if isinstance(value, float) and not value.is_integer():
            raise LabelError(self._bad(value, f"expecting {self.expectation()}"))
        try:
            number = int(float(text)) if isinstance(value, float) else int(text, 10)
        except ValueError:
            raise LabelError(self._bad(value, f"expecting {self.expectation()}")) from None
        if (self.minimum is not None and number < self.minimum) or (
                self.maximum is not None and number > self.maximum):
            raise LabelError(self._bad(value, f"expecting {self.expectation()}"))
        return str(number)


# A rule across several labels of one driver: given the effective values (defaults
# filled in), a message when they do not fit together.
CrossCheck = Callable[[Mapping[str, str]], "str | None"]
# (kernel feature, what needs it) for the effective labels; features are
# netbay.dataplane.features names.
KernelNeeds = Callable[[Mapping[str, str]], "list[tuple[str, str]]"]
