"""Port API call → packets flow, and 100 sandboxes wired: the dataplane's end-to-end speed.

    sudo python bench/wiring.py --samples 30 --sandboxes 100 --json /tmp/wiring.json

Starts ``netbay up --no-agent`` (bench/harness.py, SQLite by default) and runs the
dataplane agent in this process on a thread, with its own namespace prefix
``nbb<hex>-`` (every namespace it makes is swept at the end, also on failure).
On one network, a peer sandbox answers ICMP; then, per sample:

* **baseline** — the netlink work alone, no API: ``links.wire_port`` plugs a fresh
  namespace into a bridge of a bench namespace (veth, MAC, MTU, address, route), then
  the first ICMP answer from a peer on that bridge;
* **port API call → first packet** — ``POST /ports`` bound to an existing empty
  sandbox (``device_owner netbay:sandbox``), timed until the first ICMP answer from the
  peer through the new port (the agent sees the change, wires it, sets ACTIVE);
* **sandbox API call → first packet** — ``POST /netbay/v1/sandboxes`` with a network
  (namespace and port made together), until the first answer;
* **100 sandboxes** — created back to back through the API until all their ports are
  ACTIVE and wired, and the last one answers ICMP.

Targets (issue 3): port API call → packets flow p50 ≤ 30 ms; 100 sandboxes ≤ 3 s.
Root is needed (namespaces, raw ICMP sockets). Traffic stays between the bench's
namespaces (10.231.0.0/16).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "dataplane"))
import agent_thread
import harness
from dp_helpers import ping  # in-process ICMP from inside a namespace

from netbay.dataplane import links, netns
from netbay.dataplane.names import Names

PREFIX = f"nbb{secrets.token_hex(3)}-"
SANDBOX_OWNER = "netbay:sandbox"
CIDR = "10.231.0.0/16"


def first_answer(ns: str, dst: str, timeout: float = 5.0) -> float:
    """Seconds until an ICMP echo from ``ns`` to ``dst`` is answered (bounded)."""
    t0 = time.monotonic()
    for _ in range(100_000):
        if time.monotonic() - t0 > timeout:
            break
        try:
            if ping(ns, dst, timeout=0.003):
                return time.monotonic() - t0
        except OSError:  # namespace or interface not there yet
            time.sleep(0.001)
    raise RuntimeError(f"no ICMP answer from {dst} in {ns} after {timeout}s")


def ok(r: httpx.Response, status: int = 200) -> dict:
    if r.status_code != status:
        raise RuntimeError(f"{r.request.method} {r.request.url}: {r.status_code} {r.text}")
    return r.json() if r.content else {}


def baseline(samples: int) -> list[float]:
    """wire_port into a bridge of our own namespace, then the first answer from a peer."""
    fabric = f"{PREFIX}base"
    netns.create(fabric)
    links.bridge(fabric, "br0")
    links.wire_port(fabric, "br0", f"{PREFIX}bpeer", host_ifname="tpeer", cidrs=["10.231.255.1/24"])
    out = []
    for i in range(samples):
        ns = f"{PREFIX}b{i}"
        t0 = time.monotonic()
        links.wire_port(fabric, "br0", ns, host_ifname=f"tb{i}", cidrs=[f"10.231.255.{10 + i}/24"])
        first_answer(ns, "10.231.255.1")
        out.append(time.monotonic() - t0)
    return out


def summary(values: list[float]) -> dict[str, float]:
    ms = sorted(v * 1e3 for v in values)
    return {"n": len(ms), "p50": statistics.median(ms), "p90": ms[int(0.9 * (len(ms) - 1))], "max": ms[-1]}


def run(args: argparse.Namespace) -> dict:
    load_before = os.getloadavg()
    result: dict = {"machine": harness.machine(), "prefix": PREFIX}
    result["baseline_wire_port"] = summary(baseline(args.samples))
    names = Names(PREFIX)
    with harness.netbay(args.db) as srv, agent_thread.running(srv, names):
        result["database"] = srv.database
        http = httpx.Client(base_url=srv.url, headers={"X-Auth-Token": srv.token()}, timeout=30)
        result.update(measure(http, names, args))
        http.close()
    result["load_before_after"] = [round(load_before[0], 2), round(os.getloadavg()[0], 2)]
    return result


def measure(http: httpx.Client, names: Names, args: argparse.Namespace) -> dict:
    net = ok(http.post("/network/v2.0/networks", json={"network": {"name": "wiring"}}), 201)["network"]
    ok(http.post("/network/v2.0/subnets", json={"subnet": {
        "network_id": net["id"], "cidr": CIDR, "ip_version": 4}}), 201)

    def sandbox(name: str, networks: list[str] | None = None) -> dict:
        body: dict = {"name": name}
        if networks is not None:
            body["networks"] = networks
        return ok(http.post("/netbay/v1/sandboxes", json={"sandbox": body}), 201)["sandbox"]

    def ip_of(port_id: str) -> str:
        return ok(http.get(f"/network/v2.0/ports/{port_id}"))["port"]["fixed_ips"][0]["ip_address"]

    peer = sandbox("peer", [net["id"]])
    peer_ip = ip_of(peer["ports"][0]["port_id"])
    first_answer(names.sandbox(peer["id"]), peer_ip, timeout=10)
    host = ok(http.get(f"/netbay/v1/sandboxes/{peer['id']}"))["sandbox"]["host"]
    empties = [sandbox(f"m{i}") for i in range(args.samples)]
    for sb in empties:
        deadline = time.monotonic() + 10
        while not netns.exists(names.sandbox(sb["id"])) and time.monotonic() < deadline:
            time.sleep(0.005)
    port_api, api_only = [], []
    for sb in empties:
        t0 = time.monotonic()
        ok(http.post("/network/v2.0/ports", json={"port": {
            "network_id": net["id"], "device_owner": SANDBOX_OWNER, "device_id": sb["id"],
            "binding:host_id": host}}), 201)
        api_only.append(time.monotonic() - t0)
        first_answer(names.sandbox(sb["id"]), peer_ip)
        port_api.append(time.monotonic() - t0)
    sandbox_api = []
    for i in range(args.samples):
        t0 = time.monotonic()
        sb = sandbox(f"s{i}", [net["id"]])
        first_answer(names.sandbox(sb["id"]), peer_ip)
        sandbox_api.append(time.monotonic() - t0)

    t0 = time.monotonic()
    many = [sandbox(f"h{i}", [net["id"]]) for i in range(args.sandboxes)]
    t_api = time.monotonic() - t0
    wanted = {s["id"] for s in many}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ports = ok(http.get("/network/v2.0/ports", params={
            "device_owner": SANDBOX_OWNER, "status": "ACTIVE", "fields": "device_id"}))["ports"]
        if {p["device_id"] for p in ports} >= wanted:
            break
        time.sleep(0.01)
    else:
        raise RuntimeError(f"{args.sandboxes} sandboxes not ACTIVE after 60 s")
    first_answer(names.sandbox(many[-1]["id"]), peer_ip)
    t_all = time.monotonic() - t0
    return {
        "port_api_to_first_packet": summary(port_api),
        "port_api_call_alone": summary(api_only),
        "sandbox_api_to_first_packet": summary(sandbox_api),
        "sandboxes": args.sandboxes,
        "sandboxes_api_calls_s": round(t_api, 3),
        "sandboxes_all_active_and_answering_s": round(t_all, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", default="sqlite", choices=["sqlite", "postgresql"])
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--sandboxes", type=int, default=100)
    parser.add_argument("--json")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("root is needed (network namespaces, raw ICMP sockets)")
    if not (1 <= args.samples <= 200 and 1 <= args.sandboxes <= 500):
        raise SystemExit("--samples 1..200, --sandboxes 1..500")
    try:
        result = run(args)
    finally:
        agent_thread.sweep(PREFIX)
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
