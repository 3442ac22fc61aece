"""CLI start: ``netbay`` commands beside ``docker --help`` and ``openstack --help``, one run.

    python bench/cli_start.py [--runs 20] [--json bench/results/cli_start.json]

Each command is run ``--runs`` times as a whole process (fork, exec, imports, help
text, exit), the commands interleaved so that a change in the machine's load hits
them all alike; min and median wall time per command. ``docker --help`` (a Go binary)
is the floor a user compares with; ``openstack --help`` is the Python client the
same user types. A command that is not installed is skipped and says so.
"""

from __future__ import annotations

import argparse
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--json")
    args = ap.parse_args()
    present = {k: v for k, v in COMMANDS.items() if shutil.which(v[0])}
    for missing in COMMANDS.keys() - present.keys():
        print(f"skipped: {missing} (not installed)")
    load_before = os.getloadavg()[0]
    times: dict[str, list[float]] = {k: [] for k in present}
    for _ in range(args.runs):
        for name, argv in present.items():
            t0 = time.perf_counter()
            subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, timeout=60)
            times[name].append((time.perf_counter() - t0) * 1000)
    out = {
        "machine": harness.machine(),
        "runs": args.runs,
        "load": [load_before, os.getloadavg()[0]],
        "commands": {k: {"median_ms": round(statistics.median(v), 1), "min_ms": round(min(v), 1)}
                     for k, v in times.items()},
    }
    for name, fig in out["commands"].items():
        print(f"{name:28} median {fig['median_ms']:8.1f} ms   min {fig['min_ms']:8.1f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
