"""The conductors, as Magnum lists its ``magnum-conductor`` services (``/v1/mservices``).

Each running conductor beats every ``report_interval`` seconds into its
(host, binary) row, as Magnum's periodic ``report_state`` does; a row is ``up``
while its last beat is younger than ``service_down_time`` (Magnum's defaults:
10 s and 180 s; ``NETBAY_CONDUCTOR_REPORT_INTERVAL`` / ``_DOWN_TIME``) and it is
not ``forced_down``. Rows outlive their process, as in Magnum: a stopped
conductor is listed ``down``.
"""

from __future__ import annotations

import os
import socket
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from netbay.coe.common import timestamp
from netbay.periodic import Periodic
from netbay.store.db import Store
from netbay.store.models import MService, utcnow

BINARY = "magnum-conductor"


def report_interval() -> float:
    return float(os.environ.get("NETBAY_CONDUCTOR_REPORT_INTERVAL", "10"))


def down_time() -> float:
    return float(os.environ.get("NETBAY_CONDUCTOR_DOWN_TIME", "180"))


def beat(store: Store, host: str, binary: str = BINARY) -> None:
    """One heartbeat: the row is made on the first, counted on every later one."""

    def write(s: Session) -> None:
        row = s.scalars(select(MService).where(MService.host == host, MService.binary == binary)
                        .with_for_update()).one_or_none()
        now = utcnow()
        if row is None:
            row = MService(host=host, binary=binary, report_count=0, disabled=False, forced_down=False,
                           created_at=now)
            s.add(row)
        row.report_count += 1
        row.last_seen_up = row.updated_at = now

    store.retrying(write)


class Heartbeat(Periodic):
    """A thread beating for one conductor until stopped: the first beat at once."""

    what = "conductor heartbeat"

    def __init__(self, store: Store, host: str | None = None, interval: float | None = None) -> None:
        super().__init__(interval if interval is not None else report_interval(), "netbay-conductor-heartbeat",
                         first=True)
        self.store = store
        self.host = host or socket.gethostname()

    def round(self) -> None:
        beat(self.store, self.host)


def is_up(row: MService, now: datetime, down_after: float) -> bool:
    """Magnum's ``service_is_up``: seen within ``down_after`` seconds and not forced down."""
    seen = row.last_seen_up or row.updated_at or row.created_at
    return not row.forced_down and seen is not None and now - seen <= timedelta(seconds=down_after)


def render(row: MService, now: datetime, down_after: float) -> dict[str, Any]:
    return {"id": row.id, "host": row.host, "binary": row.binary,
            "state": "up" if is_up(row, now, down_after) else "down",
            "report_count": row.report_count, "disabled": row.disabled,
            "disabled_reason": row.disabled_reason, "created_at": timestamp(row.created_at),
            "updated_at": timestamp(row.updated_at)}


def listing(session: Session, now: datetime | None = None, down_after: float | None = None) -> list[dict[str, Any]]:
    now = now or utcnow()
    down_after = down_time() if down_after is None else down_after
    return [render(row, now, down_after) for row in session.scalars(select(MService).order_by(MService.id))]
