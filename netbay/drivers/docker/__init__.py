"""The ``docker`` network driver, declared: its label (once), its check, its typed config.

The kernel part — Docker's overlay: one subnet across the nodes, a bridge and a
VXLAN device per node — is :class:`netbay.drivers.docker.driver.DockerOverlay`,
built by the registry (:func:`netbay.drivers.registry.make`) from a
:class:`DockerOverlayConfig`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import netbay.drivers.leases as leaselib
from netbay.drivers.labelspec import LabelSpec
from netbay.drivers.spec import DriverSpec

__all__ = ["SPEC", "DockerOverlayConfig", "DEFAULT_CIDR", "block_len"]

LABELS = (
    LabelSpec("docker_overlay_cidr", "cidr", "10.200.0.0/16",
              "The overlay network's subnet, one L2 network across every node; each node "
              "hands out addresses from a block of it (a /24 where it fits)."),
)
DEFAULT_CIDR = LABELS[0].default


def block_len(prefixlen: int) -> int:
    """Each node's block of a ``/prefixlen`` overlay: a /24 (254 containers) where the
    subnet holds enough of them, else 16 blocks."""
    if prefixlen > 24:
        raise leaselib.LeaseError(f"docker_overlay_cidr /{prefixlen} is too small: at most /24 "
                                  "(each node needs a block of it)")
    return 24 if prefixlen <= 20 else prefixlen + 4


@dataclass(frozen=True)
class DockerOverlayConfig:
    network: str = DEFAULT_CIDR

    @classmethod
    def from_values(cls, values: Mapping[str, str]) -> DockerOverlayConfig:
        return cls(values["docker_overlay_cidr"])

    @classmethod
    def from_labels(cls, labels: Mapping[str, Any] | None) -> DockerOverlayConfig:
        """From the labels, checked as the API checks them (``LabelError``)."""
        return SPEC.parse(labels)

    @property
    def network_config(self) -> leaselib.NetworkConfig:
        net = ipaddress.ip_network(self.network)
        return leaselib.NetworkConfig(self.network, block_len(net.prefixlen))


def _overlay_fits(values: Mapping[str, str]) -> str | None:
    prefix = ipaddress.ip_network(values["docker_overlay_cidr"]).prefixlen
    if prefix > 24:
        return (f"Label docker_overlay_cidr={values['docker_overlay_cidr']} is too small: at most a /24 "
                "(each node hands out addresses from its own block of it).")
    return None


SPEC = DriverSpec(
    name="docker",
    summary="Docker's overlay: one container subnet across the nodes of a Swarm or Mesos cluster, "
            "carried between nodes by VXLAN (VNI 4096, UDP 4789).",
    coes=("swarm", "swarm-mode", "mesos"),
    labels=LABELS,
    checks=(_overlay_fits,),
    kernel=lambda values: [("vxlan", "network_driver=docker (overlay)")],
    beyond_magnum="Magnum left the overlay to Docker; docker_overlay_cidr is a netbay label.",
    default_for=("swarm", "swarm-mode", "mesos"),
    takes_containers=True,
    config=DockerOverlayConfig,
    factory="netbay.drivers.docker.driver:DockerOverlay",
)
