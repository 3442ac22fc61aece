"""Validated value types for request bodies, with Neutron's wording on failure.

The messages become ``Invalid input for <attr>. Reason: <message>.``.
"""

from __future__ import annotations

import ipaddress
import re
import uuid
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, StringConstraints
from pydantic import BaseModel as _BaseModel


class Body(_BaseModel):
    """A request member: unknown attributes are refused, aliases are the API names."""

    model_config = ConfigDict(extra="forbid", populate_by_name=False, str_strip_whitespace=False)

    def given(self) -> dict[str, Any]:
        """Only what the caller sent, keyed by attribute (Python) name."""
        return self.model_dump(exclude_unset=True)


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("contains a NUL character")
    return value


def _ip(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError(f"'{value}' is not a valid IP address") from None


def _cidr(value: str) -> str:
    try:
        net = ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise ValueError(f"'{value}' is not a valid IP subnet") from None
    if "/" not in value:
        raise ValueError(f"'{value}' is not a valid IP subnet")
    return str(net)


def _cidr_strict(value: str) -> str:
    """A CIDR given as its network address (``10.0.0.0/24``, not ``10.0.0.5/24``)."""
    normal = _cidr(value)
    if ipaddress.ip_interface(value).ip != ipaddress.ip_network(normal).network_address:
        raise ValueError(f"'{value}' isn't a recognized IP subnet cidr, '{normal}' is recommended")
    return normal


def _label_limits(value: dict[str, Any]) -> dict[str, Any]:
    """Labels (pods', sandboxes'): as many and as large as a cluster's may be."""
    from netbay.store.labels import limit_problem

    problem = limit_problem(value)
    if problem:
        raise ValueError(problem)
    return value


_MAC = re.compile(r"^([0-9a-fA-F]{2}[:-]){5}[0-9a-fA-F]{2}$")


def _mac(value: str) -> str:
    if not _MAC.match(value):
        raise ValueError(f"'{value}' is not a valid MAC address")
    mac = value.lower().replace("-", ":")
    if int(mac[:2], 16) & 1:
        raise ValueError(f"'{value}' is not a valid unicast MAC address")
    if mac == "00:00:00:00:00:00":
        raise ValueError(f"'{value}' is not a valid MAC address")
    return mac


class Unconvertible(ValueError):
    """A value neutron-lib's ``convert_to_*`` refuses: Neutron answers it as
    ``InvalidInput`` (``Invalid input for operation: …``), not as a validator's
    ``HTTPBadRequest`` (``Invalid input for <attr>. Reason: …``)."""


def _uuid(value: str) -> str:
    """neutron-lib's ``validate_uuid``, in its words (also for what the columns cannot hold)."""
    try:
        if len(value) > 36:
            raise ValueError
        uuid.UUID(value)
    except ValueError:
        raise ValueError(f"'{value}' is not a valid UUID") from None
    return value


def _a_string(value: Any) -> Any:
    """neutron-lib's ``validate_string`` in its words (``null`` included)."""
    if not isinstance(value, str):
        raise ValueError(f"'{value}' is not a valid string")
    return value


def _not_blank(value: str) -> str:
    """neutron-lib's ``not_empty_string``: a name that must say something."""
    if not value.strip():
        raise ValueError(f"'{value}' Blank strings are not permitted")
    return value


def _strict_bool(value: Any) -> Any:
    """Neutron's convert_to_boolean: booleans, 'true'/'false' strings, 0/1."""
    if isinstance(value, str) and value.lower() in {"true", "false"}:
        return value.lower() == "true"
    if isinstance(value, int) and not isinstance(value, bool) and value in (0, 1):
        return bool(value)
    if not isinstance(value, bool):
        raise Unconvertible(f"'{value}' cannot be converted to boolean")
    return value


Name = Annotated[str, StringConstraints(max_length=255), AfterValidator(_no_nul)]
Text = Annotated[str, StringConstraints(max_length=255), AfterValidator(_no_nul)]
NonBlankName = Annotated[str, BeforeValidator(_a_string), StringConstraints(max_length=255), AfterValidator(_no_nul),
                         AfterValidator(_not_blank)]
ID = Annotated[str, StringConstraints(max_length=36), AfterValidator(_no_nul)]
UUID = Annotated[str, AfterValidator(_uuid)]
ProjectID = Annotated[str, StringConstraints(min_length=1, max_length=64), AfterValidator(_no_nul)]
Bool = Annotated[bool, BeforeValidator(_strict_bool)]
IPAddress = Annotated[str, StringConstraints(max_length=64), AfterValidator(_ip)]
CIDR = Annotated[str, StringConstraints(max_length=64), AfterValidator(_cidr)]
StrictCIDR = Annotated[str, StringConstraints(max_length=64), AfterValidator(_cidr_strict)]
MAC = Annotated[str, StringConstraints(max_length=32), AfterValidator(_mac)]
Labels = Annotated[dict[str, str | int | float | bool], AfterValidator(_label_limits)]
Port = Annotated[int, Field(ge=0, le=65535)]
PrefixLen = Annotated[int, Field(ge=0, le=128)]
Tags = list[Annotated[str, StringConstraints(min_length=1, max_length=255), AfterValidator(_no_nul)]]


def network_of(cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    return ipaddress.ip_network(cidr, strict=False)


_DNS_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$", re.IGNORECASE)


def _dns_name(value: str) -> str:
    """neutron-lib's ``validate_dns_name`` in short: labels of letters, digits and inner
    hyphens, 63 characters each, 255 in all; a trailing dot makes it an FQDN."""
    if not value:
        return value
    labels = value.removesuffix(".").split(".")
    if len(value) > 255 or not all(_DNS_LABEL.match(label) for label in labels) or labels[-1].isdigit():
        raise ValueError(f"'{value}' not a valid PQDN or FQDN")
    return value


DNSName = Annotated[str, StringConstraints(max_length=255), AfterValidator(_dns_name)]
