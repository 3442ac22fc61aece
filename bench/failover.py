"""Conductor failover: a cluster's owner SIGKILLed mid-build -> the other process resumes it.

    python bench/failover.py [--runs 3] [--nodes 3] [--json out.json]

Two ``netbay up --no-agent`` processes (A, B: own data dirs, own ports) on one fresh
PostgreSQL database per run. A cluster is created through A; once A holds its work
lease and the build has made ``--made`` resources, A is SIGKILLed. Measured from the
kill: until B holds the lease (the takeover: the build resumes), and until the cluster
is ``CREATE_COMPLETE``. The lease lasts ``worklease.TTL`` s unrenewed, renewed every
``RENEW`` s and looked for every ``SCAN`` s, so the takeover is bounded by TTL + SCAN.

Baseline in the same run: the same cluster built through B with nobody killed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
sys.path.insert(0, os.path.abspath(os.path.dirname(__file__)))

from harness import _serve, machine, postgres
from netbay.coe import worklease

CI = "/container-infra/v1"
STEP_TIMEOUT = 240.0


def client(srv) -> httpx.Client:
    return httpx.Client(base_url=srv.url, headers={"X-Auth-Token": srv.token()}, timeout=60)


def prepare(api: httpx.Client) -> str:
    """Unlimited quotas for admin, and a template without load balancers (no agent here)."""
    project = api.get("/identity/v3/projects", params={"name": "admin"}).json()["projects"][0]["id"]
    api.put(f"/network/v2.0/quotas/{project}", json={"quota": {k: -1 for k in (
        "security_group", "security_group_rule", "floatingip", "router", "network", "subnet", "port")}}
            ).raise_for_status()
    r = api.post(f"{CI}/clustertemplates", json={
        "name": "fo", "coe": "kubernetes", "external_network_id": "public", "network_driver": "flannel",
        "floating_ip_enabled": True, "master_lb_enabled": False})
    r.raise_for_status()
    return r.json()["uuid"]


def create(api: httpx.Client, template: str, name: str, nodes: int) -> str:
    r = api.post(f"{CI}/clusters", json={"name": name, "cluster_template_id": template, "node_count": nodes})
    r.raise_for_status()
    return r.json()["uuid"]


def until(check, what: str) -> float:
    """Poll ``check`` (every 10 ms) until true; the monotonic time it became so."""
    deadline = time.monotonic() + STEP_TIMEOUT
    while time.monotonic() < deadline:
        if check():
            return time.monotonic()
        time.sleep(0.01)
    raise SystemExit(f"timed out waiting for {what}")


def status(api: httpx.Client, cid: str) -> str:
    return api.get(f"{CI}/clusters/{cid}").json()["status"]


def lease_owner(engine, cid: str) -> str | None:
    with engine.connect() as conn:
        return conn.execute(text("SELECT owner FROM coe_work_leases WHERE cluster_id = :c"), {"c": cid}).scalar()


def made(api: httpx.Client, cid: str) -> int:
    rows = api.get(f"{CI}/clusters/{cid}/resources").json().get("resources", [])
    return len([r for r in rows if r.get("physical_id")])


def one_run(pg, args: argparse.Namespace, i: int) -> dict:
    url = pg.create_database()
    engine = create_engine(url)
    roots = [Path(tempfile.mkdtemp(prefix=f"nbbench-fo{i}{x}-")) for x in "ab"]
    try:
        with _serve(url, roots[0], None) as a, _serve(url, roots[1], None) as b:
            api_a, api_b = client(a), client(b)
            template = prepare(api_a)
            # Baseline: an uninterrupted build through B.
            t0 = time.monotonic()
            base = create(api_b, template, f"base{i}", args.nodes)
            done = until(lambda: status(api_b, base) in ("CREATE_COMPLETE", "CREATE_FAILED"), "baseline build")
            assert status(api_b, base) == "CREATE_COMPLETE"
            baseline = done - t0

            cid = create(api_a, template, f"fo{i}", args.nodes)
            mark_a, mark_b = f":{a.proc.pid}:", f":{b.proc.pid}:"
            until(lambda: mark_a in (lease_owner(engine, cid) or "") and made(api_a, cid) >= args.made,
                  "A to hold the lease and build")
            at_kill = made(api_a, cid)
            a.proc.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            a.proc.wait(timeout=10)
            taken = until(lambda: mark_b in (lease_owner(engine, cid) or ""), "B to take the lease over")
            done = until(lambda: status(api_b, cid) in ("CREATE_COMPLETE", "CREATE_FAILED"), "the resumed build")
            final = status(api_b, cid)
            assert final == "CREATE_COMPLETE", api_b.get(f"{CI}/clusters/{cid}").json()["status_reason"]
            api_a.close()
            api_b.close()
            return {"baseline_build_s": baseline, "resources_at_kill": at_kill,
                    "takeover_s": taken - killed, "complete_after_kill_s": done - killed}
    finally:
        engine.dispose()
        for root in roots:
            import shutil
            shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=3, help="worker nodes of the cluster")
    parser.add_argument("--made", type=int, default=4, help="resources made before the kill")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    print(f"# failover — {machine()}; load {os.getloadavg()[0]:.1f}")
    print(f"# lease TTL {worklease.TTL} s, renewed every {worklease.RENEW} s, scanned every {worklease.SCAN} s")
    results = []
    with postgres(True) as pg:
        print(f"# {pg.version}; {pg.settings}")
        for i in range(args.runs):
            r = one_run(pg, args, i)
            results.append(r)
            print(f"  run {i}: killed at {r['resources_at_kill']} resources; takeover {r['takeover_s']:.2f} s, "
                  f"CREATE_COMPLETE {r['complete_after_kill_s']:.2f} s after the kill "
                  f"(baseline build {r['baseline_build_s']:.2f} s)")
    take = [r["takeover_s"] for r in results]
    print(f"takeover after SIGKILL: median {statistics.median(take):.2f} s, max {max(take):.2f} s "
          f"(target <= 10 s: {'met' if max(take) <= 10 else 'MISSED'})")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
