"""Who is asking: the identity a request acts for, after its token was checked."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Context:
    user_id: str
    project_id: str
    roles: tuple[str, ...] = field(default_factory=tuple)

    @property
    def is_admin(self) -> bool:
        return "admin" in self.roles

    @classmethod
    def admin(cls, project_id: str = "admin") -> Context:
        """The context of netbay itself (CLI bootstrap, --noauth, reconcilers)."""
        return cls(user_id="netbay", project_id=project_id, roles=("admin", "member"))
