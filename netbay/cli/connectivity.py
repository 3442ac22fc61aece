"""``netbay cluster connectivity``: which pod and node reaches which, by real ICMP.

Rows are the namespaces the dataplane agent made on this host for a cluster's nodes
(``<prefix>s-<sandbox>``) and pods (``<prefix>p-<pod>``); columns are their
addresses (a node's ``eth0``, a pod's). Every cell is one echo request from the
row's namespace (:mod:`netbay.dataplane.probe`: all cells in flight together, a
bounded number of rounds), so the matrix costs ``count × timeout`` seconds at most.

With several clusters the matrix also shows isolation between them. Clusters reuse
address ranges (every private subnet defaults to 10.0.0.0/24), so a column whose
address lies in the row's own cluster's networks — its nodes' subnets, its pod
leases — is not probed across: the echo would stay in the row's own cluster (where a
load balancer's VIP or another node may well answer it) and prove nothing
("overlap").

Two more kinds of column show whether the cluster reaches beyond itself (pods
masqueraded by their node, then routed by the cluster's router): every sandbox on
another network behind the cluster's router ("outside") and the external network's
outside world (its subnet's gateway, in the namespace that plays it). Only the
cluster's own rows probe them; they are listed apart (``outside`` in ``--json``).
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import asdict, dataclass
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from netbay.cli.coeclient import Api, err
from netbay.cli.daemon import require_root

console = Console()


@dataclass
class Member:
    """A row and a column of the matrix."""
    id: str            # pod id, or the node's sandbox id
    name: str          # pod name, or the node's logical name (kube_minion_0)
    kind: str          # pod | master | minion
    cluster: str       # the cluster's name
    address: str
    namespace: str
    node: str | None = None   # a pod's node
    present: bool = False     # the namespace exists on this host


@dataclass
class Outside:
    """A column beyond the cluster: a sandbox behind its router, or the external network."""
    id: str
    name: str
    kind: str          # sandbox | external
    cluster: str       # whose router leads there
    address: str


@dataclass
class Cell:
    src: str           # member ids
    dst: str
    address: str
    same_cluster: bool
    reachable: bool | None    # None: not probed (see note)
    note: str = ""            # self | overlap | namespace missing


Space = list[ipaddress.IPv4Network | ipaddress.IPv6Network]


def members(api: Api, cluster: dict[str, Any], prefix: str) -> tuple[list[Member], Space]:
    """The cluster's nodes (masters first) and pods, from its container network and
    pods (a cluster without one, or whose nodes are no sandboxes of netbay's — servers
    of a cloud's Nova — gives its servers' nodes); and its address space: the nodes'
    subnets and the pod leases."""
    from netbay.dataplane import netns
    from netbay.dataplane.names import Names

    names = Names(prefix)
    uuid = cluster["uuid"]
    out: list[Member] = []
    space: list[str] = []
    net = api.service("netbay", f"/clusternets/{quote(uuid, safe='')}", "clusternet")
    if net is not None and net.get("nodes"):
        for n in net.get("nodes") or []:
            out.append(Member(n["sandbox_id"], n["name"], n.get("role") or "minion", cluster["name"],
                              str(n["address"]).split("/")[0], names.sandbox(n["sandbox_id"])))
            space.append(str(n["address"]))
        space += [str(lease) for lease in (net.get("leases") or {}).values()]
    else:
        from netbay.cli.topology import collect

        topo = collect(api, cluster)
        for node in topo.nodes:
            if node.address:
                out.append(Member(node.sandbox_id, node.name, node.role, cluster["name"], node.address,
                                  names.sandbox(node.sandbox_id)))
        space += [s.cidr for n in topo.networks for s in n.subnets]
    pods = api.service("netbay", "/pods", "pods", cluster_id=uuid) or []
    for p in sorted(pods, key=lambda p: (p["node"], p["name"])):
        docker = p.get("runtime") == "docker"   # a Docker container on the node, named docker-<endpoint id>
        out.append(Member(p["id"], p["name"][:19] if docker else p["name"], "container" if docker else "pod",
                          cluster["name"], p["address"], names.pod(p["id"]), p["node"]))
        space.append(p["address"])
    out += containers(api, net, names, cluster["name"])
    for m in out:
        m.present = netns.exists(m.namespace)
    networks = {ipaddress.ip_interface(s).network for s in space}
    return out, sorted(networks, key=lambda n: (n.version, n))


def containers(api: Api, net: dict[str, Any] | None, names: Any, cluster: str) -> list[Member]:
    """Docker containers on the cluster's private network (ports ``compute:netbay``):
    their namespaces are named by the libnetwork plugin after Join."""
    nodes = (net or {}).get("nodes") or []
    port = api.service("network", f"/ports/{quote(nodes[0]['port_id'], safe='')}", "port") if nodes else None
    if not port:
        return []
    out = []
    for p in api.service("network", "/ports", "ports", network_id=port["network_id"],
                         device_owner="compute:netbay") or []:
        v4 = [f["ip_address"] for f in p.get("fixed_ips") or () if ":" not in f["ip_address"]]
        if v4:
            name = p.get("name") if p.get("name") not in (None, "", "docker") else f"docker-{(p['device_id'] or p['id'])[:12]}"
            out.append(Member(p["id"], name, "container", cluster, v4[0], names.container(p["id"])))
    return out


def _not_routed(src: Member, dst: Member) -> bool:
    """A container on the private network and a pod-network address (a pod, or a
    container on a node): no route between them — the pod network is not routed
    beyond the cluster's nodes (no NAT either), as in flannel."""
    def beside(m: Member) -> bool:   # on the private network, not on a node
        return m.kind == "container" and m.node is None
    return (beside(src) and dst.node is not None) or (beside(dst) and src.node is not None)


