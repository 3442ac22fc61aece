"""The smallest network driver, declared: routed pods, one direct route per peer node.

Not registered with the server (no ``register`` line in :mod:`netbay.drivers`): it is
the example of ``docs/drivers.md`` and the contract suite's
(``tests/dataplane/test_dp_driver_contract.py``) fifth driver. Its kernel part is
:mod:`.driver`; this module stays free of kernel imports, so the API server and the
CLI can read a driver's declaration without loading netlink.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import netbay.drivers.leases as leases
from netbay.drivers.labelspec import LabelSpec
from netbay.drivers.spec import DriverSpec

LABELS = (LabelSpec("example_pod_cidr", "cidr", "10.150.0.0/16", "Pod addresses; each node routes a /24 of it."),)


@dataclass(frozen=True)
class ExampleConfig:
    network: str = LABELS[0].default

    @classmethod
    def from_values(cls, values: Mapping[str, str]) -> ExampleConfig:
        return cls(values["example_pod_cidr"])

    @property
    def network_config(self) -> leases.NetworkConfig:
        return leases.NetworkConfig(self.network, 24)


SPEC = DriverSpec(
    name="example",
    summary="The smallest driver: routed pods, a direct route per peer (all nodes on one L2 network).",
    coes=("kubernetes",),
    labels=LABELS,
    config=ExampleConfig,
    factory="netbay.drivers.example.driver:Example",
)
