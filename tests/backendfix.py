"""The one parametrized fixture behind every backend-independent test (issue 14).

A test that asks for ``network_backend`` runs twice: against netbay's embedded
network service and against a real cloud's Neutron (Keystone and Neutron's API
server from PyPI, ``tests/peers/openstack_cloud.py``). The cloud is started once
per test session and shared; it has an external network named ``public``, as an
operator's cloud would. Tests written against it assert API effects (objects,
addresses, statuses, errors), never packets: that Neutron has no agents.

Loaded by ``tests/conftest.py`` (``pytest_plugins``); fixtures:

- ``cloud`` — the running peers (:class:`tests.peers.openstack_cloud.Cloud`);
- ``cloud_env`` — ``OS_CLIENT_CONFIG_FILE`` / ``OS_CLOUD`` naming it ``peer``, for
  netbay (``--backend openstack --os-cloud peer``) and the ``openstack`` CLI alike;
- ``network_backend`` — a :class:`netbay.backends.NetworkBackend`, embedded or openstack;
- ``clean_backend`` — the same, checked afterwards to hold exactly what it held before;
- ``octavia`` — Octavia's API on that cloud (noop provider driver, a stand-in reporting
  the statuses a provider would: ``tests/peers/octavia_peer.py``), in its catalog as
  ``load-balancer``; asked for only by tests that need it, so a run without them
  keeps a cloud without Octavia;
- ``nova`` — a STAND-IN for Nova (``tests/peers/nova_standin.py``, named as such: no
  Nova runs here) in that cloud's catalog as ``compute`` for the length of a module,
  binding the ports it boots servers on in the real Neutron; taken out of the catalog
  after, so other modules keep a cloud without compute;
- ``lb_backend`` — a :class:`netbay.backends.loadbalancers.LoadBalancerBackend`:
  netbay's own Octavia API (a netbay server of the module's) or the cloud's Octavia,
  each with a network and subnet of its own for VIPs (``lb_backend.vip_subnet_id``);
- ``clean_lb_backend`` — the same, checked afterwards to list what it listed before;
- ``neutron_api`` — a network API (v2.0) for a module's API tests: a netbay server of the
  module's (``tests.conftest.Server``, one per ``--db``), or the cloud's Neutron with an
  admin and users in projects of the module's own (:class:`NeutronCloud`, the same
  methods), swept at the module's end. A module opts in by building its ``server``
  fixture on it; parametrized in ``tests/conftest.py`` (:func:`neutron_params`), so
  tests marked ``embedded_only("why")`` are made against netbay's API only;
- ``octavia_api`` — ``neutron_api`` with a load-balancer API v2 beside it
  (``load_balancer_url``): netbay's own, or the cloud's Octavia (``octavia``) with the
  module's load balancers deleted (cascade) in the sweep (:class:`OctaviaCloud`);
- ``cluster_api`` — netbay's Magnum API with its conductor over one backend
  (:class:`ClusterApi`): a netbay server of the module's, or ``netbay up --backend
  openstack`` on the cloud (``pytest.mark.peers`` on that param only, so the embedded
  side runs in the main job).
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from pathlib import Path

import pytest

PUBLIC = "public"
# What a test must leave as it found it, per backend.
SWEPT = ("network", "subnet", "port", "router", "floatingip", "security_group")
BACKENDS = ("embedded", "openstack")
# What the cloud must list as before (its CLI's listings), once a test has made and deleted its things.
CLI_LISTS = ("port", "network", "subnet", "security group", "router", "floating ip")
LB_SWEPT = ("loadbalancer", "listener", "pool", "healthmonitor")
# What a module on the cloud's Neutron must leave as it found it (openstacksdk's listings).
NEUTRON_SWEPT = ("ips", "routers", "ports", "subnets", "networks", "subnet_pools", "security_groups")


@pytest.fixture(scope="session")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    from tests.peers.openstack_cloud import openstack_cloud

    with openstack_cloud(tmp_path_factory.mktemp("openstack")) as c:
        conn = c.connection()
        public = conn.network.create_network(name=PUBLIC, is_router_external=True)
        conn.network.create_subnet(network_id=public.id, cidr="203.0.113.0/24", ip_version=4,
                                   name=f"{PUBLIC}-subnet", is_dhcp_enabled=False)
        conn.close()
        yield c


@pytest.fixture(scope="session")
def cloud_env(cloud, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """``clouds.yaml`` naming the cloud ``peer``."""
    path = tmp_path_factory.mktemp("clouds") / "clouds.yaml"
    path.write_text(json.dumps({"clouds": {"peer": {"auth": cloud.auth(), "region_name": "RegionOne",
                                                    "identity_api_version": 3}}}))  # YAML ⊇ JSON
    return {"OS_CLIENT_CONFIG_FILE": str(path), "OS_CLOUD": "peer"}


@pytest.fixture(scope="module", params=BACKENDS)
def network_backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    from netbay.backends import open_backend

    if request.param == "embedded":
        from netbay.store import migrate
        from netbay.store.db import Store

        url = f"sqlite:///{tmp_path_factory.mktemp('embedded') / 'netbay.db'}"
        migrate.upgrade(url)
        store = Store(url)
        yield open_backend("embedded", store=store)
        store.dispose()
    else:
        conn = request.getfixturevalue("cloud").connection()
        yield open_backend("openstack", connection=conn)
        conn.close()


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A cluster executor's state tables on SQLite (its own, beside any server's), for the
    tests that drive ``Stack`` directly on a backend; a module's own ``store`` wins."""
    from netbay.store import migrate
    from netbay.store.db import Store

    url = f"sqlite:///{tmp_path_factory.mktemp('stacks') / 'netbay.db'}"
    migrate.upgrade(url)
    s = Store(url)
    yield s
    s.dispose()


