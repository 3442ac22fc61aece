"""Port create and port list without HTTP: the service layer's own cost.

    python bench/service_only.py --db sqlite --ports 2000

Calls the same code the API calls (``Store.retrying`` around
``PORTS.create``, ``Store.read`` around ``PORTS.list``) in this process, one
at a time, so the difference to ``port_create.py``'s sequential figures is
what HTTP, auth, JSON and thread hand-offs add. Also reports how create cost
grows with the number of addresses already allocated in the subnet.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", default="sqlite", choices=["sqlite", "postgresql"])
    parser.add_argument("--ports", type=int, default=2000)
    parser.add_argument("--pg-fsync", choices=["on", "off"], default="on")
    args = parser.parse_args()
    if args.ports > 20_000:
        raise SystemExit("--ports ≤ 20000")
    root = Path(tempfile.mkdtemp(prefix="nbsvc-"))
    try:
        if args.db == "sqlite":
            run(f"sqlite:///{root / 'netbay.db'}", root, args.ports, "SQLite WAL")
        else:
            with harness.postgres(args.pg_fsync == "on") as pg:
                run(pg.create_database(), root, args.ports, f"{pg.version}; {pg.settings}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run(url: str, data_dir: Path, count: int, label: str) -> None:
    os.environ.setdefault("NETBAY_ADMIN_PASSWORD", harness.ADMIN_PASSWORD)
    from netbay.cli.bootstrap import ensure_public_network
    from netbay.context import Context
    from netbay.identity.service import Identity
    from netbay.network.registry import NETWORKS, PORTS, SUBNETS
    from netbay.network.resource import ListQuery
    from netbay.store import migrate
    from netbay.store.db import Store

    migrate.upgrade(url)
    store = Store(url)
    Identity(store).bootstrap(data_dir)
    ensure_public_network(store)
    ctx = Context.admin()
    with store.write() as s:
        net = NETWORKS.create(s, ctx, NETWORKS.create_body.model_validate({"name": "svc"}))
        SUBNETS.create(s, ctx, SUBNETS.create_body.model_validate(
            {"network_id": net.id, "cidr": "10.9.0.0/16", "ip_version": 4}))
    body = PORTS.create_body.model_validate({"network_id": net.id, "device_id": "dev"})

    def create_one(s):
        port = PORTS.create(s, ctx, body)
        s.flush()
        return PORTS.render(s, port, [])

    print(f"# service only — {harness.machine()}; {label}\n")
    lat: list[float] = []
    cpu0, wall0 = time.process_time(), time.perf_counter()
    marks = []
    for i in range(count):
        t0 = time.perf_counter()
        store.retrying(create_one)
        lat.append(time.perf_counter() - t0)
        if (i + 1) % max(count // 4, 1) == 0:
            recent = harness.summary(lat[-200:])
            marks.append(f"| {i + 1} | {recent['p50']:.2f} | {recent['p99']:.2f} |")
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    s = harness.summary(lat)
    print(f"create x{count}: p50 {s['p50']:.2f} ms, p99 {s['p99']:.2f} ms, {count / wall:.0f}/s, "
          f"{1000 * cpu / count:.2f} ms CPU each\n")
    print("| ports in subnet | p50 ms (last 200) | p99 ms (last 200) |\n|---|---|---|")
    print("\n".join(marks), "\n")
    for label_, filters, limit in (("list device_id=dev limit=100", {"device_id": ["dev"]}, 100),
                                   ("list network_id=net (all)", {"network_id": [net.id]}, None)):
        q = ListQuery(filters=filters, fields=[], sort=[], limit=limit, marker=None)
        lat = []
        for _ in range(20):
            t0 = time.perf_counter()
            with store.read() as rs:
                page = PORTS.list(rs, ctx, q)
            lat.append(time.perf_counter() - t0)
        s = harness.summary(lat)
        print(f"{label_}: {len(page.items)} items, p50 {s['p50']:.2f} ms, p99 {s['p99']:.2f} ms")
    store.dispose()


if __name__ == "__main__":
    main()
