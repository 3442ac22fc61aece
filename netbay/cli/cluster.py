"""``netbay cluster``: create, list, show, update and delete clusters, follow them live,
export their Heat template, print (and draw) their topology and probe their connectivity.

The live view polls the cluster and netbay's ``/clusters/{id}/resources`` (the
executor's record of each resource) and shows the stack's resources as a table until
the operation ends in ``*_COMPLETE`` or ``*_FAILED`` (or ``--timeout`` passes).
The topology (:mod:`netbay.cli.topology`) is read from the APIs a user has anyway: the
network API, the load-balancer API and netbay's sandboxes, pods and cluster networks,
found through the cluster's resources; :mod:`netbay.cli.svg` draws it as a picture.
The connectivity matrix (:mod:`netbay.cli.connectivity`) pings from the agent's
namespaces on this host.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from netbay.cli.coeclient import Api, cell, err, fields_table, rows_table
from netbay.cli.out import status_text
from netbay.coe.labels import LabelSyntaxError, format_labels
from netbay.dataplane.names import PRODUCT_PREFIX

app = typer.Typer(help="Clusters (Magnum): built from a cluster template, followed live.", no_args_is_help=True)
console = Console()

POLL = 0.25  # seconds between polls of the live view
TimeoutOpt = typer.Option(600.0, "--timeout", min=1.0, help="Seconds to wait for the operation to end.")
NoWaitOpt = typer.Option(False, "--no-wait", help="Return once the request is accepted.")


def _path(ident: str) -> str:
    return f"/clusters/{quote(ident, safe='')}"


def _labels(values: list[str] | None) -> dict[str, str]:
    try:
        return format_labels(values or [])
    except LabelSyntaxError as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None


# --- the live view -----------------------------------------------------------------------------------


def progress_view(cluster: dict[str, Any] | None, resources: dict[str, Any] | None, elapsed: float,
                  label: str) -> Group:
    """The stack's resources with their status; the title says where the cluster is."""
    rows = (resources or {}).get("resources") or []
    stack = (resources or {}).get("stack") or {}
    status = cluster["status"] if cluster else "waiting"
    done = sum(1 for r in rows if str(r.get("status", "")).endswith("COMPLETE"))
    title = Text.assemble((f"cluster {label}  ", "bold"), status_text(status),
                          f"  stack {stack.get('action') or '-'} {stack.get('status') or '-'}"
                          f"  {done}/{len(rows)} resources  {elapsed:.1f} s")
    if cluster is None and elapsed > 0:  # deleted: what was recorded before is history now
        return Group(Text.assemble((f"cluster {label}  ", "bold"), status_text("DELETE_COMPLETE"),
                                   f"  gone after {elapsed:.1f} s"))
    with_reason = any(r.get("status_reason") for r in rows)
    table = Table("resource", "type", "status", "physical id", *(["reason"] if with_reason else []))
    for r in rows:
        physical = str(r.get("physical_id") or "")
        extra = [Text(str(r.get("status_reason") or ""), style="red")] if with_reason else []
        table.add_row(r.get("name", ""), r.get("type", ""), status_text(r.get("status")), physical[:36], *extra)
    return Group(title, table)


def follow(api: Api, uuid: str, label: str, timeout: float, *, until_gone: bool = False) -> dict[str, Any] | None:
    """Poll the cluster and its resources, showing them live, until the operation ends.

    Returns the last cluster (None when it is gone). Exits 1 on ``*_FAILED`` with the
    status reason, 2 when ``timeout`` passes first."""
    import httpx

    start = time.monotonic()
    deadline = start + timeout
    cluster: dict[str, Any] | None = None
    resources: dict[str, Any] | None = None
    timed_out = False
    with Live(progress_view(None, None, 0.0, label), console=console, refresh_per_second=8,
              transient=False) as live:
        while True:
            settled = False
            try:
                cluster = api.coe(_path(uuid))
                if cluster is not None:
                    resources = api.coe(_path(uuid) + "/resources")
                live.update(progress_view(cluster, resources, time.monotonic() - start, label))
                settled = cluster is None or not cluster["status"].endswith("_IN_PROGRESS")
            except httpx.TransportError:  # the server restarting (it resumes the operation)
                cluster = cluster or {"status": "UNREACHABLE"}
            if settled:
                break
            if time.monotonic() >= deadline:
                timed_out = True
                break
            time.sleep(min(POLL, max(0.0, deadline - time.monotonic())))
    if not console.is_terminal:
        console.line()  # the final render of a non-terminal Live ends without one
    elapsed = time.monotonic() - start
    if cluster is None:
        if until_gone:
            console.print(f"cluster {label} deleted in {elapsed:.1f} s")
            return None
        err.print(f"[red]error:[/] cluster {label} disappeared")
        raise typer.Exit(1)
    if timed_out:
        err.print(f"[red]error:[/] cluster {label} still {cluster['status']} after {timeout:g} s "
                  f"(it goes on in the server; follow it with `netbay cluster show {label}`)")
        raise typer.Exit(2)
    console.print(Text.assemble(f"cluster {label} ", status_text(cluster["status"]), f" in {elapsed:.1f} s"))
    if cluster["status"].endswith("_FAILED"):
        reason = escape(cluster.get("status_reason") or "")
        err.print(f"[red]error:[/] cluster {escape(label)} {cluster['status']}: {reason}")
        raise typer.Exit(1)
    return cluster


