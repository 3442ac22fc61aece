"""Keystone's admin API: the `openstack` CLI provisions a project and a user, grants a
role, and the new user works in (only) the new project; HTTP checks of the rules."""

from __future__ import annotations

import json
import os
import subprocess

import httpx
import pytest
from conftest import ADMIN_PASSWORD, Server, unique
from tests.osc import openstack as run_openstack

pytestmark = pytest.mark.shared_server   # its tests make their own objects (tests/conftest.py)


def _env(server: Server, user: str = "admin", password: str = ADMIN_PASSWORD, project: str = "admin") -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    env.update(OS_AUTH_URL=server.auth_url, OS_USERNAME=user, OS_PASSWORD=password, OS_PROJECT_NAME=project,
               OS_USER_DOMAIN_NAME="Default", OS_PROJECT_DOMAIN_NAME="Default", OS_IDENTITY_API_VERSION="3")
    return env


def osc(server: Server, *args: str, env: dict | None = None, ok: bool = True) -> subprocess.CompletedProcess:
    r = run_openstack(*args, env=env or _env(server))
    if ok:
        assert r.returncode == 0, f"openstack {' '.join(args)}:\n{r.stdout}\n{r.stderr}"
    return r


@pytest.mark.slow
def test_openstack_cli_provisions_a_project_and_user_who_then_works_alone(server):
    project, user, password = unique("proj"), unique("user"), unique("pw")
    created = json.loads(osc(server, "project", "create", project, "--description", "throw-away",
                             "-f", "json").stdout)
    assert created["name"] == project and created["domain_id"] == "default" and created["enabled"] is True
    new_user = json.loads(osc(server, "user", "create", "--password", password, "--project", project,
                              user, "-f", "json").stdout)
    assert new_user["default_project_id"] == created["id"]
    osc(server, "role", "add", "--project", project, "--user", user, "member")
    listed = json.loads(osc(server, "role", "assignment", "list", "--project", project, "--user", user,
                            "--names", "-f", "json").stdout)
    assert [(a["Role"], a["User"], a["Project"]) for a in listed] == [
        ("member", f"{user}@Default", f"{project}@Default")]

    theirs = unique("net")
    osc(server, "network", "create", theirs)  # the admin's, in project admin
    as_user = _env(server, user, password, project)
    mine = json.loads(osc(server, "--os-project-name", project, "network", "create", unique("net"), "-f", "json",
                          env=as_user).stdout)
    assert mine["project_id"] == created["id"]
    names = json.loads(osc(server, "network", "list", "-f", "json", env=as_user).stdout)
    assert {n["Name"] for n in names} >= {mine["name"]}
    assert theirs not in {n["Name"] for n in names}
    # Not an admin: the admin API refuses, in Keystone's words.
    r = osc(server, "project", "create", unique("nope"), env=as_user, ok=False)
    assert r.returncode != 0 and "not authorized" in r.stderr.lower(), r.stderr

    osc(server, "role", "remove", "--project", project, "--user", user, "member")
    r = osc(server, "network", "list", env=as_user, ok=False)
    assert r.returncode != 0
    osc(server, "user", "delete", user)
    osc(server, "project", "delete", project)
    assert project not in osc(server, "project", "list", "-f", "value", "-c", "Name").stdout.split()


def _admin(server: Server) -> httpx.Client:
    return httpx.Client(base_url=f"{server.auth_url}", headers={"X-Auth-Token": server.token()}, timeout=30)


