"""Octavia's API as a real peer beside Keystone and Neutron (``openstack_cloud``).

- Octavia from PyPI in a virtualenv of its own (``$NETBAY_PEERS_DIR/octavia``):
  its pins need not agree with Keystone's and Neutron's, and the shared peers'
  virtualenv is left alone while other runs use it.
- ``octavia-api`` served by uWSGI on 127.0.0.1, Keystone auth, its schema made
  from its models on SQLite and stamped at head (its migrations alter constraints); registered in the Keystone
  catalog as ``load-balancer``. Its network driver is the real one: a VIP
  subnet is checked in the cloud's Neutron.
- Provider: Octavia's **noop driver** (``noop_driver``). It provisions nothing
  and reports no status, so every object would stay ``PENDING_*`` and Octavia
  would refuse every further change (409, immutable) and every delete. What a
  provider's backend (amphorae, OVN) reports is therefore played by a stand-in,
  :mod:`tests.peers.octavia_provider`, named as such: it sends the statuses a
  provider sends — ACTIVE/ONLINE once made, DELETED once gone — through
  Octavia's own ``octavia-driver-agent`` (its status socket), the path every
  provider driver uses. Nothing carries packets: tests assert API effects.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.children import die_with_parent
from tests.peers.openstack_cloud import BOOT_TIMEOUT, Cloud, _free_port, _Uwsgi, peers_dir, venv_with

PINS = ("octavia==19.0.0", "uwsgi==2.0.31")
SERVICE_PASSWORD = "peer-octavia-secret"
PROVIDER = Path(__file__).with_name("octavia_provider.py")


def install() -> Path:
    """Octavia's virtualenv, made on first use, with the API's WSGI wrapper below."""
    venv = venv_with(peers_dir() / "octavia", PINS)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / f"{API_MODULE}.py").write_text(_API_ON_SQLITE)
    return venv


# Octavia's API begins its SQLite transactions deferred (oslo.db). Its read-then-write
# transactions (the project's quota row, a load balancer's status) must then upgrade
# their lock, and in WAL mode SQLite refuses the upgrade at once — "database is locked",
# no busy wait, an HTTP 500 — when the driver agent committed a provider's statuses after
# their first read (the cluster builder changes two load balancers at a time). The
# transaction has rolled back by then, so the request is run again (bounded), as a
# client's retry would. (BEGIN IMMEDIATE does not do: the API leaves sessions open
# between requests, which would then hold the write lock.) For this test peer only: a
# deployment runs Octavia on MySQL, where this does not happen.
API_MODULE = "netbay_peer_octavia_api"
_API_ON_SQLITE = """\
import io
import time

_app = None
ATTEMPTS = 6


def application(environ, start_response):
    global _app
    if _app is None:
        from octavia.wsgi.api import application as octavia
        _app = octavia
    body = environ["wsgi.input"].read()
    for attempt in range(ATTEMPTS):
        seen = {}

        def capture(status, headers, exc_info=None):
            seen["status"], seen["headers"] = status, headers
            return lambda data: None

        result = _app({**environ, "wsgi.input": io.BytesIO(body)}, capture)
        try:
            out = b"".join(result)
        finally:
            getattr(result, "close", lambda: None)()
        locked = seen["status"].startswith("500") and b"database is locked" in out
        if not locked or attempt == ATTEMPTS - 1:
            start_response(seen["status"], seen["headers"])
            return [out]
        time.sleep(0.05 * 2 ** attempt)
"""


# Octavia's migrations also seed its lookup tables (statuses, protocols, algorithms …),
# which its foreign keys reference (Octavia turns SQLite's on). Seeded here with every
# name Octavia's and octavia-lib's constants define: a superset of the migrations' rows.
_SCHEMA = """
import sqlalchemy as sa
from octavia.common import constants
from octavia.db import base_models, models
from octavia_lib.common import constants as lib_constants
engine = sa.create_engine({url!r})
base_models.BASE.metadata.create_all(engine)
names = {{v for m in (constants, lib_constants) for k, v in vars(m).items()
          if k.isupper() and isinstance(v, str) and v and len(v) < 255}}
lookups = [t for t in base_models.BASE.metadata.sorted_tables
           if {{c.name for c in t.columns}} <= {{"name", "description"}}]
with engine.begin() as conn:
    for table in lookups:
        conn.execute(table.insert(), [{{"name": n}} for n in sorted(names)])
"""


@dataclass
class Octavia:
    url: str


def _conf(work: Path, auth_url: str) -> Path:
    (work / "lock").mkdir(exist_ok=True)
    auth = f"""auth_url = {auth_url}
