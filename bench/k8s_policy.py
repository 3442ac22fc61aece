"""NetworkPolicy change → enforced, from 10 to 1,000 pods (issue 12).

    sudo python bench/k8s_policy.py [--sizes 10,100,1000] [--reps 30] [--json FILE]

Starts ``netbay up`` (bench/harness.py, SQLite) with its dataplane agent, as ``up``
runs by default (a thread of the server's process), under the bench's own prefix
``nbb<hex>-`` (swept at the end, also on error); the engine runs in this process, as
``netbay k8s`` does in its own. ``--agent thread`` is the older layout: ``up
--no-agent`` and the agent on a thread of this process, sharing its interpreter (GIL)
with the engine — a layout no deployment has. Namespaces x, y, z are networks
(10.232/10.233/10.234.0.0/22) joined by a router; every pod is a real sandbox with a
port. Every namespace has a deny-all-ingress policy, so every pod is isolated. The pod count grows 10 → 100 → 1,000 in one run; at
each size, per repetition:

* **policy create** — ``PolicyEngine.on_policy`` of "allow x/target from pods
  role=client in any namespace" (the client pod already has the label), timed from the
  call until the client's TCP connection to the target is accepted; the policy is then
  deleted and the connection checked to fail again;
* **policy update** — "allow x/target from role=client on TCP/81" changed to TCP/80
  (``on_policy``: one rule replaced), timed until the connection to port 80 is
  accepted;
* **policy delete** — with that policy in place, the client isolated in egress by a
  second policy ("y: role=client, Egress, no rules"); ``on_policy_deleted`` of the
  second one, timed until the connection is accepted;
* **label change** — with that policy in place, the client's ``role`` label is set
  (``on_pod``), timed until the connection is accepted; then unset.
* **baseline** (same path without the engine) — ``PUT /ports/<target>`` adding a group
  that admits the client's /32, timed until the connection is accepted; then removed.

Each is measured in a steady state: the spare groups a previous change used are made
again first (they are refilled on a thread, beside the next change otherwise).
"call" is the handler's own time (translation + API calls), "api" the part of it in
the network API (one batch), "at agent" (``--agent thread`` only; with ``--hops`` in
either layout) until the dataplane agent's long poll brought the change (committed and
delivered); "enforced" adds the agent's realizing (its
nft commit) and the packet's round trip. "server CPU" is the netbay server process's
CPU time from the change until enforced (a mean: the kernel counts 10 ms ticks; with
the agent in it, by default), a measure the shared machine's load does not inflate as
much as wall time.

Enforced is measured by ``bench/policy_probe.py`` in its own process: it starts sending
non-blocking SYNs (one every 0.5 ms, all kept open) from the client's namespace *before*
the change is made, and "enforced" is when the first SYN that was let through left (the
one before it was dropped: the verdict flipped within that interval, printed as
"resolution"). ``--probe inline`` is the older measure: SYNs from this process, once
the engine's call has returned — it adds the call's tail when the dataplane was quicker
than the HTTP answer, and its loop competes for the GIL with the agent thread it
measures. ``--hops FILE`` traces each hop (``bench/hoptrace``; ``python
bench/hoptrace/report.py FILE`` prints the medians). Medians; the machine is shared.
Root is needed.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import secrets
import select
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import agent_thread
import harness
from hoptrace import hops
from lightkube import codecs

from netbay.client import Api
from netbay.dataplane import netns
from netbay.dataplane.names import Names
from netbay.k8s.policy import Cluster, Namespace, Pod, PolicyEngine

PREFIX = f"nbb{secrets.token_hex(3)}-"
Sample = tuple[float, float, float, float]  # seconds: call, api, agent, enforced
CIDRS = {"x": "10.232.0.0/22", "y": "10.233.0.0/22", "z": "10.234.0.0/22"}
NET = "/network/v2.0"


def policy(ns: str, name: str, spec: dict) -> object:
    return codecs.from_dict({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                             "metadata": {"name": name, "namespace": ns}, "spec": spec})


DENY = {"podSelector": {}, "policyTypes": ["Ingress"]}
ALLOW = {"podSelector": {"matchLabels": {"role": "target"}},
         "ingress": [{"from": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"role": "client"}}}]}]}
ALLOW_81 = {**ALLOW, "ingress": [{**ALLOW["ingress"][0], "ports": [{"protocol": "TCP", "port": 81}]}]}
ALLOW_80 = {**ALLOW, "ingress": [{**ALLOW["ingress"][0], "ports": [{"protocol": "TCP", "port": 80}]}]}
NO_EGRESS = {"podSelector": {"matchLabels": {"role": "client"}}, "policyTypes": ["Egress"]}


def until_connect(ns: str, ip: str, port: int, t0: float, timeout: float = 3.0) -> float:
    """Seconds from ``t0`` until a TCP connect from ``ns`` is accepted: a new
    non-blocking SYN every 0.5 ms, all kept open (bounded in time and count)."""
    socks: list[socket.socket] = []
    poller = select.poll()
    try:
        for _ in range(int(timeout / 0.0005)):
            with netns.entered(ns):
                s = socket.socket()
            s.setblocking(False)
            if s.connect_ex((ip, port)) not in (0, errno.EINPROGRESS):
                s.close()
            else:
                socks.append(s)
                poller.register(s.fileno(), select.POLLOUT)
            for fd, _ev in poller.poll(0.5):
                sock = next(x for x in socks if x.fileno() == fd)
                poller.unregister(fd)
                if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0:
                    return time.perf_counter() - t0
            if time.perf_counter() - t0 > timeout:
                break
        raise RuntimeError(f"no connection from {ns} to {ip}:{port} within {timeout}s")
    finally:
        for s in socks:
            s.close()


class Prober:
    """``bench/policy_probe.py`` in its own process: it probes before the change starts
    and shares no interpreter (GIL) with the engine or the agent it measures."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve().parent / "policy_probe.py")],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.priority = self._line()  # what scheduling it got (bench/policy_probe.py)

    def _line(self) -> str:
        line = self.proc.stdout.readline().strip()
        if not line:
            raise RuntimeError(f"the prober ended ({self.proc.poll()})")
        return line

    def start(self, ns: str, ip: str, port: int, timeout: float = 3.0) -> None:
        self.proc.stdin.write(f"probe {ns} {ip} {port} {timeout}\n")
        if self._line() != "started":
            raise RuntimeError("the prober did not start")

    def result(self) -> tuple[float, float, float]:
        """(perf_counter) when the first accepted SYN left, when its connection was seen
        established, when the SYN before it left."""
        parts = self._line().split()
        if parts[0] != "ok":
            raise RuntimeError("no connection from the client within the prober's timeout")
        return float(parts[1]), float(parts[2]), float(parts[3])

    def close(self) -> None:
        try:
            self.proc.stdin.write("quit\n")
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait(timeout=5)


