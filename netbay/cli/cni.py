"""``netbay cni-daemon``: what ``netbay-cni`` hands each CNI call to, on a Unix socket.

Authenticates as ``netbay agent`` does (OS_* variables or the openrc ``netbay up``
wrote) and talks only to the netbay API. ``--prefix`` must be the dataplane
agent's: pods' ports are plugged into that agent's fabric.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import typer
from rich.console import Console

from netbay.cli.agent import check_prefix, credentials
from netbay.dataplane.names import PRODUCT_PREFIX

console = Console(stderr=True)


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
) -> None:
    """Serve the netbay-cni plugin's calls (CNI 1.0/1.1 ADD, DEL, CHECK, STATUS, GC)."""
    from netbay.dataplane.names import Names
    from netbay.plugins.cni.server import serve
    from netbay.plugins.cni.service import Cni
    from netbay.plugins.libnetwork.netbayapi import NetbayAPI
    from netbay.runtime.attach import Attacher

    logging.basicConfig(level=os.environ.get("NETBAY_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    if os.geteuid() != 0:
        console.print("[red]error:[/] the CNI daemon needs root (it plugs veths into pods' namespaces)")
        raise typer.Exit(1)
    try:
        creds = credentials(data_dir, openrc)
    except ValueError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    console.print(f"[green]netbay cni-daemon[/] {socket_path} → {url} (prefix {prefix})")
    serve(Cni(NetbayAPI(url, creds), Attacher(Names(prefix)), host), socket_path)


def cni_install(
    bin_dir: Path = typer.Option(Path("/opt/cni/bin"), "--bin-dir", help="A directory of the runtime's CNI_PATH."),
) -> None:
    """Install the netbay-cni plugin executable (a fast launcher of this netbay)."""
    from netbay.plugins.cni.launcher import install

    console.print(f"[green]installed[/] {install(bin_dir)}")
