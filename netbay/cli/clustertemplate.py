"""``netbay cluster-template``: create, list, show, update and delete cluster templates.

Labels parse exactly as python-magnumclient parses them (``netbay.coe.labels``);
``update`` takes magnumclient's ``OP ATTRIBUTE=VALUE…`` and sends the same patch.
"""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.console import Console

from netbay.cli.coeclient import CoeClient, err, fields_table, rows_table
from netbay.coe.labels import LabelSyntaxError, format_labels

app = typer.Typer(help="Cluster templates (Magnum): COE, network driver and labels.", no_args_is_help=True)
console = Console()


def _labels(values: list[str] | None, fixed_subnet_cidr: str | None) -> dict[str, str]:
    try:
        labels = format_labels(values or [])
    except LabelSyntaxError as exc:
        err.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    if fixed_subnet_cidr:
        labels["fixed_subnet_cidr"] = fixed_subnet_cidr
    return labels


@app.command("create")
def create(
    name: str = typer.Argument(..., help="Name of the template."),
    coe: str = typer.Option(..., "--coe", help="kubernetes, swarm, swarm-mode or mesos."),
    network_driver: str = typer.Option(None, "--network-driver", help="Default: the COE's default driver."),
    labels: list[str] = typer.Option(None, "--labels", help="KEY1=VALUE1,KEY2=VALUE2… (repeatable)."),
    external_network: str = typer.Option(None, "--external-network", help="External network name or id."),
    fixed_network: str = typer.Option(None, "--fixed-network", help="An existing private network."),
    fixed_subnet: str = typer.Option(None, "--fixed-subnet", help="An existing private subnet."),
    fixed_subnet_cidr: str = typer.Option(None, "--fixed-subnet-cidr",
                                          help="CIDR of the private subnet netbay makes (label)."),
    dns_nameserver: str = typer.Option(None, "--dns-nameserver", help="DNS server(s), comma-separated."),
    image: str = typer.Option(None, "--image", help="Image name or id (informational here)."),
    keypair: str = typer.Option(None, "--keypair", help="SSH keypair: one of yours (openstack keypair create)."),
    flavor: str = typer.Option(None, "--flavor"),
    master_flavor: str = typer.Option(None, "--master-flavor"),
    docker_volume_size: int = typer.Option(None, "--docker-volume-size", min=1),
    master_lb_enabled: bool = typer.Option(False, "--master-lb-enabled", help="Load balancers for API and etcd."),
    floating_ip: bool = typer.Option(None, "--floating-ip-enabled/--floating-ip-disabled",
                                     help="Floating IPs for the nodes (default: enabled)."),
    tls_disabled: bool = typer.Option(False, "--tls-disabled"),
    public: bool = typer.Option(False, "--public", help="Visible to every project (admin only)."),
    hidden: bool = typer.Option(False, "--hidden", help="Left out of lists (admin only)."),
    server_type: str = typer.Option(None, "--server-type", help="vm or bm."),
) -> None:
    """Create a cluster template."""
    body: dict[str, Any] = {"name": name, "coe": coe, "network_driver": network_driver,
                            "external_network_id": external_network, "fixed_network": fixed_network,
                            "fixed_subnet": fixed_subnet, "dns_nameserver": dns_nameserver, "image_id": image,
                            "keypair_id": keypair, "flavor_id": flavor, "master_flavor_id": master_flavor,
                            "docker_volume_size": docker_volume_size, "floating_ip_enabled": floating_ip,
                            "server_type": server_type}
    body = {k: v for k, v in body.items() if v is not None}
    parsed = _labels(labels, fixed_subnet_cidr)
    if parsed:
        body["labels"] = parsed
    for key, flag in (("master_lb_enabled", master_lb_enabled), ("tls_disabled", tls_disabled),
                      ("public", public), ("hidden", hidden)):
        if flag:
            body[key] = True
    template = CoeClient().request("POST", "/clustertemplates", json=body)
    console.print(fields_table(f"cluster template {template['name']}", template))
    if template.get("labels_ignored"):
        err.print(f"[yellow]note:[/] no part of a {template['network_driver']} cluster reads the label(s) "
                  f"{', '.join(template['labels_ignored'])}; they are kept but ignored")


@app.command("list")
def list_templates() -> None:
    """List the cluster templates you can use."""
    rows = CoeClient().request("GET", "/clustertemplates")["clustertemplates"]
    console.print(rows_table("cluster templates", rows,
                             ["uuid", "name", "coe", "network_driver", "labels", "public"]))


@app.command("show")
def show(template: str = typer.Argument(..., help="Name or uuid.")) -> None:
    """Show a cluster template."""
    item = CoeClient().request("GET", f"/clustertemplates/{template}")
    console.print(fields_table(f"cluster template {item['name']}", item))


@app.command("delete")
def delete(templates: list[str] = typer.Argument(..., help="Names or uuids.")) -> None:
    """Delete cluster templates."""
    client = CoeClient()
    for template in templates:
        client.request("DELETE", f"/clustertemplates/{template}")
        console.print(f"deleted cluster template {template}")


def patch_from_args(op: str, attributes: list[str]) -> list[dict[str, Any]]:
    """magnumclient's ``args_array_to_patch``: values JSON-decoded when they can be;
    ``labels=K=V,…`` sent as the ``str()`` of the parsed dict."""
    if op not in ("add", "replace", "remove"):
        raise typer.BadParameter(f"Unknown PATCH operation: {op}")
    ops: list[dict[str, Any]] = []
    for attr in attributes:
        path = attr if attr.startswith("/") else "/" + attr
        if op == "remove":
            ops.append({"op": op, "path": path})
            continue
        key, sep, raw = path.partition("=")
        if not sep:
            raise typer.BadParameter(f'Attributes must be a list of PATH=VALUE not "{attr}"')
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        if key == "/labels":
            try:
                value = str(format_labels([raw if isinstance(value, str) else str(value)]))
            except LabelSyntaxError as exc:
                raise typer.BadParameter(str(exc)) from None
        ops.append({"op": op, "path": key, "value": value})
    return ops


@app.command("update")
def update(
    template: str = typer.Argument(..., help="Name or uuid."),
    op: str = typer.Argument(..., help="add, replace or remove."),
    attributes: list[str] = typer.Argument(..., help="ATTRIBUTE=VALUE (remove: ATTRIBUTE); labels/KEY=VALUE."),
) -> None:
    """Update a cluster template with a JSON patch, as `magnum cluster-template-update` does."""
    ops = patch_from_args(op, attributes)
    item = CoeClient().request("PATCH", f"/clustertemplates/{template}", json=ops)
    console.print(fields_table(f"cluster template {item['name']}", item))
