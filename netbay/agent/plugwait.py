"""Container ports bound before their runtime plugged them (a CNI ADD, or a pod made
in one API call: the runtime binds first and plugs next, to spend one API call, not
two). The agent looks for each one's fabric end again soon, the wait doubling, for a
bounded time; after that the next resync is its next look."""

from __future__ import annotations

import time

from netbay.dataplane import netns, rtnl
from netbay.dataplane.names import Names
from netbay.dataplane.realizers import Work

# Looked for again after PENDING_FIRST s, the wait doubling up to PENDING_MAX, for PENDING_FOR s.
PENDING_FIRST, PENDING_MAX, PENDING_FOR = 0.005, 1.0, 60.0


class PlugWait:
    """The awaited ports (port id -> since when) and when to look next."""

    def __init__(self) -> None:
        self.ports: dict[str, float] = {}
        self.at = 0.0          # when to look next
        self._delay = PENDING_FIRST

    def __bool__(self) -> bool:
        return bool(self.ports)

    def watch(self, pid: str) -> None:
        """Await ``pid``'s fabric end (from now, unless awaited already)."""
        if pid not in self.ports:
            self.ports[pid] = time.monotonic()
            self._delay = PENDING_FIRST
            self.at = time.monotonic() + PENDING_FIRST

    def done(self, pid: str) -> None:
        self.ports.pop(pid, None)

    def clear(self) -> None:
        self.ports.clear()

    def due(self) -> bool:
        return bool(self.ports) and time.monotonic() >= self.at

    def look_again(self, names: Names, work: Work) -> None:
        """Put the awaited ports whose fabric end is there now back into ``work`` (a
        link lookup each until then; bounded in time)."""
        now = time.monotonic()
        fabric = rtnl.rtnl(names.fabric) if netns.exists(names.fabric) else None
        for pid, since in list(self.ports.items()):
            if now - since > PENDING_FOR or fabric is None:
                del self.ports[pid]
            elif fabric.link(Names.tap(pid)) is not None:
                work.setdefault("ports", set()).add(pid)
        self._delay = min(self._delay * 2, PENDING_MAX)
        self.at = now + self._delay
