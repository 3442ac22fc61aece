"""CLI start: ``netbay`` commands beside ``docker --help`` and ``openstack --help``, one run.

    python bench/cli_start.py [--runs 20] [--no-server] [--json bench/results/cli_start.json]

Each command is run ``--runs`` times as a whole process (fork, exec, imports, help
text, exit), the commands interleaved so that a change in the machine's load hits
them all alike; min and median wall time per command. ``docker --help`` (a Go binary)
is the floor a user compares with; ``openstack --help`` is the Python client the
same user types. A command that is not installed is skipped and says so.

Unless ``--no-server``, a ``netbay up --no-agent`` (SQLite, in a temp dir) answers the
client commands a user types again and again: ``netbay pod list`` (a Keystone login and
one list) beside ``openstack network list`` against the same server (the same login and
a list, from the Python client people compare with).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness

COMMANDS = {
    "netbay --help": ["netbay", "--help"],
    "netbay pod exec --help": ["netbay", "pod", "exec", "--help"],
    "docker --help": ["docker", "--help"],
    "openstack --help": ["openstack", "--help"],
}
AGAINST_SERVER = {
    "netbay pod list": ["netbay", "pod", "list"],
    "openstack network list": ["openstack", "network", "list"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--no-server", action="store_true", help="only the commands that need no server")
    ap.add_argument("--json")
    args = ap.parse_args()
    wanted = {**COMMANDS, **({} if args.no_server else AGAINST_SERVER)}
    present = {k: v for k, v in wanted.items() if shutil.which(v[0])}
    for missing in wanted.keys() - present.keys():
        print(f"skipped: {missing} (not installed)")
    with contextlib.ExitStack() as stack:
        env = os.environ.copy()
        if not args.no_server:
            server = stack.enter_context(harness.netbay("sqlite"))
            env = {k: v for k, v in env.items() if not k.startswith("OS_")}
            env.update(OS_AUTH_URL=f"{server.url}/identity/v3", OS_USERNAME="admin",
                       OS_PASSWORD=harness.ADMIN_PASSWORD, OS_PROJECT_NAME="admin", OS_USER_DOMAIN_NAME="Default",
                       OS_PROJECT_DOMAIN_NAME="Default", OS_IDENTITY_API_VERSION="3")
        out = _measure(present, args.runs, env)
    for name, fig in out["commands"].items():
        print(f"{name:28} median {fig['median_ms']:8.1f} ms   min {fig['min_ms']:8.1f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


def _measure(present: dict[str, list[str]], runs: int, env: dict[str, str]) -> dict:
    """Every command ``runs`` times, interleaved; a client command that fails is a bench error."""
    load_before = os.getloadavg()[0]
    times: dict[str, list[float]] = {k: [] for k in present}
    for _ in range(runs):
        for name, argv in present.items():
            t0 = time.perf_counter()
            done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False,
                                  timeout=60, env=env)
            times[name].append((time.perf_counter() - t0) * 1000)
            if name in AGAINST_SERVER and done.returncode != 0:
                raise SystemExit(f"{name} failed: {done.stderr.decode(errors='replace').strip()}")
    return {
        "machine": harness.machine(),
        "runs": runs,
        "load": [load_before, os.getloadavg()[0]],
        "commands": {k: {"median_ms": round(statistics.median(v), 1), "min_ms": round(min(v), 1)}
                     for k, v in times.items()},
    }


if __name__ == "__main__":
    main()
