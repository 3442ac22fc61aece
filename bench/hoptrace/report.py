"""Per-hop medians from ``--hops`` traces: ``python bench/hoptrace/report.py FILE… [-v]``.

Each change runs from ``bench.change`` to ``bench.enforced``; within it every event is
taken at its first occurrence (``-v`` prints each change's whole sequence). Then the
path's hops, each measured per change (where its events came in order) and its median
printed: engine → server, handler → transaction, transaction body, commit, commit →
agent has the change (long poll), agent → nft, nft transaction, nft → first SYN through.
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict


def changes(path: str) -> list[tuple[str, list[tuple[float, str, str, str]]]]:
    out, cur, kind, t0, size = [], None, "", 0.0, ""
    for line in open(path):  # noqa: SIM115
        parts = line.rstrip("\n").split(" ", 3)
        if len(parts) < 3:
            continue
        pid, t, ev = parts[0], float(parts[1]), parts[2]
        detail = parts[3] if len(parts) > 3 else ""
        if ev == "bench.size":  # a bench's next pod count: its changes are reported apart
            size = f"@{detail}"
            continue
        if ev == "bench.change":
            cur, kind, t0 = [], detail + size, t
            continue
        if cur is None:
            continue
        ms = (t - t0) * 1e3
        if ev == "bench.enforced":  # written once the prober answered; it says when, from the change
            ms = float(detail) * 1e3
        cur.append((ms, ev, detail, pid))
        if ev == "bench.enforced":
            out.append((kind, cur))
            cur = None
    return out


HOPS = [("engine → server", "bench.change", "srv.req"),
        ("handler → transaction", "srv.req", "srv.write.locked"),
        ("transaction body", "srv.write.locked", "srv.write.body"),
        ("commit", "srv.write.body", "srv.committed"),
        ("commit → agent has it", "srv.committed", "agent.changes"),
        ("agent → nft", "agent.changes", "nft.run"),
        ("nft transaction", "nft.run", "nft.run.done"),
        ("nft → first SYN through", "nft.run.done", "bench.enforced"),
        ("change → enforced", "bench.change", "bench.enforced")]


def hops(all_changes: list[tuple[str, list[tuple[float, str, str, str]]]]) -> dict[str, dict[str, float]]:
    """Median of each hop per kind of change, over the changes where it is in order."""
    got: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for kind, evs in all_changes:
        # Each hop's end is its event's first occurrence after the hop's start: an agent
        # pass or an nft run of the previous change's tail may fall in this window too.
        first: dict[str, float] = {"bench.change": 0.0}
        for _name, a, b in HOPS:
            if a in first and b not in first:
                at = next((ms for ms, ev, _d, _p in evs if ev == b and ms >= first[a]), None)
                if at is not None:
                    first[b] = at
        for name, a, b in HOPS:
            if a in first and b in first and first[b] >= first[a]:
                got[kind][name].append(first[b] - first[a])
    return {k: {n: statistics.median(v) for n, v in hs.items()} for k, hs in got.items()}


def main() -> None:
    paths = [a for a in sys.argv[1:] if not a.startswith("-")]
    verbose = "-v" in sys.argv
    by_kind: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    order: dict[str, list[str]] = defaultdict(list)
    every = [c for p in paths for c in changes(p)]
    for kind, evs in every:
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
    table = hops(every)
    kinds = list(table)
    print("\n| hop | " + " | ".join(kinds) + " |\n|---|" + "---|" * len(kinds))
    for name, _a, _b in HOPS:
        print(f"| {name} | " + " | ".join(f"{table[k].get(name, float('nan')):.2f}" for k in kinds) + " |")


if __name__ == "__main__":
    main()
