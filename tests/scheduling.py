"""How pytest-xdist hands modules to workers: the tests against the OpenStack peers on a
few workers, everything else on all of them, in one run.

Each worker that runs a peers test starts its own cloud once (Keystone, Neutron, Octavia,
Heat: a session fixture, so no worker sees another's objects in the cloud-wide "left as
it was" snapshots), so only the first ``NETBAY_TEST_PEER_WORKERS`` workers (default 2)
take peers tests, and they take them first; the others never do. Once the peers tests
are handed out, those workers take the rest's modules too: the run's tail is shared by
every worker instead of the rest's alone. (Two runs side by side, one per kind, left the
two cores 15-33 % idle for the last three minutes: the peers' run ended first.)

The work unit is the module (``--dist loadfile``: its module-scoped servers start once),
split in two where a module holds both kinds (its embedded and cloud parametrizations),
and the tests on the OVN lab (marker ``ovn``: Keystone, Neutron ML2/OVN, Octavia with
ovn-octavia-provider, ~150 CPU seconds to start, and their daemons' all along) are one
unit, a peers one, handed out first: one worker starts the lab, and that worker, busy
with it, does not also start the other cloud. The peers units go in collection order;
the rest's longest first: each module's wall seconds in a recent whole run
(``tests/unit_seconds.json``, which ``python -m tests.scheduling PROFILE_DIR`` writes from
:mod:`tests.cpuprofile`'s rows), half a second a test for a module not listed there, so
the run does not end on one long module while the other workers idle (a stale figure
only orders the queue).

The scheduler runs in the controller, which collects nothing: each worker writes the node
ids it collected with the ``peers`` and ``ovn`` markers to a file the controller names
(``NETBAY_TEST_PEERS_LIST``), read once all have collected.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

LAB = "the OVN lab"
PEERS = " (peers)"   # the suffix of a module's peers unit
_ENV = "NETBAY_TEST_PEERS_LIST"
SECONDS = Path(__file__).with_name("unit_seconds.json")
PER_TEST = 0.5   # seconds, for a module SECONDS does not list


def peer_workers() -> int:
    return int(os.environ.get("NETBAY_TEST_PEER_WORKERS", "2"))


def configure(config: pytest.Config) -> None:
    """(``pytest_configure``) The controller of a ``-n`` run: a directory for the workers'
    lists, named in the environment the workers start with."""
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput") \
            and _ENV not in os.environ:
        where = tempfile.mkdtemp(prefix="nbtest-sched-")
        os.environ[_ENV] = where
        config.add_cleanup(lambda: (shutil.rmtree(where, ignore_errors=True), os.environ.pop(_ENV, None)))


def record_peers(config: pytest.Config, items: list[pytest.Item]) -> None:
    """(``pytest_collection_modifyitems``) A worker: the peers and lab tests it collected,
    for the controller's scheduler."""
    worker = getattr(config, "workerinput", {}).get("workerid")
    where = os.environ.get(_ENV)
    if worker is None or not where or not Path(where).is_dir():
        return
    marked = {mark: [item.nodeid for item in items if item.get_closest_marker(mark)] for mark in ("peers", "ovn")}
    tmp = Path(where) / f".{worker}"
    tmp.write_text(json.dumps(marked))
    tmp.rename(Path(where) / f"{worker}.json")


@pytest.hookimpl(optionalhook=True)   # without xdist (-p no:xdist) the hook does not exist
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:   # xdist: a Scheduling
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class PeersFirst(LoadFileScheduling):
        marked: dict[str, set[str]] | None = None
        seconds: dict[str, float] = {}
        any_rest = True   # whether the run has a unit that is not the peers' (else all workers take them)

        def schedule(self) -> None:
            if self.marked is None:   # once, before the first assignment (inside super().schedule)
                self.marked = _read_marked()
                self.seconds = unit_seconds()
                collected = next(iter(self.registered_collections.values()), [])
                self.any_rest = any(not _is_peers(self._split_scope(n)) for n in collected)
            super().schedule()

        def _split_scope(self, nodeid: str) -> str:
            marked = self.marked or {}
            if nodeid in marked.get("ovn", ()):
                return LAB
            module = super()._split_scope(nodeid)
            return module + PEERS if nodeid in marked.get("peers", ()) else module

        def _assign_work_unit(self, node: Any) -> None:
            scope = self._next_for(node)
            if scope is None:   # a worker that takes no peers unit, and only those are left
                return
            self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

        def _next_for(self, node: Any) -> str | None:
            if self._takes_peers(node):
                peers = LAB if LAB in self.workqueue else next((s for s in self.workqueue if _is_peers(s)), None)
                if peers is not None:
                    return peers
            return max((s for s in self.workqueue if not _is_peers(s)),
                       key=lambda s: self.seconds.get(s, PER_TEST * len(self.workqueue[s])), default=None)

        def _takes_peers(self, node: Any) -> bool:
            """One of the first workers; or any, in a run of only peers tests, or when those
            workers are gone (crashed: else their units would wait for ever)."""
            def first(n: Any) -> bool:
                return int(n.gateway.id.removeprefix("gw")) < peer_workers()

            return first(node) or not self.any_rest or \
                not any(first(n) and not n.shutting_down for n in self.nodes)

        def _reschedule(self, node: Any) -> None:
            # xdist shuts a worker down when the queue is empty; one left only units it may
            # not take idles (its run ends when the queue does: ``tests_finished``).
            if self.workqueue and not node.shutting_down and self._pending_of(self.assigned_work[node]) <= 2 \
                    and self._next_for(node) is None:
                return
            super()._reschedule(node)

    return PeersFirst(config, log)


def _is_peers(scope: str) -> bool:
    return scope == LAB or scope.endswith(PEERS)


def _read_marked() -> dict[str, set[str]]:
    where = os.environ.get(_ENV)
    for found in sorted(Path(where).glob("gw*.json")) if where else ():
        return {mark: set(ids) for mark, ids in json.loads(found.read_text()).items()}
    return {}


def unit_seconds() -> dict[str, float]:
    """Each module's wall seconds (``NETBAY_TEST_UNIT_SECONDS``, else :data:`SECONDS`); none
    when the file is missing or unreadable (then test counts order the queue)."""
    try:
        found = json.loads(Path(os.environ.get("NETBAY_TEST_UNIT_SECONDS", SECONDS)).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in found.items()} if isinstance(found, dict) else {}


def main(profile: str) -> None:
    """Write :data:`SECONDS` from a profiled run's rows (``NETBAY_TEST_CPU_PROFILE``)."""
    from tests.cpuprofile import rows

    walls: dict[str, float] = {}
    for _, row in rows(profile):
        module = row["id"].split("::")[0]
        walls[module] = walls.get(module, 0.0) + row["wall"]
    SECONDS.write_text(json.dumps({k: round(v, 1) for k, v in sorted(walls.items())}, indent=0) + "\n")


if __name__ == "__main__":
    import sys

    main(sys.argv[1])
