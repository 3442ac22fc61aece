"""The commands that run a netbay and stop it: ``serve``, ``up``, ``down`` and ``db``.

A module of their own, loaded by ``netbay``'s lazy group only when one of them runs:
building their many options cost every other command, ``netbay --help`` included.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from netbay import keepalive
from netbay.cli.out import LazyConsole

if TYPE_CHECKING:
    from netbay.cli.settings import Settings

db_app = typer.Typer(help="Database schema migrations.", no_args_is_help=True, rich_markup_mode=None)

console = LazyConsole(stderr=True)

DataDir = typer.Option(None, "--data-dir", envvar="NETBAY_DATA_DIR", help="Where netbay keeps its state.")
DbUrl = typer.Option(None, "--database-url", envvar="NETBAY_DATABASE_URL",
                     help="SQLAlchemy URL; default SQLite in the data dir, e.g. postgresql+psycopg://…")
Host = typer.Option("127.0.0.1", "--host", help="Address to listen on.")
PortOpt = typer.Option(9696, "--port", help="Port to listen on.")
TokenTTL = typer.Option(43200, "--token-ttl", min=1, help="Seconds a token stays valid.")
BackendOpt = typer.Option(None, "--backend", envvar="NETBAY_NETWORK_BACKEND",
                          help="Where clusters' networks are made: embedded (default) or openstack (a cloud's Neutron).")
OsCloudOpt = typer.Option(None, "--os-cloud", envvar="OS_CLOUD",
                          help="clouds.yaml entry of the openstack backend's cloud (its Keystone and Neutron).")


@db_app.command("upgrade")
def db_upgrade(data_dir: Path = DataDir, database_url: str = DbUrl) -> None:
    """Apply every pending migration."""
    from netbay.cli.settings import Settings
    from netbay.store import migrate

    settings = Settings.resolve(data_dir, database_url)
    migrate.upgrade(settings.database_url)
    console.print(f"[green]schema at {migrate.head(settings.database_url)}[/] ({settings.redacted_url})")


@db_app.command("current")
def db_current(data_dir: Path = DataDir, database_url: str = DbUrl) -> None:
    """Show the schema revision of the database and the one this netbay needs."""
    from netbay.cli.settings import Settings
    from netbay.store import migrate
    from netbay.store.db import make_engine

    settings = Settings.resolve(data_dir, database_url, create=False)  # read-only: makes nothing
    if settings.missing_sqlite_file:
        console.print(f"database: none (no database at {settings.missing_sqlite_file})  "
                      f"needed: {migrate.head(settings.database_url)}")
        return
    engine = make_engine(settings.database_url)
    console.print(f"database: {migrate.current(engine)}  needed: {migrate.head(settings.database_url)}")
    engine.dispose()


def _listen(host: str, port: int):  # noqa: ANN202
    """Bind first: a port in use is said before anything is written or claimed."""
    from netbay.cli import instance

    try:
        return instance.listen(host, port)
    except OSError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None


def _claim(what: str, path: Path, info: dict, keep: bool = False) -> None:
    """Hold ``path`` for this process (one agent per prefix on this host, one server per
    data dir), or name the holder and exit. ``keep``: the file outlives the process."""
    from netbay.cli import instance

    try:
        instance.hold(path, what, info, keep=keep)
    except instance.Held as exc:
        console.print(f"[red]error:[/] {exc}; stop it first (netbay down --data-dir …) or pick another")
        raise typer.Exit(1) from None


def _claim_data_dir(data_dir: Path, url: str, agent_prefix: str | None) -> None:
    from netbay.cli import instance

    _claim(f"data dir {data_dir}", data_dir / instance.SERVER_LOCK,
           {"url": url, "agent_prefix": agent_prefix, "data_dir": str(data_dir)}, keep=True)


def _run_server(settings: Settings, sock, host: str, port: int, noauth: bool,  # noqa: ANN001
                public_url: str | None, token_ttl: int, agent: bool = False, agent_prefix: str = "nb-",
                conductor: bool = True, network_backend: tuple[str, str | None] = ("embedded", None)) -> None:
    import uvicorn

    from netbay.cli import agent as agent_cli
    from netbay.api.app import create_app
    from netbay.identity.service import Identity
    from netbay.store import migrate
    from netbay.store.db import Store

    store = Store(settings.database_url)
    try:
        migrate.ensure_current(store.engine, settings.database_url, settings.upgrade_hint)
    except migrate.SchemaOutOfDate as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    written = Identity(store).bootstrap(settings.data_dir)
    if written:
        console.print(f"[yellow]admin password generated and written to {written}[/] (mode 0600)")
    if noauth:
        console.print("[bold red]WARNING: --noauth: no authentication, every caller is admin. "
                      "For development only; never expose this server.[/]")
    connect = "127.0.0.1" if host in ("0.0.0.0", "") else ("[::1]" if host == "::" else host)
    self_url = f"http://{connect}:{port}" if conductor else None
    application = create_app(store, noauth=noauth, public_url=public_url, token_ttl=token_ttl,
                             self_url=self_url, network_backend=network_backend)
    if agent:
        agent_cli.serve_with_agent(application, host, port, agent_prefix, sock=sock)
        return
    config = uvicorn.Config(application, host=host, port=port, log_level="warning", access_log=False,
                            timeout_keep_alive=keepalive.SERVER)
    uvicorn.Server(config).run(sockets=[sock])


def _network_backend(backend: str | None, os_cloud: str | None) -> tuple[str, str | None]:
    """The backend chosen, checked before serving: an ``openstack`` cloud must answer. Its
    Keystone then also vouches for netbay's callers (``NETBAY_EXTERNAL_KEYSTONE``, unless set)."""
    from netbay.backends import report

    try:
        kind, cloud = report.chosen(backend, os_cloud)
    except ValueError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    if kind == "embedded":
        return kind, None
    seen = report.report(kind, cloud)
    if not seen["reachable"]:
        console.print(f"[red]error:[/] network backend openstack (cloud {cloud!r}) unreachable: {seen['detail']}")
        raise typer.Exit(2)
    if seen.get("auth_url"):
        os.environ.setdefault("NETBAY_EXTERNAL_KEYSTONE", seen["auth_url"])
    console.print(f"network backend: [bold]openstack[/] cloud {cloud!r}, Neutron at {seen['network']}; "
                  f"identity from {os.environ.get('NETBAY_EXTERNAL_KEYSTONE')}")
    return kind, cloud


