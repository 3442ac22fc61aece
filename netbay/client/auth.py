"""Who a client is: password credentials as an openrc (OS_*) or a clouds.yaml entry
(OS_CLOUD) holds them, and a Keystone v3 login that gives the token and the catalog."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

NEEDED = ("OS_AUTH_URL", "OS_USERNAME", "OS_PASSWORD", "OS_PROJECT_NAME")
HINT = "source the openrc `netbay up` wrote, or set OS_CLOUD with a clouds.yaml"


class CredentialsMissing(ValueError):
    """No usable credentials in the environment (or the clouds.yaml it names)."""


@dataclass(frozen=True)
class Credentials:
    """Password credentials for Keystone v3 (what an openrc holds)."""
    auth_url: str
    username: str
    password: str
    project_name: str
    user_domain_name: str = "Default"
    project_domain_name: str = "Default"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Credentials:
        """From OS_* variables; else from OS_CLOUD's entry in clouds.yaml."""
        env = os.environ if env is None else env
        missing = [k for k in NEEDED if not env.get(k)]
        if missing and env.get("OS_CLOUD"):
            return cls.from_cloud(env["OS_CLOUD"], env)
        if missing:
            raise CredentialsMissing(f"missing credentials: {', '.join(missing)} ({HINT})")
        return cls(env["OS_AUTH_URL"], env["OS_USERNAME"], env["OS_PASSWORD"], env["OS_PROJECT_NAME"],
                   env.get("OS_USER_DOMAIN_NAME") or "Default", env.get("OS_PROJECT_DOMAIN_NAME") or "Default")

    @classmethod
    def from_cloud(cls, cloud: str, env: Mapping[str, str] | None = None) -> Credentials:
        """The entry ``cloud`` of the first clouds.yaml found where openstacksdk looks."""
        import yaml

        env = os.environ if env is None else env
        places = [Path(env["OS_CLIENT_CONFIG_FILE"])] if env.get("OS_CLIENT_CONFIG_FILE") else []
        places += [Path.cwd() / "clouds.yaml", Path.home() / ".config/openstack/clouds.yaml",
                   Path("/etc/openstack/clouds.yaml")]
        for place in places:
            if place.is_file():
                entry = ((yaml.safe_load(place.read_text()) or {}).get("clouds") or {}).get(cloud)
                if entry is None:
                    continue
                auth = entry.get("auth") or {}
                try:
                    return cls(auth["auth_url"], auth["username"], auth["password"], auth["project_name"],
                               auth.get("user_domain_name") or "Default", auth.get("project_domain_name") or "Default")
                except KeyError as exc:
                    raise CredentialsMissing(f"cloud {cloud!r} in {place} lacks auth.{exc.args[0]}") from None
        raise CredentialsMissing(f"no cloud {cloud!r} in any clouds.yaml ({HINT})")

    @property
    def tokens_url(self) -> str:
        url = self.auth_url.rstrip("/")
        return (url if url.endswith("/v3") else url + "/v3") + "/auth/tokens"

    @property
    def server_url(self) -> str:
        """netbay's root, where its identity API is mounted (``…/identity/v3`` or ``…/v3``)."""
        return self.auth_url.rstrip("/").removesuffix("/v3").removesuffix("/identity").rstrip("/")

    def body(self) -> dict[str, Any]:
        """The password-scoped token request."""
        return {"auth": {"identity": {"methods": ["password"], "password": {"user": {
            "name": self.username, "domain": {"name": self.user_domain_name}, "password": self.password}}},
            "scope": {"project": {"name": self.project_name, "domain": {"name": self.project_domain_name}}}}}

    def login(self, timeout: float = 10.0) -> Login:
        """A token and the catalog (:class:`ApiError` 401 when refused; httpx's
        ``TransportError`` family when nothing answers)."""
        from netbay.client.sync import post_json

        status, headers, body = post_json(self.tokens_url, self.body(), timeout)
        return Login(headers["X-Subject-Token"], (body or {}).get("token", {}).get("catalog") or [])

    def token(self) -> str:
        return self.login().token


@dataclass(frozen=True)
class Login:
    token: str
    catalog: list[dict[str, Any]] = field(default_factory=list)

    def endpoint(self, service_type: str, interface: str = "public") -> str | None:
        """The catalog's URL of ``service_type`` (``container-infra``, ``network`` …)."""
        for service in self.catalog:
            if service.get("type") == service_type:
                for ep in service.get("endpoints", []):
                    if ep.get("interface") == interface:
                        return str(ep["url"]).rstrip("/")
        return None
