"""Shared fixtures: a real ``netbay serve`` process on SQLite and on PostgreSQL.

PostgreSQL is started by the fixture itself from Debian's server binaries (a
throwaway cluster in a temporary directory, run as the ``postgres`` user and
stopped by its PID), unless ``NETBAY_TEST_PG_URL`` points at one already.
"""

from __future__ import annotations

from tests import bytecode  # noqa: F401 - first: the caches of everything imported after it

import atexit
import contextlib
import glob
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests import scheduling, zygote
from tests.scheduling import pytest_xdist_make_scheduler  # noqa: F401 - a hook: pytest finds it here

from tests.backendfix import (clean_backend, clean_lb_backend, cloud, cloud_env, cluster_api,  # noqa: F401
                              lb_backend, network_backend, neutron_api, neutron_params, nova,
                              octavia, octavia_api, store)  # (shared fixtures)
from tests.ovn.fixtures import (ovn_cloud, ovn_cni_daemons, ovn_cni_plugin, ovn_conn, ovn_env,  # noqa: F401
                                ovn_lab, ovn_octavia)  # (the OVN lab's, one per process: tests/ovn, tests/both)

ADMIN_PASSWORD = "admin-secret-for-tests"
# Throwaway passwords: scrypt at 2^4 instead of 2^14 (~55 ms of CPU per login and user
# create, thousands per run). Set before any server, CLI or in-process app reads it;
# hashes record their cost, so a data dir made here still verifies at any other.
os.environ.setdefault("NETBAY_PASSWORD_HASH_COST", "4")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--db", default=os.environ.get("NETBAY_TEST_DBS"),
                     help="comma-separated database backends to run API tests on (default sqlite,postgresql; "
                          "sqlite alone under -m quick)")


def database_backends(config: pytest.Config) -> list[str]:
    """``--db`` (or ``NETBAY_TEST_DBS``); else SQLite and PostgreSQL, but SQLite alone for the
    ``quick`` tier: PostgreSQL's throwaway cluster is started as user ``postgres`` (root
    needed), and the tier is what needs no root — the API tests' second half, half its time."""
    chosen = config.getoption("--db")
    if chosen is None:
        quick = re.search(r"(?<!not )\bquick\b", config.getoption("markexpr") or "") is not None
        chosen = "sqlite" if quick else "sqlite,postgresql"
    return [b for b in chosen.split(",") if b]


def backends_for(metafunc: pytest.Metafunc) -> list[str]:
    """The database backends one test runs on: all of :func:`database_backends` for a module
    marked ``every_db`` (its subject is the store: constraints, IPAM, transactions, revisions,
    migrations, several processes) or when ``--db`` is given; else the first alone — an API
    whose store is covered on both gains nothing from a second run but minutes."""
    backends = database_backends(metafunc.config)
    if metafunc.config.getoption("--db") is None and metafunc.definition.get_closest_marker("every_db") is None:
        return backends[:1]
    return backends


def pytest_configure(config: pytest.Config) -> None:
    # Under -n, a module stays on one worker (``--dist loadfile``) unless --dist is given:
    # its module-scoped servers then start once, where xdist's default (``load``) started
    # one on each worker that got one of its tests.
    if getattr(config.option, "dist", "no") == "load" and \
            not any(a.startswith(("--dist", "-d")) for a in config.invocation_params.args):
        config.option.dist = "loadfile"
    config.addinivalue_line("markers", "embedded_only(reason): a test of a both-backend module "
                            "(``neutron_api``) that runs against netbay's own API only, for that reason")
    scheduling.configure(config)


DATAPLANE_DIR = Path(__file__).parent / "dataplane"
OVN_DIR = Path(__file__).parent / "ovn"