auth_type = password
username = octavia
password = {SERVICE_PASSWORD}
project_name = service
user_domain_name = Default
project_domain_name = Default
"""
    conf = work / "octavia.conf"
    conf.write_text(f"""[DEFAULT]
transport_url = fake:/
[api_settings]
bind_host = 127.0.0.1
auth_strategy = keystone
enabled_provider_drivers = noop_driver:The no-op provider driver (a stand-in reports its statuses)
default_provider_driver = noop_driver
[database]
connection = sqlite:///{work}/octavia.db?timeout=30
pool_timeout =
[keystone_authtoken]
www_authenticate_uri = {auth_url}
interface = public
{auth}
[service_auth]
{auth}
[neutron]
region_name = RegionOne
valid_interfaces = public
[oslo_concurrency]
lock_path = {work}/lock
[driver_agent]
status_socket_path = {work}/status.sock
stats_socket_path = {work}/stats.sock
get_socket_path = {work}/get.sock
enabled_provider_agents =
[quotas]
default_load_balancer_quota = -1
default_listener_quota = -1
default_member_quota = -1
default_pool_quota = -1
default_health_monitor_quota = -1
""")
    return conf


def _register(cloud: Cloud, url: str) -> None:
    """Octavia's service user and its catalog entry, as a deployment tool would make them."""
    conn = cloud.connection()
    service = conn.identity.find_project("service")
    user = conn.identity.create_user(name="octavia", password=SERVICE_PASSWORD, domain_id="default",
                                     default_project_id=service.id)
    conn.identity.assign_project_role_to_user(service, user, conn.identity.find_role("admin"))
    lb = conn.identity.create_service(name="octavia", type="load-balancer")
    conn.identity.create_endpoint(service_id=lb.id, interface="public", url=url, region_id="RegionOne")
    conn.close()


class _Process:
    """A plain child process in its own session, stopped by its process group (or by the
    kernel's SIGTERM when the test run dies: :func:`tests.children.die_with_parent`)."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self.proc = subprocess.Popen(argv, env={**os.environ, **env}, stdout=log.open("wb"),
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=die_with_parent)  # noqa: PLW1509 - prctl only, before exec

    stop = _Uwsgi.stop


@contextlib.contextmanager
def octavia(cloud: Cloud, work: Path) -> Iterator[Octavia]:
    """Octavia's API, its driver agent and the provider stand-in, for the length of the ``with``."""
    venv = install()
    work.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    conf = _conf(work, cloud.auth_url)
    # Octavia's migrations alter constraints, which SQLite cannot: its models make the
    # schema and Alembic is stamped at head, as for Neutron.
    subprocess.run([str(venv / "bin" / "python"), "-c", _SCHEMA.format(url=f"sqlite:///{work}/octavia.db")],
                   check=True, timeout=300, capture_output=True)
    subprocess.run([str(venv / "bin" / "octavia-db-manage"), "--config-file", str(conf), "stamp", "head"],
                   check=True, timeout=300, capture_output=True)
    # Two writers share this file (the API and the driver agent, which writes the provider's
    # statuses): in WAL mode a reader never waits on the other's write.
    with contextlib.closing(sqlite3.connect(work / "octavia.db")) as db:
        db.execute("PRAGMA journal_mode=WAL")
    _register(cloud, url)
    procs: list = []
    try:
        agent = _Process([str(venv / "bin" / "octavia-driver-agent"), "--config-file", str(conf)], {},
                         work / "driver-agent.log")
        procs.append(agent)
        api = _Uwsgi(venv, f"{API_MODULE}:application", port,
                     {"UWSGI_PYARGV": f"--config-file {conf}"}, work / "octavia-api.log", processes=1)
        procs.append(api)
        api.wait_ready(url + "/")
        _wait_for(lambda: (work / "status.sock").exists(), "the driver agent's status socket", agent)
        provider = _Process([str(venv / "bin" / "python"), str(PROVIDER), str(conf), url],
                            {"OCTAVIA_PEER_AUTH": json.dumps(cloud.auth())}, work / "provider.log")
        procs.append(provider)
        yield Octavia(url)
    finally:
        for proc in reversed(procs):
            proc.stop()


def _wait_for(ready, what: str, proc: _Process) -> None:
    deadline = time.monotonic() + BOOT_TIMEOUT
    while time.monotonic() < deadline:
        if proc.proc.poll() is not None:
            raise RuntimeError(f"{what}: its process exited; see {proc.log}")
        if ready():
            return
        time.sleep(0.2)
    raise TimeoutError(f"{what} not there in {BOOT_TIMEOUT} s; see {proc.log}")


__all__ = ["Octavia", "install", "octavia"]
