"""Neutron and Octavia helpers of the OVN lab's tests: a network and its subnet, ports
made in Neutron and plugged into the lab (undone after a test), waits for a port's
status and a load balancer's, a chassis's view of an OVS interface."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from .lab import Container, Hypervisor, OvnLab

ACTIVE_TIMEOUT = 60
LB_TIMEOUT = 120


@dataclass
class Net:
    network: object
    subnet: object


class Plugs:
    """Ports made in Neutron and plugged into the lab by one test; all undone after it."""

    def __init__(self, lab: OvnLab, conn, net: Net) -> None:
        self.lab, self.conn, self.net = lab, conn, net
        self.made: list[tuple[object, Container]] = []

    def port(self, hv: Hypervisor, name: str, plug: bool = True, **attrs) -> tuple[object, Container]:
        """A port bound to ``hv``'s chassis (``binding:host_id`` = its hostname), plugged
        into its br-int as os-vif plugs an OVS port: iface-id, attached-mac,
        iface-status, vm-uuid (the port's device_id). Without ``plug``, only the veth
        is made (for os-vif to plug)."""
        device = str(uuid.uuid4())  # the "instance" (os-vif wants a UUID)
        port = self.conn.network.create_port(network_id=self.net.network.id, name=name,
                                             binding_host_id=hv.chassis, device_id=device,
                                             device_owner="compute:ovn-lab", **attrs)
        ip = port.fixed_ips[0]["ip_address"]
        prefix = self.net.subnet.cidr.split("/")[1]
        box = self.lab.add_container(hv, port.id, port.mac_address, f"{ip}/{prefix}",
                                     mtu=self.net.network.mtu, vm_uuid=device, plug=plug)
        self.made.append((port, box))
        return port, box

    def undo(self) -> None:
        for port, box in reversed(self.made):
            self.lab.remove_container(box)
            self.conn.network.delete_port(port)


def wait_status(conn, port_id: str, want: str) -> str:
    """The port's status once ``want``, or its last one after ACTIVE_TIMEOUT seconds."""
    deadline = time.monotonic() + ACTIVE_TIMEOUT
    while True:
        status = conn.network.get_port(port_id).status
        if status == want or time.monotonic() > deadline:
            return status
        time.sleep(0.5)


def wait_active(conn, port_id: str) -> str:
    """The port's status once ACTIVE, or its last status after ACTIVE_TIMEOUT seconds."""
    return wait_status(conn, port_id, "ACTIVE")


def wait_lb(lb_conn, lb_id: str) -> str:
    """The load balancer's provisioning status once settled (or after LB_TIMEOUT)."""
    deadline = time.monotonic() + LB_TIMEOUT
    while True:
        status = lb_conn.load_balancer.get_load_balancer(lb_id).provisioning_status
        if not status.startswith("PENDING_") or time.monotonic() > deadline:
            return status
        time.sleep(0.5)


def iface_ids(hv: Hypervisor, name: str) -> str:
    """The ``external_ids`` of OVS interface ``name`` on ``hv``, unquoted."""
    return hv.vsctl("--bare", "--columns=external_ids", "list", "Interface", name).replace('"', "")