def snapshot(backend) -> dict[str, set[str]]:
    """Every object's id, per swept member."""
    return {m: {o["id"] for o in backend.list(m)} for m in SWEPT}


@pytest.fixture
def clean_backend(network_backend) -> Iterator:
    """The backend, checked afterwards to hold exactly what it held before."""
    network_backend.list("security_group")  # the project's default group appears on first use in both
    before = snapshot(network_backend)
    yield network_backend
    assert snapshot(network_backend) == before


@pytest.fixture(scope="session")
def octavia(cloud, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    from tests.peers.octavia_peer import octavia as run_octavia

    with run_octavia(cloud, tmp_path_factory.mktemp("octavia")) as o:
        yield o


@pytest.fixture(scope="module")
def nova(cloud) -> Iterator:
    from tests.peers.nova_standin import NovaStandin

    with NovaStandin(cloud) as n:
        yield n


@pytest.fixture(scope="module", params=BACKENDS)
def lb_backend(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A load-balancer backend, with ``vip_subnet_id``: a subnet of its own network for VIPs."""
    from netbay.backends import open_backend
    from netbay.backends.loadbalancers import open_lb_backend

    closers = []
    if request.param == "embedded":
        from conftest import start_server, stop_server

        from netbay.client import Api
        from netbay.backends.http import HttpBackend

        data = tmp_path_factory.mktemp("netbay-lb")
        server = start_server(f"sqlite:///{data / 'netbay.db'}", data)
        closers.append(lambda: stop_server(server))
        api = Api(server.url, server.token)
        closers.insert(0, api.close)
        closers.insert(0, agent_reports(server))
        net, lb = HttpBackend(api), open_lb_backend("embedded", api=api)
    else:
        request.getfixturevalue("octavia")
        conn = request.getfixturevalue("cloud").connection()
        closers.append(conn.close)
        net, lb = open_backend("openstack", connection=conn), open_lb_backend("openstack", connection=conn)
    network = net.create("network", {"name": "lb-vips"})
    lb.vip_subnet_id = net.create("subnet", {"network_id": network["id"], "cidr": "10.70.0.0/24",
                                             "ip_version": 4})["id"]
    try:
        yield lb
    finally:
        try:
            net.delete("network", network["id"])
        finally:
            for close in closers:
                close()


def agent_reports(server) -> Callable[[], None]:
    """STAND-IN for netbay's dataplane agent, which API-only servers run without: it
    reports each load balancer left ``PENDING_*`` as ``ACTIVE/ONLINE`` through the
    agent's own ``PUT /netbay/v1/status`` (settling its tree), as the agent does once
    its namespaces are wired — the part Octavia's noop peer has its stand-in for. It
    follows the change stream as the agent does (a long poll: no request while nothing
    changes), after settling what was pending when it started. Returns the function
    that stops it."""
    import threading

    import httpx

    from netbay.agent.api import Api as AgentApi
    from netbay.client import LB, ApiError

    stop = threading.Event()
    api = AgentApi(server.url, server.token)   # the agent's own calls: its token renewed on a 401

    def pending_now() -> tuple[int, set[str]]:
        head = api.changes(2**31 - 1, 0.0)["revision"]   # before the list: none missed
        return head, {lb["id"] for lb in api.call("GET", f"{LB}/loadbalancers")["loadbalancers"]
                      if lb["provisioning_status"].startswith("PENDING_")}

    def pending_in(page: dict[str, Any]) -> set[str]:
        return {c["id"] for c in page["changes"] if c["resource"] == "loadbalancer" and c["action"] != "delete"
                and str((c.get("data") or {}).get("provisioning_status", "")).startswith("PENDING_")}

    def run() -> None:
        since: int | None = None
        for _ in range(1 << 30):   # until stopped
            if stop.is_set():
                return
            try:
                if since is None:
                    since, pending = pending_now()
                else:
                    page = api.changes(since, 1.0)
                    since, pending = page["revision"], pending_in(page)
                if pending:
                    api.put_status({"loadbalancers": {i: "ACTIVE/ONLINE" for i in pending}})
            except (ApiError, httpx.TransportError, KeyError, ValueError):
                since = None     # the server is going away, or the feed was cut: start over
                stop.wait(0.1)   # the test says what failed

    thread = threading.Thread(target=run, name="lb-agent-stand-in", daemon=True)
    thread.start()

    def halt() -> None:
        stop.set()
        thread.join(timeout=15)
        api.close()

    return halt


def lb_snapshot(backend) -> dict[str, set[str]]:
    return {k: {o["id"] for o in backend.list(k)} for k in LB_SWEPT}


def octavia_snapshot(conn) -> dict[str, set[str]]:
    """What an Octavia lists, by id, through openstacksdk (``conn`` must have it in its catalog)."""
    lb = conn.load_balancer
    return {"loadbalancer": {o.id for o in lb.load_balancers()}, "listener": {o.id for o in lb.listeners()},
            "pool": {o.id for o in lb.pools()}, "healthmonitor": {o.id for o in lb.health_monitors()}}


@pytest.fixture
def clean_lb_backend(lb_backend) -> Iterator:
    """The backend, checked afterwards to list exactly what it listed before."""
    before = lb_snapshot(lb_backend)
    yield lb_backend
    assert lb_snapshot(lb_backend) == before


def openstack(env: dict[str, str], *args: str) -> str:
    """The real ``openstack`` CLI against the cloud ``env`` names (``cloud_env``); its stdout.
    Run in this process (``tests/osc.py``), a fresh shell each call."""
    from tests.osc import openstack as run_openstack

    r = run_openstack(*args, env={**os.environ, **env})
    assert r.returncode == 0, r.stderr
    return r.stdout


def cloud_snapshot(env: dict[str, str]) -> dict[str, set[str]]:
    """What the cloud ``env`` names (``cloud_env``'s clouds.yaml) lists, by id, per kind of
    ``CLI_LISTS``: the listings ``openstack … list`` makes (all projects' objects, as the
    admin sees them), through openstacksdk in this process — six CLI processes per
    snapshot cost 6-12 s of CPU, and a sweep check is not a test of the CLI."""
    from openstack.config import OpenStackConfig
    from openstack.connection import Connection

    config = OpenStackConfig(config_files=[env["OS_CLIENT_CONFIG_FILE"]]).get_one(cloud=env["OS_CLOUD"])
    conn = Connection(config=config)
    try:
        listings = {"port": conn.network.ports, "network": conn.network.networks, "subnet": conn.network.subnets,
                    "security group": conn.network.security_groups, "router": conn.network.routers,
                    "floating ip": conn.network.ips}
        return {what: {o.id for o in listings[what]()} for what in CLI_LISTS}
    finally:
        conn.close()


@contextlib.contextmanager
def netbay_on_cloud(cloud_env: dict[str, str], data: Path) -> Iterator:
    """``netbay up --backend openstack --os-cloud peer`` on SQLite in ``data``, stopped after."""
    from tests.conftest import start_server, stop_server

    saved = {k: os.environ.get(k) for k in cloud_env}
    os.environ.update(cloud_env)
    try:
        srv = start_server(f"sqlite:///{data / 'netbay.db'}", data, extra=("--backend", "openstack",
                                                                           "--os-cloud", "peer"))
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    try:
        yield srv
    finally:
        stop_server(srv)


@dataclass
class ClusterApi:
    """netbay's Magnum API over one network backend, and that backend seen from outside:
    ``conn`` (openstacksdk, admin of the project the clusters are made in) and ``env``
    (clouds.yaml for the ``openstack`` CLI, ``quota set``, and :func:`cloud_snapshot`) reach
    netbay's own Neutron on ``embedded`` and the cloud's on ``openstack``; ``seam`` is the
    :class:`netbay.backends.NetworkBackend` and ``api`` netbay's own API where the backend
    has sandboxes (embedded), as the conductor builds a ``Stack`` from them."""

    kind: str
    server: Any          # tests.conftest.Server: the netbay serving the Magnum API
    ci: Any              # httpx.Client on /container-infra/v1 with a token the server accepts
    magnum: Any          # python-magnumclient's Client on the same API
    conn: Any
    env: dict[str, str]
    seam: Any
    api: Any = None

    @property
    def project_id(self) -> str:
        return self.conn.current_project_id

    def snapshot(self) -> dict[str, set[str]]:
        """Every network object's id (through the seam), and netbay's sandboxes on embedded."""
        seen = snapshot(self.seam)
        if self.api is not None:
            seen["sandbox"] = {s["id"] for s in self.api.call("GET", "/netbay/v1/sandboxes")["sandboxes"]}
        return seen


@pytest.fixture(scope="module", params=["embedded", pytest.param("openstack", marks=pytest.mark.peers)])
def cluster_api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterApi]:
    from keystoneauth1 import session as ks_session
    from keystoneauth1.identity import v3
    from magnumclient.client import Client

    from netbay.client import Api

    data = tmp_path_factory.mktemp(f"cluster-{request.param}")
    with contextlib.ExitStack() as stack:
        if request.param == "embedded":
            from conftest import ADMIN_PASSWORD, start_server, stop_server

            from netbay.backends.http import HttpBackend

            server = start_server(f"sqlite:///{data / 'netbay.db'}", data)
            stack.callback(stop_server, server)
            auth = {"auth_url": server.auth_url, "username": "admin", "password": ADMIN_PASSWORD,
                    "project_name": "admin", "user_domain_name": "Default", "project_domain_name": "Default"}
            clouds = data / "clouds.yaml"
            clouds.write_text(json.dumps({"clouds": {"netbay": {"auth": auth, "region_name": "RegionOne",
                                                                "identity_api_version": 3}}}))
            env = {"OS_CLIENT_CONFIG_FILE": str(clouds), "OS_CLOUD": "netbay"}
            conn = server.connect()
            api = Api(server.url, server.token)
            stack.callback(api.close)
            seam, magnum = HttpBackend(api), Client("1", session=ks_session.Session(auth=v3.Password(**auth)),
                                                    region_name="RegionOne")
        else:
            from netbay.backends.openstack import OpenStackBackend

            env = request.getfixturevalue("cloud_env")
            server = stack.enter_context(netbay_on_cloud(env, data))
            conn = request.getfixturevalue("cloud").connection()
            stack.callback(conn.close)
            api, seam = None, OpenStackBackend(connection=conn)
            magnum = Client("1", session=conn.session, endpoint_override=f"{server.url}/container-infra/v1")
        from coehelp import ci_client

        seam.list("security_group")  # the project's default group appears on first use
        yield ClusterApi(request.param, server, ci_client(server, conn.auth_token), magnum, conn, env, seam, api)


def neutron_params(metafunc: pytest.Metafunc, dbs: list[str]) -> list:
    """``neutron_api``'s params for one test: netbay on each database, and the cloud's
    Neutron (``-m peers``) unless the test is ``embedded_only``."""
    params = [f"embedded-{db}" for db in dbs]
    if metafunc.definition.get_closest_marker("embedded_only") is None:
        params.append(pytest.param("openstack", marks=pytest.mark.peers))
    return params


@pytest.fixture(scope="module")
def neutron_api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    yield from _module_api(request, tmp_path_factory, lambda: NeutronCloud(request.getfixturevalue("cloud")))


@pytest.fixture(scope="module")
def octavia_api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """``neutron_api`` with the load-balancer API v2 beside it (``load_balancer_url``):
    netbay's, or the cloud's Octavia (:class:`OctaviaCloud`)."""
    def on_cloud() -> OctaviaCloud:
        return OctaviaCloud(request.getfixturevalue("cloud"), request.getfixturevalue("octavia"))

    yield from _module_api(request, tmp_path_factory, on_cloud)


def _module_api(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                on_cloud: Callable[[], NeutronCloud]) -> Iterator:
    """A netbay server of the module's on ``embedded-<db>``; else the cloud as ``on_cloud``
    makes it, swept at the module's end and checked to hold what it held before."""
    if request.param.startswith("embedded-"):
        from conftest import module_server, new_database_url, shared_server, shares_server

        if shares_server(request):   # a module marked ``shared_server``: its worker's server
            yield from shared_server(request.param.removeprefix("embedded-"), request, tmp_path_factory)
            return
        url = new_database_url(request.param.removeprefix("embedded-"), request, tmp_path_factory)
        with module_server(url, request, tmp_path_factory) as srv:
            yield srv
        return
    cloud = on_cloud()
    before = cloud.snapshot()
    try:
        yield cloud
    finally:
        cloud.sweep(before)
        after = cloud.snapshot()
        cloud.root.close()
    assert after == before


class NeutronCloud:
    """The cloud's Keystone and Neutron as one module's API tests see them: what they use
    of ``tests.conftest.Server`` (``connect``, ``make_user``, ``token``, ``http``,
    ``network_url``, ``cli_env``), with the module's admin (admin role) and every user in
    projects of the module's own; :meth:`sweep` removes what the module made."""

    kind = "openstack"

    def __init__(self, cloud) -> None:
        self.cloud = cloud
        self.root = cloud.connection()   # the cloud's own admin: sees, and sweeps, every project
        self.auth_url, self.network_url = cloud.auth_url, f"{cloud.network_url}/v2.0"
        self.projects: dict[str, str] = {}   # name -> id
        self.users: list[str] = []
        self._clients: list = [self.root]
        self.admin_user, self.admin_password, self.admin_project = self.make_user(role="admin")

    def make_user(self, project: str | None = None, role: str = "member") -> tuple[str, str, str]:
        """A fresh user with ``role`` on ``project`` (made, and swept, if new); (user, password, project)."""
        ident = self.root.identity
        project = project or "p-" + uuid.uuid4().hex[:8]
        if project not in self.projects:
            self.projects[project] = ident.create_project(name=project, domain_id="default").id
        user, password = "u-" + uuid.uuid4().hex[:8], "pw-" + uuid.uuid4().hex[:8]
        made = ident.create_user(name=user, password=password, domain_id="default",
                                 default_project_id=self.projects[project])
        self.users.append(made.id)
        ident.assign_project_role_to_user(self.projects[project], made.id, ident.find_role(role).id)
        return user, password, project

    def _who(self, user: str | None, password: str | None, project: str | None) -> dict[str, str]:
        return {"user": user or self.admin_user, "password": password or self.admin_password,
                "project": project or self.admin_project}

    def connect(self, user: str | None = None, password: str | None = None, project: str | None = None):
        conn = self.cloud.connection(**self._who(user, password, project))
        self._clients.append(conn)
        return conn

    def token(self, user: str | None = None, password: str | None = None, project: str | None = None) -> str:
        return self.connect(user, password, project).auth_token

    def http(self, token: str | None = None):
        import httpx

        client = httpx.Client(base_url=self.network_url, headers={"X-Auth-Token": token or self.token()},
                              timeout=30)
        self._clients.append(client)
        return client

    def cli_env(self) -> dict[str, str]:
        """``OS_*`` for the ``openstack`` CLI as the module's admin."""
        return {"OS_AUTH_URL": self.auth_url, "OS_USERNAME": self.admin_user, "OS_PASSWORD": self.admin_password,
                "OS_PROJECT_NAME": self.admin_project, "OS_USER_DOMAIN_NAME": "Default",
                "OS_PROJECT_DOMAIN_NAME": "Default", "OS_IDENTITY_API_VERSION": "3"}

    def snapshot(self) -> dict[str, set[str]]:
        """Every network object's id in the cloud, per kind."""
        net = self.root.network
        list(net.security_groups())   # the admin project's default group appears on first use
        return {kind: {o.id for o in getattr(net, kind)()} for kind in NEUTRON_SWEPT}

    def sweep(self, before: dict[str, set[str]]) -> None:
        """Every network object that was not there ``before`` (the module's projects', and
        those an admin made for a project Keystone never heard of), in the order Neutron
        lets it go; then the module's users and projects; then the clients but the cloud admin's."""
        net = self.root.network

        def new(kind: str) -> list:
            return [o for o in getattr(net, kind)() if o.id not in before[kind]]

        for fip in new("ips"):
            net.delete_ip(fip)
        for router in new("routers"):
            for port in net.ports(device_id=router.id):
                if port.device_owner.startswith("network:router_interface"):
                    net.remove_interface_from_router(router, port_id=port.id)
            net.delete_router(router)
        for port in new("ports"):
            net.delete_port(port)
        for network in new("networks"):
            net.delete_network(network)
        for pool in new("subnet_pools"):
            net.delete_subnet_pool(pool)
        for group in new("security_groups"):
            net.delete_security_group(group)
        for user in self.users:
            self.root.identity.delete_user(user)
        for project in self.projects.values():
            self.root.identity.delete_project(project)
        for client in self._clients[1:]:
            client.close()


class OctaviaCloud(NeutronCloud):
    """:class:`NeutronCloud` with the cloud's Octavia (``load_balancer_url``, as
    ``tests.conftest.Server``'s); :meth:`sweep` deletes the module's load balancers
    (cascade, once the provider stand-in has settled them) before the network objects."""

    def __init__(self, cloud, octavia) -> None:
        super().__init__(cloud)   # after ``octavia``: the admin's catalog lists it
        self.load_balancer_url = octavia.url

    def snapshot(self) -> dict[str, set[str]]:
        return {**super().snapshot(), "loadbalancers": {lb.id for lb in self.root.load_balancer.load_balancers()}}

    def sweep(self, before: dict[str, set[str]]) -> None:
        from openstack import exceptions as os_exc

        from netbay.backends import poll

        lbs = self.root.load_balancer
        made = [lb.id for lb in lbs.load_balancers() if lb.id not in before["loadbalancers"]]
        for lb_id in made:
            poll.until(lambda i=lb_id: lbs.get_load_balancer(i).to_dict(),
                       lambda lb: not lb["provisioning_status"].startswith("PENDING_"), 60, first=0.05, cap=0.5,
                       late=lambda lb: f"{lb['id']} still {lb['provisioning_status']}")
            lbs.delete_load_balancer(lb_id, cascade=True)
        for lb_id in made:
            def state(i: str = lb_id) -> dict:
                try:
                    return lbs.get_load_balancer(i).to_dict()
                except os_exc.NotFoundException:
                    return {"provisioning_status": "DELETED"}
            poll.until(state, lambda lb: lb["provisioning_status"] == "DELETED", 60, first=0.05, cap=0.5,
                       late=lambda lb: f"{lb.get('id')} still {lb['provisioning_status']}")
        super().sweep(before)
