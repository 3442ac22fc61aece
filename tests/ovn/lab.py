"""A real OVN dataplane for tests: OVN central and N hypervisors, all in namespaces.

Layout (every namespace named ``nbt<hex>l<n>-…``: the run's id from
tests/dataplane/dp_helpers.py and the lab's number — not the run's dataplane prefix
``nbt<hex>-``, which tests/dataplane's guard sweeps while a shared lab runs on):

- ``<prefix>ovnc``: NB and SB ``ovsdb-server`` (Unix sockets in the lab's temp dir, which
  the chassis reach through the shared filesystem) and ``ovn-northd``.
- ``<prefix>ul``: the underlay, a Linux bridge joining the hypervisors.
- ``<prefix>hv<i>``: a hypervisor — its own ``ovsdb-server``, ``ovs-vswitchd`` (userspace
  datapath) and ``ovn-controller``. Userspace tunnels need the tunnel endpoint on an OVS
  bridge's internal port, so ``br-phy`` (netdev) holds the encap IP and has the veth to
  the underlay as uplink; ovn-controller makes ``br-int`` (netdev) and the Geneve ports.
- ``<prefix>c<n>``: a "container" whose veth's other end is a port of a hypervisor's
  ``br-int`` carrying ``external_ids:iface-id`` of a logical switch port.

No kernel module is needed or loaded (``datapath_type=netdev``); nothing is created in
the root namespace; every daemon is stopped by PID in :meth:`OvnLab.stop`.
"""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from netbay.dataplane import netns
from netbay.runtime.vif import checksum_in_software
from tests.dataplane.dp_helpers import RUN_ID

from .daemons import (BINARIES, NB_SCHEMA, OVS_SCHEMA, SB_SCHEMA, Daemon, create_db, ctl,
                      processes_under, spawn, wait_for)

UNDERLAY = "10.9.250.{}"  # encap IPs, one per hypervisor, on br-phy
ENCAP_TYPE = "geneve"
PHYSNET, OUTSIDE = "physnet1", "172.24.4.1/24"   # the external network's physnet; the outside's address on it


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None]


_labs = itertools.count(1)


def _free_prefix() -> str:
    """``nbt<run id>l<n>-`` with no namespace yet: this module may be imported twice in one
    process (as ``tests.ovn.lab`` and, by pytest, as ``ovn.lab``), each with a counter."""
    while netns.list(prefix := f"nbt{RUN_ID}l{next(_labs)}-"):
        pass
    return prefix


def _ip(*args: str) -> str:
    p = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)
    if p.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)} -> rc {p.returncode}: {p.stderr.strip()}")
    return p.stdout


@dataclass
class Hypervisor:
    index: int
    ns: str
    dir: Path
    encap_ip: str
    daemons: list[Daemon] = field(default_factory=list)

    @property
    def chassis(self) -> str:
        return self.ns  # system-id: the namespace name, so it carries the run id

    @property
    def ovsdb(self) -> str:
        """Its Open vSwitch database, as an OVSDB remote (for ovs-vsctl, ovsdbapp, os-vif)."""
        return f"unix:{self.dir / 'db.sock'}"

    @property
    def uplink(self) -> str:
        return f"u{self.index}{RUN_ID}"

    def uplink_tx_packets(self) -> int:
        """Packets the hypervisor sent into the underlay (kernel counter of br-phy's uplink)."""
        link = json.loads(_ip("-n", self.ns, "-s", "-j", "link", "show", self.uplink))[0]
        return link["stats64"]["tx"]["packets"]

    def vsctl(self, *args: str, **kw) -> str:
        return ctl(self.ns, self.dir, "ovs-vsctl", f"--db={self.ovsdb}",
                   "--timeout=20", *args, **kw)

    def appctl(self, daemon: str, *args: str) -> str:
        target = next(d.ctl for d in self.daemons if d.name == daemon)
        return ctl(self.ns, self.dir, "ovs-appctl", "-t", str(target), *args)


@dataclass
class Container:
    ns: str
    hv: Hypervisor
    port: str  # the logical switch port (iface-id)
    mac: str
    ip: str
    host_end: str = ""  # the veth end in br-int


