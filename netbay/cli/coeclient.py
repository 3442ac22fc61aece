"""Talking to the APIs for the CLI: the endpoints from the catalog, the token from the
OS_* / clouds.yaml credentials, Magnum's and Neutron's errors shown plainly."""

from __future__ import annotations

from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
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
        except Exception as exc:  # noqa: BLE001 - keystoneauth raises several kinds for a missing service
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
            err.print(f"[red]error:[/] {escape(message_of(r))} (HTTP {r.status_code})")
            raise typer.Exit(1)
        return r.json() if r.content else None


class Api(CoeClient):
    """The container-infra client, plus raw reads of the network and load-balancer APIs
    and requests to netbay's own ``/netbay/v1`` (sandboxes, pods, cluster networks)."""

    def __init__(self) -> None:
        super().__init__()
        self._endpoints: dict[str, str] = {}

    def headers(self) -> dict[str, str]:
        return {"X-Auth-Token": self.conn.auth_token, "OpenStack-API-Version": VERSION}

    def get(self, url: str, **kw: Any) -> Any:
        """GET a full URL: the JSON body, or None for a 404; other errors end the command."""
        import httpx

        r = httpx.get(url, headers=self.headers(), timeout=60, **kw)
        if r.status_code == 404:
            return None
        if r.status_code >= 400:
            err.print(f"[red]error:[/] {escape(message_of(r))} (HTTP {r.status_code}, GET {url})")
            raise typer.Exit(1)
        return r.json() if r.content else None

    def coe(self, path: str) -> Any:
        return self.get(f"{self.base}{path}")

    def endpoint(self, service: str) -> str:
        if service not in self._endpoints:
            if service == "netbay":
                from netbay.cli.sandbox import _base_from_auth

                url = _base_from_auth(self.conn) + "/netbay/v1"
            else:
                url = (self.conn.session.get_endpoint(service_type=service, interface="public") or "").rstrip("/")
                version = {"network": "/v2.0", "load-balancer": "/v2"}[service]
                if not url.endswith(("/v2.0", "/v2")):
                    url += version
            self._endpoints[service] = url
        return self._endpoints[service]

    def service(self, service: str, path: str, key: str | None = None, **params: Any) -> Any:
        """``GET <service endpoint><path>``; ``key`` unwraps the body (None if missing)."""
        body = self.get(f"{self.endpoint(service)}{path}", params=params or None)
        if body is None or key is None:
            return body
        return body.get(key)

    def netbay(self, method: str, path: str, **kw: Any) -> Any:
        """A request to netbay's own ``/netbay/v1`` (pods, sandboxes, cluster networks);
        an error ends the command with its message and HTTP status."""
        import httpx

        r = httpx.request(method, f"{self.endpoint('netbay')}{path}", headers=self.headers(), timeout=60, **kw)
        if r.status_code >= 400:
            err.print(f"[red]error:[/] {escape(message_of(r))} (HTTP {r.status_code})")
            raise typer.Exit(1)
        return r.json() if r.content else None


def message_of(r: Any) -> str:
    """The error's text from Magnum's ``{"errors": [...]}`` or a ``NeutronError`` body."""
    try:
        body = r.json()
    except Exception:  # noqa: BLE001 - any body not in the expected error format
        return r.text
    try:
        if isinstance(body, dict) and "NeutronError" in body:
            return str(body["NeutronError"]["message"])
        return str(body["errors"][0]["detail"])
    except Exception:  # noqa: BLE001 - any body not in the expected error format
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
