"""rich's consoles, made on first use: a command's ``--help`` and its failures need no rich
(its import alone costs what a whole ``docker --help`` does)."""

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