def connects(ns: str, ip: str, port: int, timeout: float = 0.3) -> bool:
    with netns.entered(ns):
        s = socket.socket()
    try:
        s.settimeout(timeout)
        s.connect((ip, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


class Bench:
    def __init__(self, srv: harness.Server, http: httpx.Client, names: Names, agent: object,
                 prober: Prober | None) -> None:
        self.http, self.names, self.prober = http, names, prober
        self.resolution: list[float] = []  # s: from the last refused SYN (or the change) to the first accepted
        self.seen_lag: list[float] = []    # s: from the first accepted SYN to its connection seen
        self.server_pid = srv.proc.pid
        self.server_cpu: dict[str, float] = {}  # change kind -> server CPU seconds, summed
        self.delivered = 0.0  # when the agent's long poll first brought changes (perf_counter)
        self.sees_agent = agent is not None  # it runs in this process: its delivery is seen
        if agent is not None:
            changes = agent.api.changes

            def noted(since: int, wait: float) -> dict:
                body = changes(since, wait)
                if body.get("changes") and not self.delivered:
                    self.delivered = time.perf_counter()
                return body
            agent.api.changes = noted
        self.api = Api(srv.url, srv.token)
        self.engine = PolicyEngine(self.api, tag="k8s-policy:bench")
        self.nets: dict[str, str] = {}
        projects = self.ok(http.get("/identity/v3/auth/projects"))["projects"]
        project_id = next(p["id"] for p in projects if p["name"] == "admin")
        self.ok(http.put(f"{NET}/quotas/{project_id}", json={"quota": {
            "security_group": 100, "security_group_rule": 1000}}))
        router = self.ok(http.post(f"{NET}/routers", json={"router": {"name": "pods"}}), 201)["router"]
        for ns, cidr in CIDRS.items():
            net = self.ok(http.post(f"{NET}/networks", json={"network": {"name": ns}}), 201)["network"]
            sub = self.ok(http.post(f"{NET}/subnets", json={"subnet": {
                "network_id": net["id"], "cidr": cidr, "ip_version": 4}}), 201)["subnet"]
            self.ok(http.put(f"{NET}/routers/{router['id']}/add_router_interface", json={"subnet_id": sub["id"]}))
            self.nets[ns] = net["id"]
        self.pods: dict[str, Pod] = {}
        self.sandbox_ns: dict[str, str] = {}
        self.engine.sync(Cluster.of([Namespace(n) for n in CIDRS], policies=[policy(n, "deny", DENY) for n in CIDRS]))

    @staticmethod
    def ok(r: httpx.Response, status: int = 200) -> dict:
        if r.status_code != status:
            raise RuntimeError(f"{r.request.method} {r.request.url}: {r.status_code} {r.text}")
        return r.json() if r.content else {}

    def grow(self, total: int) -> None:
        """Pods (sandboxes with ports) until there are ``total``, round-robin over x, y, z."""
        made = []
        for i in range(len(self.pods), total):
            ns = "xyz"[i % 3]
            name = {0: "target", 1: "client"}.get(i, f"p{i}")
            sb = self.ok(self.http.post("/netbay/v1/sandboxes", json={"sandbox": {
                "name": f"{ns}-{name}", "networks": [self.nets[ns]]}}), 201)["sandbox"]
            port_id = sb["ports"][0]["port_id"]
            port = self.ok(self.http.get(f"{NET}/ports/{port_id}"))["port"]
            labels = {"role": "target"} if name == "target" else {"app": name}
            pod = Pod(ns, name, port_id, port["fixed_ips"][0]["ip_address"], labels)
            self.pods[pod.key] = pod
            self.sandbox_ns[pod.key] = self.names.sandbox(sb["id"])
            self.engine.on_pod(pod)
            made.append(port_id)
        for port_id in made:
            for _ in range(3000):
                if self.ok(self.http.get(f"{NET}/ports/{port_id}"))["port"]["status"] == "ACTIVE":
                    break
                time.sleep(0.01)
            else:
                raise RuntimeError(f"port {port_id} never ACTIVE")
        if "x/target" in self.pods and not hasattr(self, "servers"):
            self.servers = []
            for port in (80, 81):
                with netns.entered(self.sandbox_ns["x/target"]):
                    server = socket.socket()
                server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                server.bind((self.pods["x/target"].ip, port))
                server.listen(4096)
                server.setblocking(False)
                self.servers.append(server)

    def drain(self) -> None:
        for server in self.servers:
            for _ in range(10_000):
                try:
                    server.accept()[0].close()
                except BlockingIOError:
                    break

    def denied(self, ports: tuple[int, ...] = (80, 81)) -> bool:
        self.drain()
        return not any(connects(self.sandbox_ns["y/client"], self.pods["x/target"].ip, p) for p in ports)

    def settle_denied(self, timeout: float = 10.0, ports: tuple[int, ...] = (80, 81)) -> None:
        """Wait (bounded) until the agent has applied a removal: the client is refused."""
        deadline = time.monotonic() + timeout
        for _ in range(10_000):
            if self.denied(ports):
                return
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
        raise RuntimeError("the client still reaches the target")

    # -- measured operations ----------------------------------------------------------
    def timed(self, kind: str, change: Callable[[], object], port: int = 80) -> Sample:
        """``change()`` from a steady state, until the client's connection is accepted;
        the netbay server's CPU time meanwhile is added up per kind of change. The prober
        (its own process) is probing before the change starts; ``--probe inline`` probes
        from this process once the call has returned instead (the older measure)."""
        self.engine.wait_spares()
        self.delivered = 0.0
        client, target = self.sandbox_ns["y/client"], self.pods["x/target"].ip
        if self.prober is not None:
            self.prober.start(client, target, port)
        cpu = harness.proc_cpu_seconds(self.server_pid)
        hops.mark("bench.change", kind.replace(" ", "_"))
        t0 = time.perf_counter()
        change()
        call = time.perf_counter() - t0
        hops.mark("bench.call.done")
        api = self.engine.last.get("seconds", 0.0)  # its apply: the network API
        if self.prober is not None:
            sent, seen, before = self.prober.result()
            enforced = sent - t0  # the first SYN that passed left then (the one before it did not pass)
            self.resolution.append(sent - max(before, t0))
            self.seen_lag.append(seen - sent)
        else:
            enforced = until_connect(client, target, port, t0)
        hops.mark("bench.enforced", f"{enforced:.6f}")
        delivered = self.delivered - t0 if self.delivered > t0 else enforced
        if not self.sees_agent:
            delivered = float("nan")
        self.server_cpu[kind] = self.server_cpu.get(kind, 0.0) + harness.proc_cpu_seconds(self.server_pid) - cpu
        return call, api, delivered, enforced

    def client_role(self, role: str) -> None:
        client = self.pods["y/client"]
        if client.labels.get("role") != role:
            self.pods[client.key] = replace(client, labels={"role": role})
            self.engine.on_pod(self.pods[client.key])

    def policy_create(self) -> Sample:
        self.client_role("client")
        self.settle_denied()
        sample = self.timed("policy create", lambda: self.engine.on_policy(policy("x", "allow", ALLOW)))
        self.engine.on_policy_deleted("x", "allow")
        self.settle_denied()
        return sample

    def policy_update(self) -> Sample:
        self.client_role("client")
        self.engine.on_policy(policy("x", "allow", ALLOW_81))
        self.settle_denied(ports=(80,))
        sample = self.timed("policy update", lambda: self.engine.on_policy(policy("x", "allow", ALLOW_80)))
        self.engine.on_policy_deleted("x", "allow")
        self.settle_denied()
        return sample

    def policy_delete(self) -> Sample:
        self.client_role("client")
        self.engine.on_policy(policy("x", "allow", ALLOW))
        self.engine.on_policy(policy("y", "no-egress", NO_EGRESS))
        self.settle_denied()
        sample = self.timed("policy delete", lambda: self.engine.on_policy_deleted("y", "no-egress"))
        self.engine.on_policy_deleted("x", "allow")
        self.settle_denied()
        return sample

    def label_change(self) -> Sample:
        self.engine.on_policy(policy("x", "allow", ALLOW))
        self.client_role("none")
        self.settle_denied()
        sample = self.timed("label change", lambda: self.client_role("client"))
        self.client_role("none")
        self.engine.on_policy_deleted("x", "allow")
        self.settle_denied()
        return sample

    def baseline(self) -> tuple[float, float]:
        if not hasattr(self, "plain"):
            self.plain = self.ok(self.http.post(f"{NET}/security-groups", json={"security_group": {
                "name": "bench-plain"}}), 201)["security_group"]
            self.ok(self.http.post(f"{NET}/security-group-rules", json={"security_group_rule": {
                "security_group_id": self.plain["id"], "direction": "ingress", "protocol": "tcp",
                "remote_ip_prefix": self.pods["y/client"].ip + "/32"}}), 201)
        target = self.pods["x/target"].port_id
        self.settle_denied()
        groups = self.ok(self.http.get(f"{NET}/ports/{target}"))["port"]["security_groups"]
        self.engine.last = {}
        sample = self.timed("baseline", lambda: self.ok(self.http.put(f"{NET}/ports/{target}", json={"port": {
            "security_groups": [*groups, self.plain["id"]]}})))
        sample = (sample[0], sample[0], *sample[2:])  # all of the call is the API's
        self.ok(self.http.put(f"{NET}/ports/{target}", json={"port": {"security_groups": groups}}))
        self.settle_denied()
        return sample


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="10,100,1000")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--json")
    ap.add_argument("--probe", choices=("process", "inline"), default="process",
                    help="probe from its own process, started before the change (default), or "
                         "from the bench's process once the call returned (the older measure)")
    ap.add_argument("--hops", metavar="FILE", help="trace each hop of every change into FILE (bench/hoptrace)")
    ap.add_argument("--agent", choices=("server", "thread"), default="server",
                    help="the dataplane agent in the server's process, as `netbay up` runs it (default), "
                         "or on a thread of this one, beside the engine (the older layout)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the sweep below still runs
    names = Names(PREFIX)
    head = ["pods", "change", "call ms", "api ms", "at agent ms", "enforced p50 ms", "p90 ms", "× baseline",
            "server CPU ms"]
    rows, out = [], {"sizes": {}, "machine": harness.machine(), "load": []}
    try:
        env = None
        if args.hops:
            Path(args.hops).unlink(missing_ok=True)
            hops.open_trace(args.hops)
            hops.install_local(agent=args.agent == "thread")
            here = Path(__file__).resolve().parent
            env = {"NETBAY_HOPTRACE": str(Path(args.hops).resolve()),
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(here / "hoptrace"), os.environ.get("PYTHONPATH")]))}
            if args.agent == "server":
                env["NETBAY_HOPTRACE_AGENT"] = "1"
        in_server = args.agent == "server"
        print(f"agent: {'in the server process (netbay up)' if in_server else 'a thread of this process'}",
              flush=True)
        with harness.netbay("sqlite", extra_env=env, agent_prefix=PREFIX if in_server else None) as srv, \
                (contextlib.nullcontext() if in_server else agent_thread.running(srv, names)) as agent:
            http = httpx.Client(base_url=srv.url, headers={"X-Auth-Token": srv.token()}, timeout=60)
            prober = Prober() if args.probe == "process" else None
            if prober is not None:
                print(f"prober: its own process, {prober.priority}", flush=True)
            bench = Bench(srv, http, names, agent, prober)
            for size in sizes:
                hops.mark("bench.size", str(size))
                t = time.perf_counter()
                bench.grow(size)
                grown = time.perf_counter() - t
                t = time.perf_counter()
                bench.engine.sync(Cluster.of([Namespace(n) for n in CIDRS], bench.pods.values(),
                                             [policy(n, "deny", DENY) for n in CIDRS]))
                sync = time.perf_counter() - t
                load = [os.getloadavg()[0]]
                kinds = {"policy create": bench.policy_create, "policy update": bench.policy_update,
                         "policy delete": bench.policy_delete, "label change": bench.label_change,
                         "baseline": bench.baseline}
                res: dict[str, list[Sample]] = {k: [] for k in kinds}
                bench.server_cpu.clear()
                bench.resolution.clear()
                bench.seen_lag.clear()
                for _ in range(args.reps):  # interleaved: each kind sees the same load
                    for what, measure in kinds.items():
                        res[what].append(measure())
                load.append(os.getloadavg()[0])
                out["load"].append(load)
                out["sizes"][size] = {"grow_s": grown, "sync_s": sync, "load1": load}
                base = statistics.median(x[3] for x in res["baseline"])
                for what, xs in res.items():
                    call, api, done, enf = (statistics.median(x[i] for x in xs) * 1e3 for i in range(4))
                    p90 = sorted(x[3] for x in xs)[int(0.9 * (len(xs) - 1))] * 1e3
                    cpu = bench.server_cpu.get(what, 0.0) / len(xs) * 1e3  # a mean: 10 ms ticks
                    out["sizes"][size][what] = {"call_ms": call, "api_ms": api,
                                                "at_agent_ms": None if done != done else done,
                                                "enforced_ms": enf, "enforced_p90_ms": p90,
                                                "ratio_to_baseline": enf / (base * 1e3), "server_cpu_ms": cpu}
                    rows.append([str(size), what, f"{call:.1f}", f"{api:.1f}",
                                 "—" if done != done else f"{done:.1f}", f"{enf:.1f}",
                                 f"{p90:.1f}", f"{enf / (base * 1e3):.2f}", f"{cpu:.1f}"])
                print(harness.markdown_table(head, rows[-len(kinds):]), flush=True)
                print(f"sync {sync * 1e3:.0f} ms, grow {grown:.1f} s, load {load[0]:.1f} → {load[1]:.1f}", flush=True)
                if bench.resolution:
                    res_ms = sorted(x * 1e3 for x in bench.resolution)
                    lag = statistics.median(bench.seen_lag) * 1e3
                    out["sizes"][size]["probe"] = {"resolution_p50_ms": res_ms[len(res_ms) // 2],
                                                   "resolution_max_ms": res_ms[-1], "seen_lag_p50_ms": lag}
                    print(f"probe resolution (last refused SYN → first let through) p50 {res_ms[len(res_ms) // 2]:.2f}"
                          f" ms, max {res_ms[-1]:.2f} ms; that SYN's connection seen {lag:.2f} ms later (p50)",
                          flush=True)
            bench.api.close()
            http.close()
            for server in getattr(bench, "servers", ()):
                server.close()
            if prober is not None:
                prober.close()
    finally:
        from netbay.cli import instance
        instance.agent_lock_path(PREFIX).unlink(missing_ok=True)  # `up`'s agent lock, once it has ended
        left = agent_thread.sweep(PREFIX)
        if left:
            print(f"swept {len(left)} namespaces", file=sys.stderr)
    print(harness.markdown_table(head, rows))
    print(out["machine"])
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
