"""``netbay doctor``: what this host's kernel offers and which driver modes it can realize.

Reads the kernel's build configuration and, as root, probes each feature in a
throwaway namespace (``netbay.dataplane.features``); then checks every network
driver mode the registry declares (``DriverSpec.modes``) against the features it needs
(``DriverSpec.kernel_needs``), the same declaration the API refuses unrealizable modes
with: no label is read here. On ``--backend openstack``, also whether this host can bind
the cloud's ports (:func:`netbay.runtime.vif.host_report`): its Open vSwitch database
reachable, a chassis, the integration bridge, the vif_types netbay plugs; informative (a
host may run ``--plug fabric``), not a failure.
"""

from __future__ import annotations

import json
import os
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from netbay.drivers import registry

console = Console()

# Network API extensions whose realization needs a kernel feature:
# (alias, feature, what for, whether netbay's dataplane realizes it where the feature is).
EXTENSIONS: tuple[tuple[str, str, str, bool], ...] = (
    ("trunk", "vlan", "subports as 802.1Q VLAN devices on the parent port", False),
)


def extensions_report(available: dict[str, bool]) -> list[dict[str, object]]:
    """Every such extension: served by the API always, realized only with its feature."""
    rows = []
    for alias, feature, why, implemented in EXTENSIONS:
        missing = not available.get(feature, False)
        reason = (f"missing {feature}" if missing else
                  "" if implemented else "netbay's dataplane does not realize it yet")
        rows.append({"extension": alias, "needs": feature, "for": why, "ok": not reason, "reason": reason})
    return rows


def modes_report(available: dict[str, bool]) -> list[dict[str, Any]]:
    """Every driver mode with the features it needs and whether this host has them."""
    base = [f for f, _ in registry.BASE_KERNEL_NEEDS]
    rows = []
    for driver in registry.DRIVERS.values():
        for labels in driver.modes:   # each mode as the driver declares it
            needs = [f for f, _ in driver.kernel_needs(labels)]
            missing = [f for f in base + needs if not available.get(f, False)]
            mode = ", ".join(f"{k}={v}" for k, v in labels.items()) or "direct routes (no encapsulation)"
            rows.append({"driver": driver.name, "mode": mode, "needs": needs, "missing": missing, "ok": not missing})
    return rows


def big_tcp_table(decision: object) -> Table:
    """The BIG TCP decision per path and the probe's figures behind it."""
    from netbay.dataplane import bigtcp

    assert isinstance(decision, bigtcp.Decision)
    took = f", probe {decision.probe_ms:.0f} ms" if decision.probe_ms is not None else ""
    table = Table(title=f"BIG TCP per path (192 KiB GSO: on where its packets arrive whole and its stream "
                        f"is >= {bigtcp.SPEED_FLOOR:.0%} of 64 KiB's; {decision.host}{took}; "
                        f"cache {bigtcp.cache_path()}; override: {bigtcp.ENV})")
    for col in ("path", "BIG TCP", "decided by", "Gbit/s 64K / 192K", "packet B 64K / 192K", "note"):
        table.add_column(col)

    def pair(a: object, b: object, fmt: str) -> str:
        return "-" if a is None or b is None else f"{a:{fmt}} / {b:{fmt}}"

    for path, d in decision.paths.items():
        table.add_row(path, "[green]on[/]" if d.big else "off", d.source, pair(d.default_gbps, d.big_gbps, ".1f"),
                      pair(d.default_packet, d.big_packet, "d"), d.note)
    return table


def doctor(as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
           backend: str = typer.Option(None, "--backend", help="Network backend to check: embedded or "
                                       "openstack (default: $NETBAY_NETWORK_BACKEND, else embedded)."),
           os_cloud: str = typer.Option(None, "--os-cloud", help="clouds.yaml entry for the openstack "
                                        "backend (default: $OS_CLOUD)."),
           ovsdb: str = typer.Option("unix:/run/openvswitch/db.sock", "--ovsdb", envvar="NETBAY_OVSDB",
                                     help="This host's Open vSwitch database (the openstack backend's binding).")
           ) -> None:
    """The network backend in use and whether it answers; kernel features for the embedded
    dataplane, and the driver modes this host can run."""
    from netbay.backends import report as backends
    from netbay.dataplane import bigtcp, features

    try:
        network_backend = backends.report(backend, os_cloud)
    except ValueError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None

    binding = None
    if network_backend["backend"] == "openstack":
        from netbay.runtime.vif import host_report

        binding = host_report(ovsdb)
    found = features.detect(probe=os.geteuid() == 0)
    try:
        big_tcp = bigtcp.decide(probe=os.geteuid() == 0)
    except ValueError as exc:   # a malformed NETBAY_BIG_TCP
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    available = {name: f.available for name, f in found.items()}
    modes = modes_report(available)
    if as_json:
        console.print_json(json.dumps({
            "features": {n: {"available": f.available, "how": f.how, "detail": f.detail} for n, f in found.items()},
            "base_needs": [f for f, _ in registry.BASE_KERNEL_NEEDS],
            "modes": modes,
            "big_tcp": {**big_tcp.as_dict(), "cache": bigtcp.cache_path()},
            "extensions": extensions_report(available),
            "network_backend": network_backend,
            **({"binding": binding} if binding is not None else {}),
        }))
    else:
        verdict = "[green]reachable[/]" if network_backend["reachable"] else "[red]unreachable[/]"
        console.print(f"network backend: [bold]{network_backend['backend']}[/] ({verdict}): "
                      f"{network_backend['detail']}")
        if binding is not None:
            can = "[green]can bind[/]" if binding["ok"] else "[red]cannot bind[/]"
            console.print(f"this host {can} the cloud's ports:")
            for c in binding["checks"]:
                console.print(f"  {'[green]yes[/]' if c['ok'] else '[red]no[/]'}: {escape(c['line'])}",
                              soft_wrap=True)
        helps = {s.name: s.help for s in features.FEATURES}
        table = Table(title="kernel features")
        for col in ("feature", "available", "for", "how", "detail"):
            table.add_column(col)
        for name, f in found.items():
            table.add_row(name, "[green]yes[/]" if f.available else "[red]no[/]", helps.get(name, ""), f.how, f.detail)
        console.print(table)
        table = Table(title="network driver modes on this host (every cluster also needs: "
                            + ", ".join(f for f, _ in registry.BASE_KERNEL_NEEDS) + ")")
        for col in ("driver", "mode", "needs", "realizable"):
            table.add_column(col)
        for row in modes:
            verdict = "[green]yes[/]" if row["ok"] else f"[red]no: missing {', '.join(row['missing'])}[/]"
            table.add_row(str(row["driver"]), str(row["mode"]), ", ".join(row["needs"]) or "-", verdict)
        console.print(table)
        console.print(big_tcp_table(big_tcp))
        table = Table(title="network API extensions that need a kernel feature (the API serves them anyway)")
        for col in ("extension", "needs", "for", "realized"):
            table.add_column(col)
        for row in extensions_report(available):
            verdict = "[green]yes[/]" if row["ok"] else f"[red]no: {row['reason']} (status DEGRADED)[/]"
            table.add_row(str(row["extension"]), str(row["needs"]), str(row["for"]), verdict)
        console.print(table)
    if not network_backend["reachable"]:
        raise typer.Exit(1)
    base_missing = [f for f, _ in registry.BASE_KERNEL_NEEDS if not available.get(f, False)]
    if base_missing:
        console.print(f"[red]this host cannot run the embedded dataplane: missing {', '.join(base_missing)}[/]")
        raise typer.Exit(1)
