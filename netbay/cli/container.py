"""``netbay container-network`` and ``netbay container``: what python-zunclient lacks
(container networks) and the spec's workflow in netbay's own words.

Both talk to the Zun-compatible API (catalog type ``container``, ``OpenStack-API-Version:
container 1.40``). ``container run`` answers once the container is ``Running`` (bounded
by ``--timeout``). Exit codes: 0 done, 1 an error (the server's message and HTTP
status are printed) or the container ended in ``Error``, 2 the wait timed out.
"""

from __future__ import annotations

import shlex
import time
from typing import Any
from urllib.parse import quote

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from netbay.cli.coeclient import Session, err, fields_table
from netbay.cli.out import status_text

app = typer.Typer(help="Containers on netbay networks (Zun-compatible API), run by Docker.", no_args_is_help=True)
network_app = typer.Typer(help="Container networks: netbay networks containers use.", no_args_is_help=True)
console = Console()

VERSION = "container 1.40"
POLL = 0.2


class Zun:
    """Authenticated JSON requests to ``…/container/v1`` from the catalog."""

    def __init__(self) -> None:
        session = Session()
        self.base = session.endpoint("container")
        self.http = session.api(self.base, VERSION, timeout=120)

    def __call__(self, method: str, path: str, json: Any = None, params: dict[str, Any] | None = None) -> Any:
        return self.http.call(method, path, json, **(params or {}))


def _q(ident: str) -> str:
    return quote(ident, safe="")


# --- container-network -----------------------------------------------------------------------------


def networks_table(rows: list[dict[str, Any]]) -> Table:
    table = Table("name", "uuid", "neutron network", "subnet pool", "subnet", title="container networks",
                  title_justify="left")
    for n in rows:
        table.add_row(*(Text(str(n.get(k) or "-")) for k in ("name", "uuid", "neutron_net_id", "neutron_pool",
                                                              "neutron_subnet")))
    return table


@network_app.command("create")
def network_create(
    name: str = typer.Argument(..., help="The container network's name."),
    network: str = typer.Option(..., "--network", "--neutron-net", help="The netbay network (name or id)."),
    subnetpool: str = typer.Option(None, "--subnetpool", "--neutron-pool", help="Use its subnet from this pool."),
    subnet: str = typer.Option(None, "--subnet", "--neutron-subnet", help="Use this subnet (IPv4)."),
) -> None:
    """Make a netbay network usable by containers (the spec's ``zun network-create``)."""
    body = {"name": name, "neutron_net_id": network}
    body.update({k: v for k, v in (("neutron_pool", subnetpool), ("neutron_subnet", subnet)) if v})
    console.print(networks_table([Zun()("POST", "/networks", json=body)]))


@network_app.command("list")
def network_list() -> None:
    """List the project's container networks."""
    console.print(networks_table(Zun()("GET", "/networks")["networks"]))


@network_app.command("show")
def network_show(network: str = typer.Argument(..., help="Name, uuid or netbay network id.")) -> None:
    """Show one container network."""
    item = Zun()("GET", f"/networks/{_q(network)}")
    console.print(fields_table(f"container network {item['name']}", item))


@network_app.command("delete")
def network_delete(networks: list[str] = typer.Argument(..., help="Names or uuids.")) -> None:
    """Delete container networks (refused while containers are attached)."""
    zun = Zun()
    for ident in networks:
        zun("DELETE", f"/networks/{_q(ident)}")
        console.print(f"deleted container network {ident}")


# --- container ---------------------------------------------------------------------------------------


def _addresses(c: dict[str, Any]) -> str:
    return ", ".join(a["addr"] for addrs in (c.get("addresses") or {}).values() for a in addrs)


def containers_table(rows: list[dict[str, Any]]) -> Table:
    table = Table("name", "uuid", "image", "addresses", "node", "status", title="containers", title_justify="left")
    for c in rows:
        where = f"{c['cluster'][:8]}/{c['node']}" if c.get("cluster") else "-"
        table.add_row(Text(c["name"] or "-"), Text(c["uuid"]), Text(c["image"]), Text(_addresses(c)),
                      Text(where), status_text(c["status"]))
    return table


