"""``netbay libnetwork``: Docker's network + IPAM driver, on a socket Docker finds.

Networks, subnets and ports are made through the network backend
(:mod:`netbay.backends.aio`): ``embedded`` (default) is netbay's API at ``--url``,
authenticated as ``netbay agent`` does (OS_* variables or the openrc ``netbay up``
wrote); ``openstack`` is a cloud's Neutron (``--os-cloud NAME`` in clouds.yaml, as
``netbay up --backend openstack``), with kuryr-libnetwork's conventions for the
ports (``device_owner=kuryr:container``, bound to this host, tagged with their
endpoint). ``--prefix`` must be the dataplane agent's: the container ports are
plugged into that agent's fabric.

On a cloud, ``--plug os-vif`` (its default there) binds each port as
kuryr-libnetwork does: bound to this host's chassis (``--host``, default the hostname
ovn-controller registered), then plugged with os-vif into the cloud's Open vSwitch
(``--ovsdb``) as Neutron's ``binding:vif_type`` says (:mod:`netbay.runtime.vif`);
half-done plugs are finished at start. ``--plug fabric`` makes the pair in netbay's
fabric as on netbay's own backend (a cloud without a dataplane on this host).
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
from pathlib import Path

import typer
from rich.console import Console

from netbay.cli.agent import check_prefix, credentials
from netbay.cli.daemon import configure_logging, require_root
from netbay.cli.vifopts import host_vifs, ovs_netns_option, ovsdb_option, plug_option
from netbay.dataplane.names import PRODUCT_PREFIX

console = Console(stderr=True, soft_wrap=True)  # one line per message


def libnetwork(
    name: str = typer.Option("netbay", "--name", help="Plugin name = Docker driver name (-d NAME)."),
    url: str = typer.Option("http://127.0.0.1:9696", "--url", envvar="NETBAY_URL", help="The netbay server."),
    prefix: str = typer.Option(PRODUCT_PREFIX, "--prefix", callback=check_prefix,
                               help="The dataplane agent's namespace prefix (its fabric)."),
    host: str = typer.Option(None, "--host", help="This host's name (binding:host_id of the ports)."),
    plugin_dir: Path = typer.Option(Path("/run/docker/plugins"), "--plugin-dir",
                                    help="Where dockerd looks for plugin sockets."),
    openrc: Path = typer.Option(None, "--openrc", help="Credentials file (default: OS_* variables, "
                                                       "else the data dir's openrc)."),
    data_dir: Path = typer.Option(None, "--data-dir", envvar="NETBAY_DATA_DIR"),
    docker_host: str = typer.Option(None, "--docker-host", envvar="DOCKER_HOST",
                                    help="dockerd's socket: asked which networks and endpoints exist when "
                                         "collecting a crash's leftovers (default: unix:///run/docker.sock "
                                         "if present)."),
    grace: float = typer.Option(30.0, "--orphan-grace", min=0.5,
                                help="Seconds before a port or veth Docker does not know is collected."),
    backend: str = typer.Option(None, "--backend", envvar="NETBAY_NETWORK_BACKEND",
                                help="Where Docker's networks and ports are made: embedded (default: the netbay "
                                     "API at --url) or openstack (a cloud's Neutron)."),
    os_cloud: str = typer.Option(None, "--os-cloud", envvar="OS_CLOUD",
                                 help="clouds.yaml entry of the openstack backend's cloud."),
    device_owner: str = typer.Option(None, "--device-owner",
                                     help="device_owner of the containers' ports (default: compute:netbay on "
                                          "netbay's own backend, kuryr:container on a cloud)."),
    socket_group: str = typer.Option(None, "--socket-group",
                                     help="Make the socket 0660 to this group (default: 0600, root's only): "
                                          "whoever reaches it makes networks with the driver's credentials."),
    plug: str = plug_option(),
    ovsdb: str = ovsdb_option(),
    ovs_netns: str = ovs_netns_option(),
) -> None:
    """Serve Docker's remote NetworkDriver and IpamDriver (libnetwork plugin API v1.2)."""
    _stop_with_parent()
    from netbay import locks, unixsock
    from netbay.backends.report import chosen
    from netbay.plugins.libnetwork.server import serve, socket_path

    configure_logging(console)
    require_root(console, "the Docker driver needs root (it plugs veths into the fabric)")
    try:
        unixsock.group_id(socket_group)
        kind, cloud = chosen(backend, os_cloud)
        network, netbay_api, where = _backend(kind, cloud, url, data_dir, openrc)
        vifs, host = host_vifs(kind, plug, ovsdb, ovs_netns, host)
    except Exception as exc:  # noqa: BLE001 - bad settings, an unknown cloud: said, not a traceback
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    how = f"os-vif on {ovsdb}, host {host}" if vifs else f"prefix {prefix}"
    console.print(f"[green]netbay libnetwork[/] {socket_path(name, plugin_dir)} → {where} ({how})")
    if docker_host is None and Path("/run/docker.sock").is_socket():
        docker_host = "unix:///run/docker.sock"
    try:
        serve(network, name, prefix=prefix, host=host, netbay_api=netbay_api, device_owner=device_owner or OWNERS[kind],
              plugin_dir=plugin_dir, grace=grace, docker_host=docker_host, socket_group=socket_group, vifs=vifs)
    except locks.Held as exc:
        console.print(f"[red]error:[/] {exc}; stop it first or pick another --name")
        raise typer.Exit(1) from None


