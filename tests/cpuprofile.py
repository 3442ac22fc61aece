"""CPU seconds per test, for finding what makes the suite slow on two cores.

Wall time hides the cost when workers share the CPU: a test that waits looks as slow
as one that burns. With ``NETBAY_TEST_CPU_PROFILE=DIR`` and ``-p tests.cpuprofile``,
each pytest process (each xdist worker) puts itself in a cgroup-v1 ``cpuacct`` group
of its own, so every server, daemon and CLI it starts is counted with it, and writes
one JSON line per test to ``DIR/<run>-<worker>.jsonl`` (the run named by its ``-m``
expression, ``all`` without one: two runs may share DIR): node id, start (epoch seconds, for
a timeline), wall seconds and the CPU
seconds the group used from the test's setup to its teardown. ``python -m
tests.cpuprofile DIR`` sums them by module. The group is removed at the end (or named
in a warning if a process outlived the run).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import pytest

ROOT = Path("/sys/fs/cgroup/cpuacct")


def _reap_stale() -> None:
    """Groups of earlier runs whose daemons outlived their close (now empty): removed."""
    for stale in ROOT.glob("nbt-cpu-*"):
        pid = stale.name.split("-")[2]
        if not Path(f"/proc/{pid}").exists() and not (stale / "cgroup.procs").read_text().strip():
            with contextlib.suppress(OSError):
                stale.rmdir()


class _Group:
    def __init__(self, out: Path, worker: str) -> None:
        _reap_stale()
        self.path = ROOT / f"nbt-cpu-{os.getpid()}-{worker}"
        self.path.mkdir()
        (self.path / "cgroup.procs").write_text(str(os.getpid()))
        self.out = (out / f"{worker}.jsonl").open("a")

    def usage(self) -> float:
        return int((self.path / "cpuacct.usage").read_text()) / 1e9

    def close(self) -> None:
        self.out.close()
        (ROOT / "cgroup.procs").write_text(str(os.getpid()))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.2)
        left = (self.path / "cgroup.procs").read_text().split()
        print(f"cpuprofile: {self.path} still holds {left}", file=sys.stderr)


_group: _Group | None = None


def pytest_configure(config: pytest.Config) -> None:
    global _group
    out = os.environ.get("NETBAY_TEST_CPU_PROFILE")
    if not out or not ROOT.is_dir() or _group is not None:
        return
    worker = getattr(config, "workerinput", {}).get("workerid", "main")
    run = re.sub(r"\W+", "-", config.option.markexpr or "all").strip("-")   # two runs may share the folder
    Path(out).mkdir(parents=True, exist_ok=True)
    _group = _Group(Path(out), f"{run}-{worker}")


def pytest_unconfigure(config: pytest.Config) -> None:
    global _group
    if _group is not None:
        _group.close()
        _group = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Iterator[None]:
    if _group is None:
        yield
        return
    cpu, wall, start = _group.usage(), time.monotonic(), time.time()
    yield
    row = {"id": item.nodeid, "start": round(start, 1), "wall": round(time.monotonic() - wall, 2),
           "cpu": round(_group.usage() - cpu, 2)}
    _group.out.write(json.dumps(row) + "\n")
    _group.out.flush()


def rows(folder: str | Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every test's row in ``folder``, with the run that wrote it (``all`` without ``-m``)."""
    for file in Path(folder).glob("*.jsonl"):
        run = file.stem.rsplit("-", 1)[0]
        for line in file.read_text().splitlines():
            yield run, json.loads(line)


def main(folder: str) -> None:
    wall: dict[str, float] = collections.defaultdict(float)
    cpu: dict[str, float] = collections.defaultdict(float)
    count: dict[str, int] = collections.defaultdict(int)
    for run, row in rows(folder):
        module = f'{row["id"].split("::")[0]} ({run})'
        wall[module] += row["wall"]
        cpu[module] += row["cpu"]
        count[module] += 1
    print(f"{'cpu s':>8} {'wall s':>8} {'tests':>5}  module")
    for module, seconds in sorted(cpu.items(), key=lambda kv: -kv[1]):
        print(f"{seconds:8.1f} {wall[module]:8.1f} {count[module]:5d}  {module}")
    print(f"{sum(cpu.values()):8.1f} {sum(wall.values()):8.1f} {sum(count.values()):5d}  total")


if __name__ == "__main__":
    main(sys.argv[1])
