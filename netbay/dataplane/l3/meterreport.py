"""The routers' metering counts sent to the server (``PUT /netbay/v1/metering``) on a
thread of their own, as Neutron's metering agent reports them every interval.

The counts are the kernel's absolute values per router and label: sent when any
moved, and all of them every ``resend`` rounds so a restarted server has them again.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Mapping
from typing import Any

from netbay.dataplane.l3.metering import traffic_counters

log = logging.getLogger(__name__)

Send = Callable[[Mapping[str, Any]], Any]


class MeteringReporter:
    """Every ``interval`` s: the counters of the namespaces in ``metered`` (router id ->
    namespace, kept by the router realizer), sent when they changed."""

    def __init__(self, send: Send, interval: float = 5.0, resend: int = 12) -> None:
        self.send, self.interval, self.resend = send, interval, resend
        self.metered: dict[str, str] = {}
        self.sent: dict[str, dict[str, dict[str, int]]] = {}
        self.rounds = 0
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name="netbay-metering", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.stop_event.set()
        if self.thread.is_alive():
            self.thread.join(timeout)

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

    def _run(self) -> None:
        while not self.stop_event.wait(self.interval):
            try:
                self.round()
            except Exception as exc:  # noqa: BLE001 - the next round tries again
                log.warning("netbay agent: metering counts: %s", exc)


__all__ = ["MeteringReporter"]
