"""``netbay cluster``: create, list, show, update and delete clusters, follow them live,
export their Heat template and print their topology.

The live view polls the cluster and netbay's ``/clusters/{id}/resources`` (the
executor's record of each resource) and shows the stack's resources as a table until
the operation ends in ``*_COMPLETE`` or ``*_FAILED`` (or ``--timeout`` passes).
The topology is read from the APIs a user has anyway: the network API, the
load-balancer API and netbay's sandboxes, found through the cluster's resources.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from netbay.cli.coeclient import CoeClient, cell, err, fields_table, message_of, rows_table
from netbay.coe.labels import LabelSyntaxError, format_labels

app = typer.Typer(help="Clusters (Magnum): built from a cluster template, followed live.", no_args_is_help=True)
console = Console()

POLL = 0.25  # seconds between polls of the live view
TimeoutOpt = typer.Option(600.0, "--timeout", min=1.0, help="Seconds to wait for the operation to end.")
NoWaitOpt = typer.Option(False, "--no-wait", help="Return once the request is accepted.")


class Api(CoeClient):
    """The container-infra client, plus raw reads of the network and load-balancer APIs
    and of netbay's own ``/netbay/v1`` (sandboxes)."""

    def __init__(self) -> None:
        super().__init__()
        self._endpoints: dict[str, str] = {}

    def headers(self) -> dict[str, str]:
        from netbay.cli.coeclient import VERSION

        return {"X-Auth-Token": self.conn.auth_token, "OpenStack-API-Version": VERSION}

    def get(self, url: str, **kw: Any) -> Any:
        """GET a full URL: the JSON body, or None for a 404; other errors end the command."""
        import httpx

        r = httpx.get(url, headers=self.headers(), timeout=60, **kw)
        if r.status_code == 404:
            return None
        if r.status_code >= 400:
            err.print(f"[red]error:[/] {escape(message_of(r))} (HTTP {r.status_code}, GET {url})")
            raise typer.Exit(1)
        return r.json() if r.content else None

    def coe(self, path: str) -> Any:
        return self.get(f"{self.base}{path}")

    def endpoint(self, service: str) -> str:
        if service not in self._endpoints:
            if service == "netbay":
                from netbay.cli.sandbox import _base_from_auth

                url = _base_from_auth(self.conn) + "/netbay/v1"
            else:
                url = (self.conn.session.get_endpoint(service_type=service, interface="public") or "").rstrip("/")
                version = {"network": "/v2.0", "load-balancer": "/v2"}[service]
                if not url.endswith(("/v2.0", "/v2")):
                    url += version
            self._endpoints[service] = url
        return self._endpoints[service]

    def service(self, service: str, path: str, key: str | None = None, **params: Any) -> Any:
        """``GET <service endpoint><path>``; ``key`` unwraps the body (None if missing)."""
        body = self.get(f"{self.endpoint(service)}{path}", params=params or None)
        if body is None or key is None:
            return body
        return body.get(key)


def _path(ident: str) -> str:
    return f"/clusters/{quote(ident, safe='')}"


def _labels(values: list[str] | None) -> dict[str, str]:
    try:
        return format_labels(values or [])
    except LabelSyntaxError as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None


# --- the live view -----------------------------------------------------------------------------------

_STYLE = {"COMPLETE": "green", "IN_PROGRESS": "yellow", "FAILED": "bold red"}


def _status(text: str | None) -> Text:
    text = text or ""
    style = next((s for suffix, s in _STYLE.items() if text.endswith(suffix)), "dim")
    return Text(text, style=style)


def progress_view(cluster: dict[str, Any] | None, resources: dict[str, Any] | None, elapsed: float,
                  label: str) -> Group:
    """The stack's resources with their status; the title says where the cluster is."""
    rows = (resources or {}).get("resources") or []
    stack = (resources or {}).get("stack") or {}
    status = cluster["status"] if cluster else "waiting"
    done = sum(1 for r in rows if str(r.get("status", "")).endswith("COMPLETE"))
    title = Text.assemble((f"cluster {label}  ", "bold"), _status(status),
                          f"  stack {stack.get('action') or '-'} {stack.get('status') or '-'}"
                          f"  {done}/{len(rows)} resources  {elapsed:.1f} s")
    if cluster is None and elapsed > 0:  # deleted: what was recorded before is history now
        return Group(Text.assemble((f"cluster {label}  ", "bold"), _status("DELETE_COMPLETE"),
                                   f"  gone after {elapsed:.1f} s"))
    with_reason = any(r.get("status_reason") for r in rows)
    table = Table("resource", "type", "status", "physical id", *(["reason"] if with_reason else []))
    for r in rows:
        physical = str(r.get("physical_id") or "")
        extra = [Text(str(r.get("status_reason") or ""), style="red")] if with_reason else []
        table.add_row(r.get("name", ""), r.get("type", ""), _status(r.get("status")), physical[:36], *extra)
    return Group(title, table)


