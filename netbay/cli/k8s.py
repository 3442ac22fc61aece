"""``netbay k8s apply|delete -f FILE|DIR --cluster C``, ``netbay k8s resync`` and ``netbay k8s pods``.

The manifest source of the mapping controller (:mod:`netbay.k8s`): objects are
parsed with lightkube, written to the store as the cluster's desired state, and the
controller converges netbay's resources to them here (pod sandboxes are made on
this host, so run it where the dataplane agent runs, as root). Credentials: the
OS_* variables (the openrc ``netbay up`` wrote); the store: ``--data-dir`` /
``--database-url`` as for ``netbay up``.

The network backend is the one the cluster was built on, chosen as ``netbay up``
chooses it: ``--backend openstack --os-cloud NAME`` (or ``NETBAY_NETWORK_BACKEND`` /
``OS_CLOUD``). On a cloud the pods' ports are made in its Neutron, bound to their
nodes, and nothing is plugged here (:mod:`netbay.k8s.portsonly`: the nodes' CNI —
``netbay cni-daemon`` — binds them, kuryr's split); with ``NETBAY_PLUG=os-vif`` the pods
live on this host instead, their ports bound to its chassis and plugged with os-vif into
its Open vSwitch (``NETBAY_OVSDB``, ``NETBAY_OVS_NETNS``; :mod:`netbay.k8s.sandbox`). Where the cloud's
catalog lists Octavia (``load-balancer``), every Service that needs a load balancer
becomes one in it, as kuryr-kubernetes made them: VIP on the cluster's service subnet
at the Service's cluster IP, a listener and pool per port, the pods' port addresses
as members (followed as endpoints change), deleted with the Service (cascade), found
again by its tags after a crash; the cloud's default provider serves it. Where it
lists none, such Services are refused by name. The cloud's token also authenticates
to netbay's API (``--url`` / ``NETBAY_URL`` names it).

On a flannel or calico cluster (:mod:`netbay.k8s.nodecluster`) pods take addresses
from their node's lease, Services are answered by every node (kube-proxy's nftables
maps, node ports included), NetworkPolicy is enforced by the nodes on calico and, on
flannel, accepted and reported ``not enforced by flannel`` on every apply.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from netbay.cli.out import LazyConsole

from netbay.dataplane.names import PRODUCT_PREFIX

if TYPE_CHECKING:  # imported where used: the CLI starts without the controller's modules
    from netbay.k8s.controller import Controller
    from netbay.k8s.nodecluster import NodeController

app = typer.Typer(help="Kubernetes objects on a cluster: kuryr's networks, ports and load balancers, or "
                       "flannel's and calico's node leases and node-answered Services.",
                  no_args_is_help=True)
console = LazyConsole()
err = LazyConsole(stderr=True)

FilesOpt = typer.Option(..., "-f", "--filename", help="A manifest file, a directory of them, or - for standard input (repeatable).")
ClusterOpt = typer.Option(..., "--cluster", help="The cluster's name or uuid (kuryr, flannel or calico).")
UrlOpt = typer.Option(None, "--url", envvar="NETBAY_URL", help="The netbay server (default: from OS_AUTH_URL).")
DataDirOpt = typer.Option(None, "--data-dir", envvar="NETBAY_DATA_DIR", help="netbay's data directory.")
DbOpt = typer.Option(None, "--database-url", envvar="NETBAY_DATABASE_URL", help="The database (default: SQLite in the data dir).")
PrefixOpt = typer.Option(PRODUCT_PREFIX, "--prefix", envvar="NETBAY_AGENT_PREFIX",
                         help="Namespace prefix (the agent's; the openrc sets NETBAY_AGENT_PREFIX).")
BackendOpt = typer.Option(None, "--backend", envvar="NETBAY_NETWORK_BACKEND",
                          help="The cluster's network backend, as for netbay up: embedded (default) or openstack.")
OsCloudOpt = typer.Option(None, "--os-cloud", envvar="OS_CLOUD",
                          help="clouds.yaml entry of the openstack backend's cloud.")


def _controller(cluster: str, url: str | None, data_dir: Path | None, database_url: str | None, prefix: str,
                backend: str | None = None, os_cloud: str | None = None) -> Controller | NodeController:
    """The controller with the backends the configuration names (see the module's docstring)."""
    from netbay.backends import open_backend, report
    from netbay.backends.loadbalancers import cloud_load_balancers
    from netbay.cli.settings import Settings
    from netbay.client import Api
    from netbay.dataplane.names import Names
    from netbay.k8s.controller import Controller
    from netbay.k8s.controllers import open_controller
    from netbay.store.db import Store

    kind, cloud = report.chosen(backend, os_cloud)
    settings = Settings.resolve(data_dir, database_url, create=False)
    if settings.missing_sqlite_file:   # opening it would make an empty file, then fail on its first table
        from netbay.cli.errors import DATA_DIR_HINT

        raise ValueError(f"no netbay database at {settings.missing_sqlite_file}: {DATA_DIR_HINT}")
    if kind == "embedded":
        from netbay.client.auth import Credentials

        creds = Credentials.from_env()
        return open_controller(Api(url or creds.server_url, creds.token), Store(settings.database_url), cluster,
                               Names(prefix))
    if not cloud:
        raise ValueError("the openstack backend needs a cloud: pass --os-cloud NAME or set OS_CLOUD")
    if not url:
        raise ValueError("the openstack backend needs netbay's URL: pass --url or set NETBAY_URL")
    net = open_backend("openstack", cloud=cloud)
    pods, host = _cloud_pods(prefix)
    return Controller(Api(url, lambda: net.conn.auth_token), Store(settings.database_url), cluster, Names(prefix),
                      host, net=net, lbs=cloud_load_balancers(net), lb_provider=None, pods=pods)


def _cloud_pods(prefix: str):  # noqa: ANN202
    """(the pod runtime on a cloud, the host its pods' ports are bound to): ports for the
    nodes' CNI (kuryr's split, the default), or — ``NETBAY_PLUG=os-vif`` — pods on this
    host, plugged with os-vif into its Open vSwitch (``NETBAY_OVSDB``, ``NETBAY_OVS_NETNS``)."""
    import os

    from netbay.k8s.portsonly import BoundPorts

    if (os.environ.get("NETBAY_PLUG") or "fabric") != "os-vif":
        return BoundPorts(), None
    from netbay.cli.vifopts import DEFAULT_OVSDB, host_vifs
    from netbay.dataplane.names import Names
    from netbay.k8s.sandbox import PodSandboxes

    vifs, host = host_vifs("openstack", "os-vif", os.environ.get("NETBAY_OVSDB") or DEFAULT_OVSDB,
                           os.environ.get("NETBAY_OVS_NETNS") or None, None)
    return PodSandboxes(Names(prefix), vifs), host


def _close(ctrl) -> None:  # noqa: ANN001 - a Controller
    ctrl.close()
    ctrl.api.close()
    net = getattr(ctrl, "net", None)   # a NodeController has no network backend of its own
    if callable(getattr(net, "close", None)):
        net.close()


def _run(verb: str, files: list[Path] | None, cluster: str, url: str | None, data_dir: Path | None,
         database_url: str | None, prefix: str, backend: str | None = None, os_cloud: str | None = None) -> None:
    from netbay.client import ApiError
    from netbay.errors import NetbayError
    from netbay.k8s.objects import ManifestError
    from netbay.k8s.source import ManifestSource

    try:
        source = ManifestSource(files) if files else None
        ctrl = _controller(cluster, url, data_dir, database_url, prefix, backend, os_cloud)
        report = source.apply(ctrl) if verb == "apply" else source.delete(ctrl) if verb == "delete" \
            else ctrl.resync()
    except NetbayError as exc:
        err.print(f"[red]error:[/] {exc.status} {exc.kind}: {exc.message}")
        raise typer.Exit(1) from None
    except (ManifestError, ApiError, LookupError, ValueError) as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    finally:
        if "ctrl" in locals():
            _close(ctrl)
    for line in report.made:
        console.print(f"made {line}")
    for line in report.deleted:
        console.print(f"deleted {line}")
    console.print(str(report))


@app.command()
def apply(files: list[Path] = FilesOpt, cluster: str = ClusterOpt, url: str | None = UrlOpt,
          data_dir: Path | None = DataDirOpt, database_url: str | None = DbOpt, prefix: str = PrefixOpt,
          backend: str | None = BackendOpt, os_cloud: str | None = OsCloudOpt) -> None:
    """Create or update the objects in the manifests, then converge."""
    _run("apply", files, cluster, url, data_dir, database_url, prefix, backend, os_cloud)


@app.command()
def delete(files: list[Path] = FilesOpt, cluster: str = ClusterOpt, url: str | None = UrlOpt,
           data_dir: Path | None = DataDirOpt, database_url: str | None = DbOpt, prefix: str = PrefixOpt,
           backend: str | None = BackendOpt, os_cloud: str | None = OsCloudOpt) -> None:
    """Delete the objects in the manifests, then converge."""
    _run("delete", files, cluster, url, data_dir, database_url, prefix, backend, os_cloud)


@app.command()
def resync(cluster: str = ClusterOpt, url: str | None = UrlOpt, data_dir: Path | None = DataDirOpt,
           database_url: str | None = DbOpt, prefix: str = PrefixOpt, backend: str | None = BackendOpt,
           os_cloud: str | None = OsCloudOpt) -> None:
    """Converge the cluster's resources to its stored objects (after a crash)."""
    _run("resync", None, cluster, url, data_dir, database_url, prefix, backend, os_cloud)


@app.command()
def pods(cluster: str = ClusterOpt, url: str | None = UrlOpt, data_dir: Path | None = DataDirOpt,
         database_url: str | None = DbOpt, prefix: str = PrefixOpt, backend: str | None = BackendOpt,
         os_cloud: str | None = OsCloudOpt,
         as_json: bool = typer.Option(False, "--json", help="Each pod's whole status, as Kubernetes writes it.")) -> None:
    """The cluster's pods and their status, as ``kubectl get pods`` shows them (Docker-runtime
    pods from their containers, NETBAY_DOCKER_HOST; sandbox pods say they run no process)."""
    import json

    from netbay.client import ApiError
    from netbay.k8s import podstatus

    try:
        ctrl = _controller(cluster, url, data_dir, database_url, prefix, backend, os_cloud)
        try:
            found = podstatus.of_cluster(ctrl)
        finally:
            _close(ctrl)
    except (ApiError, LookupError, ValueError) as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None
    if as_json:
        print(json.dumps({f"{ns}/{name}": s for (ns, name), s in sorted(found.items())}, indent=2))
        return
    rows = [("NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS")]
    for (ns, name), s in sorted(found.items()):
        apps = s.get("containerStatuses") or []
        rows.append((ns, name, f"{sum(c['ready'] for c in apps)}/{len(apps)}", podstatus.display(s),
                     str(sum(c["restartCount"] for c in apps))))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("   ".join(cell.ljust(w) for cell, w in zip(r, widths)).rstrip())


@app.command()
def sweep(url: str | None = UrlOpt, prefix: str = PrefixOpt) -> None:
    """Delete this host's pod namespaces, cluster resolvers and Docker-runtime pods' containers
    (NETBAY_DOCKER_HOST) whose port (on a flannel or calico cluster: pod) is gone (after a cluster delete)."""
    from netbay.client import Api
    from netbay.client.auth import Credentials
    from netbay.backends.http import HttpBackend
    from netbay.dataplane.names import Names
    from netbay.k8s.dns.resolver import sweep_orphans as sweep_resolvers
    from netbay.k8s.sandbox import PodSandboxes, sweep_orphans

    creds = Credentials.from_env()
    api = Api(url or creds.server_url, creds.token)
    try:
        sandboxes, net = PodSandboxes(Names(prefix)), HttpBackend(api)
        live_pods = {p["id"] for p in api.call("GET", "/netbay/v1/pods")["pods"]}   # flannel/calico clusters'
        for port_id in sweep_orphans(net, sandboxes):
            console.print(f"deleted sandbox {port_id}")
        for port_id in sweep_resolvers(net, sandboxes, live_pods):
            console.print(f"deleted cluster resolver {port_id}")
        _sweep_containers(net, live_pods)
    finally:
        api.close()


def _sweep_containers(net, live_pods: set[str]) -> None:  # noqa: ANN001 - a NetworkBackend
    """Docker-runtime pods' containers whose port (or netbay pod) is gone (with NETBAY_DOCKER_HOST)."""
    import os

    host = os.environ.get("NETBAY_DOCKER_HOST")
    if not host:
        return
    import docker

    from netbay.k8s.dockerpods import API_VERSION, sweep_orphans

    client = docker.DockerClient(base_url=host, version=API_VERSION, timeout=60)
    try:
        for pod in sweep_orphans(net, client, live_pods):
            console.print(f"deleted containers of pod {pod}")
    finally:
        client.close()


@app.command("exec", context_settings={"ignore_unknown_options": True})
def exec_(pod: str = typer.Argument(..., help="The pod, as NAMESPACE/NAME."),
          command: list[str] = typer.Argument(..., help="The command and its arguments (after --)."),
          cluster: str = ClusterOpt, url: str | None = UrlOpt, prefix: str = PrefixOpt) -> None:
    """Run a command in a sandbox pod as its process would run: in its network
    namespace, with its /etc/resolv.conf (the cluster resolver) and its Service
    variables (/etc/environment) — what ``ip netns exec`` binds from /etc/netns."""
    import os

    from netbay.client import NET, Api
    from netbay.client.auth import Credentials
    from netbay.dataplane.names import Names

    creds = Credentials.from_env()
    api = Api(url or creds.server_url, creds.token)
    try:
        cluster = api.call("GET", f"/container-infra/v1/clusters/{cluster}")["uuid"]   # a name or a uuid
        ports = api.call("GET", f"{NET}/ports", name=pod, tags=f"netbay-cluster={cluster},netbay-k8s=pod")["ports"]
        # a flannel or calico cluster's pod: a netbay pod on its node (netbay.k8s.nodecluster)
        on_nodes = [] if ports else [p for p in api.call("GET", "/netbay/v1/pods", cluster_id=cluster)["pods"]
                                     if (p.get("labels") or {}).get("netbay-k8s") == pod]
    finally:
        api.close()
    if not ports and not on_nodes:
        err.print(f"[red]error:[/] no pod {pod} in cluster {cluster}")
        raise typer.Exit(1)
    ns = Names(prefix).k8s_pod(ports[0]["id"]) if ports else Names(prefix).pod(on_nodes[0]["id"])
    os.execvp("ip", ["ip", "netns", "exec", ns, "sh", "-c", 'set -a; [ ! -r /etc/environment ] || . /etc/environment; set +a; exec "$@"',
                     "sh", *command])

@app.command()
def watch(kubeconfig: Path = typer.Option(None, "--kubeconfig", envvar="KUBECONFIG",
                                          help="The kubeconfig (as kubectl reads it; default ~/.kube/config)."),
          context: str | None = typer.Option(None, "--context", help="The kubeconfig context (default: current)."),
          cluster: str = ClusterOpt, url: str | None = UrlOpt, data_dir: Path | None = DataDirOpt,
          database_url: str | None = DbOpt, prefix: str = PrefixOpt,
          server_timeout: int = typer.Option(300, "--watch-timeout", min=1, max=3600,
                                             help="Seconds before a watch request is renewed."),
          annotate: bool = typer.Option(True, "--annotate/--no-annotate",
                                        help="Write each pod's port back onto it (annotation netbay.io/vif)."),
          backend: str | None = BackendOpt, os_cloud: str | None = OsCloudOpt) -> None:
    """Follow a Kubernetes API server (list + watch) and converge the cluster to it, until SIGINT/SIGTERM."""
    import asyncio
    import signal

    from lightkube import AsyncClient, ConfigError, KubeConfig

    from netbay.client import ApiError
    from netbay.errors import NetbayError
    from netbay.k8s.watch import Limits, WatchSource

    try:
        config = KubeConfig.from_file(kubeconfig or Path.home() / ".kube" / "config")
        single = config.get(context_name=context)
        ctrl = _controller(cluster, url, data_dir, database_url, prefix, backend, os_cloud)
    except (ConfigError, ApiError, NetbayError, LookupError, ValueError, OSError) as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(1) from None

    async def follow() -> None:
        client = AsyncClient(config=single)
        source = WatchSource(client, Limits(server_timeout=server_timeout), annotate=annotate)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, source.stop)
        try:
            stats = await source.run(ctrl)
        finally:
            await client.close()
        console.print(f"stopped: {stats.passes} passes, {stats.relists} lists, {stats.patches} pods annotated")

    try:
        asyncio.run(follow())
    except Exception as exc:  # noqa: BLE001 - a fault in the source: say so, exit non-zero
        err.print(f"[red]error:[/] the watch source stopped: {type(exc).__name__}: {exc}")
        raise typer.Exit(1) from None
    finally:
        _close(ctrl)
