"""The controller's hook: the resolver before the Services (it takes the service
range's 10th address first), then its records and the pods' files after them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from netbay.k8s.dns import podfiles, records
from netbay.k8s.dns.resolver import ClusterResolver
from netbay.k8s.objects import Desired


class Discovery:
    def __init__(self, ctrl: Any) -> None:   # netbay.k8s.controller.Controller
        self.ctrl = ctrl
        self.resolver = ClusterResolver(ctrl)
        self.upstream = ctrl.refs.dns_upstream
        self.sandboxes = ctrl.sandboxes
        self.domain = records.DOMAIN

    def before_services(self, want: Desired, full: bool) -> None:
        """A cluster with objects has a resolver; one without has none left."""
        if want.namespaces:
            self.resolver.ensure(full)
        else:
            self.resolver.remove(full)

    def after_services(self, want: Desired, ports: Mapping[tuple[str, str], dict[str, Any]],
                       vips: Mapping[tuple[str, str], str]) -> None:
        address = self.resolver.address
        if address is None:
            return
        self.resolver.publish(records.build(want, ports, vips, self.domain, self.upstream,
                                            getattr(self.ctrl, "cluster_ips", None)))
        for (namespace, name), port in ports.items():
            if want.pods[(namespace, name)].by_cni:   # in the kubelet's namespace: not ours to write
                continue
            podfiles.write_once(self.sandboxes.ns(port["id"]), namespace, self.resolver.addresses, self.domain,
                                want.services, vips)
