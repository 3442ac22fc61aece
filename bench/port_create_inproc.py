"""Port create without HTTP: the CPU one ``Ports.create`` costs, transaction included.

    PYTHONPATH=<tree> python bench/port_create_inproc.py LABEL [--count N]

A member's port on its own network with a /16, through ``Store.retrying`` as the
API calls it, on a fresh SQLite file. Process CPU time per create is far less
sensitive to a busy machine than latency, so two source trees (a base and a
branch) can be compared in alternating runs on a shared host.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from netbay.context import Context
from netbay.network.registry import NETWORKS, PORTS, SUBNETS
from netbay.store.db import Store
from netbay.store.migrate import upgrade


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("label")
    parser.add_argument("--count", type=int, default=2000)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="nb-bench-"))
    try:
        url = f"sqlite:///{root}/netbay.db"
        upgrade(url)
        store = Store(url)
        ctx = Context("bench", "bench-project", ("member",))
        net = store.retrying(lambda s: NETWORKS.create(s, ctx, NETWORKS.create_body.model_validate(
            {"name": "bench"})).id)
        store.retrying(lambda s: SUBNETS.create(s, ctx, SUBNETS.create_body.model_validate(
            {"network_id": net, "ip_version": 4, "cidr": "10.0.0.0/16"})))
        body = PORTS.create_body.model_validate({"network_id": net})

        def create(s):
            return PORTS.rendered(s, PORTS.create(s, ctx, body))

        for _ in range(200):  # warm-up: caches, the default security group
            store.retrying(create)
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(args.count):
            store.retrying(create)
        cpu_ms = 1000 * (time.process_time() - cpu) / args.count
        wall_ms = 1000 * (time.perf_counter() - wall) / args.count
        print(f"{args.label}: {args.count} creates, CPU {cpu_ms:.3f} ms/create, wall {wall_ms:.3f} ms/create")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
