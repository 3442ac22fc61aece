"""The netbay command: schema checks, first start, openrc, noauth, clouds.yaml."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import httpx
import yaml
from conftest import ADMIN_PASSWORD, free_port, start_server, stop_server


def netbay(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "netbay.cli.main", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def test_serve_refuses_an_empty_schema_and_says_what_to_run(tmp_path):
    r = netbay("serve", "--port", str(free_port()), "--data-dir", str(tmp_path))
    assert r.returncode == 2
    out = " ".join((r.stdout + r.stderr).split())
    assert "netbay db upgrade" in out and str(tmp_path) in out


def test_db_upgrade_then_serve_with_a_generated_admin_password(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NETBAY_ADMIN_PASSWORD"}
    r = subprocess.run([sys.executable, "-m", "netbay.cli.main", "db", "upgrade", "--data-dir", str(tmp_path)],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "netbay.cli.main", "serve", "--port", str(port),
                             "--data-dir", str(tmp_path)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        from conftest import _wait_port

        _wait_port(port, 30, proc)
        secret = tmp_path / "admin-password"
        assert stat.S_IMODE(secret.stat().st_mode) == 0o600
        password = secret.read_text().strip()
        body = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
            "name": "admin", "domain": {"name": "Default"}, "password": password}}},
            "scope": {"project": {"name": "admin", "domain": {"name": "Default"}}}}}
        r = httpx.post(f"http://127.0.0.1:{port}/identity/v3/auth/tokens", json=body)
        assert r.status_code == 201
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    # The password is written once: a restart keeps it.
    assert (tmp_path / "admin-password").read_text().strip() == password


def test_up_writes_an_openrc_that_the_openstack_client_uses(tmp_path):
    srv = start_server(f"sqlite:///{tmp_path / 'nb.db'}", tmp_path)
    try:
        openrc = tmp_path / "openrc"
        assert stat.S_IMODE(openrc.stat().st_mode) == 0o600
        script = f"source {openrc} && openstack network list -f value -c Name"
        env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
        r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120, env=env)
        assert r.returncode == 0, r.stderr
        assert "public" in r.stdout.split()
        assert f"127.0.0.1:{srv.port}" in openrc.read_text()
    finally:
        stop_server(srv)


def test_demo_runs_with_os_cloud_and_clouds_yaml(tmp_path):
    srv = start_server(f"sqlite:///{tmp_path / 'nb.db'}", tmp_path)
    try:
        clouds = {"clouds": {"nb": {"auth": {
            "auth_url": srv.auth_url, "username": "admin", "password": ADMIN_PASSWORD,
            "project_name": "admin", "user_domain_name": "Default", "project_domain_name": "Default"},
            "region_name": "RegionOne", "identity_api_version": 3}}}
        (tmp_path / "clouds.yaml").write_text(yaml.safe_dump(clouds))
        env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
        env.update({"OS_CLOUD": "nb", "OS_CLIENT_CONFIG_FILE": str(tmp_path / "clouds.yaml"), "COLUMNS": "200"})
        r = subprocess.run([sys.executable, "-m", "netbay.cli.main", "demo", "--prefix", "clitest"],
                           capture_output=True, text=True, timeout=120, env=env)
        assert r.returncode == 0, r.stdout + r.stderr
        for title in ("networks", "subnets", "routers", "ports", "floating IPs"):
            assert title in r.stdout
        assert "172.24.4." in r.stdout  # the floating IP and the router's gateway address
        # The walk-through cleans up after itself.
        conn = srv.connect()
        assert not [n for n in conn.network.networks() if n.name.startswith("clitest")]
        assert not list(conn.network.ips())
    finally:
        stop_server(srv)


def test_noauth_mode_says_so_and_needs_no_token(tmp_path):
    url = f"sqlite:///{tmp_path / 'nb.db'}"
    assert netbay("db", "upgrade", "--data-dir", str(tmp_path), "--database-url", url).returncode == 0
    srv = start_server(url, tmp_path, up=False, extra=("--noauth",))
    try:
        r = httpx.get(f"{srv.url}/network/v2.0/networks")
        assert r.status_code == 200
        log = " ".join((tmp_path / "server.log").read_text().lower().split())
        assert "noauth" in log and "for development only" in log
    finally:
        stop_server(srv)


def test_tokens_expire(tmp_path):
    srv = start_server(f"sqlite:///{tmp_path / 'nb.db'}", tmp_path, extra=("--token-ttl", "2"))
    try:
        token = srv.token()
        url = f"{srv.url}/network/v2.0/networks"
        assert httpx.get(url, headers={"X-Auth-Token": token}).status_code == 200
        import time

        time.sleep(2.5)
        r = httpx.get(url, headers={"X-Auth-Token": token})
        assert r.status_code == 401
        assert r.json()["NeutronError"]["type"] == "HTTPUnauthorized"
    finally:
        stop_server(srv)


def test_serve_refuses_a_schema_at_another_revision(tmp_path):
    import sqlite3

    assert netbay("db", "upgrade", "--data-dir", str(tmp_path)).returncode == 0
    with sqlite3.connect(tmp_path / "netbay.db") as db:
        db.execute("UPDATE alembic_version SET version_num = '0000_older'")
    r = netbay("serve", "--port", str(free_port()), "--data-dir", str(tmp_path))
    assert r.returncode == 2
    out = " ".join((r.stdout + r.stderr).split())
    assert "0000_older" in out and "netbay db upgrade" in out