def _needs_host(item: pytest.Item) -> bool:
    """Whether ``item`` needs root, the OpenStack peers or the dataplane: it lives in
    ``tests/dataplane`` or ``tests/ovn``, is marked ``peers`` or ``ovn``, is skipped unless
    root, or asks for a fixture defined under ``tests/dataplane`` (namespaces, agents, dockerd)."""
    path = Path(str(item.fspath))
    if item.get_closest_marker("peers") or item.get_closest_marker("ovn") or \
            path.is_relative_to(DATAPLANE_DIR) or path.is_relative_to(OVN_DIR):
        return True
    if any("root" in str(m.kwargs.get("reason", "")) for m in item.iter_markers("skipif")):
        return True
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info else ()):
        for fixturedef in defs:
            source = getattr(fixturedef.func, "__code__", None)
            if source and Path(source.co_filename).is_relative_to(DATAPLANE_DIR):
                return True
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the ``quick`` tier (``pytest -m quick``): what needs no root, peers or dataplane,
    and is not marked ``slow`` (fuzzing, the scenarios that run the ``openstack`` CLI
    command by command: a process start each)."""
    for item in items:
        if not _needs_host(item) and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.quick)
    scheduling.record_peers(config, items)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    backends = backends_for(metafunc)
    if "db_backend" in metafunc.fixturenames:
        metafunc.parametrize("db_backend", backends, scope="module")
    for api in ("neutron_api", "octavia_api"):
        if api in metafunc.fixturenames:
            metafunc.parametrize(api, neutron_params(metafunc, backends), indirect=True, scope="module")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- PostgreSQL ----------------------------------------------------------------------


@dataclass
class Postgres:
    host: str
    port: int
    user: str = "postgres"

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://{self.user}@{self.host}:{self.port}/{database}"

    def create_database(self) -> str:
        import psycopg

        name = "nb_" + uuid.uuid4().hex[:12]
        with psycopg.connect(host=self.host, port=self.port, user=self.user, dbname="postgres",
                             autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    url = os.environ.get("NETBAY_TEST_PG_URL")
    if url:  # host:port of a server that trusts user postgres
        host, port = url.rsplit(":", 1)
        yield Postgres(host, int(port))
        return
    bindir = _pg_bin()
    if bindir is None:
        pytest.fail("PostgreSQL server binaries not found: install Debian's postgresql package "
                    "(scripts/test.sh does) or set NETBAY_TEST_PG_URL")
    root = Path(tempfile.mkdtemp(prefix="nbtest-pg-"))
    data = root / "data"
    shutil.chown(root, "postgres", "postgres")
    as_pg = ["runuser", "-u", "postgres", "--"]
    subprocess.run([*as_pg, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"],
                   check=True, capture_output=True, timeout=120)
    port = free_port()
    # jit=off: the OVN lab's Neutron asks this cluster for ORM joins that, on tables never
    # analysed, cross PostgreSQL's JIT threshold; compiling them was 38 of a module's 79 CPU s
    # (tests/ovn/test_neutron_ovn.py; 5.5 s without). netbay's own queries never reach it.
    # autovacuum=off: a worker's cluster gathers a database per module, and the launcher
    # started a worker process into one of them every naptime/N seconds, for the session,
    # to vacuum tables that live for minutes.
    proc = subprocess.Popen(
        [*as_pg, str(bindir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(root),
         "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
         "-c", "full_page_writes=off", "-c", "max_connections=300", "-c", "jit=off",
         "-c", "autovacuum=off"],
        stdout=subprocess.DEVNULL, stderr=open(root / "log", "w"),  # noqa: SIM115 - the child process writes it while it runs
    )
    try:
        _wait_port(port, 30, proc)
        yield Postgres("127.0.0.1", port)
    finally:
        _stop_postmaster(proc, data / "postmaster.pid")
        shutil.rmtree(root, ignore_errors=True)


def _stop_postmaster(proc: subprocess.Popen, pid_file: Path) -> None:
    """Fast shutdown of the postmaster by the PID it wrote (signalling ``runuser`` would orphan it)."""
    try:
        postmaster = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        postmaster = None
    for sig, seconds in ((signal.SIGINT, 30), (signal.SIGQUIT, 10)):
        try:
            os.kill(postmaster, sig) if postmaster else proc.send_signal(sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=seconds)
            return
        except subprocess.TimeoutExpired:
            continue
    proc.kill()
    proc.wait(timeout=10)


def _wait_port(port: int, seconds: float, proc: subprocess.Popen | zygote.Forked | None = None) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on {port} after {seconds}s")


# --- netbay server ------------------------------------------------------------------------


@dataclass
class Server:
    url: str
    port: int
    data_dir: Path
    database_url: str
    proc: subprocess.Popen | zygote.Forked
    started: float   # time.monotonic() at its start
    _clients: list = field(default_factory=list)
    kind = "embedded"   # which side of ``neutron_api`` (tests/backendfix.py) this is

    @property
    def auth_url(self) -> str:
        return f"{self.url}/identity/v3"

    @property
    def network_url(self) -> str:
        return f"{self.url}/network/v2.0"

    @property
    def load_balancer_url(self) -> str:
        return f"{self.url}/load-balancer"

    def cli_env(self) -> dict[str, str]:
        """``OS_*`` for the ``openstack`` CLI as the bootstrap admin."""
        return {"OS_AUTH_URL": self.auth_url, "OS_USERNAME": "admin", "OS_PASSWORD": ADMIN_PASSWORD,
                "OS_PROJECT_NAME": "admin", "OS_USER_DOMAIN_NAME": "Default",
                "OS_PROJECT_DOMAIN_NAME": "Default", "OS_IDENTITY_API_VERSION": "3"}

    def netbay(self, *args: str, env: dict | None = None, input: str | None = None) -> subprocess.CompletedProcess:  # noqa: A002 - as subprocess.run
        """Run the netbay CLI against this server's database, in the test process
        (``clihelp.invoke``: a process start is 1.5-2 s of CPU); to the server it is
        another process all the same."""
        from clihelp import invoke  # (clihelp imports this module)

        return invoke(*args, env={"NETBAY_DATA_DIR": str(self.data_dir), "NETBAY_DATABASE_URL": self.database_url,
                                  **(env or {})}, input=input)

    def make_user(self, project: str | None = None, role: str = "member") -> tuple[str, str, str]:
        """A fresh project (or the one named, made if missing) and user with ``role`` on it,
        as ``netbay admin user create --project --role`` makes them; returns (user,
        password, project). Made through the server's Keystone API as the bootstrap admin:
        a ``netbay admin`` process per call cost a second or two each (that command has
        tests of its own)."""
        project = project or "p-" + uuid.uuid4().hex[:8]
        user = "u-" + uuid.uuid4().hex[:8]
        password = "pw-" + uuid.uuid4().hex[:8]
        with httpx.Client(base_url=self.auth_url, headers={"X-Auth-Token": self.token()}, timeout=30) as ks:
            project_id = _project_id(ks, project)
            r = ks.post("/users", json={"user": {"name": user, "password": password, "domain_id": "default",
                                                 "default_project_id": project_id}})
            assert r.status_code == 201, r.text
            roles = ks.get("/roles", params={"name": role}).json()["roles"]
            assert len(roles) == 1, (role, roles)
            r = ks.put(f"/projects/{project_id}/users/{r.json()['user']['id']}/roles/{roles[0]['id']}")
            assert r.status_code == 204, r.text
        return user, password, project

    def connect(self, user: str = "admin", password: str = ADMIN_PASSWORD, project: str = "admin"):
        import openstack

        conn = openstack.connect(
            auth_url=self.auth_url, username=user, password=password, project_name=project,
            user_domain_name="Default", project_domain_name="Default", region_name="RegionOne",
            identity_api_version="3",
        )
        self._clients.append(conn)
        return conn

    def token(self, user: str = "admin", password: str = ADMIN_PASSWORD, project: str = "admin") -> str:
        body = {"auth": {"identity": {"methods": ["password"], "password": {"user": {
            "name": user, "domain": {"name": "Default"}, "password": password}}},
            "scope": {"project": {"name": project, "domain": {"name": "Default"}}}}}
        r = httpx.post(f"{self.auth_url}/auth/tokens", json=body, timeout=10)
        assert r.status_code == 201, r.text
        return r.headers["X-Subject-Token"]

    def http(self, token: str | None = None) -> httpx.Client:
        client = httpx.Client(base_url=self.network_url,
                              headers={"X-Auth-Token": token or self.token()}, timeout=30)
        self._clients.append(client)
        return client


def _project_id(keystone: httpx.Client, name: str) -> str:
    """The id of project ``name``, made if missing (a 409 when another test made it first)."""
    for _ in range(2):
        found = keystone.get("/projects", params={"name": name}).json()["projects"]
        if found:
            return found[0]["id"]
        r = keystone.post("/projects", json={"project": {"name": name, "domain_id": "default"}})
        if r.status_code == 201:
            return r.json()["project"]["id"]
        assert r.status_code == 409, r.text
    raise AssertionError(f"project {name} neither made nor found")


_SCHEMA: list[Path] = []   # this test process's SQLite database migrated to head, copied for each new one


def _schema_at_head(path: Path) -> None:
    """Write the new SQLite database ``path`` as an empty schema at head: a copy (SQLite's
    backup) of one this process migrated once. A server then finds nothing to migrate —
    twenty-two migrations were 1-1.5 s of every server's start, 5-6 s on a loaded machine,
    and every test module starts one or two. What ``netbay up`` does next (bootstrap, the
    ``public`` network) runs as on an empty file; migrations have tests of their own."""
    if not _SCHEMA:
        from netbay.store import migrate

        where = Path(tempfile.mkdtemp(prefix="nbtest-schema-"))
        # Also at exit: helpers that import ``tests.conftest`` get a module of their own (pytest's
        # is ``conftest``), whose copy pytest_sessionfinish does not see.
        atexit.register(shutil.rmtree, where, True)
        migrate.upgrade(f"sqlite:///{where / 'netbay.db'}")
        _SCHEMA.append(where / "netbay.db")
    with contextlib.closing(sqlite3.connect(_SCHEMA[0])) as source, contextlib.closing(sqlite3.connect(path)) as copy:
        source.backup(copy)


@pytest.hookimpl(trylast=True)   # after the session's fixtures are torn down
def pytest_sessionfinish(session: pytest.Session) -> None:
    """This process's zygote and schema copy go before it reports back, not at its exit: a
    pytest-xdist worker not gone 10 s after the run ends is SIGKILLed (execnet's
    ``terminate``) and runs no ``atexit`` handler — a loaded machine had left their
    directories in /tmp."""
    zygote.close()
    if _SCHEMA:
        shutil.rmtree(_SCHEMA.pop().parent, ignore_errors=True)


def _log_server(pid: int, event: str, command: str, wall: float) -> None:
    """One line per server start and stop to ``NETBAY_TEST_SERVER_LOG`` (if set): which test
    started or stopped it, its pid, the seconds it took (to listen; since the start) and the
    CPU seconds it had spent by then: what the suite pays per server, to count and sum."""
    where = os.environ.get("NETBAY_TEST_SERVER_LOG")
    if not where:
        return
    from bench.harness import proc_cpu_seconds   # only when logging: the benches' one reader of /proc

    try:
        cpu = proc_cpu_seconds(pid)
    except (OSError, IndexError, ValueError):
        cpu = float("nan")
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").rsplit(" ", 1)[0]
    with open(where, "a") as out:
        out.write(f"{event}\t{pid}\t{test}\t{command}\t{wall:.2f}\t{cpu:.2f}\n")


def start_server(database_url: str, data_dir: Path, *, up: bool = True, extra: tuple[str, ...] = ()) -> Server:
    sqlite_file = Path(database_url.removeprefix("sqlite:///")) if database_url.startswith("sqlite:///") else None
    if up and sqlite_file is not None and not sqlite_file.exists():
        _schema_at_head(sqlite_file)
    port = free_port()
    env = {**os.environ, "NETBAY_ADMIN_PASSWORD": ADMIN_PASSWORD, "NETBAY_LOG_LEVEL": "WARNING"}
    command = "up" if up else "serve"
    # API tests never touch the kernel: `up` runs no dataplane agent here (tests that
    # want one start it themselves, with their own namespace prefix).
    no_agent = ("--no-agent",) if up else ()
    log = open(data_dir / "server.log", "w")  # noqa: SIM115
    proc = zygote.popen(
        [sys.executable, "-m", "netbay.cli.main", command, "--port", str(port), "--data-dir", str(data_dir),
         "--database-url", database_url, *no_agent, *extra],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    started = time.monotonic()
    try:
        _wait_port(port, 120, proc)   # 60 s ran out under a load of 13 (a module of errors)
    except Exception as exc:
        proc.kill()
        raise RuntimeError((data_dir / "server.log").read_text()) from exc
    _log_server(proc.pid, "start", command, time.monotonic() - started)
    return Server(f"http://127.0.0.1:{port}", port, data_dir, database_url, proc, started=started)


def stop_server(server: Server) -> None:
    for client in server._clients:
        try:
            client.close()
        except Exception:  # noqa: BLE001
            pass
    _log_server(server.proc.pid, "stop", "", time.monotonic() - server.started)
    server.proc.terminate()
    try:
        server.proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait(timeout=10)


def new_database_url(db_backend: str, request: pytest.FixtureRequest,
                     tmp_path_factory: pytest.TempPathFactory) -> str:
    """A fresh, empty database on ``db_backend`` (``sqlite`` or ``postgresql``)."""
    if db_backend == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('db') / 'netbay.db'}"
    pg: Postgres = request.getfixturevalue("postgres")
    return pg.url(pg.create_database())


@pytest.fixture(scope="module")
def database_url(db_backend: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    return new_database_url(db_backend, request, tmp_path_factory)


@contextlib.contextmanager
def module_server(database_url: str, request: pytest.FixtureRequest,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``netbay up`` on ``database_url`` with the module's ``SERVER_ARGS``, stopped after."""
    extra = tuple(getattr(request.module, "SERVER_ARGS", ()))
    srv = start_server(database_url, tmp_path_factory.mktemp("netbay"), extra=extra)
    try:
        yield srv
    finally:
        stop_server(srv)


