"""Issue 25, the identity slice: restricted application credentials, token revocation
and validation rights as Keystone has them, and refusals naming the real policy rules.

Each case goes through the real ``openstack`` CLI against a real ``netbay up``;
raw HTTP checks the status codes and Keystone's error bodies the CLI only prints.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator

import httpx
import pytest
from conftest import Server, start_server, stop_server, unique
from tests.osc import openstack as run_openstack

pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)

RESTRICTED = ("You are not authorized to perform the requested action: Using method 'application_credential' "
              "is not allowed for managing additional application credentials.")


def _env(server: Server, **os_vars: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    env.update(OS_AUTH_URL=server.auth_url, OS_IDENTITY_API_VERSION="3", **os_vars)
    return env


def _as_user(server: Server, user: str, password: str, project: str) -> dict[str, str]:
    return _env(server, OS_USERNAME=user, OS_PASSWORD=password, OS_PROJECT_NAME=project,
                OS_USER_DOMAIN_NAME="Default", OS_PROJECT_DOMAIN_NAME="Default")


def _as_cred(server: Server, cred: dict) -> dict[str, str]:
    return _env(server, OS_AUTH_TYPE="v3applicationcredential", OS_APPLICATION_CREDENTIAL_ID=cred["ID"],
                OS_APPLICATION_CREDENTIAL_SECRET=cred["Secret"])


def osc(env: dict[str, str], *args: str, ok: bool = True) -> subprocess.CompletedProcess:
    r = run_openstack(*args, env=env)
    if ok:
        assert r.returncode == 0, f"openstack {' '.join(args)}:\n{r.stdout}\n{r.stderr}"
    return r


def osc_json(env: dict[str, str], *args: str) -> dict | list:
    return json.loads(osc(env, *args, "-f", "json").stdout)


def _keystone_error(r: httpx.Response, status: int, message: str) -> None:
    assert r.status_code == status, r.text
    assert r.json() == {"error": {"code": status, "title": httpx.codes.get_reason_phrase(status),
                                  "message": message}}, r.text


def _cred_token(server: Server, cred: dict) -> str:
    body = {"auth": {"identity": {"methods": ["application_credential"], "application_credential": {
        "id": cred["ID"], "secret": cred["Secret"]}}}}
    r = httpx.post(f"{server.auth_url}/auth/tokens", json=body, timeout=10)
    assert r.status_code == 201, r.text
    return r.headers["X-Subject-Token"]


def _whoami(server: Server, token: str) -> str:
    r = httpx.get(f"{server.auth_url}/auth/tokens", headers={"X-Auth-Token": token, "X-Subject-Token": token},
                  timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["token"]["user"]["id"]


# --- defect 3: application credentials --------------------------------------------------------


@pytest.mark.slow
def test_restricted_application_credential_cannot_manage_credentials(server: Server) -> None:
    user, password, project = server.make_user()
    as_user = _as_user(server, user, password, project)
    reader = osc_json(as_user, "application", "credential", "create", unique("reader"), "--role", "reader")
    member = osc_json(as_user, "application", "credential", "create", unique("member"), "--role", "member")
    free = osc_json(as_user, "application", "credential", "create", unique("free"), "--role", "reader",
                    "--unrestricted")
    assert reader["Unrestricted"] is False and member["Unrestricted"] is False and free["Unrestricted"] is True
    shown = osc_json(as_user, "application", "credential", "show", free["Name"])
    assert shown["Unrestricted"] is True

    by_reader = _as_cred(server, reader)
    # Keystone lets any token of the owner list (identity:list_application_credentials)...
    listed = {c["Name"] for c in osc_json(by_reader, "application", "credential", "list")}
    assert listed == {reader["Name"], member["Name"], free["Name"]}
    # ... but a restricted credential neither mints a successor nor deletes the others.
    r = osc(by_reader, "application", "credential", "create", unique("successor"), ok=False)
    assert r.returncode != 0 and "is not allowed for managing additional application credentials" in r.stderr
    assert "403" in r.stderr, r.stderr
    r = osc(by_reader, "application", "credential", "delete", member["Name"], ok=False)
    assert r.returncode != 0 and "is not allowed for managing additional application credentials" in r.stderr
    names = {c["Name"] for c in osc_json(as_user, "application", "credential", "list")}
    assert names == {reader["Name"], member["Name"], free["Name"]}  # nothing made, nothing gone

    # Keystone's status and body, over HTTP.
    token = _cred_token(server, reader)
    user_id = _whoami(server, token)
    api = f"{server.auth_url}/users/{user_id}/application_credentials"
    headers = {"X-Auth-Token": token}
    r = httpx.post(api, headers=headers, json={"application_credential": {"name": unique("x")}}, timeout=10)
    _keystone_error(r, 403, RESTRICTED)
    r = httpx.delete(f"{api}/{member['ID']}", headers=headers, timeout=10)
    _keystone_error(r, 403, RESTRICTED)
    body = httpx.get(f"{server.auth_url}/auth/tokens", headers={**headers, "X-Subject-Token": token},
                     timeout=10).json()["token"]
    assert body["methods"] == ["application_credential"]
    assert body["application_credential"] == {"id": reader["ID"], "name": reader["Name"], "restricted": True}

    # An unrestricted one may, as in Keystone.
    by_free = _as_cred(server, free)
    successor = osc_json(by_free, "application", "credential", "create", unique("successor"), "--role", "reader")
    assert successor["Unrestricted"] is False
    osc(by_free, "application", "credential", "delete", successor["Name"])
    osc(by_free, "application", "credential", "delete", member["Name"])
    names = {c["Name"] for c in osc_json(as_user, "application", "credential", "list")}
    assert names == {reader["Name"], free["Name"]}


def test_tokens_of_a_deleted_application_credential_stop_working(server: Server) -> None:
    user, password, project = server.make_user()
    as_user = _as_user(server, user, password, project)
    cred = osc_json(as_user, "application", "credential", "create", unique("gone"), "--role", "member")
    token = _cred_token(server, cred)
    networks = f"{server.network_url}/networks"
    assert httpx.get(networks, headers={"X-Auth-Token": token}, timeout=10).status_code == 200
    osc(as_user, "application", "credential", "delete", cred["Name"])
    assert httpx.get(networks, headers={"X-Auth-Token": token}, timeout=10).status_code == 401


# --- defect 6: token revocation and validation ---------------------------------------------------


@pytest.fixture(scope="module")
def second(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Another ``netbay serve`` on the same database: an HA peer."""
    srv = start_server(server.database_url, tmp_path_factory.mktemp("peer"), up=False)
    try:
        yield srv
    finally:
        stop_server(srv)


