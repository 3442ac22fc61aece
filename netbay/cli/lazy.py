"""The ``netbay`` command's sub-commands, imported only when one is run.

WHY: most of netbay's commands are clients of a running server (``pod exec``, ``pod
list``, ``cluster connectivity`` …) that a user types again and again; importing every
command's module (and with them SQLAlchemy, the store, the dataplane) made each of them
pay for all the others, 0.6–1.5 s before the first byte. A :class:`LazyGroup` knows each
sub-command by its module, attribute and one-line help: listing them (``netbay --help``)
imports none, running one imports that one.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup


@dataclass(frozen=True)
class Lazy:
    """A sub-command: ``attribute`` of ``module``, a ``typer.Typer`` (a group of commands)
    or a function (one command); ``help`` is its line in ``netbay --help``."""
    module: str
    attribute: str
    help: str

    def load(self, name: str) -> Any:
        obj = getattr(importlib.import_module(self.module), self.attribute)
        command: Any
        if isinstance(obj, typer.Typer):
            command = typer.main.get_group(obj)   # a group even with one command (``tap capture``)
        else:
            one = typer.Typer(rich_markup_mode=None, add_completion=False)   # completion is the group's
            one.command(name)(obj)
            command = typer.main.get_command(one)
        command.name = name
        plain(command)
        return command


def plain(command: Any) -> None:
    """Help as click writes it, without rich: rich's import alone costs what a whole
    ``docker --help`` does, and the help texts use no markup."""
    if hasattr(command, "rich_markup_mode"):
        command.rich_markup_mode = None
    for sub in getattr(command, "commands", {}).values():
        plain(sub)


def plain_strings() -> None:
    """typer coerces every parameter's value (a default shown by ``--help`` too) through a
    pydantic ``TypeAdapter``, and importing pydantic for that costs a command ~100 ms, more
    than the rest of ``netbay pod exec``. A plain ``str``, ``list[str]`` or ``bool`` parameter
    — most of netbay's — needs no schema: it is coerced here; every other kind as typer does.
    Should typer's internals move, nothing is patched (only the start is slower again; the
    import-list test says so)."""
    try:
        from typer import _coercion
        from typer import core as typer_core

        original = typer_core.build_runtime_param
        base = _coercion.RuntimeParam
    except (ImportError, AttributeError):
        return
    if getattr(original, "netbay_plain", False):
        return

    class PlainText(base):  # type: ignore[misc, valid-type]
        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            if self.annotation is bool:
                return _flag(value, param, ctx)
            if isinstance(value, (list, tuple)):
                return [str(v) for v in value]
            return str(value)

    def build(descriptor: Any) -> Any:
        info = descriptor.parameter_info
        if (descriptor.annotation in (str, list[str], bool) and descriptor.file_annotation is None
                and getattr(info, "parser", None) is None and getattr(info, "click_type", None) is None):
            return PlainText(parameter_info=info, annotation=descriptor.annotation)
        return original(descriptor)

    build.netbay_plain = True  # type: ignore[attr-defined]
    typer_core.build_runtime_param = build


def _flag(value: Any, param: Any, ctx: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "t", "yes", "y", "on"):
        return True
    if text in ("0", "false", "f", "no", "n", "off"):
        return False
    raise typer.BadParameter(f"{value!r} is not a valid boolean.", ctx=ctx, param=param)


plain_strings()


class LazyGroup(TyperGroup):
    """A typer group whose ``LAZY`` sub-commands are imported on first use."""

    lazy: dict[str, Lazy] = {}

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return list(super().list_commands(ctx)) + [n for n in self.lazy if n not in self.commands]

    def get_command(self, ctx: Any, cmd_name: str) -> Any | None:
        entry = self.lazy.get(cmd_name)
        if entry is not None and cmd_name not in self.commands:
            if self._listing:   # a line of the help: no import
                return TyperCommand(cmd_name, help=entry.help)
            self.commands[cmd_name] = entry.load(cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_commands(ctx, formatter)
        finally:
            self._listing = False

    def loaded(self, ctx: Any, name: str) -> Any:
        """The real command ``name`` (imported): for tests and docs that walk every command."""
        command = self.get_command(ctx, name)
        assert command is not None, name
        return command
