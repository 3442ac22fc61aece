"""MkDocs hook: the CLI reference on ``cli.md``, generated from the typer app at build time.

Generated rather than written so that it cannot drift from the command: every command,
argument and option the ``netbay`` entry point has, with its help, and nothing else.
Only the click API (``list_commands``/``get_command``) is used, so lazily loaded groups are
walked too.
"""

from __future__ import annotations

MARKER = "<!-- cli-reference -->"


def _cell(text: str | None) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


def _param_row(param, ctx) -> str:  # noqa: ANN001  (click's, or typer's vendored click)
    """One table row as ``--help`` shows the parameter: its options with metavar, then its help."""
    record = param.get_help_record(ctx) if param.param_type_name == "option" else None
    if record:
        names, what = record
    else:
        names, what = (param.metavar or param.name or "").upper(), getattr(param, "help", "") or ""
        what += "" if param.required else " (optional)"
    envvar = getattr(param, "envvar", None)
    if isinstance(envvar, str) and envvar not in what:
        what += f" [env: {envvar}]"
    return f"| `{_cell(names)}` | {_cell(what)} |"


def _render(cmd, path: list[str], out: list[str]) -> None:  # noqa: ANN001
    ctx = cmd.context_class(cmd, info_name=" ".join(path))
    if len(path) > 1:
        out.append(f"{'#' * min(len(path) + 1, 6)} `{' '.join(path)}`\n")
        help_text = (cmd.help or cmd.short_help or "").strip()
        if help_text:
            out.append(help_text.split("\f")[0].strip() + "\n")
        params = [p for p in cmd.get_params(ctx) if p.name != "help" and not getattr(p, "hidden", False)]
        if params and not hasattr(cmd, "list_commands"):
            out.append(f"```\n{' '.join(path)} {' '.join(cmd.collect_usage_pieces(ctx))}\n```\n")
            out.append("| parameter | what |\n|---|---|")
            out.extend(_param_row(p, ctx) for p in params)
            out.append("")
    if hasattr(cmd, "list_commands"):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                _render(sub, [*path, name], out)


def reference() -> str:
    import typer

    from netbay.cli.main import app

    out: list[str] = []
    _render(typer.main.get_command(app), ["netbay"], out)
    return "\n".join(out)


def on_page_markdown(markdown: str, page, **_kwargs: object) -> str:  # noqa: ANN001
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, reference())
