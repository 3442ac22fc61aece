"""Port ranges of floating IP port forwardings (Neutron's
``floating-ip-port-forwarding-port-ranges``): ``external_port_range`` /
``internal_port_range`` as ``"first:last"`` (or one port), with neutron-lib's
``type:port_range`` wording for bad input and Neutron's rules between them.

A forwarding maps N external ports to N internal ones (port by port, in order) or
N external ports to one internal port; anything else is Neutron's 400. Two forwardings
collide when their ranges overlap (on one floating IP and protocol outside; on one
internal address and protocol inside).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator

PortRange = tuple[int, int]


def parse_range(value: Any) -> PortRange:
    """neutron-lib's ``validate_port_range_or_none`` (1..65535): ``"a:b"``, ``"a"`` or a number."""
    ports = str(value).split(":")
    if len(ports) > 2 or any(not p for p in ports):
        raise ValueError("Port range must be two integers separated by a colon")
    numbers = []
    for p in ports:
        if not p.isdigit():
            raise ValueError(f"Invalid port: {p}")
        if not 1 <= int(p) <= 65535:
            raise ValueError(f"Invalid port: {p}, the port must be in the range [1, 65535]")
        numbers.append(int(p))
    if len(numbers) > 1 and numbers[0] > numbers[1]:
        raise ValueError("First port in a port range must be lower than the second port")
    return numbers[0], numbers[-1]


RangeField = Annotated[PortRange, BeforeValidator(parse_range)]


def text(r: PortRange) -> str:
    return f"{r[0]}:{r[1]}"


def relation_ok(internal: PortRange, external: PortRange) -> bool:
    """Neutron's ``_validate_ranges``: N-N or 1-N (internal to external), nothing else."""
    inner = internal[1] - internal[0]
    return inner == 0 or inner == external[1] - external[0]


def overlap(a: PortRange, b: PortRange) -> bool:
    return max(a[0], b[0]) <= min(a[1], b[1])


__all__ = ["PortRange", "RangeField", "overlap", "parse_range", "relation_ok", "text"]
