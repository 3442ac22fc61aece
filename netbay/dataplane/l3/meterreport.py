"""The routers' metering counts sent to the server (``PUT /netbay/v1/metering``) on a
thread of their own, as Neutron's metering agent reports them every interval.

The counts are the kernel's absolute values per router and label: sent when any
moved, and all of them every ``resend`` rounds so a restarted server has them again.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from typing import Any

from netbay.dataplane.l3.metering import traffic_counters
from netbay.periodic import Periodic

Send = Callable[[Mapping[str, Any]], Any]


class MeteringReporter(Periodic):
    """Every ``interval`` s: the counters of the namespaces in ``metered`` (router id ->
    namespace, kept by the router realizer), sent when they changed."""

    what = "metering counts"

    def __init__(self, send: Send, interval: float = 5.0, resend: int = 12) -> None:
        super().__init__(interval, "netbay-metering")
        self.send, self.resend = send, resend
        self.metered: dict[str, str] = {}
        self.sent: dict[str, dict[str, dict[str, int]]] = {}
        self.rounds = 0

    def round(self) -> bool:
        """One collection; True if a report was sent."""
        self.rounds += 1
        now: dict[str, dict[str, dict[str, int]]] = {}
        for rid, ns in list(self.metered.items()):
            try:
                counts = traffic_counters(ns)
            except OSError:   # the namespace went away meanwhile
                continue
            if counts:
                now[rid] = counts
        if now == self.sent and self.rounds % self.resend:
            return False
        self.send({"host": socket.gethostname(), "routers": now})
        self.sent = now
        return True


__all__ = ["MeteringReporter"]