def follow(api: Api, uuid: str, label: str, timeout: float, *, until_gone: bool = False) -> dict[str, Any] | None:
    """Poll the cluster and its resources, showing them live, until the operation ends.

    Returns the last cluster (None when it is gone). Exits 1 on ``*_FAILED`` with the
    status reason, 2 when ``timeout`` passes first."""
    import httpx

    start = time.monotonic()
    deadline = start + timeout
    cluster: dict[str, Any] | None = None
    resources: dict[str, Any] | None = None
    timed_out = False
    with Live(progress_view(None, None, 0.0, label), console=console, refresh_per_second=8,
              transient=False) as live:
        while True:
            settled = False
            try:
                cluster = api.coe(_path(uuid))
                if cluster is not None:
                    resources = api.coe(_path(uuid) + "/resources")
                live.update(progress_view(cluster, resources, time.monotonic() - start, label))
                settled = cluster is None or not cluster["status"].endswith("_IN_PROGRESS")
            except httpx.TransportError:  # the server restarting (it resumes the operation)
                cluster = cluster or {"status": "UNREACHABLE"}
            if settled:
                break
            if time.monotonic() >= deadline:
                timed_out = True
                break
            time.sleep(min(POLL, max(0.0, deadline - time.monotonic())))
    if not console.is_terminal:
        console.line()  # the final render of a non-terminal Live ends without one
    elapsed = time.monotonic() - start
    if cluster is None:
        if until_gone:
            console.print(f"cluster {label} deleted in {elapsed:.1f} s")
            return None
        err.print(f"[red]error:[/] cluster {label} disappeared")
        raise typer.Exit(1)
    if timed_out:
        err.print(f"[red]error:[/] cluster {label} still {cluster['status']} after {timeout:g} s "
                  f"(it goes on in the server; follow it with `netbay cluster show {label}`)")
        raise typer.Exit(2)
    console.print(Text.assemble(f"cluster {label} ", _status(cluster["status"]), f" in {elapsed:.1f} s"))
    if cluster["status"].endswith("_FAILED"):
        reason = escape(cluster.get("status_reason") or "")
        err.print(f"[red]error:[/] cluster {escape(label)} {cluster['status']}: {reason}")
        raise typer.Exit(1)
    return cluster


def _outputs(cluster: dict[str, Any]) -> None:
    for key in ("api_address", "master_addresses", "node_addresses"):
        console.print(f"  {key}: {cell(cluster.get(key)) or '-'}")


# --- commands ------------------------------------------------------------------------------------------


@app.command("create")
def create(
    name: str = typer.Argument(..., help="Name of the cluster."),
    cluster_template: str = typer.Option(..., "--cluster-template", help="Cluster template name or uuid."),
    node_count: int = typer.Option(None, "--node-count", min=1, help="Number of minions (default 1)."),
    master_count: int = typer.Option(None, "--master-count", min=1,
                                     help="Number of masters (default 1; more need --master-lb-enabled)."),
    labels: list[str] = typer.Option(None, "--labels", help="KEY1=VALUE1,KEY2=VALUE2… (repeatable)."),
    merge_labels: bool = typer.Option(False, "--merge-labels",
                                      help="Merge --labels into the template's instead of replacing them."),
    keypair: str = typer.Option(None, "--keypair", help="SSH keypair (informational here)."),
    flavor: str = typer.Option(None, "--flavor"),
    master_flavor: str = typer.Option(None, "--master-flavor"),
    docker_volume_size: int = typer.Option(None, "--docker-volume-size", min=1),
    fixed_network: str = typer.Option(None, "--fixed-network", help="An existing private network."),
    fixed_subnet: str = typer.Option(None, "--fixed-subnet", help="An existing private subnet."),
    floating_ip: bool = typer.Option(None, "--floating-ip-enabled/--floating-ip-disabled",
                                     help="Floating IPs for the nodes (default: the template's)."),
    master_lb_enabled: bool = typer.Option(False, "--master-lb-enabled",
                                           help="Load balancers for the API and etcd."),
    create_timeout: int = typer.Option(None, "--create-timeout", min=0,
                                       help="Magnum's create_timeout, in minutes (stored)."),
    no_wait: bool = NoWaitOpt,
    timeout: float = TimeoutOpt,
) -> None:
    """Create a cluster and follow it live until it is complete (or failed)."""
    body: dict[str, Any] = {"name": name, "cluster_template_id": cluster_template, "node_count": node_count,
                            "master_count": master_count, "keypair": keypair, "flavor_id": flavor,
                            "master_flavor_id": master_flavor, "docker_volume_size": docker_volume_size,
                            "fixed_network": fixed_network, "fixed_subnet": fixed_subnet,
                            "floating_ip_enabled": floating_ip, "create_timeout": create_timeout}
    body = {k: v for k, v in body.items() if v is not None}
    parsed = _labels(labels)
    if parsed:
        body["labels"] = parsed
    if merge_labels:
        body["merge_labels"] = True
    if master_lb_enabled:
        body["master_lb_enabled"] = True
    api = Api()
    uuid = api.request("POST", "/clusters", json=body)["uuid"]
    console.print(f"cluster {name} ({uuid}) accepted")
    if no_wait:
        return
    cluster = follow(api, uuid, name, timeout)
    if cluster is not None:
        _outputs(cluster)


