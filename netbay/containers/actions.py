"""Zun's action records (``/v1/containers/<id>/container_actions``): what each request
did to a container, and how it ended.

A request that changes a container (create, start, stop, reboot, rebuild, pause,
unpause, kill, update, network attach/detach) writes a record with the request's id
when it is accepted; the Docker job that carries it out adds its one event
(``compute__do_container_<action>``) and the finish time: ``Success``, or ``Error``
with the reason as the event's traceback and the record's message (tracebacks are
shown to admins only, as Zun's ``container:action:events`` rule has it).
"""

from __future__ import annotations

from concurrent.futures import Future
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.context import Context
from netbay.errors import NotFound
from netbay.store.db import Store
from netbay.store.models import ContainerAction, utcnow_precise as utcnow


def start(session: Session, ctx: Context, container_id: str, action: str, request_id: str) -> str:
    """A new record, its job under way; its id."""
    record = ContainerAction(container_id=container_id, request_id=request_id, action=action,
                             project_id=ctx.project_id, user_id=ctx.user_id, start_time=utcnow(), events=[])
    session.add(record)
    session.flush()
    return record.id


def finish(store: Store, record_id: str, began: datetime, failure: str | None) -> None:
    """The job's event and end: ``failure`` is None when it succeeded."""
    def write(s: Session) -> None:
        record = s.get(ContainerAction, record_id, with_for_update=True)
        if record is None:   # the container (and its records) went meanwhile
            return
        now = utcnow()
        event = {"event": f"compute__do_container_{record.action}", "start_time": strtime(began),
                 "finish_time": strtime(now), "result": "Error" if failure else "Success", "traceback": failure}
        record.events = [*(record.events or []), event]
        record.finish_time = now
        if failure:
            record.message = failure
    store.retrying(write)


def follow(store: Store, record_id: str, job: Future) -> None:
    """Finish the record when the Docker job ends (the job's result: None, or why it failed)."""
    began = utcnow()

    def done(f: Future) -> None:
        failure = "Cancelled: netbay stopped before the job ran." if f.cancelled() else \
            (str(f.exception()) if f.exception() is not None else f.result())
        finish(store, record_id, began, failure)
    job.add_done_callback(done)


FINISH_TIME_SINCE = (1, 33)   # Zun shows an action's finish_time from this version on


def listing(session: Session, container_id: str, version: tuple[int, int]) -> list[dict[str, Any]]:
    found = session.scalars(select(ContainerAction).where(ContainerAction.container_id == container_id)
                            .order_by(ContainerAction.start_time.desc(), ContainerAction.id))
    return [render(a, version) for a in found]


def get(session: Session, container_id: str, request_id: str, version: tuple[int, int], *,
        tracebacks: bool) -> dict[str, Any]:
    """One record by its request's id, with its events; Zun's 404 else."""
    record = session.scalars(select(ContainerAction).where(ContainerAction.container_id == container_id,
                                                           ContainerAction.request_id == request_id)).first()
    if record is None:
        raise NotFound(f"Action {request_id} could not be found.")
    out = render(record, version)
    out["events"] = [dict(e, traceback=e.get("traceback") if tracebacks else None) for e in record.events or ()]
    return out


def render(a: ContainerAction, version: tuple[int, int]) -> dict[str, Any]:
    out = {"action": a.action, "container_uuid": a.container_id, "message": a.message,
           "project_id": a.project_id, "request_id": a.request_id, "start_time": strtime(a.start_time),
           "user_id": a.user_id}
    if version >= FINISH_TIME_SINCE:
        out["finish_time"] = strtime(a.finish_time)
    return out


def strtime(value: datetime | None) -> str | None:
    """Zun's ``strtime``: ``2018-03-04T17:03:07.000000``."""
    return value.strftime("%Y-%m-%dT%H:%M:%S.%f") if value is not None else None
