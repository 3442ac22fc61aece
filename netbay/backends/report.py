"""Which network backend this netbay would use, and whether it answers
(``netbay doctor``): settings first, then a real call, so a typo in
``clouds.yaml`` or an unreachable Keystone shows before anything is built."""

from __future__ import annotations

import os
from typing import Any

from netbay.errors import NetbayError


def chosen(kind: str | None = None, cloud: str | None = None) -> tuple[str, str | None]:
    """The backend kind and cloud name from the options, else ``NETBAY_NETWORK_BACKEND`` and ``OS_CLOUD``."""
    kind = kind or os.environ.get("NETBAY_NETWORK_BACKEND") or "embedded"
    if kind not in {"embedded", "openstack"}:
        raise ValueError(f"unknown network backend {kind!r}: choose embedded or openstack")
    return kind, cloud or os.environ.get("OS_CLOUD")


def report(kind: str | None = None, cloud: str | None = None) -> dict[str, Any]:
    """``{"backend", "reachable", …}``; never raises for an unreachable cloud."""
    kind, cloud = chosen(kind, cloud)
    if kind == "embedded":
        return {"backend": "embedded", "reachable": True,
                "detail": "netbay's own network service and kernel dataplane on this machine"}
    if not cloud:
        return {"backend": "openstack", "reachable": False, "cloud": None,
                "detail": "no cloud named: pass --os-cloud NAME or set OS_CLOUD (a clouds.yaml entry)"}
    from netbay.backends import open_backend
    from netbay.backends.lbcloud import has_octavia
    from netbay.backends.novacloud import has_nova

    try:
        backend = open_backend("openstack", cloud=cloud)
        info = backend.describe()
        networks = len(backend.list("network"))
        octavia = backend.conn.endpoint_for("load-balancer") if has_octavia(backend.conn) else None
        nova = backend.conn.endpoint_for("compute") if has_nova(backend.conn) else None
    except NetbayError as exc:
        return {"backend": "openstack", "cloud": cloud, "reachable": False,
                "detail": f"{exc.status} {exc.kind}: {exc.message}"}
    except Exception as exc:  # noqa: BLE001 - config and auth errors come in many sdk/keystoneauth types
        return {"backend": "openstack", "cloud": cloud, "reachable": False,
                "detail": f"{type(exc).__name__}: {exc}"}
    lbs = f"Octavia at {octavia}" if octavia else \
        "no Octavia in its catalog (master load balancers and Kubernetes Services that need one are refused)"
    nodes = f"nodes are servers of its Nova at {nova}" if nova else \
        "no compute service in its catalog (nodes are claims on their Neutron ports)"
    return {**info, "cloud": cloud, "reachable": True, "load_balancer": octavia, "compute": nova,
            "detail": f"{networks} networks visible; {lbs}; {nodes}"}
