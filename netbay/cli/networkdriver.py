"""``netbay network-driver``: the Network Driver Matrix and the Label Matrix.

``list`` and ``show`` ask the server (its operator may have narrowed the allowed
drivers); ``docs`` prints the Markdown reference from this installation's
registry, with no server.
"""

from __future__ import annotations

import typer
from rich.console import Console

from netbay.cli.coeclient import CoeClient, cell, rows_table

app = typer.Typer(help="Container network drivers: which COE uses which, and their labels.",
                  no_args_is_help=True)
console = Console()


@app.command("list")
def list_drivers() -> None:
    """The Network Driver Matrix (per COE) and every driver."""
    doc = CoeClient().request("GET", "/network-drivers")
    console.print(rows_table("network drivers by COE", doc["coes"],
                             ["coe", "default_network_driver", "supported_network_drivers",
                              "allowed_network_drivers"]))
    rows = [{**d, "labels": [label["key"] for label in d["labels"]]} for d in doc["network_drivers"]]
    console.print(rows_table("network drivers", rows, ["name", "coes", "default_for", "labels", "summary"]))
    console.print(rows_table("labels every cluster reads", doc["common_labels"],
                             ["key", "type", "default", "help"]))


@app.command("show")
def show(name: str = typer.Argument(..., help="Driver name, e.g. flannel.")) -> None:
    """One driver and its Label Matrix."""
    d = CoeClient().request("GET", f"/network-drivers/{name}")["network_driver"]
    console.print(f"[bold]{d['name']}[/]: {d['summary']}")
    console.print(f"COEs: {cell(d['coes'])}; default for: {cell(d['default_for']) or '-'}; "
                  f"allowed for: {cell(d['allowed_for']) or '-'}")
    if d.get("notes"):
        console.print(d["notes"])
    rows = [{**label, "allowed": _allowed(label)} for label in d["labels"]]
    console.print(rows_table(f"labels of {d['name']}", rows, ["key", "type", "default", "allowed", "help"]))


def _allowed(label: dict) -> str:
    parts = list(label.get("allowed") or [])
    parts += [f"{value} (refused)" for value in label.get("refused") or {}]
    if label.get("minimum") is not None or label.get("maximum") is not None:
        parts.append(f"{label.get('minimum')}..{label.get('maximum')}")
    return ", ".join(parts)


@app.command("docs")
def docs() -> None:
    """Print docs/network-drivers.md as generated from the registry."""
    from netbay.coe.docs import render

    typer.echo(render(), nl=False)
