"""What ``netbay up`` does before serving: schema, admin, ``public`` network, openrc."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import create_engine, select, text
from sqlalchemy.pool import NullPool
from sqlalchemy.orm import Session

from netbay.cli.settings import Settings
from netbay.context import Context
from netbay.identity.service import ADMIN_PASSWORD_FILE, Identity
from netbay.store import migrate
from netbay.store.db import Store
from netbay.store.models import Network, Port, Subnet

PUBLIC_NETWORK = "public"
PUBLIC_CIDR = "172.24.4.0/24"
# device_owner of the port that plays the outside world on an external network
EXTERNAL_OWNER = "netbay:external"
BOOTSTRAP_LOCK_KEY = 0x6E65_7462_6179_0002  # "netbay", 2: pg_advisory_lock's key for start-up


def prepare(settings: Settings, host: str, port: int, agent_prefix: str | None = None) -> Path:
    with _one_at_a_time(settings.database_url):
        migrate.upgrade(settings.database_url)
        store = Store(settings.database_url)
        try:
            Identity(store).bootstrap(settings.data_dir)
            ensure_public_network(store)
        finally:
            store.dispose()
    return write_openrc(settings.data_dir, host, port, agent_prefix)


@contextmanager
def _one_at_a_time(database_url: str) -> Iterator[None]:
    """Several ``netbay up`` starting at once on one PostgreSQL: one migrates and
    bootstraps, the next finds it done (a session advisory lock; SQLite's own write
    lock already serialises them)."""
    if database_url.startswith("sqlite"):
        yield
        return
    engine = create_engine(database_url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            conn.execute(text(f"SELECT pg_advisory_lock({BOOTSTRAP_LOCK_KEY})"))
            yield  # released when the connection closes, also on error
    finally:
        engine.dispose()


def ensure_public_network(store: Store, cidr: str = PUBLIC_CIDR) -> None:
    """The embedded external network floating IPs and router gateways come from."""
    from netbay.network.registry import NETWORKS, SUBNETS
    from netbay.network.subnets import SubnetCreate

    ctx = Context.admin()
    with store.write() as s:
        net = s.scalars(select(Network).where(Network.name == PUBLIC_NETWORK, Network.external)).first()
        if net is None:
            net = NETWORKS.create(s, ctx, NETWORKS.create_body.model_validate(
                {"name": PUBLIC_NETWORK, "router:external": True, "shared": False}))
            SUBNETS.create(s, ctx, SubnetCreate.model_validate(
                {"name": f"{PUBLIC_NETWORK}-subnet", "network_id": net.id, "cidr": cidr,
                 "ip_version": 4, "enable_dhcp": False}))
        ensure_outside_port(s, net)


def ensure_outside_port(session: Session, network: Network) -> None:
    """The port that plays the outside world on an external network: it holds the
    subnet's gateway address, so routers' default routes lead somewhere (the
    dataplane wires it into the network's ``external`` namespace). Idempotent."""
    from netbay.network.ports import create_port
    from netbay.network.registry import PORTS

    if session.scalars(select(Port.id).where(Port.network_id == network.id,
                                             Port.device_owner == EXTERNAL_OWNER)).first():
        return
    subnet = session.scalars(select(Subnet).where(Subnet.network_id == network.id, Subnet.ip_version == 4,
                                                  Subnet.gateway_ip.is_not(None))
                             .order_by(Subnet.created_at)).first()
    if subnet is None:
        return
    port = create_port(session, project_id=network.project_id, network=network,
                       fixed_ips=[{"subnet_id": subnet.id, "ip_address": subnet.gateway_ip}],
                       allow_gateway=True, security_groups=[], port_security_enabled=False,
                       device_owner=EXTERNAL_OWNER, device_id=network.id, name=f"{network.name}-outside")
    PORTS.record(session, port, "create")


def write_openrc(data_dir: Path, host: str, port: int, agent_prefix: str | None = None) -> Path:
    """An openrc with OS_* variables for the admin user; 0600 as it holds a secret.

    It also names this instance for netbay's own commands: the data dir (``netbay
    down``) and the agent's namespace prefix (``pod exec``, ``cluster connectivity``…)."""
    connect_host = "127.0.0.1" if host in {"0.0.0.0", "::"} else host
    password = os.environ.get("NETBAY_ADMIN_PASSWORD")
    password_line = (
        f"export OS_PASSWORD='{password}'" if password
        else f'export OS_PASSWORD="$(cat {data_dir / ADMIN_PASSWORD_FILE})"'
    )
    text = "\n".join([
        "# netbay admin credentials: source this file, then use netbay or openstack commands",
        f"export OS_AUTH_URL=http://{connect_host}:{port}/identity/v3",
        "export OS_IDENTITY_API_VERSION=3",
        "export OS_USERNAME=admin",
        password_line,
        "export OS_PROJECT_NAME=admin",
        "export OS_USER_DOMAIN_NAME=Default",
        "export OS_PROJECT_DOMAIN_NAME=Default",
        "export OS_REGION_NAME=RegionOne",
        "unset OS_CLOUD",
        f"export NETBAY_DATA_DIR='{data_dir}'",
        f"export NETBAY_AGENT_PREFIX='{agent_prefix}'" if agent_prefix else "unset NETBAY_AGENT_PREFIX",
        "",
    ])
    path = data_dir / "openrc"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path
