"""Port create through the network backend seam, against a real Neutron.

    python bench/backend_ports.py --ports 200 --reps 3

One run starts Keystone and Neutron's API server from PyPI
(``tests/peers/openstack_cloud.py``: SQLite, uWSGI, no agents) and, in
alternating repetitions on one network, creates ``--ports`` ports
sequentially:

* ``sdk``: openstacksdk → Neutron directly (``conn.network.create_port``), the baseline;
* ``netbay-openstack``: ``NetworkBackend("openstack").create("port", …)`` → the same Neutron;
* ``netbay-embedded``: ``NetworkBackend("embedded")`` on a fresh SQLite store on the
  same machine — what one machine buys, side by side.

It prints wall time per pass and the seam's overhead (netbay-openstack / sdk).
Every port is deleted afterwards (not timed).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from netbay.backends import open_backend  # noqa: E402
from netbay.store import migrate  # noqa: E402
from netbay.store.db import Store  # noqa: E402
from tests.peers.openstack_cloud import openstack_cloud  # noqa: E402


def _timed(create, network_id: str, n: int) -> tuple[float, list[str]]:  # noqa: ANN001
    ids: list[str] = []
    start = time.perf_counter()
    for _ in range(n):
        ids.append(create(network_id))
    return time.perf_counter() - start, ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ports", type=int, default=200)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="nb-bench-peers-") as tmp, openstack_cloud(Path(tmp) / "cloud") as cloud:
        conn = cloud.connection()
        remote = open_backend("openstack", connection=conn)
        url = f"sqlite:///{tmp}/embedded.db"
        migrate.upgrade(url)
        store = Store(url)
        local = open_backend("embedded", store=store)
        nets = {}
        for name, backend in (("remote", remote), ("local", local)):
            net = backend.create("network", {"name": "bench"})
            backend.create("subnet", {"network_id": net["id"], "cidr": "10.80.0.0/16", "ip_version": 4})
            nets[name] = (backend, net["id"])
        ways = {
            "sdk": (lambda net: conn.network.create_port(network_id=net).id, nets["remote"]),
            "netbay-openstack": (lambda net: remote.create("port", {"network_id": net})["id"], nets["remote"]),
            "netbay-embedded": (lambda net: local.create("port", {"network_id": net})["id"], nets["local"]),
        }
        for way in ways:  # warm every path once (connections, token, caches)
            create, (backend, net) = ways[way]
            backend.delete("port", create(net))
        times: dict[str, list[float]] = {w: [] for w in ways}
        for rep in range(args.reps):
            for way, (create, (backend, net)) in ways.items():
                seconds, ids = _timed(create, net, args.ports)
                times[way].append(seconds)
                for port_id in ids:
                    backend.delete("port", port_id)
            print(f"rep {rep + 1}: " + ", ".join(f"{w} {times[w][-1]:.2f} s" for w in ways), flush=True)
        store.dispose()
        conn.close()
    load.append(os.getloadavg()[0])
    med = {w: statistics.median(v) for w, v in times.items()}
    paired = statistics.median(o / s for o, s in zip(times["netbay-openstack"], times["sdk"], strict=True))
    print(f"\n{args.ports} sequential port creates, median of {args.reps}; load {load[0]:.2f} → {load[1]:.2f}")
    print("| path | wall s | ms/port | vs sdk → Neutron |\n|---|---|---|---|")
    for way, seconds in med.items():
        print(f"| {way} | {seconds:.2f} | {1000 * seconds / args.ports:.1f} | {seconds / med['sdk']:.1%} |")
    print(f"seam overhead (paired median): {paired - 1:+.1%} (target ≤ +10%)")
    if args.json:
        args.json.write_text(json.dumps({"times": times, "paired": paired, "load": load}))


if __name__ == "__main__":
    main()
