"""A Job's ``parallelism`` on the Docker runtime, as Kubernetes' Job controller keeps it.

At most ``parallelism`` of a Job's pods are made and unfinished at once; the next one
(in ordinal order) is made once an earlier one finishes, until ``completions`` pods
exist (:mod:`.workloads` expands them all; their ports are made up front, their
containers held back here). A pass that holds pods back arms a :class:`FollowUp`: it
watches the running pods of those Jobs and runs the next pass as soon as one finishes,
as the Job controller wakes on a pod's completion — no ``resync`` needed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from netbay.k8s.objects import PodWant
from netbay.k8s.podrun import Found

log = logging.getLogger(__name__)

Key = tuple[str, str]
POLL = 0.2   # seconds between looks at the running pods of a Job that holds pods back


def _ordinal(name: str) -> int:
    tail = name.rpartition("-")[2]
    return int(tail) if tail.isdigit() else -1


def held(pods: Mapping[Key, PodWant], keys: Iterable[Key], have: Mapping[Key, Found],
         finished: Callable[[Found], bool]) -> set[Key]:
    """Which of ``keys`` (pods this pass would make) wait for their Job's parallelism. A
    pod already made (its containers exist) is never held: only what is new waits."""
    out: set[Key] = set()
    for owner, mine in _jobs(pods, keys).items():
        limit = pods[mine[0]].parallelism or 0
        room = limit - len(_running(pods, owner, have, finished))
        for key in sorted(mine, key=lambda k: _ordinal(k[1])):
            if key in have and have[key].apps:
                continue   # made already: it runs, finished or not
            if room > 0:
                room -= 1
            else:
                out.add(key)
    return out


def watched(pods: Mapping[Key, PodWant], waiting: Iterable[Key], have: Mapping[Key, Found],
            finished: Callable[[Found], bool]) -> list[Found]:
    """The running pods of the Jobs that hold ``waiting`` back (after the pass made what
    it could): one of them finishing lets the next start."""
    return [f for owner in _jobs(pods, waiting) for f in _running(pods, owner, have, finished)]


def _jobs(pods: Mapping[Key, PodWant], keys: Iterable[Key]) -> dict[str, list[Key]]:
    jobs: dict[str, list[Key]] = {}
    for key in keys:
        pod = pods[key]
        if pod.parallelism is not None and pod.owner:
            jobs.setdefault(pod.owner, []).append(key)
    return jobs


def _running(pods: Mapping[Key, PodWant], owner: str, have: Mapping[Key, Found],
             finished: Callable[[Found], bool]) -> list[Found]:
    return [have[k] for k, p in pods.items() if p.owner == owner and k in have and have[k].apps
            and not finished(have[k])]


class FollowUp:
    """Runs ``run`` (the controller's next pass) once ``ready`` holds — polled every
    :data:`POLL` seconds on one daemon thread, re-armed by the pass it runs."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def arm(self, ready: Callable[[], bool], run: Callable[[], Any]) -> None:
        with self._lock:
            if self._thread is not None or self._stop.is_set():
                return
            self._thread = threading.Thread(target=self._watch, args=(ready, run), daemon=True,
                                            name="netbay-k8s-jobs")
            self._thread.start()

    def _watch(self, ready: Callable[[], bool], run: Callable[[], Any]) -> None:
        while not self._stop.wait(POLL):
            try:
                if not ready():
                    continue
            except Exception:  # noqa: BLE001 - a container gone (deleted): a pass settles it
                pass
            with self._lock:
                self._thread = None   # the pass may arm a new watch
            try:
                run()
            except Exception as exc:  # noqa: BLE001 - the next apply or resync tries again
                log.warning("Job follow-up pass failed: %s", exc)
            return

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)


__all__ = ["FollowUp", "POLL", "held", "watched"]