def parse_net(value: str) -> dict[str, str]:
    """``network=X[,v4-fixed-ip=A][,v6-fixed-ip=B]`` or ``port=P`` (zunclient's --net)."""
    entry: dict[str, str] = {}
    for part in value.split(","):
        key, sep, val = part.partition("=")
        if not sep or key.strip() not in ("network", "port", "v4-fixed-ip", "v6-fixed-ip"):
            raise typer.BadParameter(f"{value!r}: expected network=<name|id>|port=<id>[,v4-fixed-ip=..]")
        entry[key.strip()] = val.strip()
    if bool(entry.get("network")) == bool(entry.get("port")):
        raise typer.BadParameter(f"{value!r}: give exactly one of network= and port=")
    return entry


def wait_running(zun: Zun, c: dict[str, Any], timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    for _ in range(int(timeout / POLL) + 2):  # bounded by count and by time
        c = zun("GET", f"/containers/{c['uuid']}")
        if c["task_state"] is None and c["status"] != "Creating" or time.monotonic() >= deadline:
            break
        time.sleep(POLL)
    if c["status"] == "Error":
        err.print(f"[red]error:[/] container {escape(c['name'] or c['uuid'])} Error: {escape(c['status_reason'] or '')}")
        raise typer.Exit(1)
    if c["status"] == "Creating":
        err.print(f"[red]error:[/] container {escape(c['uuid'])} still Creating after {timeout:g} s")
        raise typer.Exit(2)
    return c


@app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run(
    image: str = typer.Argument(..., help="The image (present in Docker: no registry is pulled from)."),
    command: list[str] = typer.Argument(None, help="The command (after --)."),
    name: str = typer.Option(None, "--name"),
    net: list[str] = typer.Option(None, "--net", help="network=<name|id>[,v4-fixed-ip=..] or port=<id>; repeatable."),
    security_group: list[str] = typer.Option(None, "--security-group", help="Name or id; repeatable."),
    expose: list[str] = typer.Option(None, "--expose", help="PORT[/tcp|udp] to open; repeatable."),
    cluster: str = typer.Option(None, "--cluster", help="Place it on a node of this cluster (name or uuid), "
                                "plugged as a pod is (Zun's hint cluster=)."),
    node: str = typer.Option(None, "--node", help="That node (default: the least-loaded minion; hint node=)."),
    no_wait: bool = typer.Option(False, "--no-wait", help="Return at once (status Creating)."),
    timeout: float = typer.Option(120.0, "--timeout", min=0.1, help="Seconds to wait for Running."),
) -> None:
    """Create and start a container on netbay networks (default: the project's network), or on a
    cluster node (--cluster C [--node N])."""
    body: dict[str, Any] = {"image": image, "command": command or []}
    if name:
        body["name"] = name
    if net:
        body["nets"] = [parse_net(n) for n in net]
    if security_group:
        body["security_groups"] = security_group
    if expose:
        body["exposed_ports"] = {e: {} for e in expose}
    if node and not cluster:
        raise typer.BadParameter("--node needs --cluster")
    if cluster:
        body["hints"] = {"cluster": cluster, **({"node": node} if node else {})}
    zun = Zun()
    c = zun("POST", "/containers?run=true", json=body)
    if not no_wait:
        c = wait_running(zun, c, timeout)
    console.print(containers_table([c]))


@app.command("list")
def list_() -> None:
    """List the project's containers."""
    console.print(containers_table(Zun()("GET", "/containers")["containers"]))


@app.command("show")
def show(container: str = typer.Argument(..., help="Name or uuid.")) -> None:
    """Show one container."""
    c = Zun()("GET", f"/containers/{_q(container)}")
    console.print(fields_table(f"container {c['name'] or c['uuid']}", c))


@app.command("exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def exec_(
    container: str = typer.Argument(..., help="Name or uuid."),
    command: list[str] = typer.Argument(..., help="The command (after --)."),
) -> None:
    """Run COMMAND in the running container; prints its output, exits with its code."""
    out = Zun()("POST", f"/containers/{_q(container)}/execute",
                params={"run": "true", "command": shlex.join(command)})
    print(out["output"], end="")
    raise typer.Exit(out["exit_code"])


@app.command("delete")
def delete(
    containers: list[str] = typer.Argument(..., help="Names or uuids."),
    force: bool = typer.Option(False, "--force", help="Also a running container."),
) -> None:
    """Delete containers (their own ports go; ports given to them are kept, unbound)."""
    zun = Zun()
    for ident in containers:
        zun("DELETE", f"/containers/{_q(ident)}", params={"force": "true"} if force else None)
        console.print(f"deleted container {ident}")
