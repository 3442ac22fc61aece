"""``netbay tap capture``: write what a tap service receives to a pcap file, in one line.

The tap service's port is where the fabric puts the mirrored copies (tap flows,
``openstack tap flow create``). The command plugs that port into a sandbox of its
own when nothing holds it (and removes that sandbox afterwards, which unbinds the
port again), waits until the dataplane has it up, then runs Debian's ``tcpdump``
inside the sandbox's network namespace — promiscuous, since the copies carry other
ports' addresses — writing the file the user names, for ``--count`` packets or
``--seconds`` seconds, whichever ends first. Local: the agent of this host made the
namespace.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from netbay.cli.sandbox import UrlOpt, _Client
from netbay.dataplane.names import PRODUCT_PREFIX, Names

app = typer.Typer(help="Port mirroring (Tap-as-a-Service): capture what a tap service receives.",
                  no_args_is_help=True)
err = Console(stderr=True)

SANDBOX_OWNER = "netbay:sandbox"
READY_TIMEOUT = 30.0


@app.command("capture")
def capture(
    tap_service: str = typer.Option(..., "--tap-service", help="The tap service (name or id)."),
    write: Path = typer.Option(..., "--write", "-w", help="The pcap file to write."),
    count: int = typer.Option(None, "--count", "-c", min=1, help="Stop after this many packets."),
    seconds: float = typer.Option(10.0, "--seconds", "-s", min=0.1, max=86400,
                                  help="Stop after this long (default 10 s)."),
    prefix: str = typer.Option(PRODUCT_PREFIX, "--prefix", envvar="NETBAY_AGENT_PREFIX",
                               help="The agent's namespace prefix (the openrc `netbay up` wrote sets it)."),
    url: str = UrlOpt,
) -> None:
    """Capture the mirrored traffic of TAP_SERVICE into a pcap file."""
    tcpdump = shutil.which("tcpdump")
    if tcpdump is None:
        err.print("[red]error:[/] tcpdump is not installed (Debian: apt-get install tcpdump)")
        raise typer.Exit(1)
    client = _Client(url)
    service = _tap_service(client, tap_service)
    port = client.conn.network.get_port(service.port_id)
    own = None
    if port.device_owner == SANDBOX_OWNER and port.device_id:
        sandbox_id = port.device_id
    elif not port.device_owner and not port.device_id:
        own = client.request("POST", "/sandboxes", json={"sandbox": {
            "name": f"tap-{service.id[:8]}", "ports": [port.id]}})["sandbox"]
        sandbox_id = own["id"]
    else:
        err.print(f"[red]error:[/] the tap service's port {port.id} is in use by {port.device_owner} "
                  f"{port.device_id}; give the tap service a port of its own")
        raise typer.Exit(1)
    try:
        sandbox = _ready(client, sandbox_id)
        ifname = next(p["interface"] for p in sandbox["ports"] if p["port_id"] == port.id)
        code = _tcpdump(tcpdump, Names(prefix).sandbox(sandbox_id), ifname, write, count, seconds)
    finally:
        if own is not None:
            client.request("DELETE", f"/sandboxes/{own['id']}")
    raise typer.Exit(code)


def _tap_service(client: _Client, name_or_id: str) -> Any:
    try:
        return client.conn.network.find_tap_service(name_or_id, ignore_missing=False)
    except Exception as exc:  # noqa: BLE001 - the SDK's ResourceNotFound / DuplicateResource
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None


def _ready(client: _Client, sandbox_id: str) -> dict[str, Any]:
    """The sandbox once the agent has it ACTIVE (bounded)."""
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        sandbox = client.request("GET", f"/sandboxes/{sandbox_id}")["sandbox"]
        if sandbox["status"] == "ACTIVE":
            return sandbox
        if sandbox["status"] == "ERROR" or time.monotonic() > deadline:
            err.print(f"[red]error:[/] sandbox {sandbox_id} is {sandbox['status']} (is the agent running here?)")
            raise typer.Exit(1)
        time.sleep(0.1)


def _tcpdump(tcpdump: str, ns: str, ifname: str, write: Path, count: int | None, seconds: float) -> int:
    """tcpdump in ``ns`` until ``count`` packets or ``seconds``; its exit code (0 on a timed stop)."""
    from netbay.cli.nsexec import enter_netns
    from netbay.dataplane import netns

    argv = [tcpdump, "-i", ifname, "-U", "-Z", "root", "-w", str(write.resolve())]
    if count:
        argv += ["-c", str(count)]
    proc = subprocess.Popen(argv, preexec_fn=lambda: enter_netns(netns.path(ns)))  # noqa: PLW1509
    try:
        return proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)   # tcpdump flushes and closes the file
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return 0
    except KeyboardInterrupt:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
        return 0
