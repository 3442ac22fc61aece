"""Identity: Keystone v3 password tokens, catalog, expiry/revocation, roles, scoping."""

from __future__ import annotations

import httpx
import pytest
from conftest import ADMIN_PASSWORD, unique

pytestmark = pytest.mark.every_db   # the store's semantics: on SQLite and PostgreSQL (tests/conftest.py)


def _auth(user: str, password: str, project: str | None = "admin") -> dict:
    body = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
        "name": user, "domain": {"name": "Default"}, "password": password}}}}}
    if project:
        body["auth"]["scope"] = {"project": {"name": project, "domain": {"name": "Default"}}}
    return body


def test_version_discovery(server):
    r = httpx.get(f"{server.url}/identity/v3")
    assert r.status_code == 200
    assert r.json()["version"]["id"].startswith("v3")
    r = httpx.get(f"{server.url}/identity")
    assert r.status_code == 300
    assert r.json()["versions"]["values"][0]["status"] == "stable"


def test_password_token_has_user_project_roles_catalog(server):
    r = httpx.post(f"{server.auth_url}/auth/tokens", json=_auth("admin", ADMIN_PASSWORD))
    assert r.status_code == 201
    assert r.headers["X-Subject-Token"]
    token = r.json()["token"]
    assert token["user"]["name"] == "admin"
    assert token["project"]["name"] == "admin"
    assert {"admin", "member"} <= {role["name"] for role in token["roles"]}
    assert token["expires_at"] > token["issued_at"]
    types = {service["type"]: service for service in token["catalog"]}
    assert "network" in types and "identity" in types
    url = types["network"]["endpoints"][0]["url"]
    assert url == f"{server.url}/network"


def test_wrong_password_and_unknown_user_are_401_in_keystone_format(server):
    for body in (_auth("admin", "wrong"), _auth("nobody-" + unique(), "x")):
        r = httpx.post(f"{server.auth_url}/auth/tokens", json=body)
        assert r.status_code == 401
        assert r.json()["error"]["code"] == 401


@pytest.mark.parametrize("raw", [b"{", b"[]", b'{"auth": 1}', b'{"auth": {"identity": {"methods": ["password"]}}}'])
def test_malformed_auth_body_is_400(server, raw):
    r = httpx.post(f"{server.auth_url}/auth/tokens", content=raw, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == 400


def test_requests_need_a_valid_token(server):
    base = f"{server.url}/network/v2.0/networks"
    assert httpx.get(base).status_code == 401
    r = httpx.get(base, headers={"X-Auth-Token": "garbage"})
    assert r.status_code == 401
    assert r.json()["NeutronError"]["type"] == "HTTPUnauthorized"
    good = server.token()
    tampered = good[:-2] + ("AA" if not good.endswith("AA") else "BB")
    assert httpx.get(base, headers={"X-Auth-Token": tampered}).status_code == 401
    assert httpx.get(base, headers={"X-Auth-Token": good}).status_code == 200


def test_validate_token_endpoint(server):
    admin_token = server.token()
    user, password, project = server.make_user()
    subject = server.token(user, password, project)
    r = httpx.get(f"{server.auth_url}/auth/tokens",
                  headers={"X-Auth-Token": admin_token, "X-Subject-Token": subject})
    assert r.status_code == 200
    assert r.json()["token"]["user"]["name"] == user


def test_password_change_revokes_older_tokens(server):
    user, password, project = server.make_user()
    old = server.token(user, password, project)
    base = f"{server.url}/network/v2.0/networks"
    assert httpx.get(base, headers={"X-Auth-Token": old}).status_code == 200
    r = server.netbay("admin", "user", "set-password", user, env={"NETBAY_NEW_USER_PASSWORD": "new-" + password})
    assert r.returncode == 0, r.stderr
    # Another process changed it: the server reads the epoch on every request, so at once.
    assert httpx.get(base, headers={"X-Auth-Token": old}).status_code == 401
    fresh = server.token(user, "new-" + password, project)
    assert httpx.get(base, headers={"X-Auth-Token": fresh}).status_code == 200


def test_member_is_not_admin_and_cannot_read_the_change_stream(server):
    user, password, project = server.make_user()
    token = server.token(user, password, project)
    r = httpx.get(f"{server.url}/netbay/v1/changes", headers={"X-Auth-Token": token})
    assert r.status_code == 403
    admin = server.token()
    assert httpx.get(f"{server.url}/netbay/v1/changes", headers={"X-Auth-Token": admin}).status_code == 200


def test_user_without_role_on_project_cannot_scope_to_it(server):
    user, password, project = server.make_user()
    r = httpx.post(f"{server.auth_url}/auth/tokens", json=_auth(user, password, "admin"))
    assert r.status_code == 401


def test_removed_role_blocks_new_tokens(server):
    user, password, project = server.make_user()
    r = server.netbay("admin", "role", "remove", "member", "--user", user, "--project", project)
    assert r.returncode == 0, r.stdout + r.stderr
    r = httpx.post(f"{server.auth_url}/auth/tokens", json=_auth(user, password, project))
    assert r.status_code == 401


def test_openstacksdk_authenticates_and_finds_network_endpoint(server):
    conn = server.connect()
    assert conn.network.get_endpoint().startswith(server.url)
    names = [n.name for n in conn.network.networks()]
    assert "public" in names


def test_admin_cli_lists_projects_and_users(server):
    user, _, project = server.make_user()
    r = server.netbay("admin", "user", "list")
    assert r.returncode == 0 and user in r.stdout
    r = server.netbay("admin", "project", "list")
    assert r.returncode == 0 and project in r.stdout
    r = server.netbay("admin", "role", "add", "superuser", "--user", user, "--project", project)
    assert r.returncode == 1 and "Could not find role" in r.stderr
