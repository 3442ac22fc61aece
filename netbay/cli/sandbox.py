"""``netbay sandbox``: create, list, delete sandboxes and run commands inside them.

Talks to a running netbay with the OS_* credentials (as ``netbay demo`` does);
names of ports and networks are resolved with openstacksdk. ``exec`` runs a
command locally in the sandbox's network namespace (the dataplane agent of this
host made it).
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from netbay.dataplane.names import PRODUCT_PREFIX

app = typer.Typer(help="Sandboxes: network namespaces that ports plug into.", no_args_is_help=True)
console = Console()
err = Console(stderr=True)

UrlOpt = typer.Option(None, "--url", envvar="NETBAY_URL",
                      help="The netbay server (default: from OS_AUTH_URL).")


class _Client:
    """openstacksdk for names, raw HTTP for ``/netbay/v1`` with the SDK's token."""

    def __init__(self, url: str | None) -> None:
        from netbay.cli.demo import connect

        self.conn = connect()
        self.base = (url or _base_from_auth(self.conn)).rstrip("/")

    def request(self, method: str, path: str, **kw: Any) -> Any:
        import httpx

        r = httpx.request(method, f"{self.base}/netbay/v1{path}",
                          headers={"X-Auth-Token": self.conn.auth_token}, timeout=60, **kw)
        if r.status_code >= 400:
            try:
                message = r.json()["NeutronError"]["message"]
            except Exception:  # noqa: BLE001 - any body not in Neutron's error format
                message = r.text
            err.print(f"[red]error:[/] {message} (HTTP {r.status_code})")
            raise typer.Exit(1)
        return r.json() if r.content else None

    def sandbox(self, name_or_id: str) -> dict[str, Any]:
        found = self.request("GET", "/sandboxes", params={"name": name_or_id})["sandboxes"]
        if len(found) > 1:
            err.print(f"[red]error:[/] {len(found)} sandboxes are named {name_or_id!r}; use the id")
            raise typer.Exit(1)
        if found:
            return found[0]
        return self.request("GET", f"/sandboxes/{name_or_id}")["sandbox"]


def _base_from_auth(conn: Any) -> str:
    auth_url = str(conn.config.get_auth_args().get("auth_url") or os.environ.get("OS_AUTH_URL") or "")
    base = auth_url.rstrip("/")
    for tail in ("/v3", "/identity"):
        if base.endswith(tail):
            base = base[: -len(tail)]
    if not base:
        err.print("[red]error:[/] no server URL: set OS_AUTH_URL or pass --url")
        raise typer.Exit(1)
    return base


def _table(rows: list[dict[str, Any]]) -> Table:
    table = Table("name", "id", "status", "host", "interfaces", title="sandboxes", title_justify="left")
    for sb in rows:
        ifs = "\n".join(f"{p['interface']} {p['port_id']} ({p.get('network_id') or '-'})" for p in sb["ports"])
        table.add_row(sb["name"], sb["id"], sb["status"], sb["host"], ifs)
    return table


@app.command("create")
def create(
    name: str = typer.Argument(..., help="The sandbox's name."),
    port: list[str] = typer.Option(None, "--port", help="An existing port (name or id) to plug in; repeatable."),
    network: list[str] = typer.Option(None, "--network", help="A network (name or id) to get a new port on; "
                                                              "repeatable."),
    url: str = UrlOpt,
) -> None:
    """Create a sandbox with existing ports or new ports on networks."""
    client = _Client(url)
    net = client.conn.network
    try:
        ports = [net.find_port(p, ignore_missing=False).id for p in port or []]
        networks = [net.find_network(n, ignore_missing=False).id for n in network or []]
    except Exception as exc:  # noqa: BLE001 - the SDK's ResourceNotFound / DuplicateResource
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    body: dict[str, Any] = {"name": name}
    if ports:
        body["ports"] = ports
    if networks:
        body["networks"] = networks
    sb = client.request("POST", "/sandboxes", json={"sandbox": body})["sandbox"]
    console.print(_table([sb]))


@app.command("list")
def list_(url: str = UrlOpt) -> None:
    """List sandboxes."""
    client = _Client(url)
    console.print(_table(client.request("GET", "/sandboxes")["sandboxes"]))


@app.command("show")
def show(name: str = typer.Argument(..., help="Name or id."), url: str = UrlOpt) -> None:
    """Show one sandbox."""
    console.print(_table([_Client(url).sandbox(name)]))


@app.command("delete")
def delete(names: list[str] = typer.Argument(..., help="Names or ids."), url: str = UrlOpt) -> None:
    """Delete sandboxes (their own ports go; ports they were given are unbound)."""
    client = _Client(url)
    for name in names:
        sb = client.sandbox(name)
        client.request("DELETE", f"/sandboxes/{sb['id']}")
        console.print(f"deleted sandbox {sb['name'] or sb['id']}")


@app.command("exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def exec_(
    name: str = typer.Argument(..., help="Name or id."),
    command: list[str] = typer.Argument(..., help="The command (after --)."),
    prefix: str = typer.Option(PRODUCT_PREFIX, "--prefix", envvar="NETBAY_AGENT_PREFIX",
                               help="The agent's namespace prefix (the openrc `netbay up` wrote sets it)."),
    url: str = UrlOpt,
) -> None:
    """Run COMMAND inside the sandbox's network namespace (replaces this process)."""
    from netbay.cli.nsexec import exec_in
    from netbay.dataplane import netns
    from netbay.dataplane.names import Names

    sandbox_id = name if is_uuid(name) and netns.exists(Names(prefix).sandbox(name)) else \
        _Client(url).sandbox(name)["id"]
    exec_in(Names(prefix).sandbox(sandbox_id), command)


def is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True