class OvnLab:
    """Start with :meth:`start`, always end with :meth:`stop` (idempotent)."""

    def __init__(self, hypervisors: int = 2) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=f"nbt{RUN_ID}-ovn-"))
        # Several labs may live in one run. The run's id, not its dataplane prefix: a lab
        # lives through the session (fixtures.py), beside tests that sweep that prefix.
        self.prefix = _free_prefix()
        self.central_ns = f"{self.prefix}ovnc"
        self.underlay_ns = f"{self.prefix}ul"
        self.bridge = f"ulbr{RUN_ID}"
        self.central: list[Daemon] = []
        self.hvs = [Hypervisor(i, f"{self.prefix}hv{i}", self.dir / f"hv{i}", UNDERLAY.format(i))
                    for i in range(1, hypervisors + 1)]
        self.containers: list[Container] = []
        self._container_numbers = itertools.count(1)
        self.namespaces: list[str] = []
        self.outside: str | None = None         # the outside's namespace, once add_outside made it
        self._outside_as: tuple[Hypervisor, str, str] | None = None   # (hv, physnet, address) it was made with

    # --- clients -----------------------------------------------------------------------

    @property
    def nb_sock(self) -> Path:
        return self.dir / "central" / "nb.sock"

    @property
    def sb_sock(self) -> Path:
        return self.dir / "central" / "sb.sock"

    @property
    def nb_remote(self) -> str:
        """The NB database as an OVSDB remote (for ovn-nbctl, ovsdbapp, Neutron's ML2/OVN)."""
        return f"unix:{self.nb_sock}"

    @property
    def sb_remote(self) -> str:
        return f"unix:{self.sb_sock}"

    def nbctl(self, *args: str, **kw) -> str:
        return ctl(self.central_ns, self.dir / "central", "ovn-nbctl", f"--db={self.nb_remote}",
                   "--timeout=30", *args, **kw)

    def sbctl(self, *args: str, **kw) -> str:
        return ctl(self.central_ns, self.dir / "central", "ovn-sbctl", f"--db={self.sb_remote}",
                   "--timeout=30", *args, **kw)

    def sync(self) -> None:
        """Wait until every chassis has applied the NB's current state to its flows."""
        self.nbctl("--wait=hv", "sync")

    def daemons(self) -> list[Daemon]:
        return self.central + [d for hv in self.hvs for d in hv.daemons]

    # --- start -------------------------------------------------------------------------

    def _netns(self, name: str) -> str:
        netns.create(name)
        self.namespaces.append(name)
        _ip("-n", name, "link", "set", "lo", "up")
        return name

    def start(self) -> OvnLab:
        self._start_central()
        self._netns(self.underlay_ns)
        _ip("-n", self.underlay_ns, "link", "add", self.bridge, "type", "bridge")
        _ip("-n", self.underlay_ns, "link", "set", self.bridge, "up")
        for hv in self.hvs:
            self._start_hypervisor(hv)
        wait_for("every chassis registered in the SB",
                 lambda: set(self.sbctl("--bare", "--columns=name", "list", "Chassis").split())
                 >= {hv.chassis for hv in self.hvs}, 60, self.daemons())
        for hv in self.hvs:  # ovn-controller makes br-int (netdev) once it reads the SB
            wait_for(f"{hv.ns} br-int", lambda hv=hv: hv.vsctl("br-exists", "br-int", check=False) == ""
                     and "br-int" in hv.vsctl("list-br").split(), 60, hv.daemons)
        return self

    def _start_central(self) -> None:
        ns, run = self._netns(self.central_ns), self.dir / "central"
        run.mkdir(parents=True)
        for name, schema, sock in (("nb", NB_SCHEMA, self.nb_sock), ("sb", SB_SCHEMA, self.sb_sock)):
            create_db(ns, run / f"{name}.db", schema)
            self.central.append(spawn(f"ovsdb-server-{name}", ns, run, [
                "ovsdb-server", f"--remote=punix:{sock}", str(run / f"{name}.db")]))
        wait_for("NB and SB sockets", lambda: self.nb_sock.is_socket() and self.sb_sock.is_socket(),
                 20, self.central)
        self.central.append(spawn("ovn-northd", ns, run, [
            "ovn-northd", f"--ovnnb-db=unix:{self.nb_sock}", f"--ovnsb-db=unix:{self.sb_sock}"]))

    def _start_hypervisor(self, hv: Hypervisor) -> None:
        ns, run = self._netns(hv.ns), hv.dir
        run.mkdir(parents=True)
        create_db(ns, run / "conf.db", OVS_SCHEMA)
        sock = run / "db.sock"
        hv.daemons.append(spawn("ovsdb-server", ns, run, [
            "ovsdb-server", f"--remote=punix:{sock}", "--remote=db:Open_vSwitch,Open_vSwitch,manager_options",
            str(run / "conf.db")]))
        wait_for(f"{hv.ns} ovsdb socket", sock.is_socket, 20, hv.daemons)
        hv.vsctl("--no-wait", "init")
        hv.daemons.append(spawn("ovs-vswitchd", ns, run, ["ovs-vswitchd", f"unix:{sock}"]))
        # The underlay: uplink veth (made in the hypervisor, peer moved straight into the
        # underlay namespace: never in the root one) as a port of br-phy.
        uplink, peer = hv.uplink, f"h{hv.index}{RUN_ID}"
        _ip("-n", ns, "link", "add", uplink, "type", "veth", "peer", "name", peer,
            "netns", self.underlay_ns)
        _ip("-n", self.underlay_ns, "link", "set", peer, "master", self.bridge, "up")
        _ip("-n", ns, "link", "set", uplink, "up")
        hv.vsctl("add-br", "br-phy", "--", "set", "Bridge", "br-phy", "datapath_type=netdev",
                 "--", "add-port", "br-phy", uplink)
        _ip("-n", ns, "addr", "add", f"{hv.encap_ip}/24", "dev", "br-phy")
        _ip("-n", ns, "link", "set", "br-phy", "up")
        hv.vsctl("set", "Open_vSwitch", ".",
                 f"external_ids:system-id={hv.chassis}",
                 f"external_ids:hostname={hv.chassis}",
                 f"external_ids:ovn-remote={self.sb_remote}",
                 f"external_ids:ovn-encap-type={ENCAP_TYPE}",
                 f"external_ids:ovn-encap-ip={hv.encap_ip}",
                 "external_ids:ovn-bridge-datapath-type=netdev")
        hv.daemons.append(spawn("ovn-controller", ns, run, ["ovn-controller", f"unix:{sock}"],
                                  unixctl=False))

    # --- the outside -------------------------------------------------------------------

    def add_outside(self, hv: Hypervisor, physnet: str = PHYSNET, address: str = OUTSIDE) -> str:
        """An external (provider) network on ``hv``: ``br-ex`` (netdev) mapped to ``physnet``
        (``ovn-bridge-mappings``), ``hv`` made a gateway chassis (``ovn-cms-options=
        enable-chassis-as-gw``, where ML2/OVN schedules routers' gateway ports), and a
        namespace standing for the outside on br-ex's other side, ``address`` on its
        ``oeth0``. Returns that namespace (deleted with the lab). Made once: the lab is
        shared by the tests of a run, so a second call (same ``hv``) returns the first
        one's namespace."""
        if self.outside is not None and self._outside_as is not None:
            made_on, made_physnet, made_address = self._outside_as
            if (made_on.ns, made_physnet, made_address) != (hv.ns, physnet, address):
                raise ValueError(f"the lab's outside is on {made_on.ns} ({made_physnet}, {made_address}), "
                                 f"not on {hv.ns} ({physnet}, {address})")
            return self.outside
        ns = self._netns(f"{self.prefix}out")
        port = f"x{hv.index}{RUN_ID}"
        _ip("-n", hv.ns, "link", "add", port, "type", "veth", "peer", "name", "oeth0", "netns", ns)
        _ip("-n", hv.ns, "link", "set", port, "up")
        _ip("-n", ns, "addr", "add", address, "dev", "oeth0")
        _ip("-n", ns, "link", "set", "oeth0", "up")
        checksum_in_software(ns, "oeth0")
        hv.vsctl("add-br", "br-ex", "--", "set", "Bridge", "br-ex", "datapath_type=netdev",
                 "--", "add-port", "br-ex", port)
        _ip("-n", hv.ns, "link", "set", "br-ex", "up")
        hv.vsctl("set", "Open_vSwitch", ".", f"external_ids:ovn-bridge-mappings={physnet}:br-ex",
                 "external_ids:ovn-cms-options=enable-chassis-as-gw")
        wait_for(f"{hv.chassis} a gateway chassis in the SB",
                 lambda: "enable-chassis-as-gw" in self.sbctl("--bare", "--columns=other_config", "find", "Chassis",
                                                               f"name={hv.chassis}"), 30, hv.daemons)
        self.outside, self._outside_as = ns, (hv, physnet, address)
        return ns

    # --- containers --------------------------------------------------------------------

    def add_container(self, hv: Hypervisor, port: str, mac: str, ip_cidr: str,
                      mtu: int = 1400, vm_uuid: str | None = None, plug: bool = True) -> Container:
        """A namespace with ``ceth0`` (``mac``, ``ip_cidr``) whose veth peer is a port of
        ``hv``'s br-int bound to logical port ``port`` the way os-vif plugs it (with
        ``vm_uuid``, the ``vm-uuid`` os-vif sets from the instance). Without ``plug``
        the veth's host end is left out of br-int, for os-vif itself to plug."""
        n = next(self._container_numbers)  # never reused: containers may be removed
        ns = self._netns(f"{self.prefix}c{n}")
        host_end = f"c{n}{RUN_ID}"
        _ip("-n", hv.ns, "link", "add", host_end, "mtu", str(mtu), "type", "veth", "peer", "name",
            "ceth0", "netns", ns)
        _ip("-n", ns, "link", "set", "ceth0", "address", mac, "mtu", str(mtu), "up")
        _ip("-n", ns, "addr", "add", ip_cidr, "dev", "ceth0")
        _ip("-n", hv.ns, "link", "set", host_end, "up")
        checksum_in_software(ns, "ceth0")
        if plug:
            hv.vsctl("add-port", "br-int", host_end, "--", "set", "Interface", host_end,
                     f"external_ids:iface-id={port}", f"external_ids:attached-mac={mac}",
                     "external_ids:iface-status=active",
                     *([f"external_ids:vm-uuid={vm_uuid}"] if vm_uuid else []))
        box = Container(ns, hv, port, mac, ip_cidr.split("/")[0], host_end)
        self.containers.append(box)
        return box

    def remove_container(self, box: Container) -> None:
        """Unplug ``box`` from its br-int and delete its namespace (the veth goes with it)."""
        box.hv.vsctl("--if-exists", "del-port", "br-int", box.host_end)
        netns.delete(box.ns)
        self.namespaces.remove(box.ns)
        self.containers.remove(box)

    def bound_chassis(self, port: str) -> str | None:
        """The name of the chassis the SB's Port_Binding of ``port`` names, or None."""
        uuid = self.sbctl("--bare", "--columns=chassis", "find", "Port_Binding",
                          f"logical_port={port}")
        if not uuid:
            return None
        return self.sbctl("--bare", "--columns=name", "list", "Chassis", uuid) or None

    # --- stop --------------------------------------------------------------------------

    def stop(self) -> list[str]:
        """Stop every daemon by PID (controllers first, databases last), delete the
        namespaces and the temp dir. Returns problems (daemons of the run still alive)."""
        for hv in self.hvs:
            for d in reversed(hv.daemons):
                d.stop()
        for d in reversed(self.central):
            d.stop()
        for name in reversed(self.namespaces):
            netns.delete(name)
        left = processes_under(self.dir)
        problems = [f"still running: pid {pid} {cmd}" for pid, cmd in left]
        problems += [f"not stopped: {d.name} pid {d.pid}" for d in self.daemons() if d.alive()]
        if not problems:
            shutil.rmtree(self.dir, ignore_errors=True)
        return problems


@dataclass
class Pair:
    """Two containers on one logical switch, each on its own chassis."""
    switch: str
    a: Container
    b: Container


def plug_pair(lab: OvnLab, switch: str = "ls0") -> Pair:
    """Logical switch ``switch`` with one port on each of the first two chassis, each
    plugged into a container (10.9.1.1 and .2), and the chassis synced."""
    lab.nbctl("ls-add", switch)
    boxes = []
    for i, hv in enumerate(lab.hvs[:2], start=1):
        port, mac, ip = f"{switch}-p{i}", f"02:00:0a:09:01:{i:02x}", f"10.9.1.{i}"
        lab.nbctl("lsp-add", switch, port)
        lab.nbctl("lsp-set-addresses", port, f"{mac} {ip}")
        boxes.append(lab.add_container(hv, port, mac, f"{ip}/24"))
    lab.sync()
    return Pair(switch, *boxes)
