"""Can this host realize a driver mode? The kernel features the drivers declare
(:mod:`netbay.drivers.registry`), checked against what :mod:`netbay.dataplane.features`
detects — once per process: the kernel does not change under a running server.
The API refuses a mode the host cannot realize, naming the missing feature."""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

from netbay.drivers.spec import DriverSpec

_lock = threading.Lock()
_detected: dict[str, object] | None = None


def host_features() -> dict[str, object]:
    """``{feature: Feature}`` of this host (probed in a throwaway namespace as root)."""
    global _detected
    with _lock:
        if _detected is None:
            from netbay.dataplane import features

            _detected = dict(features.detect(probe=os.geteuid() == 0))
        return _detected


def refusal(driver: DriverSpec, effective: Mapping[str, str]) -> str | None:
    """Why this host cannot realize ``driver`` with these labels, or None."""
    if driver.kernel is None:
        return None
    from netbay.dataplane.features import FEATURES

    helps = {spec.name: spec.help for spec in FEATURES}
    detected = host_features()
    for feature, wanted_by in driver.kernel(effective):
        found = detected.get(feature)
        if found is not None and not getattr(found, "available", False):
            hint = " Use calico_ipv4pool_vxlan instead, which this host supports." \
                if feature == "ipip" and getattr(detected.get("vxlan"), "available", False) else ""
            return (f"Label {wanted_by} needs the kernel feature {feature} ({helps.get(feature, feature)}), "
                    f"which this host's kernel lacks ({getattr(found, 'detail', '')}). "
                    f"`netbay doctor` lists what the host offers.{hint}")
    return None
