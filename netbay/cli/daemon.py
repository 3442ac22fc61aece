"""What every long-running netbay process sets up alike: its log lines and its root check.

The server (``netbay up``/``serve``), the dataplane agent and the CNI and Docker plugin
daemons log one format to stderr at ``NETBAY_LOG_LEVEL`` (default ``INFO``), with the
libraries that would log a line per routine call held at WARNING; each needs root for
its own reason, said in one line when it is missing (as do ``netbay down`` and
``netbay cluster connectivity``, which use the same check). ``SIGUSR1`` writes every
thread's stack to the log.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import signal
import sys
from typing import Any

import typer

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# httpx: a line per API call (the agent's and the daemons' long polls, every 30 s);
# alembic: a line per migration step at every start.
QUIET = ("alembic", "httpx")


def configure_logging(console: Any) -> None:
    """Log lines as every netbay daemon writes them; an unknown level is one line, not a traceback."""
    level = os.environ.get("NETBAY_LOG_LEVEL", "INFO").upper()
    if level not in LEVELS:
        console.print(f"[red]error:[/] NETBAY_LOG_LEVEL={level!r} is not a log level: one of {', '.join(LEVELS)}")
        raise typer.Exit(2)
    logging.basicConfig(level=level, format=FORMAT, stream=sys.stderr)
    for name in QUIET:
        logging.getLogger(name).setLevel(logging.WARNING)
    # SIGUSR1: every thread's stack into the log, and on it goes (as dockerd dumps its
    # goroutines): a daemon that went quiet says where it waits.
    faulthandler.register(signal.SIGUSR1, all_threads=True)


def require_root(console: Any, what: str) -> None:
    """Exit with one line saying why ``what`` needs root, unless running as root."""
    if os.geteuid() != 0:
        console.print(f"[red]error:[/] {what}")
        raise typer.Exit(1)
