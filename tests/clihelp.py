"""The ``netbay`` CLI as a user runs it (with OS_* credentials: in a subprocess, or in the
test process), and checks of what it writes (the topology SVG)."""

from __future__ import annotations

import os
import subprocess
import sys
import traceback
import xml.etree.ElementTree as ET
from pathlib import Path
from tests import zygote


SVG = "{http://www.w3.org/2000/svg}"


def server_env(server) -> dict[str, str]:
    """``OS_*`` for the ``netbay`` CLI as ``server``'s bootstrap admin (``Server.cli_env``), and a wide terminal."""
    return {**server.cli_env(), "COLUMNS": "200"}


def cli(server, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """``netbay ARGS`` against ``server`` in a process of its own (the dataplane scenarios)."""
    env = {**os.environ, **server_env(server)}
    env.pop("OS_CLOUD", None)
    return zygote.run([sys.executable, "-m", "netbay.cli.main", *args], env=env, capture_output=True,
                      text=True, timeout=timeout)


def invoke(*args: str, env: dict[str, str | None] | None = None,
           input: str | None = None) -> subprocess.CompletedProcess:  # noqa: A002 - as subprocess.run
    """``netbay ARGS`` in this process (typer's ``CliRunner`` on the app, ``env`` laid over
    ``os.environ``; ``None`` unsets): the same command, output and exit status as a process
    gives, without the 1.5-2 s of CPU (imports) a ``netbay`` process start costs. An
    exception the command let out is what a process prints: a traceback on stderr, exit 1.
    Where the process itself is under test (a server, signals, a second instance), run it."""
    from typer.testing import CliRunner

    from netbay.cli.main import app

    _size_consoles({**os.environ, **(env or {})})
    result = CliRunner().invoke(app, list(args), env=env, input=input)
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        stderr += "".join(traceback.format_exception(*result.exc_info))
    return subprocess.CompletedProcess(["netbay", *args], result.exit_code, result.stdout, stderr)


def _size_consoles(env: dict[str, str | None]) -> None:
    """Give the CLI's rich consoles the size a new ``netbay`` process with ``env`` would
    (not a terminal: ``COLUMNS`` × ``LINES``, else 80 × 25). Most are made at their
    module's import, once per test process, and keep the ``COLUMNS`` of that moment —
    80 in an xdist worker, whose environment has ``COLUMNS=80`` — where a process makes
    them anew with its own."""
    from rich.console import Console

    from netbay.cli.out import LazyConsole

    def number(key: str, default: int) -> int:
        value = env.get(key)
        return int(value) if value and value.isdigit() else default

    width, height = number("COLUMNS", 80), number("LINES", 25)
    for name, module in list(sys.modules.items()):
        if name.startswith("netbay.cli.") and module is not None:
            for value in list(vars(module).values()):
                console = value._real if isinstance(value, LazyConsole) else value
                if isinstance(console, Console):
                    console.size = (width, height)


def cli_here(server, *args: str) -> subprocess.CompletedProcess:
    """``netbay ARGS`` against ``server`` in this process (:func:`invoke`), as :func:`cli` runs it."""
    return invoke(*args, env={**server_env(server), "OS_CLOUD": None})


def ok(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def svg_boxes(path: Path) -> list[tuple[str, tuple[float, float, float, float], list[str]]]:
    """Parse the topology SVG (it must be valid XML): each box's kind, rectangle and the
    lines of text drawn in it."""
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG}svg", root.tag
    boxes = []
    for g in root.iter(f"{SVG}g"):
        rect = g.find(f"{SVG}rect")
        assert rect is not None
        box = tuple(float(rect.get(k)) for k in ("x", "y", "width", "height"))
        boxes.append((g.get("class") or "", box, [t.text or "" for t in g.iter(f"{SVG}text")]))
    return boxes


def check_svg_readable(path: Path) -> str:
    """No two boxes overlap and every label fits its box (monospace, 12 px); returns all
    the picture's text."""
    boxes = svg_boxes(path)
    assert boxes, "no boxes drawn"
    for i, (_, (x, y, w, h), lines) in enumerate(boxes):
        for line in lines:
            assert len(line) * 7.3 + 16 <= w + 0.5, f"label {line!r} wider than its box ({w})"
        for _, (x2, y2, w2, h2), other in boxes[i + 1:]:
            apart = x + w <= x2 or x2 + w2 <= x or y + h <= y2 or y2 + h2 <= y
            assert apart, f"boxes overlap: {lines[:1]} and {other[:1]}"
    root = ET.parse(path).getroot()
    return "\n".join((t.text or "") for t in root.iter(f"{SVG}text")) + "\n" + \
        "\n".join((t.text or "") for t in root.iter(f"{SVG}title"))