def _calls(server: Server, token: str, user_id: str) -> dict[str, int]:
    """The token's status on each API family, of this server."""
    headers = {"X-Auth-Token": token}
    paths = {"network": "/network/v2.0/networks", "identity": f"/identity/v3/users/{user_id}",
             "load-balancer": "/load-balancer/v2/lbaas/loadbalancers", "compute": "/compute/v2.1/os-keypairs",
             "container-infra": "/container-infra/v1/clustertemplates"}
    return {family: httpx.get(server.url + path, headers=headers, timeout=10).status_code
            for family, path in paths.items()}


def test_openstack_token_revoke_refuses_the_token_at_once_everywhere(server: Server, second: Server) -> None:
    user, password, project = server.make_user()
    as_user = _as_user(server, user, password, project)
    issued = osc_json(as_user, "token", "issue")
    token, user_id = issued["id"], issued["user_id"]
    assert set(_calls(server, token, user_id).values()) == {200}
    assert set(_calls(second, token, user_id).values()) == {200}  # the peer has verified (and cached) it
    subject = {"X-Auth-Token": token, "X-Subject-Token": token}
    assert httpx.head(f"{second.auth_url}/auth/tokens", headers=subject, timeout=10).status_code == 200

    osc(as_user, "token", "revoke", token)

    # No wait: this server and its peer refuse it on their next request.
    assert set(_calls(second, token, user_id).values()) == {401}
    assert set(_calls(server, token, user_id).values()) == {401}
    admin = {"X-Auth-Token": server.token()}
    r = httpx.head(f"{second.auth_url}/auth/tokens", headers={**admin, "X-Subject-Token": token}, timeout=10)
    assert r.status_code == 404
    r = httpx.get(f"{server.auth_url}/auth/tokens", headers={**admin, "X-Subject-Token": token}, timeout=10)
    _keystone_error(r, 404, "Failed to validate token")
    r = httpx.delete(f"{server.auth_url}/auth/tokens", headers={**admin, "X-Subject-Token": token}, timeout=10)
    _keystone_error(r, 404, "Failed to validate token")
    # The user's other tokens live on; the CLI works on with a fresh one.
    assert osc_json(as_user, "network", "list") is not None