def _outputs(cluster: dict[str, Any]) -> None:
    for key in ("api_address", "master_addresses", "node_addresses"):
        console.print(f"  {key}: {cell(cluster.get(key)) or '-'}")


# --- commands ------------------------------------------------------------------------------------------


@app.command("create")
def create(
    name: str = typer.Argument(..., help="Name of the cluster."),
    cluster_template: str = typer.Option(..., "--cluster-template", help="Cluster template name or uuid."),
    node_count: int = typer.Option(None, "--node-count", min=1, help="Number of minions (default 1)."),
    master_count: int = typer.Option(None, "--master-count", min=1,
                                     help="Number of masters (default 1; more need --master-lb-enabled)."),
    labels: list[str] = typer.Option(None, "--labels", help="KEY1=VALUE1,KEY2=VALUE2… (repeatable)."),
    merge_labels: bool = typer.Option(False, "--merge-labels",
                                      help="Merge --labels into the template's instead of replacing them."),
    keypair: str = typer.Option(None, "--keypair", help="SSH keypair: one of yours (openstack keypair create)."),
    flavor: str = typer.Option(None, "--flavor"),
    master_flavor: str = typer.Option(None, "--master-flavor"),
    docker_volume_size: int = typer.Option(None, "--docker-volume-size", min=1),
    fixed_network: str = typer.Option(None, "--fixed-network", help="An existing private network."),
    fixed_subnet: str = typer.Option(None, "--fixed-subnet", help="An existing private subnet."),
    floating_ip: bool = typer.Option(None, "--floating-ip-enabled/--floating-ip-disabled",
                                     help="Floating IPs for the nodes (default: the template's)."),
    master_lb_enabled: bool = typer.Option(False, "--master-lb-enabled",
                                           help="Load balancers for the API and etcd."),
    create_timeout: int = typer.Option(None, "--create-timeout", min=0,
                                       help="Magnum's create_timeout, in minutes (stored)."),
    no_wait: bool = NoWaitOpt,
    timeout: float = TimeoutOpt,
) -> None:
    """Create a cluster and follow it live until it is complete (or failed)."""
    body: dict[str, Any] = {"name": name, "cluster_template_id": cluster_template, "node_count": node_count,
                            "master_count": master_count, "keypair": keypair, "flavor_id": flavor,
                            "master_flavor_id": master_flavor, "docker_volume_size": docker_volume_size,
                            "fixed_network": fixed_network, "fixed_subnet": fixed_subnet,
                            "floating_ip_enabled": floating_ip, "create_timeout": create_timeout}
    body = {k: v for k, v in body.items() if v is not None}
    parsed = _labels(labels)
    if parsed:
        body["labels"] = parsed
    if merge_labels:
        body["merge_labels"] = True
    if master_lb_enabled:
        body["master_lb_enabled"] = True
    api = Api()
    uuid = api.request("POST", "/clusters", json=body)["uuid"]
    console.print(f"cluster {name} ({uuid}) accepted")
    if no_wait:
        return
    cluster = follow(api, uuid, name, timeout)
    if cluster is not None:
        _outputs(cluster)


@app.command("list")
def list_clusters() -> None:
    """List clusters."""
    rows = Api().request("GET", "/clusters")["clusters"]
    console.print(rows_table("clusters", rows, ["uuid", "name", "node_count", "master_count", "status",
                                                 "health_status"]))


@app.command("show")
def show(cluster: str = typer.Argument(..., help="Name or uuid.")) -> None:
    """Show a cluster, with its addresses and status reason."""
    item = Api().request("GET", _path(cluster))
    console.print(fields_table(f"cluster {item['name']}", item))


