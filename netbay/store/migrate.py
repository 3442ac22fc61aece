"""Schema migrations through Alembic, and the check ``serve`` makes at start."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Engine

MIGRATIONS = Path(__file__).parent / "migrations"


def config(url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def head(url: str) -> str | None:
    return ScriptDirectory.from_config(config(url)).get_current_head()


def current(engine: Engine) -> str | None:
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(config(url), revision)


class SchemaOutOfDate(RuntimeError):
    pass


def ensure_current(engine: Engine, url: str, how_to_fix: str) -> None:
    """Refuse to run against a schema that is not at the code's head revision."""
    have, want = current(engine), head(url)
    if have != want:
        state = f"at revision {have}" if have else "empty (no netbay schema)"
        raise SchemaOutOfDate(
            f"The database schema is {state}, but this netbay needs revision {want}. Run: {how_to_fix}"
        )