def test_roles_are_objects_with_ids_and_imply_member_and_reader(server):
    with _admin(server) as c:
        roles = {r["name"]: r["id"] for r in c.get("/roles").json()["roles"]}
        for name in ("admin", "member", "reader", "load-balancer_member", "load-balancer_observer",
                     "load-balancer_global_observer", "load-balancer_admin"):
            assert name in roles and roles[name] != name
        assert c.get(f"/roles/{roles['reader']}").json()["role"]["name"] == "reader"
        assert c.get("/roles", params={"name": "member"}).json()["roles"][0]["id"] == roles["member"]
        # An admin's token carries the implied member and reader, by id.
        body = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
            "name": "admin", "domain": {"name": "Default"}, "password": ADMIN_PASSWORD}}},
            "scope": {"project": {"name": "admin", "domain": {"name": "Default"}}}}}
        token = httpx.post(f"{server.auth_url}/auth/tokens", json=body).json()["token"]
        assert {(r["name"], r["id"]) for r in token["roles"]} == {
            ("admin", roles["admin"]), ("member", roles["member"]), ("reader", roles["reader"])}
        admin_id = token["user"]["id"]
        direct = c.get("/role_assignments", params={"user.id": admin_id, "scope.project.id": "admin"}).json()
        assert [a["role"]["id"] for a in direct["role_assignments"]] == [roles["admin"]]
        effective = c.get("/role_assignments", params={"user.id": admin_id, "scope.project.id": "admin",
                                                       "effective": "", "include_names": ""}).json()
        assert {a["role"]["name"] for a in effective["role_assignments"]} == {"admin", "member", "reader"}
        # The role filter applies (the admin's own roles are not listed); the worker's shared
        # server may hold other modules' load-balancer admins.
        lb_admins = c.get("/role_assignments", params={"role.id": roles["load-balancer_admin"]}).json()[
            "role_assignments"]
        assert all(a["role"]["id"] == roles["load-balancer_admin"] for a in lb_admins), lb_admins
        assert admin_id not in {a["user"]["id"] for a in lb_admins}


def test_grant_check_revoke_and_keystone_errors(server):
    with _admin(server) as c:
        r = c.post("/projects", json={"project": {"name": unique("p")}})
        assert r.status_code == 201, r.text
        project = r.json()["project"]
        dup = c.post("/projects", json={"project": {"name": project["name"]}})
        assert dup.status_code == 409 and dup.json()["error"]["title"] == "Conflict"
        assert "Duplicate entry" in dup.json()["error"]["message"]
        bad = c.post("/projects", json={"project": {"description": "no name"}})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == 400
        assert "'name'" in bad.json()["error"]["message"]
        assert c.post("/projects", json={"project": {"name": unique("p"), "domain_id": "other"}}).status_code == 404
        password = unique("pw")
        r = c.post("/users", json={"user": {"name": unique("u"), "password": password,
                                            "default_project_id": project["id"]}})
        assert r.status_code == 201, r.text
        user = r.json()["user"]
        assert "password" not in user
        reader = c.get("/roles", params={"name": "reader"}).json()["roles"][0]["id"]
        grant = f"/projects/{project['id']}/users/{user['id']}/roles/{reader}"
        assert c.head(grant).status_code == 404
        assert c.put(grant).status_code == 204
        assert c.put(grant).status_code == 204  # idempotent, as Keystone
        assert c.head(grant).status_code == 204 and c.get(grant).status_code == 204
        listed = c.get(f"/projects/{project['id']}/users/{user['id']}/roles").json()["roles"]
        assert [r["name"] for r in listed] == ["reader"]
        missing = c.put(f"/projects/{project['id']}/users/{user['id']}/roles/nosuchrole")
        assert missing.status_code == 404
        assert missing.json()["error"] == {"code": 404, "title": "Not Found",
                                           "message": "Could not find role: nosuchrole."}
        # The user reads itself with its own token, but not the admin API.
        token = httpx.post(f"{server.auth_url}/auth/tokens", json={"auth": {"identity": {
            "methods": ["password"], "password": {"user": {"id": user["id"], "password": password}}},
            "scope": {"project": {"id": project["id"]}}}})
        assert token.status_code == 201, token.text
        own = {"X-Auth-Token": token.headers["X-Subject-Token"]}
        assert httpx.get(f"{server.auth_url}/users/{user['id']}", headers=own).status_code == 200
        denied = httpx.get(f"{server.auth_url}/users", headers=own)
        assert denied.status_code == 403
        assert denied.json()["error"]["message"] == \
            "You are not authorized to perform the requested action: identity:list_users."
        # Revoking the only role revokes the user's tokens at once.
        assert c.delete(grant).status_code == 204
        assert c.delete(grant).status_code == 404
        assert httpx.get(f"{server.auth_url}/users/{user['id']}", headers=own).status_code == 401
        assert c.delete(f"/users/{user['id']}").status_code == 204
        assert c.get(f"/users/{user['id']}").status_code == 404
        assert c.delete(f"/projects/{project['id']}").status_code == 204


