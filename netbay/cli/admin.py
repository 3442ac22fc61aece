"""``netbay admin``: projects, users and roles, straight on the database (like keystone-manage)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from netbay.cli.settings import Settings
from netbay.errors import NetbayError

app = typer.Typer(help="Manage projects, users and roles.", no_args_is_help=True)
project_app = typer.Typer(help="Projects.", no_args_is_help=True)
user_app = typer.Typer(help="Users.", no_args_is_help=True)
role_app = typer.Typer(help="Role assignments (admin, member, reader, load-balancer_*).", no_args_is_help=True)
app.add_typer(project_app, name="project")
app.add_typer(user_app, name="user")
app.add_typer(role_app, name="role")

console = Console()
DataDir = typer.Option(None, "--data-dir", envvar="NETBAY_DATA_DIR")
DbUrl = typer.Option(None, "--database-url", envvar="NETBAY_DATABASE_URL")


def _identity(data_dir: Path | None, database_url: str | None):  # noqa: ANN202
    from netbay.identity.service import Identity
    from netbay.store import migrate
    from netbay.store.db import Store

    settings = Settings.resolve(data_dir, database_url)
    store = Store(settings.database_url)
    try:
        migrate.ensure_current(store.engine, settings.database_url, settings.upgrade_hint)
    except migrate.SchemaOutOfDate as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    return Identity(store)


def _guard(fn):  # noqa: ANN001, ANN202
    try:
        return fn()
    except NetbayError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(1) from None


@project_app.command("create")
def project_create(name: str, description: str = "", data_dir: Path = DataDir, database_url: str = DbUrl) -> None:
    p = _guard(lambda: _identity(data_dir, database_url).create_project(name, description))
    console.print(f"project [bold]{p.name}[/] created: {p.id}")


@project_app.command("list")
def project_list(data_dir: Path = DataDir, database_url: str = DbUrl) -> None:
    table = Table("id", "name", "enabled", "description")
    for p in _identity(data_dir, database_url).projects():
        table.add_row(p.id, p.name, str(p.enabled), p.description)
    console.print(table)


@project_app.command("delete")
def project_delete(name: str, data_dir: Path = DataDir, database_url: str = DbUrl) -> None:
    _guard(lambda: _identity(data_dir, database_url).delete_project(name))
    console.print(f"project {name} deleted")


@user_app.command("create")
def user_create(
    name: str,
    password: str = typer.Option(..., prompt=True, hide_input=True, envvar="NETBAY_NEW_USER_PASSWORD"),
    project: str = typer.Option(None, help="Default project; the user gets --role on it."),
    role: str = typer.Option("member", help="a role name: admin, member, reader, load-balancer_…"),
    data_dir: Path = DataDir,
    database_url: str = DbUrl,
) -> None:
    u = _guard(lambda: _identity(data_dir, database_url).create_user(name, password, project, role))
    console.print(f"user [bold]{u.name}[/] created: {u.id}")


@user_app.command("list")
def user_list(data_dir: Path = DataDir, database_url: str = DbUrl) -> None:
    table = Table("id", "name", "enabled", "roles")
    for user, grants in _identity(data_dir, database_url).users():
        table.add_row(user.id, user.name, str(user.enabled), ", ".join(f"{r}@{p}" for p, r in grants))
    console.print(table)


@user_app.command("set-password")
def user_set_password(
    name: str,
    password: str = typer.Option(..., prompt=True, hide_input=True, confirmation_prompt=True,
                                 envvar="NETBAY_NEW_USER_PASSWORD"),
    data_dir: Path = DataDir,
    database_url: str = DbUrl,
) -> None:
    """Change a password; every token issued before stops working."""
    _guard(lambda: _identity(data_dir, database_url).set_password(name, password))
    console.print(f"password of {name} changed; older tokens are revoked")


@user_app.command("delete")
def user_delete(name: str, data_dir: Path = DataDir, database_url: str = DbUrl) -> None:
    _guard(lambda: _identity(data_dir, database_url).delete_user(name))
    console.print(f"user {name} deleted")


@role_app.command("add")
def role_add(role: str, user: str = typer.Option(...), project: str = typer.Option(...),
             data_dir: Path = DataDir, database_url: str = DbUrl) -> None:
    _guard(lambda: _identity(data_dir, database_url).grant(user, project, role))
    console.print(f"{user} has role {role} on {project}")


@role_app.command("remove")
def role_remove(role: str, user: str = typer.Option(...), project: str = typer.Option(...),
                data_dir: Path = DataDir, database_url: str = DbUrl) -> None:
    _guard(lambda: _identity(data_dir, database_url).revoke(user, project, role))
    console.print(f"{user} no longer has role {role} on {project}")
