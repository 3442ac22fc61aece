"""rich's consoles, made on first use: a command's ``--help`` and its failures need no rich
(its import alone costs what a whole ``docker --help`` does); and the one colouring of a
status word every table and tree uses."""

from __future__ import annotations

from typing import Any


class LazyConsole:
    """A ``rich.console.Console`` made when first printed to."""

    def __init__(self, stderr: bool = False) -> None:
        self._stderr = stderr
        self._real: Any = None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if self._real is None:
            from rich.console import Console

            # Messages on stderr are one line each, however narrow the terminal (or the
            # 80 columns rich assumes without one): a hard wrap would split a path.
            self._real = Console(stderr=self._stderr, soft_wrap=self._stderr)
        return getattr(self._real, name)


# A status is coloured by how it ends: Heat's CREATE_COMPLETE and a cluster's
# UPDATE_IN_PROGRESS, Neutron's ACTIVE and DOWN, Octavia's ONLINE and ERROR alike.
STATUS_STYLES = {"COMPLETE": "green", "IN_PROGRESS": "yellow", "FAILED": "bold red", "ACTIVE": "green",
                 "ONLINE": "green", "BUILD": "yellow", "DOWN": "yellow", "ERROR": "bold red", "OFFLINE": "red"}


def status_text(text: str | None) -> Any:
    """``text`` as a rich ``Text`` in its status's colour (dim when none applies); never markup."""
    from rich.text import Text

    text = text or ""
    style = next((s for suffix, s in STATUS_STYLES.items() if text.endswith(suffix)), "dim")
    return Text(text, style=style)
