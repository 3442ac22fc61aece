"""The network backend seam: netbay's controllers ask for networks, subnets,
ports, routers, floating IPs and security groups through ``NetworkBackend``
and never learn which backend answers.

Two implementations (DESIGN.md, "Narrow backend seams"):

- ``embedded`` — netbay's own network service, called in-process (no HTTP hop,
  the same validation, quotas and rules as its Neutron API);
- ``openstack`` — a real cloud's Neutron, through openstacksdk and the cloud's
  Keystone (``clouds.yaml``, as every OpenStack tool reads it); ``for_context`` /
  ``for_project`` give it acting for one project (:mod:`netbay.backends.cloudscope`),
  as the embedded backend's ``for_context`` does.

Both speak Neutron's vocabulary: members are Neutron's (``network``,
``subnet``, ``subnetpool``, ``port``, ``router``, ``floatingip``,
``security_group``, ``security_group_rule``), bodies and results are the JSON
objects Neutron's API takes and returns, and failures are ``netbay.errors``
exceptions carrying the backend's own status, type and message.

Where callers must act differently (who binds a port, whether netbay's own load
balancers and sandboxes stand beside the network), each backend declares it in
``traits`` (:class:`Traits`): callers read the trait, never the backend's name.
"""

from __future__ import annotations

from typing import Any

from netbay.backends.seam import CLOUD, EMBEDDED, MEMBERS, NetworkBackend, Traits


def open_backend(kind: str, **options: Any) -> NetworkBackend:
    """``embedded`` (``store=``, ``context=``) or ``openstack`` (``cloud=`` or ``connection=``)."""
    if kind == "embedded":
        from netbay.backends.embedded import EmbeddedBackend

        return EmbeddedBackend(**options)
    if kind == "openstack":
        from netbay.backends.openstack import OpenStackBackend

        return OpenStackBackend(**options)
    raise ValueError(f"unknown network backend {kind!r}: choose embedded or openstack")


__all__ = ["CLOUD", "EMBEDDED", "MEMBERS", "NetworkBackend", "Traits", "open_backend"]
