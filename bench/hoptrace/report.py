"""Per-hop medians from a ``--hops`` trace: ``python bench/hoptrace/report.py FILE [-v]``.

Each change runs from ``bench.change`` to ``bench.enforced``; within it every event is
taken at its first occurrence (``-v`` prints each change's whole sequence)."""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict


def changes(path: str) -> list[tuple[str, list[tuple[float, str, str, str]]]]:
    out, cur, kind, t0 = [], None, "", 0.0
    for line in open(path):
        parts = line.rstrip("\n").split(" ", 3)
        if len(parts) < 3:
            continue
        pid, t, ev = parts[0], float(parts[1]), parts[2]
        detail = parts[3] if len(parts) > 3 else ""
        if ev == "bench.change":
            cur, kind, t0 = [], detail, t
            continue
        if cur is None:
            continue
        cur.append(((t - t0) * 1e3, ev, detail, pid))
        if ev == "bench.enforced":
            out.append((kind, cur))
            cur = None
    return out


def main() -> None:
    path, verbose = sys.argv[1], "-v" in sys.argv
    by_kind: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    order: dict[str, list[str]] = defaultdict(list)
    for kind, evs in changes(path):
        seen: dict[str, float] = {}
        for ms, ev, detail, _pid in evs:
            key = ev if ev.startswith(("bench.", "agent.")) or ev in ("nft.run", "nft.run.done") else f"{ev} {detail}"
            if key not in seen:
                seen[key] = ms
        for k, ms in seen.items():
            by_kind[kind][k].append(ms)
            if k not in order[kind]:
                order[kind].append(k)
        if verbose:
            print(kind, " ".join(f"{ev}{'(' + d + ')' if d else ''}@{ms:.2f}" for ms, ev, d, _ in evs))
    for kind, evs in by_kind.items():
        n = len(evs.get("bench.enforced", []))
        print(f"\n{kind} (n={n})")
        for k in sorted(order[kind], key=lambda k: statistics.median(evs[k])):
            xs = evs[k]
            print(f"  {statistics.median(xs):7.2f} ms  ({len(xs):3d})  {k}")


if __name__ == "__main__":
    main()