@pytest.fixture(scope="module")
def server(db_backend: str, tmp_path_factory: pytest.TempPathFactory,
           request: pytest.FixtureRequest) -> Iterator[Server]:
    """A running ``netbay up`` (schema, admin, ``public`` network) for one test module;
    a module's ``SERVER_ARGS`` are added to the command line. A module marked
    ``shared_server`` gets the worker's shared one instead (:func:`shared_server`), unless
    ``NETBAY_TEST_SHARED_SERVER=0`` (to tell a failure's cause, or time the difference)."""
    if shares_server(request):
        yield from shared_server(db_backend, request, tmp_path_factory)
        return
    with module_server(request.getfixturevalue("database_url"), request, tmp_path_factory) as srv:
        yield srv


def shares_server(request: pytest.FixtureRequest) -> bool:
    """Whether the requesting module is marked ``shared_server`` (and sharing is not off:
    ``NETBAY_TEST_SHARED_SERVER=0``); for ``server`` and ``neutron_api``/``octavia_api``."""
    return request.node.get_closest_marker("shared_server") is not None and \
        os.environ.get("NETBAY_TEST_SHARED_SERVER", "1") != "0"


@pytest.fixture(scope="session")
def _shared_servers() -> Iterator[dict[tuple[str, tuple[str, ...]], Server]]:
    """This worker's shared servers, by (database backend, ``SERVER_ARGS``); stopped at its end."""
    servers: dict[tuple[str, tuple[str, ...]], Server] = {}
    try:
        yield servers
    finally:
        for srv in servers.values():
            stop_server(srv)