def outside(api: Api, cluster: dict[str, Any], own: Space) -> list[Outside]:
    """Columns beyond ``cluster``: the sandboxes on other networks behind its router
    (addresses outside ``own``) and its external network's gateway (the outside world)."""
    path = f"/clusters/{quote(cluster['uuid'], safe='')}/resources"
    resources = (api.coe(path) or {}).get("resources") or []
    routers = [r["physical_id"] for r in resources if r.get("type") == "OS::Neutron::Router" and r.get("physical_id")]
    out: list[Outside] = []
    for router_id in routers[:1]:
        legs = api.service("network", "/ports", "ports", device_id=router_id) or []
        nets = {p["network_id"] for p in legs if p.get("device_owner") == "network:router_interface"}
        for net_id in sorted(nets):
            for p in api.service("network", "/ports", "ports", network_id=net_id,
                                 device_owner="netbay:sandbox") or []:
                ips = [ip["ip_address"] for ip in p.get("fixed_ips") or [] if "." in ip["ip_address"]]
                if ips and not any(ipaddress.ip_address(ips[0]) in n for n in own):
                    sb = api.service("netbay", f"/sandboxes/{p['device_id']}", "sandbox") or {}
                    out.append(Outside(p["device_id"], sb.get("name") or p["device_id"][:8], "sandbox",
                                       cluster["name"], ips[0]))
        router = api.service("network", f"/routers/{router_id}", "router") or {}
        ext_id = (router.get("external_gateway_info") or {}).get("network_id")
        ext = api.service("network", f"/networks/{ext_id}", "network") if ext_id else None
        for sid in (ext or {}).get("subnets") or []:
            assert ext is not None  # the loop runs only over ext's subnets
            sub = api.service("network", f"/subnets/{sid}", "subnet") or {}
            if sub.get("ip_version") == 4 and sub.get("gateway_ip"):
                out.append(Outside(ext["id"], ext.get("name") or ext["id"][:8], "external", cluster["name"],
                                   sub["gateway_ip"]))
                break
    return out


def plan_outside(rows: list[Member], columns: list[Outside]) -> list[Cell]:
    """A cell from each row to each column beyond its own cluster."""
    cells = []
    for src in rows:
        for dst in columns:
            if dst.cluster != src.cluster:
                continue
            cell = Cell(src.id, dst.id + "@" + dst.address, dst.address, True, False)
            if not src.present:
                cell.reachable, cell.note = None, "namespace missing"
            cells.append(cell)
    return cells