@app.command("list")
def list_clusters() -> None:
    """List clusters."""
    rows = Api().request("GET", "/clusters")["clusters"]
    console.print(rows_table("clusters", rows, ["uuid", "name", "node_count", "master_count", "status",
                                                 "health_status"]))


@app.command("show")
def show(cluster: str = typer.Argument(..., help="Name or uuid.")) -> None:
    """Show a cluster, with its addresses and status reason."""
    item = Api().request("GET", _path(cluster))
    console.print(fields_table(f"cluster {item['name']}", item))


@app.command("update")
def update(
    cluster: str = typer.Argument(..., help="Name or uuid."),
    node_count: int = typer.Option(..., "--node-count", min=1, help="The new number of minions."),
    no_wait: bool = NoWaitOpt,
    timeout: float = TimeoutOpt,
) -> None:
    """Scale a cluster's minions (newest removed first) and follow it live."""
    api = Api()
    uuid = api.request("GET", _path(cluster))["uuid"]
    api.request("PATCH", _path(uuid), json=[{"op": "replace", "path": "/node_count", "value": node_count}])
    console.print(f"cluster {cluster} update to node_count={node_count} accepted")
    if no_wait:
        return
    item = follow(api, uuid, cluster, timeout)
    if item is not None:
        _outputs(item)


@app.command("delete")
def delete(
    clusters: list[str] = typer.Argument(..., help="Names or uuids."),
    no_wait: bool = NoWaitOpt,
    timeout: float = TimeoutOpt,
) -> None:
    """Delete clusters and wait until they are gone."""
    api = Api()
    for cluster in clusters:
        uuid = api.request("GET", _path(cluster))["uuid"]
        api.request("DELETE", _path(uuid))
        console.print(f"cluster {cluster} delete accepted")
        if not no_wait:
            follow(api, uuid, cluster, timeout, until_gone=True)


@app.command("template-export")
def template_export(
    cluster: str = typer.Argument(..., help="Name or uuid."),
    output_dir: Path = typer.Option(Path("."), "--output-dir", help="Where to write the two files."),
) -> None:
    """Write the cluster's Heat (HOT) template and an environment file with its parameters."""
    import yaml

    api = Api()
    item = api.request("GET", _path(cluster))
    exported = api.request("GET", _path(item["uuid"]) + "/template")
    output_dir.mkdir(parents=True, exist_ok=True)
    template_file = output_dir / f"{item['name']}-template.yaml"
    env_file = output_dir / f"{item['name']}-env.yaml"
    template_file.write_text(yaml.safe_dump(exported["template"], sort_keys=False, default_flow_style=False))
    env_file.write_text(yaml.safe_dump({"parameters": exported["parameters"]}, sort_keys=False,
                                       default_flow_style=False))
    resources = exported["template"].get("resources") or {}
    console.print(f"HOT template ({len(resources)} resources): {template_file}")
    console.print(f"environment (parameters): {env_file}")
    console.print(f"with a real Heat: openstack stack create -t {template_file} -e {env_file} {item['name']}")


# --- topology -----------------------------------------------------------------------------------------


def _short(ident: str | None) -> str:
    return (ident or "")[:8]


