"""Names of everything the embedded dataplane makes, derived from resource ids.

One source of truth for namespace and interface names, so the agent can find
what it made after a restart (adopt) and recognize what nothing wants (remove).
Interface names are unique within their namespace and at most 15 characters.
Tests pass their own ``prefix`` so that runs never collide with each other or
with a product instance.
"""

from __future__ import annotations

from dataclasses import dataclass

PRODUCT_PREFIX = "nb-"


@dataclass(frozen=True)
class Names:
    prefix: str = PRODUCT_PREFIX

    # -- namespaces -----------------------------------------------------------------
    @property
    def fabric(self) -> str:
        """The namespace holding one bridge per network (and the security groups)."""
        return f"{self.prefix}fabric"

    def sandbox(self, sandbox_id: str) -> str:
        return f"{self.prefix}s-{sandbox_id}"

    def router(self, router_id: str) -> str:
        return f"{self.prefix}r-{router_id}"

    def loadbalancer(self, lb_id: str) -> str:
        return f"{self.prefix}lb-{lb_id}"

    def pod(self, pod_id: str) -> str:
        """A pod on a cluster node (plugged into the node's namespace, not the fabric)."""
        return f"{self.prefix}p-{pod_id}"

    def k8s_pod(self, port_id: str) -> str:
        """A Kubernetes pod's sandbox namespace, named after its port (:mod:`netbay.k8s.sandbox`)."""
        return f"{self.prefix}k-{port_id}"

    def container(self, port_id: str) -> str:
        """A Docker container's own namespace, named after its port by the libnetwork
        plugin (``ip netns attach``) so that probes can enter it; not made by netbay."""
        return f"{self.prefix}d-{port_id}"

    def external(self, network_id: str) -> str:
        """The namespace that plays the outside world of an external network."""
        return f"{self.prefix}x-{network_id}"

    def owns(self, namespace: str) -> bool:
        return namespace.startswith(self.prefix)

    # -- interfaces -------------------------------------------------------------------
    @staticmethod
    def bridge(network_id: str) -> str:
        return "brq" + network_id[:11]

    @staticmethod
    def tap(port_id: str) -> str:
        """The fabric end of a port's veth (as Neutron's ``tap<port id>``)."""
        return "tap" + port_id[:11]

    @staticmethod
    def provisional(token: str) -> str:
        """A fabric end made before its port is known (CNI ADD makes the pair while the
        API makes the port), renamed :meth:`tap` once it is; never swept as a tap."""
        return "nbq" + token[:12]

    @staticmethod
    def container_end(port_id: str) -> str:
        """A container port's inner veth end, made in the host namespace for the
        container runtime to move into the container at once (Docker's Join)."""
        return "nbc" + port_id[:11]

    @staticmethod
    def router_interface(port_id: str) -> str:
        return "qr-" + port_id[:11]

    @staticmethod
    def router_gateway(port_id: str) -> str:
        return "qg-" + port_id[:11]

    @staticmethod
    def external_port(port_id: str) -> str:
        return "ext-" + port_id[:11]
