"""Where netbay keeps its state and which database it uses."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from netbay.store.db import default_url


def default_data_dir() -> Path:
    return Path.home() / ".local" / "share" / "netbay"


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    database_url: str

    @classmethod
    def resolve(cls, data_dir: Path | None, database_url: str | None, *, create: bool = True) -> Settings:
        """``create=False`` for read-only commands: they make no directory."""
        directory = Path(data_dir or default_data_dir()).expanduser().resolve()
        if create:
            directory.mkdir(parents=True, exist_ok=True)
            directory.chmod(0o700)
        return cls(directory, database_url or default_url(directory))

    @property
    def missing_sqlite_file(self) -> Path | None:
        """The SQLite file the URL names, if it does not exist (opening it would create it)."""
        if not self.database_url.startswith("sqlite:///"):
            return None
        path = Path(self.database_url[len("sqlite:///"):])
        return None if path.exists() else path

    @property
    def redacted_url(self) -> str:
        return re.sub(r"://([^:/@]+):[^@]*@", r"://\1:***@", self.database_url)

    @property
    def upgrade_hint(self) -> str:
        hint = f"netbay db upgrade --data-dir {self.data_dir}"
        if not self.database_url.startswith("sqlite"):
            hint += " --database-url '<your database URL>'"
        return hint
