"""Status written in the background, so a slow PUT never delays wiring."""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Mapping

from netbay.agent.api import Api

log = logging.getLogger(__name__)


class Reporter:
    """Writes status in the background, so that a slow PUT never delays wiring.

    Reports are merged per object (the latest wins) and sent in order by one
    thread; a failed PUT is retried with backoff, newer reports taking precedence.
    """

    def __init__(self, api: Api) -> None:
        self.api = api
        self._pending: dict[str, dict[str, str]] = defaultdict(dict)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="netbay-agent-status", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self.api.close()

    def submit(self, report: Mapping[str, Mapping[str, str]]) -> None:
        with self._lock:
            for coll, items in report.items():
                self._pending[coll].update(items)
            self._idle.clear()
        self._wake.set()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until everything submitted was written (tests, shutdown)."""
        return self._idle.wait(timeout)

    def _take(self) -> dict[str, dict[str, str]]:
        with self._lock:
            report = {k: v for k, v in self._pending.items() if v}
            self._pending = defaultdict(dict)
            if not report:
                self._idle.set()
            return report

    def _run(self) -> None:
        backoff = 0.2
        while not self._stop.is_set():
            self._wake.wait()
            self._wake.clear()
            report = self._take()
            if not report:
                continue
            try:
                self.api.put_status(report)
                backoff = 0.2
            except Exception as exc:  # noqa: BLE001 - retried; the agent must not stop
                log.warning("netbay agent: cannot write status (%s); retrying", exc)
                with self._lock:
                    for coll, items in report.items():
                        newer = self._pending[coll]
                        self._pending[coll] = {**items, **newer}
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)
            self._wake.set()  # look again: more may have come meanwhile


# --- the agent --------------------------------------------------------------------------------