def shared_server(db_backend: str, request: pytest.FixtureRequest,
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """The server of a module marked ``shared_server``: one per worker (and backend and
    ``SERVER_ARGS``), started by the first such module, for modules whose tests make
    their own objects (unique names, projects of their own) and count on nothing a fresh
    server has but what every server has. A start is 3-5 s of CPU (15-25 s of wall on a
    loaded machine) and most API modules need nothing else of their own. After the module,
    what the server held before it (:func:`held`) must be there unchanged: a module that
    changes or removes shared things is told to drop the marker. The module's clients
    (``raw``, ``admin_http``, …) are closed at its end, not the server's."""
    servers = request.getfixturevalue("_shared_servers")
    key = (db_backend, tuple(getattr(request.module, "SERVER_ARGS", ())))
    srv = servers.get(key)
    if srv is None or srv.proc.poll() is not None:
        url = new_database_url(db_backend, request, tmp_path_factory)
        srv = servers[key] = start_server(url, tmp_path_factory.mktemp("netbay-shared"), extra=key[1])
    clients = len(srv._clients)
    before = held(srv)
    yield srv
    for client in srv._clients[clients:]:
        client.close()
    del srv._clients[clients:]
    after = held(srv)
    changed = sorted(k for k in before if after.get(k) != before[k])
    fields = {k: sorted(f for f in set(before[k]) | set(after.get(k) or {})
                        if (after.get(k) or {}).get(f) != before[k].get(f)) for k in changed[:3]}
    assert not changed, (f"{request.module.__name__} (marked shared_server) changed or removed what the "
                         f"shared server held before it: {changed[:10]} (fields: {fields})")


_VOLATILE = ("updated_at", "revision_number")
HELD = {"network": ("networks", "subnets", "ports", "routers", "security-groups", "floatingips",
                    "subnetpools", "address-scopes", "qos/policies", "rbac-policies", "default-security-group-rules"),
        "identity": ("projects", "users", "roles", "domains")}


def _unordered(field: str, value: object) -> object:
    """A network's ``subnets`` and a group's ``security_group_rules`` are sets: their order
    is the database's (PostgreSQL's changes when a row is rewritten), not the object's."""
    if field == "subnets" and isinstance(value, list):
        return sorted(value)
    if field == "security_group_rules" and isinstance(value, list):
        return sorted(value, key=lambda rule: rule["id"])
    return value


def held(srv: Server) -> dict[tuple[str, str], dict]:
    """What ``srv`` holds as the admin lists it: (collection, id) -> the object, less the
    fields every write bumps."""
    out: dict[tuple[str, str], dict] = {}
    with httpx.Client(base_url=srv.url, headers={"X-Auth-Token": srv.token()}, timeout=60) as api:
        for family, base in (("network", "/network/v2.0"), ("identity", "/identity/v3")):
            for collection in HELD[family]:
                r = api.get(f"{base}/{collection}")
                assert r.status_code == 200, (collection, r.text)
                body = r.json()
                (items,) = (v for k, v in body.items() if isinstance(v, list))
                for item in items:
                    out[(collection, item["id"])] = {k: _unordered(k, v) for k, v in item.items()
                                                     if k not in _VOLATILE}
    return out


@pytest.fixture(scope="module")
def ci(server: Server) -> httpx.Client:
    """Magnum's API on the module's server, as admin (python-magnumclient's headers)."""
    from coehelp import ci_client  # (coehelp imports this module)

    return ci_client(server, server.token())


@pytest.fixture(scope="module")
def raw(server: Server) -> httpx.Client:
    """Any of the server's APIs, as admin; closed with the server."""
    client = httpx.Client(base_url=server.url, headers={"X-Auth-Token": server.token()}, timeout=60)
    server._clients.append(client)
    return client


@pytest.fixture(scope="module")
def agent_http(server: Server) -> httpx.Client:
    """What the dataplane agent calls (admin): ``/netbay/v1``; closed with the server."""
    client = httpx.Client(base_url=f"{server.url}/netbay/v1", headers={"X-Auth-Token": server.token()},
                          timeout=30)
    server._clients.append(client)
    return client


@pytest.fixture(scope="module")
def settle(agent_http: httpx.Client):
    """Settle a load balancer's statuses as the realizer would report them (API tests, where
    nothing realizes load balancers); modules with their own ``settle`` override it."""
    def settle(lb_id: str, value: str = "ACTIVE/ONLINE") -> None:
        r = agent_http.put("/status", json={"loadbalancers": {lb_id: value}})
        assert r.status_code == 200, r.text
    return settle


@pytest.fixture(scope="module")
def admin(server: Server):
    """An openstacksdk connection as the bootstrap admin."""
    return server.connect()


@pytest.fixture(scope="module")
def member(server: Server):
    """An openstacksdk connection as a member of a fresh project."""
    user, password, project = server.make_user()
    return server.connect(user, password, project)


@pytest.fixture(scope="module")
def member_http(server: Server, member) -> httpx.Client:
    """Raw HTTP to the network API as the ``member`` connection's user."""
    return server.http(member.auth_token)


@pytest.fixture(scope="module")
def admin_http(server: Server) -> httpx.Client:
    return server.http()


def neutron_error(r: httpx.Response, status: int, kind: str, message: str | None = None) -> str:
    """Assert a NeutronError body of ``kind`` with ``status`` (and ``message``); return its message."""
    assert r.status_code == status, r.text
    err = r.json()["NeutronError"]
    assert err["type"] == kind, err
    if message is not None:
        assert err["message"] == message, err
    return err["message"]


def unique(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
