"""A real OpenStack control plane for the ``openstack`` backend's tests:
Keystone and Neutron's API server installed from PyPI, run on 127.0.0.1.

- Installed once per machine into a virtualenv of their own
  (``$NETBAY_PEERS_DIR``, default ``~/.cache/netbay/openstack-peers``), pinned to
  one release so every run tests the same peers.
- Each on SQLite, served by uWSGI, started and stopped by PID (their process group,
  which this module created).
- Neutron's ML2 has the ``tag_ports_during_bulk_creation`` extension driver, as a
  kuryr deployment enables it: a port's tags come with its create, in one request.
- Neutron runs **API server only**: ML2 with no mechanism drivers, no agents, no
  RPC (``transport_url = fake:/``). So the tests assert API effects — ports,
  bindings, statuses the API sets — never packets. Neutron's migrations do not
  run on SQLite, so its schema is made with ``create_all`` and stamped at head.
- tests/ovn starts the same two with ML2/OVN on its OVN lab and Neutron on
  PostgreSQL instead (``openstack_cloud``'s arguments; docs/ovn-lab.md).
- A start runs as few of the peers' (slow to import) programs as it can: the empty
  schemas on SQLite are made once per machine (:func:`made_once`, keyed by the pins)
  and copied; Keystone's key repositories are written here (two Fernet keys each, as
  ``keystone-manage fernet_setup`` writes them); Neutron's schema and its Alembic
  stamp are one process. Left: ``keystone-manage bootstrap`` and the two servers.
- Keystone hashes passwords with bcrypt at 4 rounds (``[identity]
  password_hash_rounds``, its documented option), not 12: a test deployment's
  choice, as every token the tests ask for costs a password check.
- Keystone caches (``[cache] enabled``, oslo.cache's in-memory ``dogpile.cache.memory``
  backend, which oslo.cache documents for "test environments with a single instance
  of the server") and so runs one uWSGI worker: with two, each would hold its own
  cache and one could accept a token the other revoked. Uncached, Keystone took
  ~160 ms to validate a token (it rebuilds it) and ~120 ms to issue one, 12 and 32 ms
  cached (uWSGI's request log); a cloud-backed scenario's Keystone went from 27.7 to
  7.7 CPU s.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.children import die_with_parent

PINS = ("keystone==30.0.0", "neutron==29.0.0", "uwsgi==2.0.31")
ADMIN_PASSWORD = "peer-admin-secret"
SERVICE_PASSWORD = "peer-neutron-secret"
INSTALL_TIMEOUT = 1200
BOOT_TIMEOUT = 90


def peers_dir() -> Path:
    return Path(os.environ.get("NETBAY_PEERS_DIR", Path.home() / ".cache" / "netbay" / "openstack-peers"))


def install() -> Path:
    """The peers' virtualenv, made on first use."""
    return venv_with(peers_dir(), PINS)


def venv_with(root: Path, pins: tuple[str, ...], timeout: float = INSTALL_TIMEOUT) -> Path:
    """A virtualenv at ``root/venv`` holding exactly ``pins``, made on first use and kept
    (a stamp names the pins; a file lock keeps parallel runs out of each other's way)."""
    root.mkdir(parents=True, exist_ok=True)
    venv, stamp = root / "venv", root / "installed"
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text() == "\n".join(pins):
            return venv
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", "--clear", str(venv)], check=True, timeout=120)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", *pins],
                       check=True, timeout=timeout)
        stamp.write_text("\n".join(pins))
    return venv


