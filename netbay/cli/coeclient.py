"""Talking to the APIs for the CLI, on :mod:`netbay.client`: one login per command (the
OS_* / clouds.yaml credentials give the token and the catalog), the token renewed on a
401, every API's error decoded by the one decoder.

A failure is an exception (:class:`netbay.client.ApiError`, httpx's transport errors,
:class:`netbay.client.auth.CredentialsMissing`) that the ``netbay`` group turns into one
line (:mod:`netbay.cli.errors`). Nothing here imports the client until a command runs,
nor rich until a table is drawn: a command's ``--help`` needs neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from netbay.cli.out import LazyConsole

if TYPE_CHECKING:   # imported when a command runs: ``--help`` needs no HTTP client
    from netbay.client import Api as _Api
    from netbay.client.auth import Login

err = LazyConsole(stderr=True)
VERSION = "container-infra latest"
VERSIONS = {"network": "/v2.0", "load-balancer": "/v2"}
CONTAINER_INFRA = "/container-infra/v1"   # where netbay serves it, beside /netbay/v1


class Session:
    """A login (token and catalog) and clients of the services in its catalog; the
    token is renewed by logging in again when a service answers 401."""

    def __init__(self) -> None:
        from netbay.client.auth import Credentials

        self.creds = Credentials.from_env()
        self.login: Login = self.creds.login()
        self._fresh: str | None = self.login.token

    @property
    def server_url(self) -> str:
        """netbay's root (where ``/netbay/v1`` is)."""
        return self.creds.server_url

    def token(self) -> str:
        if self._fresh is not None:
            token, self._fresh = self._fresh, None
            return token
        self.login = self.creds.login()
        return self.login.token

    def endpoint(self, service_type: str) -> str:
        from netbay.client import ApiError

        url = self.login.endpoint(service_type)
        if not url:
            raise ApiError(404, f"no {service_type} endpoint in the catalog of {self.creds.auth_url}")
        return url

    def api(self, base: str, version: str | None = None, timeout: float = 60.0) -> _Api:
        from netbay.client import Api as _Api

        headers = {"OpenStack-API-Version": version} if version else None
        return _Api(base, self.token, timeout=timeout, headers=headers)


class CoeClient:
    """Authenticated JSON requests to ``…/container-infra/v1``."""

    def __init__(self) -> None:
        self.session = Session()
        self.base = self.session.endpoint("container-infra")
        self.http = self.session.api(self.base, VERSION)

    def request(self, method: str, path: str, json: Any = None, params: dict[str, Any] | None = None) -> Any:
        return self.http.call(method, path, json, **(params or {}))


class Api(CoeClient):
    """The container-infra client, plus raw reads of the network and load-balancer APIs
    and requests to netbay's own ``/netbay/v1`` (sandboxes, pods, cluster networks)."""

    def __init__(self) -> None:
        super().__init__()
        self._endpoints: dict[str, str] = {}

    def get(self, url: str, params: dict[str, Any] | None = None) -> Any:
        """GET a full URL: the JSON body, or None for a 404."""
        from netbay.client import ApiError

        try:
            return self.http.call("GET", url, **(params or {}))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def coe(self, path: str) -> Any:
        return self.get(f"{self.base}{path}")

    def endpoint(self, service: str) -> str:
        if service not in self._endpoints:
            if service == "netbay":   # beside the container-infra API (a cloud's Keystone is elsewhere)
                root = self.base.removesuffix(CONTAINER_INFRA) if self.base.endswith(CONTAINER_INFRA) \
                    else self.session.server_url
                url = root + "/netbay/v1"
            else:
                url = self.session.endpoint(service)
                if not url.endswith(("/v2.0", "/v2")):
                    url += VERSIONS[service]
            self._endpoints[service] = url
        return self._endpoints[service]

    def service(self, service: str, path: str, key: str | None = None, **params: Any) -> Any:
        """``GET <service endpoint><path>``; ``key`` unwraps the body (None if missing)."""
        body = self.get(f"{self.endpoint(service)}{path}", params=params or None)
        if body is None or key is None:
            return body
        return body.get(key)

    def netbay(self, method: str, path: str, json: Any = None, params: dict[str, Any] | None = None) -> Any:
        """A request to netbay's own ``/netbay/v1`` (pods, sandboxes, cluster networks)."""
        return self.http.call(method, f"{self.endpoint('netbay')}{path}", json, **(params or {}))


def find(http: _Api, member: str, ident: str, collection: str | None = None) -> dict[str, Any]:
    """A Neutron object (``port``, ``network``, ``tap_service`` …) by name or id, as
    openstack's ``find`` does: one named so, else the id; two of that name is an error."""
    from netbay.client import NET, ApiError

    collection = collection or member + "s"
    found = http.call("GET", f"{NET}/{collection}", name=ident)[collection.rsplit("/", 1)[-1]]
    if len(found) > 1:
        raise ApiError(409, f"{len(found)} {member.replace('_', ' ')}s are named {ident!r}; use the id")
    if found:
        return found[0]
    return http.call("GET", f"{NET}/{collection}/{ident}")[member]


def cell(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(cell(v) for v in value)
    return "" if value is None else str(value)


def fields_table(title: str, item: dict[str, Any], skip: tuple[str, ...] = ("links",)) -> Any:
    from rich.table import Table

    table = Table("Field", "Value", title=title, title_justify="left")
    for key in sorted(item):
        if key not in skip:
            table.add_row(key, cell(item[key]))
    return table


def rows_table(title: str, rows: list[dict[str, Any]], columns: list[str]) -> Any:
    from rich.table import Table

    table = Table(*columns, title=title, title_justify="left")
    for row in rows:
        table.add_row(*[cell(row.get(c)) for c in columns])
    return table