def test_domains_only_default(server):
    with _admin(server) as c:
        assert [d["id"] for d in c.get("/domains").json()["domains"]] == ["default"]
        assert c.get("/domains/default").json()["domain"]["name"] == "Default"
        assert c.get("/domains/other").status_code == 404


def test_application_credentials_log_in_to_their_project_until_deleted(server):
    project, user, password = unique("proj"), unique("user"), unique("pw")
    osc(server, "project", "create", project)
    osc(server, "user", "create", "--password", password, "--project", project, user)
    osc(server, "role", "add", "--project", project, "--user", user, "member")
    as_user = _env(server, user, password, project)
    cred = json.loads(osc(server, "application", "credential", "create", "ci-bot", "--role", "member",
                          "-f", "json", env=as_user).stdout)
    assert cred["Secret"] and cred["Project ID"]
    assert "member" in str(cred["Roles"])
    listed = json.loads(osc(server, "application", "credential", "list", "-f", "json", env=as_user).stdout)
    assert [c["Name"] for c in listed] == ["ci-bot"]

    by_cred = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    by_cred.update(OS_AUTH_URL=server.auth_url, OS_AUTH_TYPE="v3applicationcredential",
                   OS_APPLICATION_CREDENTIAL_ID=cred["ID"], OS_APPLICATION_CREDENTIAL_SECRET=cred["Secret"],
                   OS_IDENTITY_API_VERSION="3")
    made = json.loads(osc(server, "network", "create", unique("net"), "-f", "json", env=by_cred).stdout)
    assert made["project_id"] == cred["Project ID"]
    body = {"auth": {"identity": {"methods": ["application_credential"], "application_credential": {
        "id": cred["ID"], "secret": cred["Secret"]}}}}
    token = httpx.post(f"{server.auth_url}/auth/tokens", json=body)
    assert token.status_code == 201, token.text
    assert token.json()["token"]["application_credential"]["name"] == "ci-bot"
    assert {r["name"] for r in token.json()["token"]["roles"]} == {"member", "reader"}
    wrong = {"auth": {"identity": {"methods": ["application_credential"], "application_credential": {
        "id": cred["ID"], "secret": "not-it"}}}}
    assert httpx.post(f"{server.auth_url}/auth/tokens", json=wrong).status_code == 401
    # A role the user does not hold cannot be delegated.
    r = osc(server, "application", "credential", "create", "too-much", "--role", "admin", env=as_user, ok=False)
    assert r.returncode != 0
    osc(server, "application", "credential", "delete", "ci-bot", env=as_user)
    assert httpx.post(f"{server.auth_url}/auth/tokens", json=body).status_code == 401


def test_roles_are_created_and_deleted_but_the_implied_chain_is_immutable(server):
    with _admin(server) as c:
        name = unique("role")
        made = c.post("/roles", json={"role": {"name": name, "description": "for a test"}})
        assert made.status_code == 201 and made.json()["role"]["name"] == name
        assert c.post("/roles", json={"role": {"name": name}}).status_code == 409
        assert c.delete(f"/roles/{made.json()['role']['id']}").status_code == 204
        admin = c.get("/roles", params={"name": "admin"}).json()["roles"][0]
        assert admin["options"] == {"immutable": True}
        r = c.delete(f"/roles/{admin['id']}")
        assert r.status_code == 403 and "immutable" in r.json()["error"]["message"]
