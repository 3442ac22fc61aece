"""netbay's CNI daemon on the lab's chassis, and pods made with the real ``netbay-cni``
launcher (ADD, DEL) the way a runtime calls it."""

from __future__ import annotations

from pathlib import Path

from netbay.dataplane import netns
from tests.dataplane.cni_fixtures import Daemon, invoke, netbay_conf

from .lab import Hypervisor, OvnLab


def start_daemon(ovn_lab: OvnLab, hv: Hypervisor, env: dict[str, str], where: Path, *extra: str) -> Daemon:
    """``netbay cni-daemon`` for chassis ``hv``: its OVS database, host ends in its namespace."""
    where.mkdir(exist_ok=True)
    return Daemon(where / "cni.sock", "http://127.0.0.1:9", f"{ovn_lab.prefix}f{hv.index}-", env,
                  where / "daemon.log", extra=("--backend", "openstack", "--os-cloud", "ovn", "--ovsdb", hv.ovsdb,
                                               "--ovs-netns", hv.ns, *extra)).start(timeout=60)


class Pods:
    """Pod namespaces of one test (or module), deleted after it (:meth:`delete_all`)."""

    def __init__(self, lab: OvnLab, tag: str = "pod") -> None:
        self.lab, self.tag, self.made = lab, tag, []

    def __call__(self) -> str:
        name = f"{self.lab.prefix}{self.tag}{len(self.made)}"
        netns.create(name)
        self.made.append(name)
        return name

    def delete_all(self) -> None:
        for name in self.made:
            netns.delete(name)


def add(plugin: Path, daemon: Daemon, net, pod: str, container: str) -> dict:
    """CNI ADD of ``container`` (pod ``default/<container>``) on network ``net``; its result."""
    r = invoke(plugin, "ADD", netbay_conf("vifnet", net.id, daemon.sock), container=container,
               netns=netns.path(pod), args=f"K8S_POD_NAMESPACE=default;K8S_POD_NAME={container}")
    assert r.rc == 0, (r, daemon.log.read_text()[-3000:])
    return r.json


def delete(plugin: Path, daemon: Daemon, net, pod: str, container: str) -> None:
    """CNI DEL of ``container``: answered with nothing."""
    r = invoke(plugin, "DEL", netbay_conf("vifnet", net.id, daemon.sock), container=container,
               netns=netns.path(pod), args=f"K8S_POD_NAMESPACE=default;K8S_POD_NAME={container}")
    assert (r.rc, r.out) == (0, ""), (r, daemon.log.read_text()[-3000:])
