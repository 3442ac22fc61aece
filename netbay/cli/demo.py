"""``netbay demo``: a short walk-through against a running netbay, as tables."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

console = Console()


def connect():  # noqa: ANN201
    """An authenticated openstacksdk connection from OS_* variables or OS_CLOUD + clouds.yaml.

    It logs in at once, so a wrong password or a server that is not there is said
    plainly instead of surfacing later as a missing catalog endpoint."""
    import logging

    import openstack
    from keystoneauth1 import exceptions as ksa

    logging.getLogger("keystoneauth").setLevel(logging.ERROR)  # its discovery warnings repeat ours
    try:
        conn = openstack.connect()
    except Exception as exc:  # noqa: BLE001 - the SDK raises several kinds for missing config
        typer.echo(f"error: cannot connect: {exc}; source the openrc that `netbay up` wrote, "
                   "or set OS_CLOUD with a clouds.yaml", err=True)
        raise typer.Exit(1) from None
    url = conn.config.get_auth_args().get("auth_url", "?")
    try:
        conn.session.get_token()
    except (ksa.Unauthorized, ksa.NotFound) as exc:
        if isinstance(exc, ksa.NotFound):
            typer.echo(f"error: no netbay at {url} (it answers, but has no identity API there)", err=True)
        else:
            typer.echo(f"error: authentication failed at {url}: check OS_USERNAME, OS_PASSWORD "
                       "and OS_PROJECT_NAME (or source the openrc `netbay up` wrote)", err=True)
        raise typer.Exit(1) from None
    except (ksa.ConnectFailure, ksa.ConnectTimeout, ksa.DiscoveryFailure, ksa.UnknownConnectionError):
        typer.echo(f"error: no netbay at {url}: nothing answers there (is `netbay up` running?)", err=True)
        raise typer.Exit(1) from None
    return conn


def _table(title: str, rows: list[dict], columns: list[str]) -> Table:
    table = Table(*columns, title=title, title_justify="left")
    for row in rows:
        table.add_row(*[_cell(row.get(c)) for c in columns])
    return table


def _cell(value: object) -> str:
    if isinstance(value, list):
        return "\n".join(_cell(v) for v in value)
    if isinstance(value, dict):
        return ", ".join(f"{k}={v}" for k, v in value.items())
    return "" if value is None else str(value)


def demo(prefix: str = typer.Option("demo", help="Name prefix for what the walk-through creates."),
         keep: bool = typer.Option(False, help="Keep the resources instead of deleting them.")) -> None:
    """Create a network, subnet, router with gateway, ports and a floating IP; print them."""
    conn = connect()
    net = conn.network
    public = net.find_network("public")
    if public is None:
        console.print("[red]no external network 'public'[/]: start netbay with `netbay up`")
        raise typer.Exit(1)
    made: list = []
    try:
        network = net.create_network(name=f"{prefix}-net")
        made.append(network)
        subnet = net.create_subnet(name=f"{prefix}-subnet", network_id=network.id, ip_version=4,
                                   cidr="10.0.0.0/24")
        router = net.create_router(name=f"{prefix}-router",
                                   external_gateway_info={"network_id": public.id})
        made.append(router)
        net.add_interface_to_router(router, subnet_id=subnet.id)
        ports = [net.create_port(name=f"{prefix}-port-{i}", network_id=network.id) for i in (1, 2)]
        made.extend(ports)
        fip = net.create_ip(floating_network_id=public.id, port_id=ports[0].id)
        made.append(fip)

        console.print(_table("networks", [n.to_dict() for n in net.networks()],
                             ["name", "id", "is_router_external", "mtu", "status"]))
        console.print(_table("subnets", [s.to_dict() for s in net.subnets()],
                             ["name", "cidr", "gateway_ip", "allocation_pools"]))
        router = net.get_router(router.id)
        console.print(_table("routers", [router.to_dict()], ["name", "status", "external_gateway_info"]))
        console.print(_table("ports", [p.to_dict() for p in net.ports(network_id=network.id)],
                             ["name", "mac_address", "fixed_ips", "device_owner", "status"]))
        console.print(_table("floating IPs", [net.get_ip(fip.id).to_dict()],
                             ["floating_ip_address", "fixed_ip_address", "port_id", "router_id", "status"]))
    finally:
        if not keep:
            _cleanup(net, made)


def _cleanup(net, made: list) -> None:  # noqa: ANN001
    from openstack.network.v2.floating_ip import FloatingIP
    from openstack.network.v2.network import Network
    from openstack.network.v2.port import Port
    from openstack.network.v2.router import Router

    for item in reversed(made):
        if isinstance(item, FloatingIP):
            net.delete_ip(item, ignore_missing=True)
        elif isinstance(item, Port):
            net.delete_port(item, ignore_missing=True)
        elif isinstance(item, Router):
            for port in net.ports(device_id=item.id, device_owner="network:router_interface"):
                for ip in port.fixed_ips:
                    net.remove_interface_from_router(item, subnet_id=ip["subnet_id"])
            net.delete_router(item, ignore_missing=True)
        elif isinstance(item, Network):
            net.delete_network(item, ignore_missing=True)
    console.print("[dim]walk-through resources deleted[/]")