def serve(
    host: str = Host,
    port: int = PortOpt,
    data_dir: Path = DataDir,
    database_url: str = DbUrl,
    noauth: bool = typer.Option(False, "--noauth", help="DEVELOPMENT ONLY: no authentication."),
    public_url: str = typer.Option(None, "--public-url", help="Base URL put in the catalog."),
    token_ttl: int = TokenTTL,
    conductor: bool = typer.Option(True, "--conductor/--no-conductor", envvar="NETBAY_CONDUCTOR",
                                   help="Build clusters (off: they wait in *_IN_PROGRESS)."),
    backend: str = BackendOpt,
    os_cloud: str = OsCloudOpt,
) -> None:
    """Run the API services (identity, network, load balancers, container infrastructure)."""
    from netbay.cli.settings import Settings

    _logging()
    network_backend = _network_backend(backend, os_cloud)
    sock = _listen(host, port)
    settings = Settings.resolve(data_dir, database_url)
    _claim_data_dir(settings.data_dir, f"http://{host}:{port}", None)
    _run_server(settings, sock, host, port, noauth, public_url, token_ttl, conductor=conductor,
                network_backend=network_backend)


def up(
    host: str = Host,
    port: int = PortOpt,
    data_dir: Path = DataDir,
    database_url: str = DbUrl,
    public_url: str = typer.Option(None, "--public-url", help="Base URL put in the catalog."),
    token_ttl: int = TokenTTL,
    agent: bool = typer.Option(True, "--agent/--no-agent", envvar="NETBAY_AGENT",
                               help="Also run the dataplane agent (needs root), wiring this host's kernel."),
    agent_prefix: str = typer.Option("nb-", "--agent-prefix", envvar="NETBAY_AGENT_PREFIX",
                                     callback=lambda value: _check_prefix(value),
                                     help="Name prefix of the agent's namespaces."),
    conductor: bool = typer.Option(True, "--conductor/--no-conductor", envvar="NETBAY_CONDUCTOR",
                                   help="Build clusters (off: they wait in *_IN_PROGRESS)."),
    backend: str = BackendOpt,
    os_cloud: str = OsCloudOpt,
) -> None:
    """Migrate, bootstrap, create the ``public`` external network, write an openrc; serve the
    API and run the dataplane agent."""
    from netbay.cli import agent as agent_cli
    from netbay.cli import instance
    from netbay.cli import libnetwork as libnetwork_cli
    from netbay.cli.bootstrap import prepare
    from netbay.cli.settings import Settings

    _logging()
    network_backend = _network_backend(backend, os_cloud)
    sock = _listen(host, port)
    if agent and os.geteuid() != 0:
        console.print("[yellow]not root: API only, no dataplane agent[/] (run as root, or pass --no-agent)")
        agent = False
    if agent and (missing := agent_cli.missing_features()):
        console.print(f"[yellow]API only, no dataplane agent:[/] the kernel lacks {', '.join(missing)}")
        agent = False
    url = f"http://{host}:{port}"
    if agent:  # before making the data dir
        _claim(f"namespace prefix {agent_prefix!r}", instance.agent_lock_path(agent_prefix),
               {"url": url, "agent_prefix": agent_prefix})
    settings = Settings.resolve(data_dir, database_url)
    _claim_data_dir(settings.data_dir, url, agent_prefix if agent else None)
    openrc = prepare(settings, host, port, agent_prefix if agent else None)
    console.print(f"[green]netbay is starting on http://{host}:{port}[/]"
                  + (" with the dataplane agent" if agent else ""))
    console.print(f"credentials: [bold]source {openrc}[/]")
    if agent:  # Docker's network driver too, when this host runs dockerd
        connect = "127.0.0.1" if host in ("0.0.0.0", "") else host
        libnetwork_cli.start_beside_up(openrc, f"http://{connect}:{port}", agent_prefix, network_backend)
    _run_server(settings, sock, host, port, False, public_url, token_ttl, agent=agent,
                agent_prefix=agent_prefix, conductor=conductor, network_backend=network_backend)


