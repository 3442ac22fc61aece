"""netbay's binding of a cloud's port (netbay.runtime.vif) without a cloud: which
``binding:vif_type`` it plugs, the note a restart reads back, and the CNI daemon's
refusal of a type it cannot plug — by name, before anything is plugged, the port it
made deleted. The real thing (OVN, Neutron ML2/OVN, os-vif): tests/ovn/test_vif_cni.py."""

from __future__ import annotations

import asyncio

import pytest

from netbay.plugins.cni import spec
from netbay.plugins.cni.service import Cni
from netbay.runtime.vif import Unpluggable, Vif, host_end

PORT = {"id": "0123456789abcdef", "mac_address": "fa:16:3e:00:00:01", "network_id": "n1", "device_id": "pod-uid",
        "binding:vif_type": "ovs", "binding:vif_details": {"bridge_name": "br-int", "datapath_type": "netdev"}}


def test_an_ovs_binding_is_plugged_as_its_details_say() -> None:
    vif = Vif.of(PORT, 1442)
    assert (vif.bridge, vif.datapath_type, vif.device_id, vif.mtu) == ("br-int", "netdev", "pod-uid", 1442)
    assert vif.host_end == host_end(PORT["id"]) == "nbv0123456789a" and len(vif.host_end) <= 15
    assert Vif.from_note(vif.note()) == vif
    assert len(vif.note().encode()) < 256          # an ifalias holds it
    assert Vif.from_note("someone else's alias") is None


@pytest.mark.parametrize("vif_type", ["vhostuser", "binding_failed", "unbound", None])
def test_other_vif_types_are_refused_by_name(vif_type: str | None) -> None:
    with pytest.raises(Unpluggable) as info:
        Vif.of({**PORT, "binding:vif_type": vif_type}, 1500)
    assert repr(vif_type) in str(info.value) and "cannot plug" in str(info.value)


def test_ovs_without_a_bridge_is_refused() -> None:
    with pytest.raises(Unpluggable):
        Vif.of({**PORT, "binding:vif_details": {}}, 1500)


class Cloud:
    """A network backend whose Neutron binds every new port as ``vif_type``."""

    name, traits = "cloud", None

    def __init__(self, vif_type: str) -> None:
        self.vif_type, self.ports, self.deleted = vif_type, {}, []

    def list(self, member: str, **where: str) -> list[dict]:
        return [{"id": "n1", "name": "net", "mtu": 1442}] if member == "network" else []

    def show(self, member: str, obj_id: str) -> dict:
        return self.list(member)[0]

    def create(self, member: str, body: dict) -> dict:
        port = {**PORT, **body, "binding:vif_type": self.vif_type, "fixed_ips": []}
        self.ports[port["id"]] = port
        return port

    def delete(self, member: str, obj_id: str) -> None:
        self.deleted.append(obj_id)
        self.ports.pop(obj_id)


class NoPlugs:
    def plug(self, *args: object) -> None:
        raise AssertionError("plugged a port it should have refused")

    def unplug(self, port_id: str) -> bool:
        return False


def test_the_cni_daemon_refuses_an_unpluggable_port_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    cloud = Cloud("vhostuser")
    cni = Cni(cloud, None, "chassis-1", vifs=NoPlugs())  # type: ignore[arg-type]
    monkeypatch.setattr(Cni, "_free", staticmethod(lambda req: None))   # no runtime namespace here
    call = {"command": "ADD", "containerID": "c1", "netns": "/run/netns/none", "ifname": "eth0", "args": "",
            "config": {"cniVersion": "1.0.0", "name": "pods", "network": "net"}}
    try:
        out = asyncio.run(cni.handle(call))
    finally:
        asyncio.run(cni.aclose())
    assert out["error"]["code"] == spec.INTERNAL
    assert "binding:vif_type 'vhostuser'" in out["error"]["msg"], out
    assert cloud.deleted == [PORT["id"]] and not cloud.ports   # the port it made, deleted again


def test_a_pod_sandbox_refuses_an_unpluggable_port_before_its_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Kubernetes mapping's pods on a cloud: the port's binding travels with its wiring,
    and a type netbay cannot plug is refused by name before the pod's namespace is made."""
    from netbay.dataplane import netns
    from netbay.dataplane.names import Names
    from netbay.k8s.sandbox import PodSandboxes, pod_port

    made: list[str] = []
    monkeypatch.setattr(netns, "create", made.append)
    boxes = PodSandboxes(Names("nbtx-"), NoPlugs())  # type: ignore[arg-type]
    port = {**PORT, "fixed_ips": [{"ip_address": "10.0.0.5"}]}
    wiring = pod_port({**port, "binding:vif_type": "vhostuser"}, {"cidr": "10.0.0.0/24", "gateway_ip": "10.0.0.1"})
    with pytest.raises(Unpluggable, match="binding:vif_type 'vhostuser'"):
        boxes.plug(wiring)
    assert made == []
    assert pod_port(port, {"cidr": "10.0.0.0/24"}).vif() == Vif.of(port, 1500)
