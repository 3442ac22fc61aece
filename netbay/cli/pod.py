"""``netbay pod``: pods on a cluster's nodes — create (and wait until plugged in), list,
show, exec into, delete.

Pods live in netbay's ``/netbay/v1/pods`` (Neutron conventions, ``NeutronError``
bodies); clusters are named through the container-infra API, so ``--cluster``
takes a name or a uuid. The API places a pod and answers at once (``BUILD``); the
dataplane agent makes its namespace, plugs it into the node and reports
``ACTIVE``, which ``create`` waits for, bounded by ``--timeout``. Exit codes: 0 done,
1 an error (the server's message and HTTP status are printed) or the pod ended in
``ERROR``, 2 the wait timed out.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote

import typer

from netbay.cli.coeclient import Api, err, fields_table
from netbay.cli.out import LazyConsole
from netbay.dataplane.names import PRODUCT_PREFIX

app = typer.Typer(help="Pods on cluster nodes: a namespace per pod, addressed from its node's lease.",
                  no_args_is_help=True)
console = LazyConsole()

POLL = 0.2  # seconds between status polls
ClusterOpt = typer.Option(None, "--cluster", help="Cluster name or uuid (to tell apart pods of the same name).")


def cluster_of(api: Api, ident: str) -> dict[str, Any]:
    """The cluster by name or uuid (Magnum's 404 ends the command)."""
    return api.request("GET", f"/clusters/{quote(ident, safe='')}")


def find(api: Api, ident: str, cluster: str | None = None) -> dict[str, Any]:
    """A pod by name (within ``cluster`` if given) or id."""
    from rich.markup import escape

    params = {"name": ident}
    if cluster:
        params["cluster_id"] = cluster_of(api, cluster)["uuid"]
    found = api.netbay("GET", "/pods", params=params)["pods"]
    if len(found) > 1:
        err.print(f"[red]error:[/] {len(found)} pods are named {escape(ident)!r}; use the id or --cluster")
        raise typer.Exit(1)
    if found:
        return found[0]
    pod = api.netbay("GET", f"/pods/{quote(ident, safe='')}")["pod"]
    if cluster and pod["cluster_id"] != params["cluster_id"]:
        err.print(f"[red]error:[/] pod {escape(ident)} is not in cluster {escape(cluster)}")
        raise typer.Exit(1)
    return pod


def _cluster_names(api: Api) -> dict[str, str]:
    return {c["uuid"]: c["name"] for c in api.request("GET", "/clusters")["clusters"]}


def pods_table(rows: list[dict[str, Any]], clusters: dict[str, str], title: str = "pods") -> Any:
    from rich.table import Table
    from rich.text import Text

    from netbay.cli.out import status_text

    table = Table("name", "id", "cluster", "node", "address", "status", title=title, title_justify="left")
    for p in rows:
        cells = (p["name"], p["id"], clusters.get(p["cluster_id"], p["cluster_id"]), p["node"], p["address"])
        table.add_row(*(Text(str(c)) for c in cells), status_text(p["status"]))   # Text: names are not markup
    return table


def wait_active(api: Api, pod: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Poll the pod until ``ACTIVE``; exit 1 on ``ERROR``, 2 when ``timeout`` passes."""
    from rich.markup import escape
    from rich.text import Text

    from netbay.cli.out import status_text

    start = time.monotonic()
    deadline = start + timeout
    for _ in range(int(timeout / POLL) + 2):   # bounded by count and by time
        pod = api.netbay("GET", f"/pods/{pod['id']}")["pod"]
        if pod["status"] != "BUILD" or time.monotonic() >= deadline:
            break
        time.sleep(min(POLL, max(0.0, deadline - time.monotonic())))
    elapsed = time.monotonic() - start
    if pod["status"] == "ACTIVE":
        console.print(Text.assemble(f"pod {pod['name']} ", status_text("ACTIVE"), f" in {elapsed:.1f} s"))
        return pod
    if pod["status"] == "ERROR":
        why = pod.get("status_reason") or "the agent's log says why"
        err.print(f"[red]error:[/] pod {escape(pod['name'])} ERROR: the dataplane agent could not plug it into "
                  f"node {escape(pod['node'])}: {escape(why)}")
        raise typer.Exit(1)
    err.print(f"[red]error:[/] pod {escape(pod['name'])} still {pod['status']} after {timeout:g} s: a pod becomes "
              "ACTIVE once the dataplane agent has plugged it in; is the agent running (`netbay up` as root)?")
    raise typer.Exit(2)


@app.command("create")
def create(
    name: str = typer.Argument(..., help="The pod's name (unique within its cluster)."),
    cluster: str = typer.Option(..., "--cluster", help="Cluster name or uuid."),
    node: str = typer.Option(None, "--node", help="Place it on this node (logical name or sandbox id); "
                                                  "default: the least-loaded minion."),
    no_wait: bool = typer.Option(False, "--no-wait", help="Return once the pod is placed (status BUILD)."),
    timeout: float = typer.Option(60.0, "--timeout", min=0.1, help="Seconds to wait for ACTIVE."),
) -> None:
    """Create a pod on a cluster node and wait until the dataplane agent has plugged it in."""
    api = Api()
    item = cluster_of(api, cluster)
    body: dict[str, Any] = {"name": name, "cluster_id": item["uuid"]}
    if node:
        body["node"] = node
    pod = api.netbay("POST", "/pods", json={"pod": body})["pod"]
    console.print(f"pod {pod['name']} ({pod['id']}) placed on {pod['node']}, address {pod['address']}")
    if not no_wait:
        pod = wait_active(api, pod, timeout)
    console.print(pods_table([pod], {item["uuid"]: item["name"]}))


@app.command("list")
def list_(cluster: str = typer.Option(None, "--cluster", help="Only this cluster's pods (name or uuid).")) -> None:
    """List pods."""
    api = Api()
    params = {"cluster_id": cluster_of(api, cluster)["uuid"]} if cluster else None
    rows = api.netbay("GET", "/pods", params=params)["pods"]
    rows.sort(key=lambda p: (p["cluster_id"], p["node"], p["name"]))
    console.print(pods_table(rows, _cluster_names(api)))


@app.command("show")
def show(
    pod: str = typer.Argument(..., help="Name or id."),
    cluster: str = ClusterOpt,
    prefix: str = typer.Option(PRODUCT_PREFIX, "--prefix", envvar="NETBAY_AGENT_PREFIX",
                               help="The agent's namespace prefix (the openrc `netbay up` wrote sets it)."),
) -> None:
    """Show one pod, with its cluster's name and its namespace on the agent's host."""
    from netbay.dataplane.names import Names

    api = Api()
    item = find(api, pod, cluster)
    names = _cluster_names(api)
    shown = {**item, "cluster": names.get(item["cluster_id"], "-"), "namespace": Names(prefix).pod(item["id"])}
    console.print(fields_table(f"pod {item['name']}", shown))


@app.command("delete")
def delete(pods: list[str] = typer.Argument(..., help="Names or ids."), cluster: str = ClusterOpt) -> None:
    """Delete pods (the agent unplugs them and deletes their namespaces)."""
    api = Api()
    for ident in pods:
        item = find(api, ident, cluster)
        api.netbay("DELETE", f"/pods/{item['id']}")
        console.print(f"deleted pod {item['name']} ({item['id']})")


@app.command("exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def exec_(
    pod: str = typer.Argument(..., help="Name or id."),
    command: list[str] = typer.Argument(..., help="The command (after --)."),
    cluster: str = ClusterOpt,
    prefix: str = typer.Option(PRODUCT_PREFIX, "--prefix", envvar="NETBAY_AGENT_PREFIX",
                               help="The agent's namespace prefix (the openrc `netbay up` wrote sets it)."),
) -> None:
    """Run COMMAND inside the pod's network namespace on this host (replaces this process)."""
    from netbay.cli.nsexec import exec_in
    from netbay.dataplane import netns
    from netbay.dataplane.names import Names
    from netbay.runtime.resolve import id_shaped

    names = Names(prefix)
    pod_id = pod if id_shaped(pod) and not cluster and netns.exists(names.pod(pod)) else find(Api(), pod, cluster)["id"]
    exec_in(names.pod(pod_id), command)
