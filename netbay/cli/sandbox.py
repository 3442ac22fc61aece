"""``netbay sandbox``: create, list, delete sandboxes and run commands inside them.

Talks to a running netbay with the OS_* credentials (or OS_CLOUD's clouds.yaml entry);
names of ports and networks are resolved through its network API. ``exec`` runs a
command locally in the sandbox's network namespace (the dataplane agent of this
host made it).
"""

from __future__ import annotations

from typing import Any

import typer

from netbay.cli.coeclient import Session, find
from netbay.cli.out import LazyConsole
from netbay.dataplane.names import PRODUCT_PREFIX

app = typer.Typer(help="Sandboxes: network namespaces that ports plug into.", no_args_is_help=True)
console = LazyConsole()

UrlOpt = typer.Option(None, "--url", envvar="NETBAY_URL",
                      help="The netbay server (default: from OS_AUTH_URL).")


class _Client:
    """Requests to ``/netbay/v1`` and names of ports and networks, one login."""

    def __init__(self, url: str | None) -> None:
        self.session = Session()
        self.base = (url or self.session.server_url).rstrip("/")
        self.http = self.session.api(self.base)

    def request(self, method: str, path: str, json: Any = None, params: dict[str, Any] | None = None) -> Any:
        return self.http.call(method, f"/netbay/v1{path}", json, **(params or {}))

    def find(self, member: str, ident: str, collection: str | None = None) -> dict[str, Any]:
        """A Neutron object by name or id."""
        return find(self.http, member, ident, collection)

    def sandbox(self, name_or_id: str) -> dict[str, Any]:
        found = self.request("GET", "/sandboxes", params={"name": name_or_id})["sandboxes"]
        if len(found) > 1:
            from netbay.client import ApiError

            raise ApiError(409, f"{len(found)} sandboxes are named {name_or_id!r}; use the id")
        if found:
            return found[0]
        return self.request("GET", f"/sandboxes/{name_or_id}")["sandbox"]


def _table(rows: list[dict[str, Any]]) -> Any:
    from rich.table import Table

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
    ports = [client.find("port", p)["id"] for p in port or []]
    networks = [client.find("network", n)["id"] for n in network or []]
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
    from netbay.runtime.resolve import id_shaped

    sandbox_id = name if id_shaped(name) and netns.exists(Names(prefix).sandbox(name)) else \
        _Client(url).sandbox(name)["id"]
    exec_in(Names(prefix).sandbox(sandbox_id), command)

