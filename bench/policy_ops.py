"""The server's CPU per operation of a NetworkPolicy change's batch, without HTTP.

    python bench/policy_ops.py [--tree DIR] [--rounds 300] [--db sqlite|URL]

Runs the network API's batch operations (``netbay.api.network.batch``) in-process on
a fresh SQLite database (or the URL given) — the transaction bodies a policy change
costs the server, commit included — and prints, per kind of batch, the statements it
executes and its CPU time (``time.process_time``: the figure a shared machine's load
inflates least), medians over ``--rounds``. ``--tree DIR`` imports netbay from another
checkout (main's, for a same-run baseline). The kinds are the ones
``bench/k8s_policy.py`` sends: a port's groups changed (a label change; the floor),
a rule created, a rule deleted, a group deleted, and a policy create (a rule created
and two ports moved) and update (a rule created and one deleted) as one batch each.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tree", default=str(Path(__file__).resolve().parent.parent))
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--db", default="sqlite")
    ap.add_argument("--fill", type=int, default=0,
                    help="ports besides the four measured ones, members of the remote group (pods)")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(args.tree).resolve()))
    from sqlalchemy import event

    from netbay.api.network.batch import _parse
    from netbay.context import Context
    from netbay.store.db import Store
    from netbay.store.migrate import upgrade

    url = args.db if args.db != "sqlite" else f"sqlite:///{tempfile.mkdtemp(prefix='nb-polops-')}/nb.db"
    upgrade(url)
    store = Store(url)
    ctx = Context.admin()
    statements = [0]
    for engine in {store.engine, store._write_engine}:
        event.listen(engine, "before_cursor_execute", lambda *_a: statements.__setitem__(0, statements[0] + 1))

    def run(ops: list[dict[str, Any]]) -> tuple[Any, float, int]:
        parsed = [_parse(i, op) for i, op in enumerate(ops)]
        statements[0] = 0
        t = time.process_time()
        out = store.retrying(lambda s: [op.run(s, ctx) for op in parsed])
        return out, time.process_time() - t, statements[0]

    def post(path: str, member: str, body: dict[str, Any]) -> dict[str, Any]:
        return run([{"method": "POST", "path": path, "body": {member: body}}])[0][0][member]

    net = post("networks", "network", {"name": "polops"})
    post("subnets", "subnet", {"network_id": net["id"], "cidr": "10.99.0.0/22", "ip_version": 4})
    ports = [post("ports", "port", {"network_id": net["id"]})["id"] for _ in range(4)]
    groups = [post("security-groups", "security_group", {"name": f"g{i}"})["id"] for i in range(4)]
    if args.fill:
        from netbay.network import quotas
        store.retrying(lambda s: quotas.update(s, ctx.project_id, {"quota": {"port": -1}}))
    for start in range(0, args.fill, 200):  # the cluster's other pods: in the remote group, as isolated pods are
        run([{"method": "POST", "path": "ports", "body": {"ports": [
            {"network_id": net["id"], "security_groups": [groups[1], groups[3]]}
            for _ in range(start, min(args.fill, start + 200))]}}])

    def port_op(port: str, gids: list[str]) -> dict[str, Any]:
        return {"method": "PUT", "path": f"ports/{port}", "body": {"port": {"security_groups": gids}}}

    def rule_op(group: str, port: int) -> dict[str, Any]:
        return {"method": "POST", "path": "security-group-rules", "body": {"security_group_rules": [
            {"security_group_id": group, "direction": "ingress", "protocol": "tcp",
             "port_range_min": port, "port_range_max": port, "remote_group_id": groups[1]}]}}

    def delete_op(path: str) -> dict[str, Any]:
        return {"method": "DELETE", "path": path}

    results: dict[str, list[tuple[float, int]]] = {}

    def measure(kind: str, ops: list[dict[str, Any]]) -> Any:
        out, cpu, n = run(ops)
        results.setdefault(kind, []).append((cpu, n))
        return out

    for i in range(args.rounds):
        measure("port groups changed (label change, floor)", [port_op(ports[0], [groups[i % 2]])])
        made = measure("rule create", [rule_op(groups[2], 1000 + i % 50)])[0]["security_group_rules"][0]["id"]
        measure("rule delete", [delete_op(f"security-group-rules/{made}")])
        out = measure("policy create (rule + 2 ports)", [rule_op(groups[2], 80), port_op(ports[1], [groups[2]]),
                                                         port_op(ports[2], [groups[1]])])
        created = out[0]["security_group_rules"][0]["id"]
        out = measure("policy update (rule + rule delete)", [rule_op(groups[2], 81),
                                                             delete_op(f"security-group-rules/{created}")])
        run([delete_op(f"security-group-rules/{out[0]['security_group_rules'][0]['id']}"),
             port_op(ports[1], []), port_op(ports[2], [])])
        spare = post("security-groups", "security_group", {"name": "spare"})["id"]
        run([rule_op(spare, 80), port_op(ports[3], [spare])])
        measure("policy delete (port + group delete)", [port_op(ports[3], []), delete_op(f"security-groups/{spare}")])
    print(f"tree {args.tree}, {args.rounds} rounds, {args.fill} more ports, {store.url.split(':')[0]}")
    print("| batch | statements | CPU ms p50 | CPU ms p90 |")
    print("|---|---|---|---|")
    for kind, xs in results.items():
        cpu = sorted(x[0] * 1e3 for x in xs)
        print(f"| {kind} | {xs[-1][1]} | {statistics.median(cpu):.2f} | {cpu[int(0.9 * (len(cpu) - 1))]:.2f} |")
    store.dispose()


if __name__ == "__main__":
    main()
