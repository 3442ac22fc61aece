"""``netbay cni-daemon``: what ``netbay-cni`` hands each CNI call to, on a Unix socket.

Pods' ports are made through the network backend (:mod:`netbay.backends`):
``embedded`` (default) is the netbay API, authenticated as ``netbay agent`` does
(OS_* variables or the openrc ``netbay up`` wrote); ``openstack`` is a cloud's
Neutron (``--os-cloud NAME`` in clouds.yaml), with kuryr's conventions for the
ports (``device_owner=compute:kuryr``, bound to this host). ``--prefix`` must be
the dataplane agent's: pods' ports are plugged into that agent's fabric. On the
embedded backend the daemon also follows netbay's change feed (an admin's credentials,
as the agent's), so that CHECK reads its ports from memory
(:mod:`netbay.plugins.cni.watch`); without it every CHECK asks the API.

On a cloud, ``--plug os-vif`` (its default there) binds each port as kuryr does: bound
to this host's chassis name (``--host``, default the hostname ovn-controller registered),
plugged with os-vif into the cloud's Open vSwitch (``--ovsdb``) as Neutron's
``binding:vif_type`` says (:mod:`netbay.runtime.vif`); on start, half-done plugs are
finished. ``--plug fabric`` keeps the host ends in netbay's fabric namespace (a cloud
without a dataplane on this host: nothing wires them).
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from netbay.cli.agent import check_prefix, credentials
from netbay.cli.daemon import configure_logging, require_root
from netbay.cli.vifopts import host_vifs, ovs_netns_option, ovsdb_option, plug_option
from netbay.dataplane.names import PRODUCT_PREFIX

console = Console(stderr=True, soft_wrap=True)  # one line per message
API_TIMEOUT = 5.0   # a runtime waits on every call: an answer or a clear error, never a hang


def cni_daemon(
    socket_path: Path = typer.Option(Path("/run/netbay/cni.sock"), "--socket", envvar="NETBAY_CNI_SOCKET",
                                     help="Where netbay-cni finds this daemon (or \"socket\" in the CNI config)."),
    url: str = typer.Option("http://127.0.0.1:9696", "--url", envvar="NETBAY_URL", help="The netbay server."),
    prefix: str = typer.Option(PRODUCT_PREFIX, "--prefix", callback=check_prefix,
                               help="The dataplane agent's namespace prefix (its fabric)."),
    host: str = typer.Option(None, "--host", help="This host's name (binding:host_id of the ports)."),
    openrc: Path = typer.Option(None, "--openrc", help="Credentials file (default: OS_* variables, "
                                                       "else the data dir's openrc)."),
    data_dir: Path = typer.Option(None, "--data-dir", envvar="NETBAY_DATA_DIR"),
    backend: str = typer.Option(None, "--backend", envvar="NETBAY_NETWORK_BACKEND",
                                help="Where pods' ports are made: embedded (default: the netbay API at --url) "
                                     "or openstack (a cloud's Neutron)."),
    os_cloud: str = typer.Option(None, "--os-cloud", envvar="OS_CLOUD",
                                 help="clouds.yaml entry of the openstack backend's cloud."),
    plug: str = plug_option(),
    ovsdb: str = ovsdb_option(),
    ovs_netns: str = ovs_netns_option(),
    socket_group: str = typer.Option(None, "--socket-group",
                                     help="Make the socket 0660 to this group (default: 0600, root's only): "
                                          "whoever reaches it plugs pods' ports."),
) -> None:
    """Serve the netbay-cni plugin's calls (CNI 1.0/1.1 ADD, DEL, CHECK, STATUS, GC)."""
    from netbay import locks, unixsock
    from netbay.backends.report import chosen
    from netbay.dataplane.names import Names
    from netbay.plugins.cni.server import serve
    from netbay.plugins.cni.service import Cni
    from netbay.runtime.attach import Attacher

    configure_logging(console)
    require_root(console, "the CNI daemon needs root (it plugs veths into pods' namespaces)")
    try:
        unixsock.group_id(socket_group)
        kind, cloud = chosen(backend, os_cloud)
        network, owner, where, feed = _backend(kind, cloud, url, data_dir, openrc)
        vifs, host = host_vifs(kind, plug, ovsdb, ovs_netns, host)
    except Exception as exc:  # noqa: BLE001 - bad settings, an unknown cloud: said, not a traceback
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    how = f"os-vif on {ovsdb}, host {host}" if vifs else f"prefix {prefix}"
    console.print(f"[green]netbay cni-daemon[/] {socket_path} → {where} ({how})")
    try:
        serve(Cni(network, Attacher(Names(prefix)), host, owner=owner, vifs=vifs, feed=feed), socket_path,
              socket_group)
    except locks.Held as exc:
        console.print(f"[red]error:[/] {exc}; stop it first or pick another --socket")
        raise typer.Exit(1) from None


def _backend(kind: str, cloud: str | None, url: str, data_dir: Path | None, openrc: Path | None):  # noqa: ANN202
    """(the backend, the pods' ports' ``device_owner``, a description, the client of
    netbay's change feed that CHECK's port watch follows — None on a cloud)."""
    from netbay.backends import open_backend
    from netbay.dataplane.fabric import CONTAINER, KURYR_POD

    if kind == "openstack":
        if not cloud:
            raise ValueError("--backend openstack needs --os-cloud NAME (or OS_CLOUD): a clouds.yaml entry")
        return open_backend("openstack", cloud=cloud), KURYR_POD, f"cloud {cloud!r}", None
    from netbay.client import Api
    from netbay.backends.http import HttpBackend

    creds = credentials(data_dir, openrc)
    api = Api(url, creds.token, timeout=API_TIMEOUT)
    return HttpBackend(api), CONTAINER, url, api


def cni_install(
    bin_dir: Path = typer.Option(Path("/opt/cni/bin"), "--bin-dir", help="A directory of the runtime's CNI_PATH."),
    python_launcher: bool = typer.Option(False, "--python-launcher",
                                         help="Install the Python launcher even when a C compiler can build "
                                              "the compiled one."),
) -> None:
    """Install the netbay-cni plugin executable (a fast launcher of this netbay)."""
    from netbay.plugins.cni.launcher import install, is_compiled

    path = install(bin_dir, compiled=not python_launcher)
    how = "compiled launcher" if is_compiled(path) else "Python launcher: python -I -S, ~10 ms more per call"
    console.print(f"[green]installed[/] {path} ({how})")
