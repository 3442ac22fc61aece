"""COEs, their default network drivers and the operator's allowed-driver lists.

As in Magnum (``[cluster_template] <family>_allowed_network_drivers`` and
``<family>_default_network_driver``), configuration is per COE *family*:
``kubernetes``, ``swarm`` (which also governs ``swarm-mode``) and ``mesos``. Here
it comes from the environment of the server, read once at start:

    NETBAY_KUBERNETES_ALLOWED_NETWORK_DRIVERS=flannel,calico   (default: all)
    NETBAY_KUBERNETES_DEFAULT_NETWORK_DRIVER=flannel
    NETBAY_SWARM_… / NETBAY_MESOS_…                             (likewise)

``all`` allows every driver the registry supports for the COE; the default default is
the driver that declares itself the COE's (:func:`netbay.drivers.registry.default_driver`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from netbay.drivers import registry
from netbay.errors import BadRequest

# Magnum's ClusterType enum: what the ``coe`` field accepts at all.
COE_ENUM = ("kubernetes", "swarm", "mesos", "dcos", "swarm-mode")
# COE -> the family whose validator (and configuration) it uses, as in Magnum.
FAMILY = {"kubernetes": "kubernetes", "swarm": "swarm", "swarm-mode": "swarm", "mesos": "mesos"}
SERVER_TYPES = ("vm", "bm")


@dataclass(frozen=True)
class CoeConfig:
    """Per family: the allowed drivers (``("all",)`` = no restriction) and the default."""

    allowed: Mapping[str, tuple[str, ...]]
    default: Mapping[str, str]

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> CoeConfig:
        env = os.environ if env is None else env
        allowed: dict[str, tuple[str, ...]] = {}
        default: dict[str, str] = {}
        for family in dict.fromkeys(FAMILY.values()):
            fallback = registry.default_driver(family) or ""
            prefix = f"NETBAY_{family.upper()}_"
            raw = env.get(prefix + "ALLOWED_NETWORK_DRIVERS", "all")
            allowed[family] = tuple(d.strip() for d in raw.split(",") if d.strip()) or ("all",)
            default[family] = env.get(prefix + "DEFAULT_NETWORK_DRIVER", "").strip() or fallback
            unknown = [d for d in (*allowed[family], default[family]) if d != "all" and d not in registry.DRIVERS]
            if unknown:
                raise ValueError(f"{prefix}*: unknown network driver(s) {', '.join(unknown)}; "
                                 f"known: {', '.join(registry.DRIVERS)}")
        return cls(allowed, default)

    def family(self, coe: str) -> str:
        if coe not in FAMILY:
            raise BadRequest(f"Requested COE type {coe} is not supported.")
        return FAMILY[coe]

    def default_driver(self, coe: str) -> str:
        return self.default[self.family(coe)]

    def allowed_drivers(self, coe: str) -> list[str]:
        """The drivers a template of ``coe`` may name, after the operator's list."""
        family = self.family(coe)
        names = registry.supported(coe)
        if "all" in self.allowed[family]:
            return names
        return [n for n in names if n in self.allowed[family]]

    def validate_network_driver(self, coe: str, driver: str) -> None:
        """Magnum's two checks, with its wording: supported for the COE, then allowed."""
        family = self.family(coe)
        names = registry.supported(coe)
        if driver not in names:
            raise BadRequest(f"Network driver type {driver} is not supported, expecting a "
                             f"{'/'.join(names + ['unspecified'])} network driver.")
        allowed = self.allowed[family]
        if "all" not in allowed and driver not in allowed:
            raise BadRequest(f"Network driver type {driver} is not allowed, expecting a "
                             f"{'/'.join([*allowed, 'unspecified'])} network driver.")

    def validate_server_type(self, coe: str, server_type: str) -> None:
        self.family(coe)
        if server_type not in SERVER_TYPES:
            raise BadRequest(f"Server type {server_type} is not supported, expecting a "
                             f"{'/'.join([*SERVER_TYPES, 'unspecified'])} server type.")
