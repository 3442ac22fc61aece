"""``netbay libnetwork``: Docker's network + IPAM driver, on a socket Docker finds.

Authenticates as ``netbay agent`` does (OS_* variables or the openrc ``netbay up``
wrote) and talks only to the netbay API. ``--prefix`` must be the dataplane
agent's: the container ports are plugged into that agent's fabric.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import typer
from rich.console import Console

from netbay.cli.agent import check_prefix, credentials
from netbay.dataplane.names import PRODUCT_PREFIX

console = Console(stderr=True)


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
) -> None:
    """Serve Docker's remote NetworkDriver and IpamDriver (libnetwork plugin API v1.2)."""
    from netbay.plugins.libnetwork.netbayapi import NetbayAPI
    from netbay.plugins.libnetwork.server import serve, socket_path

    logging.basicConfig(level=os.environ.get("NETBAY_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per API call otherwise
    if os.geteuid() != 0:
        console.print("[red]error:[/] the Docker driver needs root (it plugs veths into the fabric)")
        raise typer.Exit(1)
    try:
        creds = credentials(data_dir, openrc)
    except ValueError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    console.print(f"[green]netbay libnetwork[/] {socket_path(name, plugin_dir)} → {url} (prefix {prefix})")
    if docker_host is None and Path("/run/docker.sock").is_socket():
        docker_host = "unix:///run/docker.sock"
    serve(NetbayAPI(url, creds), name, prefix=prefix, host=host, plugin_dir=plugin_dir, grace=grace,
          docker_host=docker_host)


def dockerd_present() -> bool:
    """Whether this host runs Docker (for ``netbay up``'s optional hook)."""
    return shutil.which("dockerd") is not None and Path("/run/docker.sock").is_socket()


def start_beside_up(openrc: Path, url: str, prefix: str) -> subprocess.Popen | None:
    """``netbay up``'s hook: the Docker driver as a child process when this host runs
    dockerd (stopped with ``up``: it is in ``up``'s process group, and killed at exit)."""
    if not dockerd_present():
        return None
    proc = subprocess.Popen([sys.executable, "-m", "netbay.cli.main", "libnetwork", "--url", url,
                             "--prefix", prefix, "--openrc", str(openrc)])
    atexit.register(lambda: proc.poll() is None and proc.terminate())
    # The container API (same process, created after this hook) runs containers there.
    os.environ.setdefault("NETBAY_DOCKER_HOST", "unix:///run/docker.sock")
    os.environ.setdefault("NETBAY_DOCKER_DRIVER", "netbay")
    console.print("[green]Docker driver[/] `netbay` started (docker network create -d netbay --ipam-driver netbay …)")
    return proc
