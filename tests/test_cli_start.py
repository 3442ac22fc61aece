"""The ``netbay`` command starts at once: a command imports only what it needs.

Issue 30: the client commands a user types again and again (``pod exec``, ``pod list``,
``k8s exec``, ``cluster connectivity`` …) never import SQLAlchemy, FastAPI, the store or
the dataplane's kernel code, and ``--help`` imports no HTTP client and no rich. The
guard is the list of modules a real run loaded (not the time, which a loaded machine
blurs); each run is a fresh interpreter, as a user's is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import free_port

SERVER_SIDE = ("sqlalchemy", "fastapi", "uvicorn", "alembic", "netbay.store", "netbay.api", "netbay.network",
               "netbay.agent", "openstack", "pyroute2", "nftables",
               "netbay.cli.server")   # serve/up/down/db: their options cost every command that built them
# A network driver's package declares its labels, checks and defaults (pure data: the CLI
# parses labels with them); its kernel code is ``<pkg>.driver``, loaded only to build one.
DRIVER_KERNEL_CODE = ".driver"
# Two leaves of the dataplane package are plain names (stdlib only): a pod's namespace name
# and whether it exists. Every other dataplane module talks to the kernel.
DATAPLANE_LEAVES = {"netbay.dataplane", "netbay.dataplane.names", "netbay.dataplane.netns"}
HELP_FREE = ("rich", "httpx", "urllib3", "netbay.client", "pydantic")
# The commands typed most: their parameters are plain text, coerced without pydantic
# (netbay.cli.lazy.plain_strings).
TYPED_MOST = {("pod", "exec"), ("pod", "list"), ("k8s", "exec")}

CLIENT_COMMANDS = [
    ("pod", "exec", "web", "--", "true"), ("pod", "list"), ("pod", "show", "web"),
    ("k8s", "exec", "default/web", "--cluster", "c", "--", "true"),
    ("cluster", "list"), ("cluster", "connectivity", "c"), ("cluster", "show", "c"),
    ("cluster-template", "list"), ("sandbox", "list"), ("sandbox", "exec", "s", "--", "true"),
    ("container", "list"), ("container-network", "list"),
]

PROBE = """
import atexit, json, sys
out, sys.argv = sys.argv[1], ["netbay", *sys.argv[2:]]
atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=open(out, "w")))
from netbay.cli.main import app
app()
"""


def loaded(tmp_path, *args: str) -> tuple[set[str], subprocess.CompletedProcess]:
    """The modules a ``netbay ARGS`` run imported (its server is one that does not answer)."""
    out = tmp_path / "modules.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    env.update(OS_AUTH_URL=f"http://127.0.0.1:{free_port()}/identity/v3", OS_USERNAME="u", OS_PASSWORD="p",
               OS_PROJECT_NAME="p")
    r = subprocess.run([sys.executable, "-c", PROBE, str(out), *args], env=env, capture_output=True, text=True,
                       timeout=60)
    return set(json.loads(out.read_text())), r


def heavy(modules: set[str], banned: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in banned or any(m == b or m.startswith(b + ".")
                                                                          for b in banned)
                  or (m.startswith("netbay.dataplane") and m not in DATAPLANE_LEAVES)
                  or (m.startswith("netbay.drivers.") and m.endswith(DRIVER_KERNEL_CODE)))


@pytest.mark.parametrize("args", CLIENT_COMMANDS, ids=" ".join)
def test_a_client_command_imports_no_server_side_code(tmp_path, args):
    modules, r = loaded(tmp_path, *args)
    assert r.returncode == 1 and "no netbay at" in r.stderr, r.stderr   # it really ran, up to the login
    assert "netbay.client.sync" in modules   # the probe really lists what was loaded
    assert heavy(modules, SERVER_SIDE + (("pydantic",) if args[:2] in TYPED_MOST else ())) == []


@pytest.mark.parametrize("args", [(), ("pod", "exec"), ("k8s", "exec"), ("pod", "list"),
                                  ("sandbox", "create")], ids=lambda a: " ".join(a) or "netbay")
def test_help_imports_neither_an_http_client_nor_rich(tmp_path, args):
    modules, r = loaded(tmp_path, *args, "--help")
    assert r.returncode == 0 and "Usage:" in r.stdout, r.stderr
    assert "typer" in modules
    assert heavy(modules, SERVER_SIDE + HELP_FREE) == []


def test_netbay_help_lists_every_command_with_its_own_help_line():
    """The lazy table's help lines are the commands' own (no drift between the two)."""
    import typer

    from netbay.cli.main import app

    group = typer.main.get_command(app)
    ctx = typer.Context(group)
    for name, entry in group.lazy.items():
        real = group.loaded(ctx, name)
        assert " ".join((real.help or "").split("\n\n")[0].split()) == entry.help, name
