"""Talking to the container-infra API for the CLI: the endpoint from the catalog,
the token from the OS_* / clouds.yaml credentials, Magnum's errors shown plainly."""

from __future__ import annotations

from typing import Any

import typer
from rich.console import Console
from rich.table import Table

err = Console(stderr=True)
VERSION = "container-infra latest"


class CoeClient:
    """Authenticated JSON requests to ``…/container-infra/v1``."""

    def __init__(self) -> None:
        from netbay.cli.demo import connect

        self.conn = connect()
        try:
            endpoint = self.conn.session.get_endpoint(service_type="container-infra", interface="public")
        except Exception as exc:  # keystoneauth raises several kinds for a missing service
            err.print(f"[red]error:[/] no container-infra endpoint in the catalog: {exc}")
            raise typer.Exit(1) from None
        if not endpoint:
            err.print("[red]error:[/] no container-infra endpoint in the catalog")
            raise typer.Exit(1)
        self.base = endpoint.rstrip("/")

    def request(self, method: str, path: str, **kw: Any) -> Any:
        import httpx

        headers = {"X-Auth-Token": self.conn.auth_token, "OpenStack-API-Version": VERSION}
        r = httpx.request(method, f"{self.base}{path}", headers=headers, timeout=60, **kw)
        if r.status_code >= 400:
            err.print(f"[red]error:[/] {message_of(r)} (HTTP {r.status_code})")
            raise typer.Exit(1)
        return r.json() if r.content else None


def message_of(r: Any) -> str:
    try:
        return r.json()["errors"][0]["detail"]
    except Exception:
        return r.text


def cell(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(cell(v) for v in value)
    return "" if value is None else str(value)


def fields_table(title: str, item: dict[str, Any], skip: tuple[str, ...] = ("links",)) -> Table:
    table = Table("Field", "Value", title=title, title_justify="left")
    for key in sorted(item):
        if key not in skip:
            table.add_row(key, cell(item[key]))
    return table


def rows_table(title: str, rows: list[dict[str, Any]], columns: list[str]) -> Table:
    table = Table(*columns, title=title, title_justify="left")
    for row in rows:
        table.add_row(*[cell(row.get(c)) for c in columns])
    return table
