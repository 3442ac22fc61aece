"""What the quota check adds to a create: ``netbay.network.quotas.enforce`` in process.

    python bench/quota_check.py --db sqlite,postgresql

The HTTP benchmark (bench/port_create.py) is too noisy on a shared machine to see a
fraction of a millisecond, so this times the check itself, in the transaction it
runs in, against a baseline ``SELECT 1`` round trip on the same connection. Cases:

* unlimited (the project's port quota set to -1): a primary-key read of the limit;
* Neutron's default port limit (500) with 500 ports held: that read plus a count
  capped at 501 index entries — the most this check ever reads at the default;
* a limit of 100,000 with 5,000 ports held: the count reads all 5,000 entries (the
  cost grows with what the project holds, up to its limit).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sqlalchemy import insert, text

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

from netbay.network import quotas
from netbay.store.db import Store
from netbay.store.models import Base, Network, Port, Quota, new_id, utcnow


def _fill(store: Store, project: str, ports: int) -> None:
    with store.write() as s:
        net = new_id()
        s.execute(insert(Network.__table__), [{"id": net, "project_id": project, "name": "q", "description": "",
                                               "shared": False, "external": False, "mtu": 1500,
                                               "admin_state_up": True, "status": "ACTIVE",
                                               "segmentation_id": abs(hash(project)) % 10**6 + 100,
                                               "created_at": utcnow(), "updated_at": utcnow(),
                                               "revision_number": 0}])
        rows = [{"id": new_id(), "project_id": project, "name": "", "description": "", "network_id": net,
                 "mac_address": f"fa:16:3e:{i >> 16 & 255:02x}:{i >> 8 & 255:02x}:{i & 255:02x}",
                 "admin_state_up": True, "status": "DOWN", "device_id": "", "device_owner": "",
                 "binding_host_id": "", "port_security_enabled": True, "allowed_address_pairs": [],
                 "created_at": utcnow(), "updated_at": utcnow(), "revision_number": 0} for i in range(ports)]
        if rows:
            s.execute(insert(Port.__table__), rows)


def _time(store: Store, fn, n: int) -> float:
    """Median µs of ``fn(session)`` over ``n`` calls, each in its own write transaction
    (where a create runs it)."""
    samples = []
    for _ in range(n):
        with store.write() as s:
            s.connection()  # the transaction is open before the clock starts
            t0 = time.perf_counter()
            fn(s)
            samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1e6


def run(url: str, n: int) -> list[tuple[str, float]]:
    store = Store(url)
    Base.metadata.create_all(store.engine)
    _fill(store, "unlimited", 500)
    _fill(store, "default", 500)
    _fill(store, "big", 5000)
    with store.write() as s:
        s.add_all([Quota(project_id="unlimited", resource="port", limit=-1),
                   Quota(project_id="big", resource="port", limit=100_000)])

    def refused(project: str):
        def check(s):
            try:
                quotas.enforce(s, "port", project)
            except Exception:  # noqa: BLE001 - 500 of 500 held: refused, as it should be
                pass
        return check

    rows = [
        ("baseline: SELECT 1 on the same connection", _time(store, lambda s: s.execute(text("SELECT 1")), n)),
        ("unlimited (-1), 500 ports held", _time(store, lambda s: quotas.enforce(s, "port", "unlimited"), n)),
        ("default limit 500, 500 held (count capped at 501)", _time(store, refused("default"), n)),
        ("limit 100,000, 5,000 held (count reads 5,000)", _time(store, lambda s: quotas.enforce(s, "port", "big"), n)),
    ]
    store.dispose()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", default="sqlite,postgresql")
    parser.add_argument("-n", type=int, default=2000, help="calls per case")
    args = parser.parse_args()
    print(f"# quota check per create — {harness.machine()}; median of {args.n} calls\n")
    for db in [d for d in args.db.split(",") if d]:
        if db == "sqlite":
            with tempfile.TemporaryDirectory(prefix="nbbench-q-") as tmp:
                rows = run(f"sqlite:///{tmp}/q.db", args.n)
            label = "SQLite (WAL, file)"
        else:
            with harness.postgres(True) as pg:
                rows = run(pg.create_database(), args.n)
                label = f"{pg.version}, TCP loopback"
        print(f"### {label}\n")
        print(harness.markdown_table(["case", "µs per check (median)"], [[c, f"{us:.0f}"] for c, us in rows]))
        print()


if __name__ == "__main__":
    main()
