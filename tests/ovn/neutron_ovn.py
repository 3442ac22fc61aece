"""A real Neutron with ML2/OVN on the OVN lab: the peers' Keystone and Neutron API
server (``tests/peers/openstack_cloud.py``, same virtualenv, same start/stop by PID),
with the ``ovn`` mechanism driver pointed at the lab's NB and SB databases.

- Tenant networks are Geneve (what the lab's chassis tunnel with); flat is allowed for
  provider networks. L3 is OVN's own (``ovn-router``, gateway chassis by
  ``ovn_l3_scheduler``).
- No message bus: ``transport_url = fake:/`` as for the API-only peers; ML2/OVN talks
  to OVN over OVSDB, never over RPC, and no agent is involved.
- The API server (uWSGI) runs no maintenance worker (that is the separate
  ``neutron-ovn-maintenance-worker``, not started), so ``neutron_sync_mode = off``:
  there is nothing to sync on a fresh NB, and no worker would do it.
- On PostgreSQL, not SQLite: ML2/OVN writes from three threads of the one API process
  (requests; its OVSDB event thread, which sets a port's status when OVN reports it
  up or down; the hash ring's heartbeat, which the NB connection thread itself
  writes). On SQLite one writer locks the whole file: the event thread holds it while
  its NB transaction waits for the connection thread, which waits for the lock to
  heartbeat — a deadlock broken only by timeouts, and a port create fails with
  "database is locked" (HTTP 500, Neutron deletes the port). The driver (psycopg) is
  installed beside the peers' virtualenv (``pip --target``), not into it.
- Metadata and DHCP agents do not exist here: ``ovn_metadata_enabled = false``;
  OVN's native DHCP options are written but the tests address ports statically.
"""

from __future__ import annotations

import contextlib
import fcntl
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.peers.openstack_cloud import INSTALL_TIMEOUT, Cloud, install, openstack_cloud, peers_dir

from .lab import OvnLab

GENEVE_VNIS = "1:65535"
DB_DRIVERS = ("psycopg==3.3.9", "psycopg-binary==3.3.9")  # as netbay's own driver


def ml2_ovn(lab: OvnLab) -> str:
    """``ml2_conf.ini`` for ML2/OVN against ``lab``."""
    return f"""[ml2]
type_drivers = geneve,flat
tenant_network_types = geneve
mechanism_drivers = ovn
extension_drivers = port_security,tag_ports_during_bulk_creation
overlay_ip_version = 4
[ml2_type_geneve]
vni_ranges = {GENEVE_VNIS}
max_header_size = 38
[ml2_type_flat]
flat_networks = *
[ovn]
ovn_nb_connection = {lab.nb_remote}
ovn_sb_connection = {lab.sb_remote}
ovn_l3_scheduler = leastloaded
neutron_sync_mode = off
ovn_metadata_enabled = false
enable_distributed_floating_ip = false
ovsdb_connection_timeout = 30
"""


def db_driver_dir() -> Path:
    """A directory with the PostgreSQL driver for the peers' Python, made on first use
    (``--no-deps``: its one dependency, typing_extensions, is in the peers' venv)."""
    venv = install()
    root = peers_dir() / "pg-driver"
    root.mkdir(parents=True, exist_ok=True)
    target, stamp = root / "site", root / "installed"
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (stamp.exists() and stamp.read_text() == " ".join(DB_DRIVERS)):
            subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
                            "--no-deps", "--upgrade", "--target", str(target), *DB_DRIVERS],
                           check=True, timeout=INSTALL_TIMEOUT)
            stamp.write_text(" ".join(DB_DRIVERS))
    return target


@contextlib.contextmanager
def ovn_neutron(lab: OvnLab, work: Path, db_url: str) -> Iterator[Cloud]:
    """Keystone and Neutron (ML2/OVN on ``lab``, its database ``db_url``, an empty
    PostgreSQL database) for the length of the ``with``."""
    with openstack_cloud(work, ml2=ml2_ovn(lab), service_plugins="ovn-router", neutron_db=db_url,
                         neutron_env={"PYTHONPATH": str(db_driver_dir())}) as cloud:
        yield cloud
