"""A thread that does one round of work every interval until stopped: what the agent's
reporters to the server (load-balancer statistics, metering counts) and the
conductor's heartbeat share.

A failed round is logged and the next one tries again: a report or a beat is worth
retrying, not worth stopping its process for (a missed beat shows as ``down``).
"""

from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)


class Periodic:
    """``round()`` every ``interval`` s on a daemon thread named ``name`` (``first``: one
    at once, before the first wait); ``what`` names the work in the log when a round fails."""

    what = "a periodic round"

    def __init__(self, interval: float, name: str, *, first: bool = False) -> None:
        self.interval = interval
        self.first = first
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self.stop_event.set()
        if self.thread.is_alive():
            self.thread.join(timeout)

    def round(self) -> object:
        raise NotImplementedError

    def _run(self) -> None:
        if self.first:
            self._one()
        while not self.stop_event.wait(self.interval):
            self._one()

    def _one(self) -> None:
        try:
            self.round()
        except Exception as exc:  # noqa: BLE001 - the next round tries again
            log.warning("netbay: %s failed (the next round tries again): %s", self.what, exc)


__all__ = ["Periodic"]