def _rules(group: dict[str, Any]) -> str:
    """A security group's ingress rules in a line: ``icmp; tcp 22; udp 8472``."""
    out: list[str] = []
    for r in group.get("security_group_rules") or []:
        if r.get("direction") != "ingress" or r.get("ethertype") not in (None, "IPv4"):
            continue
        proto = r.get("protocol") or "any"
        lo, hi = r.get("port_range_min"), r.get("port_range_max")
        ports = "" if lo is None else (f" {lo}" if lo == hi or hi is None else f" {lo}-{hi}")
        source = r.get("remote_ip_prefix") or (f"group {_short(r['remote_group_id'])}"
                                               if r.get("remote_group_id") else "")
        out.append(f"{proto}{ports}" + (f" from {source}" if source else ""))
    return "; ".join(dict.fromkeys(out)) or "no ingress"


def _node_label(api: Api, server: dict[str, Any], ports: dict[str, Any], fips: dict[str, Any],
                groups: dict[str, str]) -> Text:
    sandbox = api.service("netbay", f"/sandboxes/{server['physical_id']}", "sandbox") or {}
    label = Text.assemble((sandbox.get("name") or server["name"], "bold"), " ",
                          _status(sandbox.get("status") or server.get("status")))
    for attached in sandbox.get("ports") or []:
        port = ports.get(attached["port_id"]) or api.service("network", f"/ports/{attached['port_id']}",
                                                             "port") or {}
        addresses = [ip["ip_address"] for ip in port.get("fixed_ips") or []]
        label.append(f"  {attached.get('interface', 'eth0')} {', '.join(addresses) or '-'}")
        fip = fips.get(attached["port_id"])
        label.append(f" ⇄ floating {fip['floating_ip_address']}" if fip else "  (no floating IP)")
        names = [groups.get(g, _short(g)) for g in port.get("security_groups") or []]
        if names:
            label.append(f"  sg: {', '.join(names)}", style="dim")
    return label


def _loadbalancer(api: Api, tree: Tree, lb_id: str, fips: dict[str, Any]) -> None:
    lb = api.service("load-balancer", f"/lbaas/loadbalancers/{lb_id}", "loadbalancer")
    if lb is None:
        tree.add(Text(f"load balancer {_short(lb_id)} (gone)", style="dim"))
        return
    fip = fips.get(lb.get("vip_port_id"))
    node = tree.add(Text.assemble((f"load balancer {lb['name']}", "bold"), " ",
                                  _status(lb.get("provisioning_status")), f"/{lb.get('operating_status')}",
                                  f"  VIP {lb.get('vip_address')}",
                                  f" ⇄ floating {fip['floating_ip_address']}" if fip else ""))
    for ref in lb.get("listeners") or []:
        listener = api.service("load-balancer", f"/lbaas/listeners/{ref['id']}", "listener") or {}
        pool_id = listener.get("default_pool_id")
        branch = node.add(Text(f"listener {listener.get('protocol')}:{listener.get('protocol_port')}"))
        if not pool_id:
            continue
        pool = api.service("load-balancer", f"/lbaas/pools/{pool_id}", "pool") or {}
        monitor = ""
        if pool.get("healthmonitor_id"):
            hm = api.service("load-balancer", f"/lbaas/healthmonitors/{pool['healthmonitor_id']}",
                             "healthmonitor") or {}
            monitor = f", health monitor {hm.get('type')} every {hm.get('delay')} s"
        members = api.service("load-balancer", f"/lbaas/pools/{pool_id}/members", "members") or []
        pool_node = branch.add(Text(f"pool {pool.get('protocol')} {pool.get('lb_algorithm')}{monitor}"))
        for m in members:
            pool_node.add(Text.assemble(f"member {m.get('address')}:{m.get('protocol_port')} ",
                                        _status(m.get("operating_status"))))
        if not members:
            pool_node.add(Text("no members", style="dim"))