OWNERS = {"embedded": "compute:netbay", "openstack": "kuryr:container"}  # whose agent wires the port
STOP_WITH = "NETBAY_STOP_WITH"   # set by ``netbay up`` for its driver: the pid it must not outlive
PR_SET_PDEATHSIG = 1


def _stop_with_parent() -> None:
    """Started by ``netbay up``: SIGTERM when ``up`` ends, however it ends (a signal ends
    ``up`` without its ``atexit``; ``netbay down`` signals ``up`` alone)."""
    parent = os.environ.pop(STOP_WITH, None)
    if not parent or not parent.isdigit():
        return
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != int(parent):   # it ended before the kernel was asked
        os.kill(os.getpid(), signal.SIGTERM)


def _backend(kind: str, cloud: str | None, url: str, data_dir: Path | None, openrc: Path | None):  # noqa: ANN202
    """(the async network backend, netbay's own APIs or None, a description for the log)."""
    from netbay.backends.aio import open_async_backend

    if kind == "openstack":
        return open_async_backend("openstack", cloud=cloud), None, f"cloud {cloud!r}"
    network = open_async_backend("embedded", url=url, creds=credentials(data_dir, openrc))
    return network, network.api, url


def dockerd_present() -> bool:
    """Whether this host runs Docker (for ``netbay up``'s optional hook)."""
    return shutil.which("dockerd") is not None and Path("/run/docker.sock").is_socket()


def start_beside_up(openrc: Path, url: str, prefix: str,
                    network_backend: tuple[str, str | None] = ("embedded", None)) -> subprocess.Popen | None:
    """``netbay up``'s hook: the Docker driver as a child process when this host runs
    dockerd (stopped with ``up``: terminated at exit, and SIGTERM from the kernel when
    ``up`` ends otherwise — see :func:`_stop_with_parent`), on ``up``'s network backend."""
    if not dockerd_present():
        return None
    kind, cloud = network_backend
    # On a cloud: where ``up``'s user says (NETBAY_PLUG), else the fabric as before.
    on_cloud = ["--backend", kind, "--os-cloud", cloud, "--plug", os.environ.get("NETBAY_PLUG") or "fabric"] \
        if kind == "openstack" and cloud else []
    proc = subprocess.Popen([sys.executable, "-m", "netbay.cli.main", "libnetwork", "--url", url,
                             "--prefix", prefix, "--openrc", str(openrc), *on_cloud],
                            env={**os.environ, STOP_WITH: str(os.getpid())})
    atexit.register(lambda: proc.terminate() if proc.poll() is None else None)
    # The container API (same process, created after this hook) runs containers there.
    os.environ.setdefault("NETBAY_DOCKER_HOST", "unix:///run/docker.sock")
    os.environ.setdefault("NETBAY_DOCKER_DRIVER", "netbay")
    console.print("[green]Docker driver[/] `netbay` started (docker network create -d netbay --ipam-driver netbay …)")
    return proc
