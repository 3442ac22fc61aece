"""Octavia's API as a real peer beside Keystone and Neutron (``openstack_cloud``).

- Octavia from PyPI in a virtualenv of its own (``$NETBAY_PEERS_DIR/octavia``):
  its pins need not agree with Keystone's and Neutron's, and the shared peers'
  virtualenv is left alone while other runs use it.
- ``octavia-api`` served by uWSGI on 127.0.0.1, Keystone auth, its schema made
  from its models on SQLite and stamped at head (its migrations alter constraints); registered in the Keystone
  catalog as ``load-balancer``. Its network driver is the real one: a VIP
  subnet is checked in the cloud's Neutron.
- Provider, by default: Octavia's **noop driver** (``noop_driver``). It provisions nothing
  and reports no status, so every object would stay ``PENDING_*`` and Octavia
  would refuse every further change (409, immutable) and every delete. What a
  provider's backend (amphorae, OVN) reports is therefore played by a stand-in,
  :mod:`tests.peers.octavia_provider`, named as such: it sends the statuses a
  provider sends — ACTIVE/ONLINE once made, DELETED once gone — through
  Octavia's own ``octavia-driver-agent`` (its status socket), the path every
  provider driver uses. Nothing carries packets: tests assert API effects.
- Or, given an :class:`OvnProvider` (the OVN lab, tests/ovn), the real
  **ovn-octavia-provider** (``ovn``), in a virtualenv of its own beside Octavia's:
  its driver runs in the API process, writes OVN ``Load_Balancer`` rows into the NB
  and reports statuses through the same driver agent; OVN's own L4 load balancing
  then carries the packets. No stand-in runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.children import die_with_parent
from tests.peers.openstack_cloud import BOOT_TIMEOUT, Cloud, _free_port, _Uwsgi, made_once, peers_dir, venv_with

PINS = ("octavia==19.0.0", "uwsgi==2.0.31")
OVN_PROVIDER_PIN = "ovn-octavia-provider==11.0.0"   # PyPI's newest, installed beside Octavia 19
SERVICE_PASSWORD = "peer-octavia-secret"
PROVIDER = Path(__file__).with_name("octavia_provider.py")


@dataclass(frozen=True)
class OvnProvider:
    """Where ovn-octavia-provider finds OVN: the NB and SB databases as OVSDB remotes."""
    nb: str
    sb: str


def install(ovn: bool = False) -> Path:
    """Octavia's virtualenv (with ``ovn``: one with ovn-octavia-provider too), made on
    first use, with the API's WSGI wrapper below."""
    venv = venv_with(peers_dir() / "octavia-ovn", (*PINS, OVN_PROVIDER_PIN)) if ovn \
        else venv_with(peers_dir() / "octavia", PINS)
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
#
# ovn-octavia-provider 11 builds octavia-lib's DriverLibrary without arguments, so with
# octavia-lib's default socket paths (/var/run/octavia/*.sock), not the ones Octavia's
# [driver_agent] options give its agent; it would wait for those files (about 150 s)
# and fail. Rather than a host-wide /var/run/octavia, the wrapper points those defaults
# at this peer's sockets ($NETBAY_PEER_AGENT_SOCKETS, status:stats:get) before Octavia
# loads its providers.
_API_ON_SQLITE = """\
import io
import os
import time

_app = None
ATTEMPTS = 6


def application(environ, start_response):
    global _app
    if _app is None:
        sockets = os.environ.get("NETBAY_PEER_AGENT_SOCKETS")
        if sockets:
            from octavia_lib.api.drivers import driver_lib
            driver_lib.DriverLibrary.__init__.__defaults__ = tuple(sockets.split(":"))
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


# octavia-driver-agent, with the same defaults pointed at its own sockets (see above):
# ovn-octavia-provider's agent, which it runs, builds a DriverLibrary as well.
_AGENT = """\
import os
import sys

from octavia_lib.api.drivers import driver_lib
from octavia.cmd.driver_agent import main

