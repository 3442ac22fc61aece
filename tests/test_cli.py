"""The netbay command: schema checks, first start, openrc, noauth, clouds.yaml.

A command that serves (``serve``, ``up``, ``agent``), refused or not, runs as a process of
its own: a regression that let it serve would hang the test process instead of failing.
The others run in the test process (:func:`clihelp.invoke`): a ``netbay`` process start
costs 1.5-2 s of CPU in imports alone.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import httpx
import pytest
import yaml
from clihelp import invoke
from conftest import ADMIN_PASSWORD, free_port, start_server, stop_server
from tests import zygote

# The module's own tests use ``server`` only as a user would (``public``, objects of their
# own, removed): the worker's shared server does (tests/conftest.py).
pytestmark = pytest.mark.shared_server


def netbay(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """A ``netbay`` process: for the commands that serve (see the module's docstring).
    ``env`` is laid over ``os.environ``, a ``None`` unsetting (as :func:`clihelp.invoke`)."""
    full = {k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None}
    return zygote.run([sys.executable, "-m", "netbay.cli.main", *args], capture_output=True, text=True,
                      env=full, timeout=timeout)


def test_serve_refuses_an_empty_schema_and_says_what_to_run(tmp_path):
    r = netbay("serve", "--port", str(free_port()), "--data-dir", str(tmp_path))
    assert r.returncode == 2
    out = " ".join((r.stdout + r.stderr).split())
    assert "netbay db upgrade" in out and str(tmp_path) in out


def test_db_upgrade_then_serve_with_a_generated_admin_password(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NETBAY_ADMIN_PASSWORD"}
    r = invoke("db", "upgrade", "--data-dir", str(tmp_path), env={"NETBAY_ADMIN_PASSWORD": None})
    assert r.returncode == 0, r.stderr
    port = free_port()
    proc = zygote.popen([sys.executable, "-m", "netbay.cli.main", "serve", "--port", str(port),
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


def test_up_writes_an_openrc_that_the_openstack_client_uses(server):
    # ``server`` was started by ``netbay up`` (tests/conftest.py): its data dir is the one `up` wrote.
    openrc = server.data_dir / "openrc"
    assert stat.S_IMODE(openrc.stat().st_mode) == 0o600
    script = f"source {openrc} && openstack network list -f value -c Name"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    r = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert "public" in r.stdout.split()
    assert f"127.0.0.1:{server.port}" in openrc.read_text()


def test_demo_runs_with_os_cloud_and_clouds_yaml(server, tmp_path):
    srv = server
    clouds = {"clouds": {"nb": {"auth": {
        "auth_url": srv.auth_url, "username": "admin", "password": ADMIN_PASSWORD,
        "project_name": "admin", "user_domain_name": "Default", "project_domain_name": "Default"},
        "region_name": "RegionOne", "identity_api_version": 3}}}
    (tmp_path / "clouds.yaml").write_text(yaml.safe_dump(clouds))
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("OS_")}
    env.update({"OS_CLOUD": "nb", "OS_CLIENT_CONFIG_FILE": str(tmp_path / "clouds.yaml"), "COLUMNS": "200"})
    conn = srv.connect()
    floating_before = {ip.id for ip in conn.network.ips()}
    r = invoke("demo", "--prefix", "clitest", env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    for title in ("networks", "subnets", "routers", "ports", "floating IPs"):
        assert title in r.stdout
    assert "172.24.4." in r.stdout  # the floating IP and the router's gateway address
    # The walk-through cleans up after itself: its networks and its floating IP.
    assert not [n for n in conn.network.networks() if n.name.startswith("clitest")]
    assert {ip.id for ip in conn.network.ips()} == floating_before


def test_noauth_mode_says_so_and_needs_no_token(tmp_path):
    url = f"sqlite:///{tmp_path / 'nb.db'}"
    assert invoke("db", "upgrade", "--data-dir", str(tmp_path), "--database-url", url).returncode == 0
    srv = start_server(url, tmp_path, up=False, extra=("--noauth",))
    try:
        r = httpx.get(f"{srv.url}/network/v2.0/networks")
        assert r.status_code == 200
        log = " ".join((tmp_path / "server.log").read_text().lower().split())
        assert "noauth" in log and "for development only" in log
    finally:
        stop_server(srv)


def test_tokens_expire(tmp_path):
    # 5 s: under a load of 8+ on two cores, issuing the token and the first GET took over 2 s.
    srv = start_server(f"sqlite:///{tmp_path / 'nb.db'}", tmp_path, extra=("--token-ttl", "5"))
    try:
        import time

        token = srv.token()
        issued = time.monotonic()   # the server issued it before this: it expires by issued + 5 s
        url = f"{srv.url}/network/v2.0/networks"
        # httpx's 5 s default read timeout ran out once at load 12-17: the round trip is not the subject.
        assert httpx.get(url, headers={"X-Auth-Token": token}, timeout=30).status_code == 200
        time.sleep(max(0.0, issued + 5.0 - time.monotonic()))
        deadline = issued + 7.0   # a margin for the round trips of a loaded machine
        while (r := httpx.get(url, headers={"X-Auth-Token": token}, timeout=30)).status_code == 200 and \
                time.monotonic() < deadline:
            time.sleep(0.1)
        assert r.status_code == 401
        assert r.json()["NeutronError"]["type"] == "HTTPUnauthorized"
    finally:
        stop_server(srv)


def test_serve_refuses_a_schema_at_another_revision(tmp_path):
    import sqlite3

    assert invoke("db", "upgrade", "--data-dir", str(tmp_path)).returncode == 0
    with sqlite3.connect(tmp_path / "netbay.db") as db:
        db.execute("UPDATE alembic_version SET version_num = '0000_older'")
    r = netbay("serve", "--port", str(free_port()), "--data-dir", str(tmp_path))
    assert r.returncode == 2
    out = " ".join((r.stdout + r.stderr).split())
    assert "0000_older" in out and "netbay db upgrade" in out


# --- a server a person runs by hand --------------------------------------------------------


def _said(r: subprocess.CompletedProcess) -> str:
    return " ".join((r.stdout + r.stderr).split())


def test_one_server_per_data_dir_and_down_stops_it(tmp_path):
    srv = start_server(f"sqlite:///{tmp_path / 'nb.db'}", tmp_path)
    try:
        openrc = (tmp_path / "openrc").read_text()
        assert f"export NETBAY_DATA_DIR='{tmp_path}'" in openrc
        assert "unset NETBAY_AGENT_PREFIX" in openrc  # no agent: no prefix to learn
        r = netbay("up", "--no-agent", "--port", str(free_port()), "--data-dir", str(tmp_path),
                   env={"NETBAY_ADMIN_PASSWORD": ADMIN_PASSWORD})
        assert r.returncode == 1
        assert f"held by netbay PID {srv.proc.pid}" in _said(r) and "is starting" not in _said(r)
        assert (tmp_path / "openrc").read_text() == openrc, "the second server rewrote the openrc"
        down = invoke("down", "--data-dir", str(tmp_path))
        assert down.returncode == 0 and f"stopped netbay PID {srv.proc.pid}" in _said(down)
        assert srv.proc.wait(timeout=5) is not None
        again = invoke("down", "--data-dir", str(tmp_path))
        assert again.returncode == 0 and "no netbay is running" in _said(again)
    finally:
        stop_server(srv)
    never = invoke("down", "--data-dir", str(tmp_path / "never"))
    assert never.returncode == 1 and "no netbay was started with data dir" in _said(never)
    assert not (tmp_path / "never").exists()


def test_a_port_in_use_is_said_first_and_makes_no_data_dir(tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        for command in ("up", "serve"):
            fresh = tmp_path / command
            r = netbay(command, "--no-agent" if command == "up" else "--no-conductor", "--port", str(port),
                       "--data-dir", str(fresh), env={"NETBAY_ADMIN_PASSWORD": ADMIN_PASSWORD})
            assert r.returncode == 1
            assert f"cannot listen on 127.0.0.1:{port}" in _said(r) and "in use" in _said(r)
            assert "starting" not in _said(r)
            assert not fresh.exists(), f"{command} made a data dir before failing"


def test_db_current_creates_nothing(tmp_path):
    target = tmp_path / "nothing-here"
    r = invoke("db", "current", "--data-dir", str(target))
    assert r.returncode == 0 and "database: none" in _said(r)
    assert not target.exists()


def _client_env(auth_url: str, password: str) -> dict:
    """``os.environ``'s ``OS_*`` replaced by the admin's at ``auth_url`` with ``password``
    (``None``: unset, for :func:`clihelp.invoke`)."""
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("OS_")}
    env.update(OS_AUTH_URL=auth_url, OS_USERNAME="admin", OS_PASSWORD=password, OS_PROJECT_NAME="admin",
               OS_USER_DOMAIN_NAME="Default", OS_PROJECT_DOMAIN_NAME="Default", OS_IDENTITY_API_VERSION="3")
    return env


def test_client_errors_say_what_is_wrong(server):
    nothing = f"http://127.0.0.1:{free_port()}/identity/v3"
    r = invoke("cluster", "list", env=_client_env(nothing, "x"))
    assert r.returncode == 1 and f"no netbay at {nothing}" in _said(r), _said(r)
    assert "catalog" not in _said(r) and "Traceback" not in _said(r)
    srv = server
    r = invoke("pod", "list", env=_client_env(srv.auth_url, "wrong-password"))
    assert r.returncode == 1 and "authentication failed" in _said(r), _said(r)
    assert "catalog" not in _said(r)
    if os.geteuid() == 0:  # the standalone agent logs in before it claims its prefix
        r = netbay("agent", "--url", srv.url, "--prefix", "nbtnever-", env=_client_env(srv.auth_url, "wrong-password"))
        assert r.returncode == 1 and "authentication failed" in _said(r), _said(r)


def test_the_readme_names_what_a_user_needs_and_it_is_in_the_repository():
    """`pip install netbay[client]` brings the `openstack` command the README uses, the
    design document it points to is in the repository, and the quickstart's server is
    stopped with `netbay down`."""
    import re
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for client in ("python-openstackclient", "python-magnumclient", "python-zunclient", "python-octaviaclient"):
        assert any(dep.startswith(client) for dep in extras["client"]), client   # coe, appcontainer, loadbalancer
    readme = (root / "README.md").read_text()
    assert "[client]" in readme
    for target in re.findall(r"\]\((docs/[^)]+)\)", readme):
        assert (root / target).is_file(), target
    assert "(docs/design.md)" in readme and "shared/DESIGN" not in readme
    quickstart = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    first_block = quickstart.split("```bash", 1)[1].split("```", 1)[0]
    assert "netbay up" in first_block and "netbay down" in first_block