@app.command("update")
def update(
    cluster: str = typer.Argument(..., help="Name or uuid."),
    node_count: int = typer.Option(..., "--node-count", min=1, help="The new number of minions."),
    no_wait: bool = NoWaitOpt,
    timeout: float = TimeoutOpt,
) -> None:
    """Scale a cluster's minions (newest removed first) and follow it live."""
    api = Api()
    uuid = api.request("GET", _path(cluster))["uuid"]
    api.request("PATCH", _path(uuid), json=[{"op": "replace", "path": "/node_count", "value": node_count}])
    console.print(f"cluster {cluster} update to node_count={node_count} accepted")
    if no_wait:
        return
    item = follow(api, uuid, cluster, timeout)
    if item is not None:
        _outputs(item)


@app.command("delete")
def delete(
    clusters: list[str] = typer.Argument(..., help="Names or uuids."),
    no_wait: bool = NoWaitOpt,
    timeout: float = TimeoutOpt,
) -> None:
    """Delete clusters and wait until they are gone."""
    api = Api()
    for cluster in clusters:
        uuid = api.request("GET", _path(cluster))["uuid"]
        api.request("DELETE", _path(uuid))
        console.print(f"cluster {cluster} delete accepted")
        if not no_wait:
            follow(api, uuid, cluster, timeout, until_gone=True)


@app.command("template-export")
def template_export(
    cluster: str = typer.Argument(..., help="Name or uuid."),
    output_dir: Path = typer.Option(Path("."), "--output-dir", help="Where to write the two files."),
) -> None:
    """Write the cluster's Heat (HOT) template and an environment file with its parameters."""
    import yaml

    api = Api()
    item = api.request("GET", _path(cluster))
    exported = api.request("GET", _path(item["uuid"]) + "/template")
    output_dir.mkdir(parents=True, exist_ok=True)
    template_file = output_dir / f"{item['name']}-template.yaml"
    env_file = output_dir / f"{item['name']}-env.yaml"
    template_file.write_text(yaml.safe_dump(exported["template"], sort_keys=False, default_flow_style=False))
    env_file.write_text(yaml.safe_dump({"parameters": exported["parameters"]}, sort_keys=False,
                                       default_flow_style=False))
    resources = exported["template"].get("resources") or {}
    console.print(f"HOT template ({len(resources)} resources): {template_file}")
    console.print(f"environment (parameters): {env_file}")
    console.print(f"with a real Heat: openstack stack create -t {template_file} -e {env_file} {item['name']}")


# --- topology and connectivity -----------------------------------------------------------------------


@app.command("topology")
def topology(
    cluster: str = typer.Argument(..., help="Name or uuid."),
    svg: Path = typer.Option(None, "--svg", help="Also write the topology as an SVG picture to this file."),
) -> None:
    """Print the cluster's topology as a tree: external network, router, private network
    and subnet, masters and minions with their addresses, leases and pods, load balancers,
    security groups; with --svg also draw it as a picture."""
    from netbay.cli import svg as svg_writer
    from netbay.cli import topology as topo_view

    api = Api()
    item = api.request("GET", _path(cluster))
    topo = topo_view.collect(api, item)
    console.print(Group(topo_view.tree(topo)))
    if svg is not None:
        try:
            svg.parent.mkdir(parents=True, exist_ok=True)
            svg.write_text(svg_writer.render(topo), encoding="utf-8")
        except OSError as exc:
            err.print(f"[red]error:[/] cannot write {svg}: {exc.strerror or exc}")
            raise typer.Exit(1) from None
        console.print(f"topology picture written to {svg.resolve()}")


@app.command("connectivity")
def connectivity(
    cluster: str = typer.Argument(..., help="Name or uuid."),
    others: list[str] = typer.Argument(None, help="More clusters: their pods and nodes join the matrix "
                                                  "(isolation between clusters)."),
    prefix: str = typer.Option(PRODUCT_PREFIX, "--prefix", envvar="NETBAY_AGENT_PREFIX",
                               help="The agent's namespace prefix (the openrc `netbay up` wrote sets it)."),
    as_json: bool = typer.Option(False, "--json", help="Print the matrix as JSON."),
    timeout: float = typer.Option(1.0, "--timeout", min=0.05, max=30.0, help="Seconds to wait for each round."),
    count: int = typer.Option(2, "--count", min=1, max=10,
                              help="Rounds: a cell unanswered after one is probed again."),
) -> None:
    """Ping from every pod and node of the cluster to every pod and node address: a matrix
    of ICMP reachability, probed from the namespaces the dataplane agent made on this host
    (root). Exit 1 when a cell within one cluster is unreachable."""
    from netbay.cli import connectivity as matrix

    api = Api()
    items = [api.request("GET", _path(c)) for c in [cluster, *(others or [])]]
    matrix.command(api, items, prefix=prefix, as_json=as_json, timeout=timeout, count=count)