driver_lib.DriverLibrary.__init__.__defaults__ = tuple(os.environ["NETBAY_PEER_AGENT_SOCKETS"].split(":"))
sys.argv[0] = "octavia-driver-agent"
sys.exit(main())
"""


# Octavia's migrations also seed its lookup tables (statuses, protocols, algorithms …),
# which its foreign keys reference (Octavia turns SQLite's on). Seeded here with every
# name Octavia's and octavia-lib's constants define: a superset of the migrations' rows.
# Then ``octavia-db-manage stamp head`` in the same process (one import of Octavia);
# the arguments: its config file. Made once per machine and copied (made_once).
_SCHEMA = """
import sys
import sqlalchemy as sa
from octavia.db.migration import cli
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
sys.argv = ["octavia-db-manage", *sys.argv[1:], "stamp", "head"]
cli.main()
"""


def _schema_template(venv: Path, path: Path) -> None:
    conf = path.with_suffix(".conf")
    conf.write_text(f"[database]\nconnection = sqlite:///{path}\n")
    subprocess.run([str(venv / "bin" / "python"), "-c", _SCHEMA.format(url=f"sqlite:///{path}"),
                    "--config-file", str(conf)], check=True, timeout=300, capture_output=True)


@dataclass
class Octavia:
    url: str


_NOOP = """enabled_provider_drivers = noop_driver:The no-op provider driver (a stand-in reports its statuses)
default_provider_driver = noop_driver
"""
_OVN = """enabled_provider_drivers = ovn:OVN provider driver
default_provider_driver = ovn
"""
# ovn-octavia-provider's agent (in the driver agent) follows OVN's events: a floating IP
# on a VIP port becomes a VIP of the OVN load balancer too.
_OVN_AGENT = "ovn"


def _ovn_sections(ovn: OvnProvider) -> str:
    return f"""[ovn]
ovn_nb_connection = {ovn.nb}
ovn_sb_connection = {ovn.sb}
ovsdb_connection_timeout = 60
"""


def _conf(work: Path, auth_url: str, ovn: OvnProvider | None = None) -> Path:
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
{_NOOP if ovn is None else _OVN}[database]
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
enabled_provider_agents = {"" if ovn is None else _OVN_AGENT}
[quotas]
default_load_balancer_quota = -1
default_listener_quota = -1
default_member_quota = -1
default_pool_quota = -1
default_health_monitor_quota = -1
{"" if ovn is None else _ovn_sections(ovn)}""")
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
def octavia(cloud: Cloud, work: Path, ovn: OvnProvider | None = None) -> Iterator[Octavia]:
    """Octavia's API, its driver agent and the provider stand-in (or, with ``ovn``,
    ovn-octavia-provider against that OVN), for the length of the ``with``."""
    venv = install(ovn=ovn is not None)
    pins = (*PINS, OVN_PROVIDER_PIN) if ovn is not None else PINS
    work.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    conf = _conf(work, cloud.auth_url, ovn)
    # Octavia's migrations alter constraints, which SQLite cannot: its models make the
    # schema and Alembic is stamped at head, as for Neutron.
    key = "\n".join((*pins, hashlib.sha256(_SCHEMA.encode()).hexdigest()))
    template = made_once(venv.parent, "schema.db", key, lambda path: _schema_template(venv, path))
    shutil.copyfile(template, work / "octavia.db")
    # Two writers share this file (the API and the driver agent, which writes the provider's
    # statuses): in WAL mode a reader never waits on the other's write.
    with contextlib.closing(sqlite3.connect(work / "octavia.db")) as db:
        db.execute("PRAGMA journal_mode=WAL")
    _register(cloud, url)
    procs: list = []
    try:
        sockets = ":".join(str(work / f"{kind}.sock") for kind in ("status", "stats", "get"))
        agent = _Process([str(venv / "bin" / "python"), "-c", _AGENT, "--config-file", str(conf)],
                         {"NETBAY_PEER_AGENT_SOCKETS": sockets}, work / "driver-agent.log")
        procs.append(agent)
        _wait_for(lambda: (work / "status.sock").exists(), "the driver agent's status socket", agent)
        api = _Uwsgi(venv, f"{API_MODULE}:application", port,
                     {"UWSGI_PYARGV": f"--config-file {conf}", "NETBAY_PEER_AGENT_SOCKETS": sockets},
                     work / "octavia-api.log", processes=1)
        procs.append(api)
        api.wait_ready(url + "/")
        if ovn is not None:   # the real provider reports its own statuses
            yield Octavia(url)
            return
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


__all__ = ["Octavia", "OvnProvider", "install", "octavia"]