def down(
    data_dir: Path = DataDir,
    timeout: float = typer.Option(20.0, "--timeout", min=0.0, help="Seconds to wait before SIGKILL."),
) -> None:
    """Stop the netbay serving DATA_DIR and delete exactly its agent's namespaces."""
    from netbay.cli import instance
    from netbay.cli.settings import default_data_dir

    directory = Path(data_dir or default_data_dir()).expanduser().resolve()
    if not (directory / instance.SERVER_LOCK).exists():
        console.print(f"[red]error:[/] no netbay was started with data dir {directory}")
        raise typer.Exit(1)
    running = instance.holder(directory / instance.SERVER_LOCK)
    last = running or instance.last_run(directory)
    if running:
        if not (instance.stop(int(running["pid"]), timeout)
                and instance.released(directory / instance.SERVER_LOCK, int(running["pid"]), timeout)):
            console.print(f"[red]error:[/] netbay PID {running['pid']} did not stop")
            raise typer.Exit(1)
        console.print(f"stopped netbay PID {running['pid']} ({running.get('url', '?')}, data dir {directory})")
    else:
        console.print(f"no netbay is running for data dir {directory}")
    prefix = last.get("agent_prefix")
    if not prefix:
        return
    lock = instance.agent_lock_path(prefix)
    if running:  # its agent's lock goes with the last of its threads
        instance.released(lock, int(running["pid"]), timeout)
    if (other := instance.holder(lock)) is not None:
        console.print(f"[yellow]namespaces {prefix}* kept:[/] netbay PID {other.get('pid')} serves that prefix now")
        return
    from netbay.cli.daemon import require_root

    require_root(console, f"removing the namespaces {prefix}* needs root")
    stopped = instance.stop_processes(prefix)   # none after a clean stop: its agent's own
    removed = instance.remove_namespaces(prefix)
    console.print(f"removed {len(removed)} namespaces {prefix}*"
                  + (f", stopped {len(stopped)} processes it left" if stopped else ""))


def _check_prefix(value: str) -> str:
    from netbay.cli.agent import check_prefix

    return check_prefix(value)


def _logging() -> None:
    from netbay.cli.daemon import configure_logging

    configure_logging(console)
