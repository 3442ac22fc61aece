"""The Network Driver Matrix and the Label Matrix, as data derived from the registry.

``GET /v1/network-drivers``, ``netbay network-driver list/show`` and
``docs/network-drivers.md`` all print these; none of them knows a driver by name.
"""

from __future__ import annotations

from typing import Any

from netbay.drivers import registry
from netbay.coe.coes import FAMILY, CoeConfig

COES = tuple(FAMILY)  # the COEs netbay can build (Magnum's enum also has dcos: refused)


def label(spec: registry.LabelSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"key": spec.key, "type": spec.type, "default": spec.default,
                           "allowed": list(spec.allowed), "help": spec.help}
    if spec.refused:
        out["refused"] = dict(spec.refused)
    if spec.minimum is not None or spec.maximum is not None:
        out["minimum"], out["maximum"] = spec.minimum, spec.maximum
    return out


def driver(d: registry.DriverSpec, config: CoeConfig) -> dict[str, Any]:
    return {
        "name": d.name,
        "summary": d.summary,
        "coes": list(d.coes),
        "default_for": [coe for coe in COES if config.default_driver(coe) == d.name],
        "allowed_for": [coe for coe in COES if d.name in config.allowed_drivers(coe)],
        "labels": [label(s) for s in d.labels],
        "notes": d.beyond_magnum,
    }


def coe_row(coe: str, config: CoeConfig) -> dict[str, Any]:
    return {"coe": coe, "default_network_driver": config.default_driver(coe),
            "supported_network_drivers": registry.supported(coe),
            "allowed_network_drivers": config.allowed_drivers(coe)}


def document(config: CoeConfig) -> dict[str, Any]:
    """Everything: drivers (each with its labels), the per-COE matrix, the common labels."""
    return {
        "network_drivers": [driver(d, config) for d in registry.DRIVERS.values()],
        "coes": [coe_row(coe, config) for coe in COES],
        "common_labels": [label(s) for s in registry.COMMON_LABELS],
    }