def plan(rows: list[Member], spaces: dict[str, Space]) -> list[Cell]:
    """Every (row, column) cell, with the ones not to probe marked."""
    def inside(address: str, cluster: str) -> bool:
        ip = ipaddress.ip_address(address)
        return any(ip in n for n in spaces.get(cluster, ()))

    cells = []
    for src in rows:
        for dst in rows:
            same = src.cluster == dst.cluster
            cell = Cell(src.id, dst.id, dst.address, same, False)
            if not src.present:
                cell.reachable, cell.note = None, "namespace missing"
            elif not same and inside(dst.address, src.cluster):
                cell.reachable, cell.note = None, "overlap"
            elif _not_routed(src, dst):
                cell.reachable, cell.note = None, "not routed"
            elif src.id == dst.id:
                cell.note = "self"
            cells.append(cell)
    return cells


def probe_cells(rows: list[Member], cells: list[Cell], *, timeout: float, count: int) -> None:
    """Fill in ``reachable`` for every cell to probe: all in flight together."""
    from netbay.dataplane import probe

    ns = {m.id: m.namespace for m in rows}
    todo = [c for c in cells if c.reachable is False]
    got = probe.run([probe.Probe(ns[c.src], c.address) for c in todo], timeout=timeout, count=count)
    for c, ok in zip(todo, got):
        c.reachable = ok
        if ok is None:   # it went between planning and probing
            c.note = "namespace missing"


def summary(cells: list[Cell], beyond: Sequence[Cell] = ()) -> dict[str, Any]:
    within = [c for c in cells if c.same_cluster]
    between = [c for c in cells if not c.same_cluster]
    counts: dict[str, Any] = {
        "within": {"cells": len(within), "probed": sum(c.reachable is not None for c in within),
                   "reachable": sum(c.reachable is True for c in within)},
        "between": {"cells": len(between), "probed": sum(c.reachable is not None for c in between),
                    "reachable": sum(c.reachable is True for c in between)},
    }
    if beyond:
        counts["outside"] = {"cells": len(beyond), "probed": sum(c.reachable is not None for c in beyond),
                             "reachable": sum(c.reachable is True for c in beyond)}
    w = counts["within"]
    w["not_routed"] = sum(c.note == "not routed" for c in within)
    counts["all_reachable_within"] = w["cells"] > 0 and w["reachable"] == w["cells"] - w["not_routed"]
    return counts


# --- output -------------------------------------------------------------------------------------------


def _label(m: Member, qualify: bool) -> str:
    return f"{m.cluster}/{m.name}" if qualify else m.name


def _mark(cell: Cell) -> Text:
    if cell.reachable is True:
        return Text("✓ self" if cell.note == "self" else "✓", style="green")
    if cell.reachable is False:
        return Text("✗", style="bold red")
    return Text({"overlap": "overlap", "not routed": "–"}.get(cell.note, "?"), style="dim")


def table(rows: list[Member], cells: list[Cell], title: str, columns: Sequence[Outside] = (),
          beyond: Sequence[Cell] = ()) -> Table:
    qualify = len({m.cluster for m in rows}) > 1
    out = Table(title=title, title_justify="left")
    out.add_column("from \\ to")
    for m in rows:
        out.add_column(Text(f"{_label(m, qualify)}\n{m.address}"), justify="center")
    for o in columns:
        kind = "external" if o.kind == "external" else "outside"
        name = f"{o.cluster}/{o.name}" if qualify else o.name
        out.add_column(Text(f"{kind} {name}\n{o.address}", style="cyan"), justify="center")
    by_pair = {(c.src, c.dst): c for c in [*cells, *beyond]}
    for src in rows:
        where = f" @{src.node}" if src.node else ""
        head = Text.assemble((f"{src.kind} ", "dim"), (_label(src, qualify), "bold"), (where, "dim"))
        if not src.present:
            head.append(" (no namespace)", style="red")
        marks = [_mark(by_pair[(src.id, dst.id)]) for dst in rows]
        marks += [_mark(c) if (c := by_pair.get((src.id, f"{o.id}@{o.address}"))) else Text("")
                  for o in columns]
        out.add_row(head, *marks)
    return out


