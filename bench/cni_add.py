"""CNI ADD latency: netbay-cni against the reference ``bridge`` plugin, one run.

    sudo python bench/cni_add.py [--runs 50] [--family 4|6|dual] [--json /tmp/cni_add.json]

Issue 27's targets: netbay-cni ADD ≤ 1.0× the reference bridge plugin (Debian's
containernetworking-plugins) measured in the same run; CHECK and DEL ≤ 1.5×. ``--family 6``
(or ``dual``) adds a second netbay network, IPv6-only fd00:95::/64 (or dual-stack
10.97.0.0/24 + fd00:97::/64), and times netbay-cni's ADD, CHECK and DEL there too,
alternating with the IPv4 network's: issue 28's target, IPv6 ADD within 1.1× of IPv4's
in the same run.

Set-up (everything named ``nbb<hex>…``, removed at the end, also on error): a
``netbay up --no-agent`` server (SQLite), ``netbay agent`` and ``netbay cni-daemon``
as child processes, a netbay network 10.95.0.0/24, and the plugin launcher that
``netbay cni-install`` writes (the compiled one when this host has a C compiler). The baseline: ``bridge`` + ``host-local`` IPAM on
10.96.0.0/24, run inside a namespace of its own (``nsenter --net``), so its bridge
and host-side veths never touch the host's namespace.

Each iteration makes a fresh pod namespace (not timed), then times, as a runtime
does (fork + exec, config on stdin, result on stdout): ADD, CHECK (with the ADD's
result as prevResult) and DEL, for netbay-cni and for bridge, alternating. Besides the
p50s' ratio, ``add_ratio_paired``: the median of each iteration's netbay ADD over the
bridge ADD timed right after it (the same moment's load; steadier on a shared machine). Also
timed: ``VERSION`` (the exec floor of each executable), netbay-cni's ADD through
the Python launcher (``python -I -S``: what a host without a C compiler gets) and
through the pip console script (``site`` and the editable install's path finder,
which the launchers skip), and ADD sent straight to the daemon's socket (no fork: what the
plugin costs beyond starting its executable). An ADD is complete when it returns: netbay-cni's port is plugged,
addressed and bound (the agent then adopts it and reports ACTIVE).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.abspath(os.path.join(HERE, "..")))
sys.path.insert(0, HERE)

import httpx  # noqa: E402

import harness  # noqa: E402
from netbay.dataplane import netns  # noqa: E402
from netbay.plugins.cni.client import exchange  # noqa: E402
from netbay.plugins.cni.launcher import install, is_compiled  # noqa: E402

TAG = secrets.token_hex(3)
PREFIX = f"nbb{TAG}-"
REFERENCE = Path("/usr/lib/cni")
NETBAY_CIDR, BRIDGE_CIDR = "10.95.0.0/24", "10.96.0.0/24"
FAMILY_CIDRS = {"6": ("fd00:95::/64",), "dual": ("10.97.0.0/24", "fd00:97::/64")}


def child(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "netbay.cli.main", *args], env=env,
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def call(plugin: Path, command: str, conf: dict[str, Any], container: str, pod_ns: str,
         run_in: str | None = None) -> tuple[float, str]:
    """(seconds, stdout) of one call, fork to exit; fails loudly on an error result."""
    env = {"CNI_COMMAND": command, "CNI_CONTAINERID": container, "CNI_NETNS": netns.path(pod_ns),
           "CNI_IFNAME": "eth0", "CNI_PATH": f"{plugin.parent}:{REFERENCE}", "PATH": os.environ["PATH"]}
    cmd = [str(plugin)] if run_in is None else ["nsenter", f"--net={netns.path(run_in)}", "--", str(plugin)]
    data = json.dumps(conf).encode()
    t0 = time.perf_counter()
    p = subprocess.run(cmd, input=data, env=env, capture_output=True, timeout=60)
    took = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{plugin.name} {command} failed: {p.stdout.decode()} {p.stderr.decode()}")
    return took, p.stdout.decode()


def nsenter_floor(base_ns: str, runs: int) -> float:
    """What ``nsenter --net`` adds to the baseline's calls (subtracted from bridge's)."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(["nsenter", f"--net={netns.path(base_ns)}", "--", "true"], check=True)
        times.append(time.perf_counter() - t0)
    return harness.percentile([t * 1000 for t in times], 50)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--family", choices=("4", "6", "dual"), default="4",
                    help="also time netbay-cni on an IPv6-only or a dual-stack network (against IPv4's)")
    ap.add_argument("--json")
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("needs root (namespaces, veths)")
    if not (REFERENCE / "bridge").exists():
        raise SystemExit("the reference plugins are not installed (apt-get install containernetworking-plugins)")
    work = Path(tempfile.mkdtemp(prefix=f"nbb{TAG}-"))
    base_ns = f"{PREFIX}bl"
    procs: list[subprocess.Popen] = []
    pods: list[str] = []
    results: dict[str, Any] = {"machine": harness.machine(), "runs": args.runs, "family": args.family}
    other = f"netbay/{'IPv6' if args.family == '6' else 'dual'}"   # the --family network's rows
    load_before = os.getloadavg()[0]
    with harness.netbay("sqlite") as srv:
        try:
            env = {**os.environ, "OS_AUTH_URL": f"{srv.url}/identity/v3", "OS_USERNAME": "admin",
                   "OS_PASSWORD": harness.ADMIN_PASSWORD, "OS_PROJECT_NAME": "admin",
                   "OS_USER_DOMAIN_NAME": "Default", "OS_PROJECT_DOMAIN_NAME": "Default",
                   "NETBAY_LOG_LEVEL": os.environ.get("NETBAY_LOG_LEVEL", "WARNING")}
            sock = work / "cni.sock"
            procs.append(child(["agent", "--url", srv.url, "--prefix", PREFIX, "--wait", "5"], env, work / "agent.log"))
            procs.append(child(["cni-daemon", "--socket", str(sock), "--url", srv.url, "--prefix", PREFIX], env,
                               work / "cni.log"))
            http = httpx.Client(base_url=srv.network, headers={"X-Auth-Token": srv.token()}, timeout=30)
            net, _sub = harness.make_network(http, f"{PREFIX}net", NETBAY_CIDR)
            plugin = install(work / "bin")
            python_launcher = install(work / "pybin", compiled=False)
            results["launcher"] = "compiled" if is_compiled(plugin) else "python"
            console = Path(sys.executable).parent / "netbay-cni"
            for _ in range(600):  # the daemon listens; the agent made the fabric (its first resync)
                if sock.is_socket() and netns.exists(f"{PREFIX}fabric"):
                    break
                time.sleep(0.1)
            netns.create(base_ns)
            nb_conf = {"cniVersion": "1.0.0", "name": f"{PREFIX}nb", "type": "netbay-cni", "network": net,
                       "socket": str(sock)}
            br_conf = {"cniVersion": "1.0.0", "name": f"{PREFIX}br", "type": "bridge", "bridge": "nbbr0",
                       "isGateway": True, "ipam": {"type": "host-local", "subnet": BRIDGE_CIDR,
                                                   "dataDir": str(work / "ipam"), "routes": [{"dst": "0.0.0.0/0"}]}}
            samples: dict[str, list[float]] = {k: [] for k in (
                "netbay ADD", "bridge ADD", "netbay CHECK", "bridge CHECK", "netbay DEL", "bridge DEL",
                "netbay ADD (Python launcher)", "netbay ADD (console script)", "netbay ADD (daemon only)",
                "netbay VERSION", "bridge VERSION",
                *([f"{other} {verb}" for verb in ("ADD", "CHECK", "DEL")] if args.family != "4" else []))}
            fam_conf = None
            if args.family != "4":
                fam_net, _ = harness.make_network(http, f"{PREFIX}net{args.family}", *FAMILY_CIDRS[args.family])
                fam_conf = {**nb_conf, "name": f"{PREFIX}nb{args.family}", "network": fam_net}

            def daemon_only(i: int) -> None:
                """ADD then DEL straight on the daemon's socket (no fork): the plugin's cost
                beyond starting the executable."""
                pod = f"{PREFIX}pd{i}"
                netns.create(pod)
                pods.append(pod)
                env = {"CNI_COMMAND": "ADD", "CNI_CONTAINERID": f"cd{i}", "CNI_NETNS": netns.path(pod),
                       "CNI_IFNAME": "eth0", "CNI_PATH": str(plugin.parent)}
                frame = b"".join(f"{k}={v}\0".encode() for k, v in env.items()) + b"\0" + json.dumps(nb_conf).encode()
                t0 = time.perf_counter()
                answer = exchange(str(sock), frame)
                samples["netbay ADD (daemon only)"].append(time.perf_counter() - t0)
                if answer[:1] != b"0":
                    raise SystemExit(f"daemon ADD failed: {answer!r}")
                call(plugin, "DEL", nb_conf, f"cd{i}", pod)
                netns.delete(pod)
                pods.remove(pod)

            def cycle(i: int, which: str, timed: bool = True) -> None:
                pod = f"{PREFIX}p{which[0]}{i}"
                netns.create(pod)
                pods.append(pod)
                if which == "netbay":
                    p, conf, run_in = plugin, nb_conf, None
                elif which == "family":
                    assert fam_conf is not None
                    p, conf, run_in = plugin, fam_conf, None
                elif which == "console":
                    p, conf, run_in = console, nb_conf, None
                elif which == "python":
                    p, conf, run_in = python_launcher, nb_conf, None
                else:
                    p, conf, run_in = REFERENCE / "bridge", br_conf, base_ns
                name = {"console": "netbay", "python": "netbay", "family": other}.get(which, which)
                t_add, out = call(p, "ADD", conf, f"c{which}{i}", pod, run_in)
                t_chk, _ = call(p, "CHECK", {**conf, "prevResult": json.loads(out)}, f"c{which}{i}", pod, run_in)
                t_del, _ = call(p, "DEL", conf, f"c{which}{i}", pod, run_in)
                netns.delete(pod)
                pods.remove(pod)
                if timed:
                    samples[{"console": "netbay ADD (console script)", "python": "netbay ADD (Python launcher)"}
                            .get(which, f"{name} ADD")].append(t_add)
                    if which not in ("console", "python"):
                        samples[f"{name} CHECK"].append(t_chk)
                        samples[f"{name} DEL"].append(t_del)

            for i in range(3):  # warm-up: caches, first bridge creation
                cycle(1000 + i, "netbay", False), cycle(1000 + i, "bridge", False)
                if fam_conf is not None:
                    cycle(1000 + i, "family", False)
            for i in range(args.runs):
                if fam_conf is not None and i % 2:   # alternate which family goes first
                    cycle(i, "family"), cycle(i, "netbay")
                elif fam_conf is not None:
                    cycle(i, "netbay"), cycle(i, "family")
                else:
                    cycle(i, "netbay")
                cycle(i, "bridge")
                daemon_only(i)
                if i % 5 == 0:
                    cycle(i, "console")
                    cycle(i, "python")
                for p, key in ((plugin, "netbay VERSION"), (REFERENCE / "bridge", "bridge VERSION")):
                    t0 = time.perf_counter()
                    subprocess.run([str(p)], env={"CNI_COMMAND": "VERSION"}, capture_output=True, check=True)
                    samples[key].append(time.perf_counter() - t0)
            floor = nsenter_floor(base_ns, args.runs)
            results["nsenter_ms"] = floor
            results["ms"] = {k: harness.summary(v) for k, v in samples.items() if v}
            add_nb, add_br = results["ms"]["netbay ADD"]["p50"], results["ms"]["bridge ADD"]["p50"]
            results["add_ratio"] = add_nb / add_br
            results["check_ratio"] = results["ms"]["netbay CHECK"]["p50"] / results["ms"]["bridge CHECK"]["p50"]
            results["del_ratio"] = results["ms"]["netbay DEL"]["p50"] / results["ms"]["bridge DEL"]["p50"]
            results["add_ratio_without_nsenter"] = add_nb / max(add_br - floor, 1e-9)
            # each iteration's netbay ADD over the bridge ADD right after it (the same moment's
            # load): on a shared machine the p50s' ratio swings with the load's phases
            pairs = [a / b for a, b in zip(samples["netbay ADD"], samples["bridge ADD"])]
            results["add_ratio_paired"] = harness.percentile(pairs, 50)
            if fam_conf is not None:
                results["family_add_ratio"] = results["ms"][f"{other} ADD"]["p50"] / add_nb
            results["load"] = (load_before, os.getloadavg()[0])
        finally:
            for proc in reversed(procs):
                stop(proc)
            for name in netns.list(PREFIX):  # pods, the baseline's, and the agent's (fabric…)
                netns.delete(name)
            if os.environ.get("NETBAY_BENCH_KEEP"):
                print("kept", work)
            else:
                shutil.rmtree(work, ignore_errors=True)
    rows = [[k, str(v["n"]), harness.fmt(v["p50"]), harness.fmt(v["p99"])] for k, v in results["ms"].items()]
    print(harness.markdown_table(["call (fork → exit)", "n", "p50 ms", "p99 ms"], rows))
    print(f"nsenter --net (in bridge's figures): {floor:.1f} ms; ADD p50 ratio netbay/bridge "
          f"{results['add_ratio']:.2f} (paired per iteration: {results['add_ratio_paired']:.2f}; bridge without "
          f"nsenter: {results['add_ratio_without_nsenter']:.2f}), CHECK "
          f"{results['check_ratio']:.2f}, DEL {results['del_ratio']:.2f}; {results['launcher']} launcher; "
          f"load {results['load'][0]:.1f} → {results['load'][1]:.1f}; {results['machine']}")
    if "family_add_ratio" in results:
        print(f"ADD p50 ratio {other}/IPv4 (same run, alternating): {results['family_add_ratio']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