def made_once(root: Path, name: str, key: str, make: Callable[[Path], None]) -> Path:
    """``root/name``, made by ``make(path)`` once per machine and kept while ``key`` (what
    it is made from: the pins) is the same; a file lock keeps parallel runs out of each
    other's way. Callers copy it, never change it."""
    root.mkdir(parents=True, exist_ok=True)
    path, stamp = root / name, root / f"{name}.made"
    with open(root / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (path.exists() and stamp.exists() and stamp.read_text() == key):
            stamp.unlink(missing_ok=True)
            path.unlink(missing_ok=True)
            make(path)
            stamp.write_text(key)
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Cloud:
    """Where the peers listen, and admin credentials for them."""

    auth_url: str
    network_url: str
    admin_password: str = ADMIN_PASSWORD

    def auth(self, project: str = "admin", user: str = "admin", password: str | None = None) -> dict[str, str]:
        return {"auth_url": self.auth_url, "username": user, "password": password or self.admin_password,
                "project_name": project, "user_domain_name": "Default", "project_domain_name": "Default"}

    def connection(self, **auth: str):
        import openstack

        return openstack.connect(auth=self.auth(**auth), identity_api_version="3", region_name="RegionOne")


class _Uwsgi:
    """One uWSGI master serving one WSGI module; stopped by its process group, or sent
    SIGTERM by the kernel when the test run dies without its teardown (``--die-on-term``:
    the master then stops its workers and HTTP router, so a killed run leaves none)."""

    def __init__(self, venv: Path, module: str, port: int, env: dict[str, str], log: Path, *,
                 processes: int) -> None:   # each peer says why its number (all three: 1)
        argv = [str(venv / "bin" / "uwsgi"), "--http", f"127.0.0.1:{port}", "--http-keepalive",
                "--module", module, "--master", "--processes", str(processes), "--threads", "1",
                "--enable-threads",
                "--die-on-term", "--buffer-size", "65535", "--need-app", "--lazy-apps"]
        self.log = log
        self.proc = subprocess.Popen(argv, env={**os.environ, **env}, stdout=log.open("wb"),
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=die_with_parent)  # noqa: PLW1509 - prctl only, before exec

    def wait_ready(self, url: str) -> None:
        deadline = time.monotonic() + BOOT_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{url} exited at start; see {self.log}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=2).status_code < 500:
                    return
            time.sleep(0.3)
        raise TimeoutError(f"{url} not up in {BOOT_TIMEOUT} s; see {self.log}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def _run(venv: Path, tool: str, *args: str, env: dict[str, str] | None = None) -> None:
    subprocess.run([str(venv / "bin" / tool), *args], check=True, timeout=300, capture_output=True,
                   env={**os.environ, **(env or {})})


# Keystone's bcrypt at its default 12 rounds costs ~285 ms of CPU per password check
# and per user made here; every token the tests ask for (each ``connect``, each CLI
# run, each user a test makes) pays it. A test deployment chooses Keystone's own
# documented trade-off, ``[identity] password_hash_rounds``, at bcrypt's minimum (4):
# passwords hashed here, the bootstrap admin's too, verify in ~1 ms.
PASSWORD_HASH_ROUNDS = 4


def _keystone_conf(work: Path, db: Path | None = None) -> Path:
    conf = work / "keystone.conf"
    conf.write_text(f"""[database]
connection = sqlite:///{db or work / "keystone.db"}
[identity]
password_hash_algorithm = bcrypt
password_hash_rounds = {PASSWORD_HASH_ROUNDS}
[token]
provider = fernet
[fernet_tokens]
key_repository = {work}/fernet-keys
[fernet_receipts]
key_repository = {work}/fernet-keys
[credential]
key_repository = {work}/credential-keys
[cache]
enabled = true
backend = dogpile.cache.memory
""")
    return conf


# The service plugins that run without agents, beside the router's: the extensions'
# API shapes are compared with netbay's (tests/test_neutron_ext_peer.py). ``segments`` is
# left out: it changes how every network and subnet of the other tests behaves.
SERVICE_PLUGINS = "router,qos,port_forwarding,metering,network_ip_availability"

# API only: ML2 with no mechanism driver (no agents, no dataplane); the ``qos`` extension
# driver gives ports and networks their ``qos_policy_id``.
ML2_API_ONLY = """[ml2]
type_drivers = flat,vxlan
tenant_network_types = vxlan
mechanism_drivers =
extension_drivers = port_security,tag_ports_during_bulk_creation,qos
[ml2_type_vxlan]
vni_ranges = 1:1000
[ml2_type_flat]
flat_networks = *
"""


def _neutron_conf(work: Path, venv: Path, auth_url: str, ml2: str, service_plugins: str, db_url: str) -> Path:
    paste = next((venv / "etc" / "neutron").glob("api-paste.ini"))
    (work / "lock").mkdir(exist_ok=True)
    (work / "neutron.conf").write_text(f"""[DEFAULT]
core_plugin = ml2
service_plugins = {service_plugins}
auth_strategy = keystone
transport_url = fake:/
api_paste_config = {paste}
notify_nova_on_port_status_changes = false
notify_nova_on_port_data_changes = false
[database]
connection = {db_url}
[keystone_authtoken]
www_authenticate_uri = {auth_url}
auth_url = {auth_url}
auth_type = password
username = neutron
password = {SERVICE_PASSWORD}
project_name = service
user_domain_name = Default
project_domain_name = Default
interface = public
[oslo_concurrency]
lock_path = {work}/lock
[quotas]
quota_port = -1
""")
    (work / "ml2_conf.ini").write_text(ml2)
    return work


# Neutron's schema from its models, then ``neutron-db-manage stamp heads`` in the same
# process (one import of Neutron, not two); the arguments: its config files.
_NEUTRON_SCHEMA = """
import sys
import sqlalchemy as sa
from neutron.db.migration import cli
from neutron.db.migration.models import head
head.get_metadata().create_all(sa.create_engine({url!r}))
sys.argv = ["neutron-db-manage", *sys.argv[1:], "stamp", "heads"]
sys.exit(1 if cli.main() else 0)
"""


def _neutron_schema(venv: Path, db_url: str, conf_files: list[Path], env: dict[str, str]) -> None:
    """Neutron's schema made and stamped at head in the database ``db_url`` (its
    ``[database] connection`` in ``conf_files``)."""
    args = [a for f in conf_files for a in ("--config-file", str(f))]
    subprocess.run([str(venv / "bin" / "python"), "-c", _NEUTRON_SCHEMA.format(url=db_url), *args],
                   check=True, timeout=300, capture_output=True, env={**os.environ, **env})


def _neutron_sqlite_template(venv: Path, path: Path) -> None:
    conf = path.with_suffix(".conf")
    conf.write_text(f"[database]\nconnection = sqlite:///{path}\n")
    _neutron_schema(venv, f"sqlite:///{path}", [conf], {})


def _keystone_sqlite_template(venv: Path, path: Path) -> None:
    _run(venv, "keystone-manage", "--config-file", str(_keystone_conf(path.parent, path)), "db_sync")


def _key_repository(path: Path) -> None:
    """A Fernet key repository as ``keystone-manage fernet_setup`` (or ``credential_setup``)
    leaves it: key ``1`` primary, key ``0`` staged, readable by this user only."""
    path.mkdir(mode=0o700)
    for name in ("0", "1"):
        fd = os.open(path / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(base64.urlsafe_b64encode(os.urandom(32)))


@contextlib.contextmanager
def openstack_cloud(work: Path, ml2: str = ML2_API_ONLY, service_plugins: str = SERVICE_PLUGINS,
                    neutron_db: str | None = None, neutron_env: dict[str, str] | None = None) -> Iterator[Cloud]:
    """Keystone + Neutron, bootstrapped, for the length of the ``with``. Unless told
    otherwise (tests/ovn: ML2/OVN on PostgreSQL), Neutron is API only (``ml2``) on
    SQLite (``neutron_db``, an SQLAlchemy URL); ``neutron_env`` is added to the
    environment of Neutron and its schema tools (e.g. a PYTHONPATH with a DB driver)."""
    venv = install()
    work.mkdir(parents=True, exist_ok=True)
    ks_port, nt_port = _free_port(), _free_port()
    auth_url, network_url = f"http://127.0.0.1:{ks_port}/v3", f"http://127.0.0.1:{nt_port}"
    conf = _keystone_conf(work)
    key = "\n".join(PINS)
    shutil.copyfile(made_once(peers_dir() / "schemas", "keystone.db", key,
                              lambda path: _keystone_sqlite_template(venv, path)), work / "keystone.db")
    for repo in ("fernet-keys", "credential-keys"):
        _key_repository(work / repo)
    _run(venv, "keystone-manage", "--config-file", str(conf), "bootstrap", "--bootstrap-password", ADMIN_PASSWORD,
         "--bootstrap-public-url", auth_url, "--bootstrap-region-id", "RegionOne")
    servers: list[_Uwsgi] = []
    try:
        keystone = _Uwsgi(venv, "keystone.wsgi.api:application", ks_port,
                          {"OS_KEYSTONE_CONFIG_FILES": str(conf)}, work / "keystone.log",
                          processes=1)  # one cache: its in-memory cache is per process
        servers.append(keystone)
        keystone.wait_ready(auth_url)
        cloud = Cloud(auth_url, network_url)
        _wait_for_tokens(cloud)
        _register_neutron(cloud)
        db_url = neutron_db or f"sqlite:///{work}/neutron.db?timeout=30"
        extra_env = neutron_env or {}
        _neutron_conf(work, venv, auth_url, ml2, service_plugins, db_url)
        if neutron_db is None:
            neutron_key = f"{key}\n{hashlib.sha256(_NEUTRON_SCHEMA.encode()).hexdigest()}"
            shutil.copyfile(made_once(peers_dir() / "schemas", "neutron.db", neutron_key,
                                      lambda path: _neutron_sqlite_template(venv, path)), work / "neutron.db")
        else:
            _neutron_schema(venv, db_url, [work / "neutron.conf", work / "ml2_conf.ini"], extra_env)
        (work / "tmp").mkdir(exist_ok=True)   # its neutron_start_time<pid> file, gone with the work dir
        neutron = _Uwsgi(venv, "neutron.wsgi.api:application", nt_port,
                         {"OS_NEUTRON_CONFIG_DIR": str(work), "TMPDIR": str(work / "tmp"),
                          "OS_NEUTRON_CONFIG_FILES": "neutron.conf;ml2_conf.ini", **extra_env}, work / "neutron.log",
                         processes=1)  # one writer: SQLite refuses concurrent ones ("database is locked")
        servers.append(neutron)
        neutron.wait_ready(network_url + "/")
        _default_rule_templates(cloud)
        yield cloud
    finally:
        for server in reversed(servers):
            server.stop()


def _wait_for_tokens(cloud: Cloud) -> None:
    """Until Keystone issues a token: uWSGI answers ``GET /v3`` before every worker can
    reach the database, and a first token request may still be refused or reset."""
    user = {"name": "admin", "domain": {"id": "default"}, "password": cloud.admin_password}
    body = {"auth": {"identity": {"methods": ["password"], "password": {"user": user}},
                     "scope": {"project": {"name": "admin", "domain": {"id": "default"}}}}}
    deadline, last = time.monotonic() + BOOT_TIMEOUT, ""
    while time.monotonic() < deadline:
        try:
            r = httpx.post(f"{cloud.auth_url}/auth/tokens", json=body, timeout=10)
            if r.status_code == 201:
                return
            last = f"{r.status_code} {r.text[:200]}"
        except httpx.HTTPError as exc:
            last = repr(exc)
        time.sleep(0.5)
    raise TimeoutError(f"Keystone at {cloud.auth_url} issued no token in {BOOT_TIMEOUT} s: {last}")


def _register_neutron(cloud: Cloud) -> None:
    """Neutron's service user and its catalog entry, as a deployment tool would make them."""
    conn = cloud.connection()
    service = conn.identity.create_project(name="service", domain_id="default")
    user = conn.identity.create_user(name="neutron", password=SERVICE_PASSWORD, domain_id="default",
                                     default_project_id=service.id)
    admin = conn.identity.find_role("admin")
    conn.identity.assign_project_role_to_user(service, user, admin)
    network = conn.identity.create_service(name="neutron", type="network")
    conn.identity.create_endpoint(service_id=network.id, interface="public", url=cloud.network_url,
                                  region_id="RegionOne")
    conn.close()


def _default_rule_templates(cloud: Cloud) -> None:
    """The rules every new group starts with, which Neutron's migrations insert and
    ``create_all`` does not: egress anywhere for every group, ingress from the
    group itself for a project's default group."""
    conn = cloud.connection()
    for ethertype in ("IPv4", "IPv6"):
        conn.network.create_default_security_group_rule(
            direction="egress", ethertype=ethertype, used_in_default_sg=True, used_in_non_default_sg=True)
        conn.network.create_default_security_group_rule(
            direction="ingress", ethertype=ethertype, remote_group_id="PARENT", used_in_default_sg=True,
            used_in_non_default_sg=False)
    conn.close()