def topology_tree(api: Api, cluster: dict[str, Any]) -> Tree:
    """The cluster's topology from the APIs: external network → router → private network
    and subnet → masters, minions and load balancers; then the security groups."""
    resources = (api.coe(_path(cluster["uuid"]) + "/resources") or {}).get("resources") or []
    by_type: dict[str, list[dict[str, Any]]] = {}
    for r in resources:
        if r.get("physical_id") and not str(r.get("status", "")).startswith("DELETE"):
            by_type.setdefault(r["type"], []).append(r)
    template = api.coe(f"/clustertemplates/{quote(cluster['cluster_template_id'], safe='')}") or {}

    root = Tree(Text.assemble((f"cluster {cluster['name']}", "bold"), " ", _status(cluster["status"]),
                              f"  {template.get('coe', '?')}/{template.get('network_driver', '?')}",
                              f"  api {cluster.get('api_address') or '-'}"))

    groups: dict[str, str] = {}
    group_bodies: list[dict[str, Any]] = []
    for r in by_type.get("OS::Neutron::SecurityGroup", []):
        group = api.service("network", f"/security-groups/{r['physical_id']}", "security_group")
        if group:
            groups[group["id"]] = group["name"]
            group_bodies.append(group)

    servers = by_type.get("OS::Nova::Server", [])
    sandboxes = {s["physical_id"]: api.service("netbay", f"/sandboxes/{s['physical_id']}", "sandbox") or {}
                 for s in servers}
    # The private network: the one the cluster made, else the one its nodes sit on.
    net_ids = [r["physical_id"] for r in by_type.get("OS::Neutron::Net", [])]
    if not net_ids:
        net_ids = list(dict.fromkeys(p["network_id"] for sb in sandboxes.values() for p in sb.get("ports") or []))
    ports = {p["id"]: p for n in net_ids for p in api.service("network", "/ports", "ports", network_id=n) or []}
    fips = {f["port_id"]: f for f in api.service("network", "/floatingips", "floatingips") or [] if f.get("port_id")}

    routers = [api.service("network", f"/routers/{r['physical_id']}", "router")
               for r in by_type.get("OS::Neutron::Router", [])]
    routers = [r for r in routers if r]
    parent = root
    if routers:
        router = routers[0]
        gateway = router.get("external_gateway_info") or {}
        if gateway.get("network_id"):
            ext = api.service("network", f"/networks/{gateway['network_id']}", "network") or {}
            cidrs = []
            for sid in ext.get("subnets") or []:
                sub = api.service("network", f"/subnets/{sid}", "subnet")
                if sub:
                    cidrs.append(sub["cidr"])
            parent = root.add(Text.assemble((f"external network {ext.get('name', _short(gateway['network_id']))}",
                                             "bold cyan"), f"  {', '.join(cidrs)}"))
        gw_ips = [ip["ip_address"] for ip in gateway.get("external_fixed_ips") or []]
        parent = parent.add(Text.assemble((f"router {router['name']}", "bold"), " ", _status(router.get("status")),
                                          f"  gateway {', '.join(gw_ips) or '-'}",
                                          ", SNAT" if gateway.get("enable_snat") else ""))
    else:
        parent = root.add(Text("no router (the cluster uses an existing network)", style="dim"))

    params = (api.coe(_path(cluster["uuid"]) + "/template") or {}).get("parameters") or {}
    lb_ids = [r["physical_id"] for r in by_type.get("OS::Octavia::LoadBalancer", [])]
    for net_id in net_ids:
        net = api.service("network", f"/networks/{net_id}", "network") or {"name": _short(net_id), "subnets": []}
        net_node = parent.add(Text.assemble((f"network {net['name']}", "bold cyan"), f"  {net_id}",
                                            f"  mtu {net.get('mtu')}" if net.get("mtu") else ""))
        for sid in net.get("subnets") or []:
            sub = api.service("network", f"/subnets/{sid}", "subnet")
            if sub:
                net_node.add(Text(f"subnet {sub['name']} {sub['cidr']}  gateway {sub.get('gateway_ip') or '-'}"))
        if params.get("flannel_network_cidr"):
            net_node.add(Text(f"container network: flannel {params.get('flannel_backend')} "
                              f"{params['flannel_network_cidr']}, a /{params.get('flannel_network_subnetlen')} "
                              "per node", style="magenta"))
        on_net = [s for s in servers
                  if any(p["network_id"] == net_id for p in sandboxes[s["physical_id"]].get("ports") or [])
                  or not sandboxes[s["physical_id"]]]
        for role in ("master", "minion"):
            nodes = [s for s in on_net if ("master" in s["name"]) == (role == "master")]
            branch = net_node.add(Text(f"{role}s ({len(nodes)})", style="bold"))
            for s in nodes:
                branch.add(_node_label(api, s, ports, fips, groups))
        if lb_ids:
            branch = net_node.add(Text(f"load balancers ({len(lb_ids)})", style="bold"))
            for lb_id in lb_ids:
                _loadbalancer(api, branch, lb_id, fips)

    sg_node = root.add(Text(f"security groups ({len(group_bodies)})", style="bold"))
    for group in group_bodies:
        sg_node.add(Text(f"{group['name']}: {_rules(group)}"))
    return root


@app.command("topology")
def topology(cluster: str = typer.Argument(..., help="Name or uuid.")) -> None:
    """Print the cluster's topology as a tree: external network, router, private network
    and subnet, masters and minions with their addresses, load balancers, security groups."""
    api = Api()
    item = api.request("GET", _path(cluster))
    console.print(Group(topology_tree(api, item)))