def _failures(rows: list[Member], cells: list[Cell], columns: Sequence[Outside] = ()) -> list[str]:
    name = {m.id: m.name for m in rows} | {f"{o.id}@{o.address}": f"{o.kind} {o.name}" for o in columns}
    return [f"{name[c.src]} → {name[c.dst]} ({c.address})" for c in cells if c.same_cluster and c.reachable is False]


def command(api: Api, clusters: list[dict[str, Any]], *, prefix: str, as_json: bool, timeout: float,
            count: int) -> None:
    """Gather the members, probe, print; exit 1 when a cell within a cluster is unreachable."""
    rows: list[Member] = []
    columns: list[Outside] = []
    spaces: dict[str, Space] = {}
    for c in clusters:
        found, spaces[c["name"]] = members(api, c, prefix)
        rows += found
        columns += outside(api, c, spaces[c["name"]])
    label = ", ".join(c["name"] for c in clusters)
    if not rows:
        err.print(f"[red]error:[/] cluster {escape(label)} has no nodes or pods to probe")
        raise typer.Exit(1)
    if not any(m.present for m in rows):
        err.print(f"[red]error:[/] no namespace of cluster {escape(label)} with prefix {prefix!r} on this host: "
                  "the matrix is probed from the dataplane agent's namespaces (run it where the agent runs, "
                  "as root, with the agent's --prefix)")
        raise typer.Exit(1)
    require_root(err, "probing needs root (raw ICMP sockets inside the agent's namespaces)")
    cells = plan(rows, spaces)
    beyond = plan_outside(rows, columns)
    try:
        probe_cells(rows, [*cells, *beyond], timeout=timeout, count=count)
    except PermissionError as exc:
        err.print(f"[red]error:[/] cannot open an ICMP socket: {exc} (CAP_NET_RAW needed)")
        raise typer.Exit(1) from None
    counts = summary(cells, beyond)
    failures = _failures(rows, cells) + _failures(rows, beyond, columns)
    if as_json:
        print(json.dumps({"clusters": [{"name": c["name"], "uuid": c["uuid"],
                                        "address_space": [str(n) for n in spaces[c["name"]]]} for c in clusters],
                          "prefix": prefix, "timeout": timeout, "count": count,
                          "members": [asdict(m) for m in rows],
                          "cells": [{"from": c.src, "to": c.dst, "address": c.address, "reachable": c.reachable,
                                     "same_cluster": c.same_cluster, "note": c.note} for c in cells],
                          "outside": [asdict(o) for o in columns],
                          "outside_cells": [{"from": c.src, "to": c.dst.split("@")[0], "address": c.address,
                                             "reachable": c.reachable, "note": c.note} for c in beyond],
                          "summary": counts}, indent=2))
    else:
        title = f"cluster {label}: ICMP from each row to each column (at most {count} × {timeout:g} s)"
        console.print(table(rows, cells, title, columns, beyond))
        w, b = counts["within"], counts["between"]
        if counts["all_reachable_within"]:
            routed = (f" ({w['not_routed']} not routed: a container on the private network and the pod "
                      "network, –)" if w["not_routed"] else "")
            console.print(f"[green]all {w['cells'] - w['not_routed']} cells within the cluster"
                          f"{'s' if len(clusters) > 1 else ''} reachable[/]{routed}")
        else:
            console.print(f"[red]{w['reachable']}/{w['cells']} cells within the cluster"
                          f"{'s' if len(clusters) > 1 else ''} reachable[/]")
        o = counts.get("outside")
        if o:
            console.print(f"beyond the cluster{'s' if len(clusters) > 1 else ''} (other networks behind the "
                          f"router, the external network): {o['reachable']}/{o['cells']} cells reachable")
        if b["cells"]:
            skipped = b["cells"] - b["probed"]
            console.print(f"between clusters: {b['reachable']}/{b['probed']} probed cells reachable"
                          + (f"; {skipped} not probed (overlap: the address lies in the row's own cluster's "
                             "networks)" if skipped else ""))
    missing = sorted({m.namespace for m in rows if not m.present})
    if missing:
        err.print(f"[yellow]namespaces missing on this host:[/] {', '.join(missing)}")
    if failures or missing:
        if failures:
            err.print(f"[red]unreachable within a cluster:[/] {escape('; '.join(failures))}")
        raise typer.Exit(1)