def test_validating_another_users_token_needs_admin(server: Server) -> None:
    mine = _as_user(server, *server.make_user())
    theirs = _as_user(server, *server.make_user())
    my_token = osc_json(mine, "token", "issue")["id"]
    their_token = osc_json(theirs, "token", "issue")["id"]
    url = f"{server.auth_url}/auth/tokens"

    r = httpx.get(url, headers={"X-Auth-Token": my_token, "X-Subject-Token": their_token}, timeout=10)
    _keystone_error(r, 403, "You are not authorized to perform the requested action: identity:validate_token.")
    r = httpx.head(url, headers={"X-Auth-Token": my_token, "X-Subject-Token": their_token}, timeout=10)
    assert r.status_code == 403
    r = httpx.delete(url, headers={"X-Auth-Token": my_token, "X-Subject-Token": their_token}, timeout=10)
    _keystone_error(r, 403, "You are not authorized to perform the requested action: identity:revoke_token.")
    r = osc(mine, "token", "revoke", their_token, ok=False)
    assert r.returncode != 0 and "identity:revoke_token" in r.stderr, r.stderr

    own = httpx.get(url, headers={"X-Auth-Token": my_token, "X-Subject-Token": my_token}, timeout=10)
    assert own.status_code == 200 and own.headers["X-Subject-Token"] == my_token
    admin = server.token()
    r = httpx.get(url, headers={"X-Auth-Token": admin, "X-Subject-Token": their_token}, timeout=10)
    assert r.status_code == 200 and r.json()["token"]["user"]["name"] == theirs["OS_USERNAME"]
    r = httpx.head(url, headers={"X-Auth-Token": admin, "X-Subject-Token": their_token}, timeout=10)
    assert r.status_code == 200 and r.headers["X-Subject-Token"] == their_token and not r.content
    r = httpx.head(url, headers={"X-Auth-Token": admin, "X-Subject-Token": "garbage"}, timeout=10)
    assert r.status_code == 404
    r = httpx.get(url, headers={"X-Auth-Token": "garbage", "X-Subject-Token": their_token}, timeout=10)
    assert r.status_code == 401
    # Still valid: nobody revoked it.
    assert httpx.get(f"{server.network_url}/networks", headers={"X-Auth-Token": their_token},
                     timeout=10).status_code == 200


# --- defect 11: refusals name the real rules -------------------------------------------------------


def test_reader_refusals_name_taas_rules(server: Server) -> None:
    reader = _as_user(server, *server.make_user(role="reader"))
    issued = osc_json(reader, "token", "issue")
    token, project_id = issued["id"], issued["project_id"]
    admin = server.http()  # a port in the reader's project, which the CLI looks up first
    net = admin.post("/networks", json={"network": {"name": unique("n"), "project_id": project_id}}).json()
    admin.post("/subnets", json={"subnet": {"network_id": net["network"]["id"], "cidr": "10.78.0.0/24",
                                            "ip_version": 4, "project_id": project_id}})
    port = admin.post("/ports", json={"port": {"network_id": net["network"]["id"], "project_id": project_id}})
    assert port.status_code == 201, port.text
    r = osc(reader, "tap", "service", "create", "--name", unique("ts"), "--port", port.json()["port"]["id"],
            ok=False)
    assert r.returncode != 0 and "rule:create_tap_service is disallowed by policy" in r.stderr, r.stderr
    base = f"{server.network_url}/taas"
    headers = {"X-Auth-Token": token}
    cases = [("POST", "/tap_services", "create_tap_service"), ("POST", "/tap_flows", "create_tap_flow"),
             ("PUT", "/tap_services/x", "update_tap_service"), ("DELETE", "/tap_flows/x", "delete_tap_flow")]
    for method, path, rule in cases:
        r = httpx.request(method, base + path, headers=headers, json={}, timeout=10)
        assert r.status_code == 403, r.text
        assert r.json()["NeutronError"]["message"] == f"rule:{rule} is disallowed by policy", r.text


def test_keypair_refusals_name_the_action(server: Server) -> None:
    member = _as_user(server, *server.make_user())
    other = _as_user(server, *server.make_user())
    other_id = osc_json(other, "token", "issue")["user_id"]
    r = osc(member, "--os-compute-api-version", "2.10", "keypair", "create", "--user", other_id,
            unique("kp"), ok=False)
    assert r.returncode != 0 and "os_compute_api:os-keypairs:create" in r.stderr, r.stderr
    token = osc_json(member, "token", "issue")["id"]
    api = f"{server.url}/compute/v2.1/os-keypairs"
    headers = {"X-Auth-Token": token, "OpenStack-API-Version": "compute 2.10"}
    cases = [("GET", "", "index"), ("GET", "/kp", "show"), ("DELETE", "/kp", "delete")]
    for method, path, action in cases:
        r = httpx.request(method, f"{api}{path}?user_id={other_id}", headers=headers, timeout=10)
        assert r.status_code == 403, r.text
        assert r.json() == {"forbidden": {"code": 403, "message":
                                          f"Policy doesn't allow os_compute_api:os-keypairs:{action} "
                                          "to be performed."}}, r.text
    r = httpx.post(api, headers=headers, json={"keypair": {"name": "kp", "user_id": other_id}}, timeout=10)
    assert r.status_code == 403 and "os-keypairs:create" in r.text, r.text
    reader = osc_json(_as_user(server, *server.make_user(role="reader")), "token", "issue")["id"]
    r = httpx.delete(f"{api}/kp", headers={"X-Auth-Token": reader}, timeout=10)
    assert r.status_code == 403 and "os_compute_api:os-keypairs:delete" in r.text, r.text
