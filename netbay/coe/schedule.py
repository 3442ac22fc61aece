"""Runs named steps in dependency order, a few at a time: the executor's scheduling,
apart from what a step does (:mod:`netbay.coe.executor`).

The first failure stops new work, but work already running finishes: a call that
went out is never abandoned half-way, so its row is written either way. A
``BaseException`` that is not an ``Exception`` (the executor's ``Interrupted``: a
simulated crash) propagates once the running work is done.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait


class StepFailed(RuntimeError):
    """One resource's step failed; said as Heat says it."""

    def __init__(self, name: str, type_: str, action: str, cause: BaseException) -> None:
        message = getattr(cause, "message", None) or str(cause) or type(cause).__name__
        super().__init__(f"Resource {action} failed: {name} ({type_}): {message}")


def run_in_order(names: Iterable[str], prereqs: Mapping[str, set[str]], work: Callable[[str], None], *,
                 workers: int) -> StepFailed | None:
    """Run ``work`` on every name once its prerequisites among ``names`` are done, up
    to ``workers`` at a time; the first failure, or None."""
    pending = set(names)
    done: set[str] = set()
    running: dict[Future[None], str] = {}
    failure: StepFailed | None = None
    crash: BaseException | None = None
    within = set(pending)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="netbay-stack") as pool:
        for _ in range(2 * len(pending) + 2):  # each round finishes at least one
            if failure is None and crash is None:
                for name in sorted(n for n in pending if prereqs.get(n, set()) & within <= done):
                    pending.discard(name)
                    running[pool.submit(work, name)] = name
            if not running:
                break
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for fut in finished:
                name = running.pop(fut)
                exc = fut.exception()
                if exc is None:
                    done.add(name)
                elif not isinstance(exc, Exception):
                    crash = crash or exc
                elif failure is None:
                    failure = exc if isinstance(exc, StepFailed) else StepFailed(name, "?", "?", exc)
    if crash is not None:
        raise crash
    if failure is None and pending:
        failure = StepFailed(min(pending), "?", "schedule", RuntimeError("unreachable prerequisites"))
    return failure
