"""A change → the long poll that carries it, old tree against this one, alternated.

    python bench/change_wake.py [--samples 100] [--old-tree DIR]

The hop of issue 12's NetworkPolicy path that the change stream owns: from a ``PUT
/ports`` (a security-group change, as a policy's label change makes) until a long poll
parked on ``/netbay/v1/changes`` (as the dataplane agent's) has the change. Two ``netbay
up --no-agent`` servers on SQLite run side by side — this tree's and ``--old-tree``'s
(a checkout whose ``netbay`` package is imported instead, e.g. ``/work/main``) — and the
samples alternate between them, so both see the same machine. No dataplane, no root.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

NET = "/network/v2.0"


@contextmanager
def server_of(tree: Path | None):
    """``netbay up`` importing ``tree``'s package (the child's cwd comes first on its path)."""
    here = os.getcwd()
    if tree is not None:
        os.chdir(tree)
    try:
        cm = harness.netbay("sqlite")
        srv = cm.__enter__()
    finally:
        os.chdir(here)
    try:
        yield srv
    finally:
        cm.__exit__(None, None, None)


class Target:
    def __init__(self, srv: harness.Server, name: str) -> None:
        self.name = name
        self.http = httpx.Client(base_url=srv.url, headers={"X-Auth-Token": srv.token()}, timeout=30)
        self.poll = httpx.Client(base_url=srv.url, headers={"X-Auth-Token": srv.token()}, timeout=30)
        net = self.ok(self.http.post(f"{NET}/networks", json={"network": {"name": "w"}}), 201)["network"]
        self.ok(self.http.post(f"{NET}/subnets", json={"subnet": {
            "network_id": net["id"], "cidr": "10.77.0.0/24", "ip_version": 4}}), 201)
        self.port = self.ok(self.http.post(f"{NET}/ports", json={"port": {"network_id": net["id"]}}), 201)["port"]
        self.groups = [self.ok(self.http.post(f"{NET}/security-groups", json={"security_group": {
            "name": f"g{i}"}}), 201)["security_group"]["id"] for i in range(2)]
        self.head = self.latest()
        self.n = 0

    @staticmethod
    def ok(r: httpx.Response, status: int = 200) -> dict:
        if r.status_code != status:
            raise RuntimeError(f"{r.request.method} {r.request.url}: {r.status_code} {r.text}")
        return r.json()

    def latest(self) -> int:
        rev = 0
        for _ in range(10_000):
            page = self.ok(self.poll.get("/netbay/v1/changes", params={"since": rev}))
            if not page["changes"]:
                return rev
            rev = page["revision"]
        raise RuntimeError("the change stream did not end")

    def sample(self) -> tuple[float, float]:
        """(PUT → the parked long poll has it, PUT → its answer), seconds."""
        got: dict[str, float] = {}

        def park() -> None:
            page = self.ok(self.poll.get("/netbay/v1/changes", params={"since": self.head, "wait": 5}))
            got["at"] = time.perf_counter()
            got["rev"] = page["revision"]
        t = threading.Thread(target=park)
        t.start()
        time.sleep(0.03)  # parked
        self.n += 1
        groups = self.groups[:1] if self.n % 2 else self.groups
        t0 = time.perf_counter()
        self.ok(self.http.put(f"{NET}/ports/{self.port['id']}", json={"port": {"security_groups": groups}}))
        answered = time.perf_counter() - t0
        t.join(10)
        if "at" not in got:
            raise RuntimeError("the long poll did not answer")
        self.head = int(got["rev"])
        return got["at"] - t0, answered


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=int, default=100)
    ap.add_argument("--old-tree", type=Path, help="a checkout whose netbay package is the baseline")
    args = ap.parse_args()
    with ExitStack() as stack:
        trees = {"this tree": None}
        if args.old_tree:
            trees["old tree"] = args.old_tree.resolve()
        targets = [Target(stack.enter_context(server_of(tree)), name) for name, tree in trees.items()]
        load = [os.getloadavg()[0]]
        res: dict[str, list[tuple[float, float]]] = {t.name: [] for t in targets}
        for _ in range(5):
            for t in targets:
                t.sample()  # warm-up
        for _ in range(args.samples):
            for t in targets:
                res[t.name].append(t.sample())
        load.append(os.getloadavg()[0])
    rows = []
    for name, xs in res.items():
        seen = sorted(x[0] * 1e3 for x in xs)
        put = sorted(x[1] * 1e3 for x in xs)
        rows.append([name, f"{statistics.median(seen):.2f}", f"{seen[int(0.9 * (len(seen) - 1))]:.2f}",
                     f"{statistics.median(put):.2f}"])
    print(harness.markdown_table(["server", "PUT → long poll has it p50 ms", "p90 ms", "PUT answered p50 ms"], rows))
    print(f"{args.samples} samples each, alternated; load {load[0]:.1f} → {load[1]:.1f}; {harness.machine()}")


if __name__ == "__main__":
    main()
