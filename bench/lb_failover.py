"""Load balancer failover -> VIP answers again, and the cost of one statistics round.

    sudo python bench/lb_failover.py [--runs 20] [--json out.json]

The same set-up as ``bench/lb_create.py`` (``netbay up`` with its agent, SQLite, a
throwaway namespace prefix; a member sandbox answering with its name, a client
sandbox). One load balancer (fully populated create); then, ``--runs`` times:
``PUT …/loadbalancers/{id}/failover`` and connect from the client until the member
answers through the VIP again after the namespace was rebuilt (its inode changed),
then wait for ``ACTIVE``. Statistics: one round as the agent's sender does it for
this load balancer, idle (a counter listing) and after traffic (+ a conntrack dump),
timed here.

Baseline in the same run: the fully populated create -> VIP answers (what a failover
rebuilds, plus the API work of creating it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
sys.path.insert(0, os.path.abspath(os.path.dirname(__file__)))

import lb_create
from harness import machine
from lb_create import LB, MEMBER_PORT, PREFIX, VIP_PORT, Backend, Client, pct, server, setup, sweep
from netbay.dataplane import lbstats, netns
from netbay.dataplane.lb.table import FAMILY, TABLE
from netbay.dataplane.nft import Nft


def failover_once(api: Client, lb: dict, ns: str, client_ns: str) -> tuple[float, float]:
    """Seconds from the failover request until the VIP answers again, and until ACTIVE."""
    old = netns.inode(ns)
    t0 = time.monotonic()
    api.call("PUT", f"{LB}/loadbalancers/{lb['id']}/failover", 202)
    for _ in range(1_000_000):
        if netns.inode(ns) != old:
            break
        if time.monotonic() - t0 > lb_create.STEP_TIMEOUT:
            raise RuntimeError("the namespace was not rebuilt")
        time.sleep(0.0005)
    lb_create.until_answer(client_ns, lb["vip_address"], VIP_PORT, b"member")
    answered = time.monotonic() - t0
    api.wait_active(lb["id"])
    return answered, time.monotonic() - t0


def stats_round(ns: str) -> tuple[float, float]:
    """(an idle round: the counter listing; a round after traffic: + the conntrack dump)."""
    with Nft(ns) as nft:
        t0 = time.monotonic()
        lbstats.read_counters(nft, FAMILY, TABLE)
        t1 = time.monotonic()
        lbstats.open_connections(ns)
        lbstats.read_counters(nft, FAMILY, TABLE)
        return t1 - t0, time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if not 5 <= args.runs <= 200:
        raise SystemExit("--runs must be between 5 and 200")
    if os.geteuid() != 0:
        raise SystemExit("needs root (network namespaces)")
    load_before = os.getloadavg()
    backend = None
    try:
        with server(False) as url:
            api = Client(url)
            env = setup(api)
            client_ns = f"{PREFIX}s-{env['client']['id']}"
            backend = Backend(f"{PREFIX}s-{env['member_sandbox']['id']}", "member")
            lb_create.one_populated_lb(api, env, client_ns)   # warm-up
            base = [lb_create.one_populated_lb(api, env, client_ns) for _ in range(args.runs)]
            lb = api.create(f"{LB}/loadbalancers", "loadbalancer", {
                "name": "failover", "vip_subnet_id": env["subnet"]["id"], "listeners": [{
                    "protocol": "TCP", "protocol_port": VIP_PORT, "default_pool": {
                        "protocol": "TCP", "lb_algorithm": "ROUND_ROBIN",
                        "members": [{"address": env["member_ip"], "protocol_port": MEMBER_PORT}]}}]})
            api.wait_active(lb["id"])
            ns = f"{PREFIX}lb-{lb['id']}"
            lb_create.until_answer(client_ns, lb["vip_address"], VIP_PORT, b"member")
            rounds = [stats_round(ns) for _ in range(args.runs)]
            runs = [failover_once(api, lb, ns, client_ns) for _ in range(args.runs)]
    finally:
        if backend is not None:
            backend.close()
        sweep()
    answered, active = [r[0] for r in runs], [r[1] for r in runs]
    out = {
        "machine": machine(), "runs": args.runs, "load_before": load_before, "load_after": os.getloadavg(),
        "failover_to_answer_ms": {"p50": pct(answered, 50), "p90": pct(answered, 90), "max": max(answered) * 1e3},
        "failover_to_active_ms": {"p50": pct(active, 50), "p90": pct(active, 90)},
        "stats_round_idle_ms": {"p50": pct([r[0] for r in rounds], 50), "p90": pct([r[0] for r in rounds], 90)},
        "stats_round_busy_ms": {"p50": pct([r[1] for r in rounds], 50), "p90": pct([r[1] for r in rounds], 90)},
        "baseline_populated_create_to_answer_ms": {"p50": pct(base, 50), "p90": pct(base, 90)},
    }
    print(f"machine: {out['machine']}; load {load_before[0]:.2f} -> {out['load_after'][0]:.2f}")
    f = out["failover_to_answer_ms"]
    print(f"failover -> VIP answers again (n={args.runs}): p50 {f['p50']:.1f} ms, p90 {f['p90']:.1f} ms, "
          f"max {f['max']:.1f} ms; -> ACTIVE p50 {out['failover_to_active_ms']['p50']:.1f} ms")
    idle, busy = out["stats_round_idle_ms"], out["stats_round_busy_ms"]
    print(f"one statistics round for the load balancer: idle p50 {idle['p50']:.2f} ms (p90 {idle['p90']:.2f}); "
          f"after traffic (+ conntrack dump) p50 {busy['p50']:.2f} ms (p90 {busy['p90']:.2f})")
    b = out["baseline_populated_create_to_answer_ms"]
    print(f"baseline: fully populated create -> VIP answers: p50 {b['p50']:.1f} ms, p90 {b['p90']:.1f} ms")
    if args.json:
        args.json.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
