"""What one pass of the kuryr mapping controller leaves: its :class:`Report` (what it
made and deleted, the Warning events) and :class:`Known` (what the next pass of the
same process starts from instead of listing everything again)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Known:
    """What the last complete pass left (wanted and made): the next pass of this
    process starts from it instead of listing everything again (``apply``'s fast
    path); a full ``resync`` — every restart — lists afresh."""
    segments: dict[str, tuple[dict, dict]]    # "ns/<name>" or "node/<name>" → (network, subnet)
    ports: dict[str, dict[str, Any]]           # "ns/pod" → port
    lbs: dict[str, dict[str, Any]]             # "ns/svc" → load balancer
    fips: dict[str, dict[str, Any]]            # "ns/svc <address|pool>" → floating IP
    subnets6: dict[str, dict[str, Any]] = field(default_factory=dict)   # network id → its IPv6 subnet


@dataclass
class Report:
    made: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)   # Kubernetes' Warning events (a pod not started, why)

    def __str__(self) -> str:
        return "\n".join([*self.events, f"{len(self.made)} made, {len(self.deleted)} deleted"])


__all__ = ["Known", "Report"]
