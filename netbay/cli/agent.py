"""``netbay agent``: the dataplane agent, standalone or inside ``netbay up``.

Standalone it authenticates with password credentials (OS_* variables, or the
openrc ``netbay up`` wrote) and talks to a netbay server over HTTP. Inside
``netbay up`` it runs on a background thread of the server process, started once
the server listens and stopped when it exits; it still talks HTTP to its own
server (one code path), with tokens minted in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shlex
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from netbay import keepalive
from netbay.cli.daemon import configure_logging, require_root
from netbay.dataplane.names import PRODUCT_PREFIX

console = Console(stderr=True, soft_wrap=True)  # one line per message
log = logging.getLogger("netbay.agent")

_PREFIX_RE = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")


def read_openrc(path: Path) -> dict[str, str]:
    """The ``export OS_*=…`` lines of an openrc (``"$(cat FILE)"`` is read from FILE)."""
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line.startswith("export "):
            continue
        key, _, raw = line[len("export "):].partition("=")
        if not key.startswith("OS_"):
            continue
        m = re.fullmatch(r'"\$\(cat (.+)\)"', raw.strip())
        if m:
            try:
                env[key] = Path(m.group(1)).read_text().strip()
            except OSError:
                continue
        else:
            parts = shlex.split(raw)
            env[key] = parts[0] if parts else ""
    return env


def credentials(data_dir: Path | None, openrc: Path | None):  # noqa: ANN201
    """Credentials from OS_* variables, else from ``openrc`` (or the data dir's)."""
    from netbay.cli.settings import default_data_dir
    from netbay.client.auth import Credentials

    if os.environ.get("OS_AUTH_URL") and openrc is None:
        return Credentials.from_env()
    path = openrc or Path(data_dir or default_data_dir()) / "openrc"
    if not path.exists():
        raise ValueError(f"no OS_* variables and no openrc at {path}: source the openrc `netbay up` wrote")
    return Credentials.from_env({**os.environ, **read_openrc(path)})


def missing_features() -> list[str]:
    """What the fabric needs and this kernel lacks (probed), worded for a message."""
    from netbay.dataplane import features

    found = features.detect(only=("veth", "bridge"))
    return [f"{name} ({f.detail})" for name, f in sorted(found.items()) if not f.available]


def check_prefix(prefix: str) -> str:
    if not _PREFIX_RE.match(prefix):
        raise typer.BadParameter("a prefix is 1-32 characters of [A-Za-z0-9_.-]")
    return prefix


def agent(
    url: str = typer.Option("http://127.0.0.1:9696", "--url", envvar="NETBAY_URL",
                            help="The netbay server."),
    prefix: str = typer.Option(PRODUCT_PREFIX, "--prefix", callback=check_prefix, envvar="NETBAY_AGENT_PREFIX",
                               help="Name prefix of every namespace the agent makes (and sweeps)."),
    host: str = typer.Option(None, "--host", help="This host's name (sandboxes bound elsewhere are skipped)."),
    openrc: Path = typer.Option(None, "--openrc", help="Credentials file (default: OS_* variables, "
                                                       "else the data dir's openrc)."),
    data_dir: Path = typer.Option(None, "--data-dir", envvar="NETBAY_DATA_DIR"),
    wait: float = typer.Option(30.0, "--wait", min=0.0, max=60.0, help="Long-poll seconds."),
) -> None:
    """Run the dataplane agent: wire this host's kernel as the network service says."""
    from netbay.agent import Agent, Api
    from netbay.dataplane.names import Names

    configure_logging(console)
    require_root(console, "the dataplane agent needs root (network namespaces, netlink)")
    missing = missing_features()
    if missing:
        console.print(f"[red]error:[/] this kernel cannot host the dataplane: missing {', '.join(missing)}")
        raise typer.Exit(1)
    try:
        creds = credentials(data_dir, openrc)
    except ValueError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    _check_login(creds)
    from netbay.cli import instance

    try:  # a second agent on this prefix would sweep the first one's namespaces
        instance.hold(instance.agent_lock_path(prefix), f"namespace prefix {prefix!r}",
                      {"url": url, "agent_prefix": prefix})
    except instance.Held as exc:
        console.print(f"[red]error:[/] {exc}; stop it first or pick another --prefix")
        raise typer.Exit(1) from None
    api = Api(url, creds.token)
    the_agent = Agent(api, Names(prefix), host=host, wait=wait)
    stop = threading.Event()
    thread = threading.Thread(target=the_agent.run, args=(stop,), name="netbay-agent", daemon=True)

    def _stop(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    console.print(f"[green]netbay agent[/] following {url} (prefix {prefix})")
    thread.start()
    while thread.is_alive() and not stop.wait(0.5):
        pass
    stop.set()
    thread.join(timeout=5)  # a long poll in flight is abandoned with the process
    the_agent.release()     # told to stop: its haproxy and resolver processes stop too
    api.close()


def _check_login(creds: Any) -> None:
    """Log in once before starting, so a wrong password or a missing server is said plainly."""
    import httpx

    from netbay.agent import ApiError

    try:
        creds.token()
    except ApiError as exc:
        what = "authentication failed" if exc.status == 401 else str(exc)
        console.print(f"[red]error:[/] {what} at {creds.auth_url}")
        raise typer.Exit(1) from None
    except httpx.HTTPError:
        console.print(f"[red]error:[/] no netbay at {creds.auth_url}: nothing answers there")
        raise typer.Exit(1) from None


# --- inside `netbay up` ----------------------------------------------------------------------


def in_process_token(app: Any) -> Callable[[], str]:
    """Admin tokens minted by the server's own token service (no password needed)."""
    from netbay.identity.tokens import service_token

    return service_token(app.state.store, app.state.tokens)


def serve_with_agent(application: Any, host: str, port: int, prefix: str = PRODUCT_PREFIX,
                     sock: Any = None) -> None:
    """Run the API server and, on a background thread once it listens, the agent."""
    import uvicorn

    from netbay.agent import Agent, BesideServer
    from netbay.dataplane.names import Names

    stop = threading.Event()
    closing = asyncio.Event()
    application.state.closing = closing  # ends the agent's long poll at once on shutdown

    agents: list[Any] = []   # the agent, once the server started

    def finish_agent() -> None:
        """The agent's thread ends (bounded), then the processes it ran stop."""
        stop.set()
        thread.join(timeout=10)
        while agents:
            agents.pop().release()

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            stop.set()
            with contextlib.suppress(RuntimeError):  # no loop running (yet)
                asyncio.get_running_loop().call_soon_threadsafe(closing.set)
            super().handle_exit(sig, frame)

        async def shutdown(self, sockets: Any = None) -> None:
            # Before uvicorn re-raises the SIGTERM it caught (the process then dies at
            # once, netbay.locks): while the API still answers the agent's last calls.
            await asyncio.to_thread(finish_agent)
            await super().shutdown(sockets)

    config = uvicorn.Config(application, host=host, port=port, log_level="warning", access_log=False,
                            timeout_graceful_shutdown=2, timeout_keep_alive=keepalive.SERVER)
    server = Server(config)
    connect = "127.0.0.1" if host in ("0.0.0.0", "") else ("[::1]" if host == "::" else host)
    api = BesideServer(f"http://{connect}:{port}", in_process_token(application), application.state.feed, stop)

    def run_agent() -> None:
        deadline = time.monotonic() + 120
        while not server.started and not stop.is_set():
            if time.monotonic() > deadline:
                log.error("netbay agent: the server did not start; no agent")
                return
            stop.wait(0.05)
        if not stop.is_set():
            agents.append(Agent(api, Names(prefix)))
            agents[0].run(stop)

    thread = threading.Thread(target=run_agent, name="netbay-agent", daemon=True)
    thread.start()
    try:
        server.run(sockets=[sock] if sock is not None else None)
    finally:
        finish_agent()
        api.close()


__all__ = ["agent", "credentials", "in_process_token", "read_openrc", "serve_with_agent"]
