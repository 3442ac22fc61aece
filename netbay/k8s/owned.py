"""What the kuryr mapping controller makes, marked as its own: tags (``netbay-cluster=<id>``,
``netbay-k8s=<what>``), a description on networks and subnets, a device id on pods'
ports — so a pass finds again what an earlier one (or a killed controller) made.

A mixin of :class:`netbay.k8s.controller.Controller` (its ``net`` and ``refs``).
"""

from __future__ import annotations

from typing import Any

from netbay.backends import NetworkBackend
from netbay.k8s.cluster import ClusterRefs
from netbay.k8s.podport import POD_OWNER, device_id


class Owned:
    """Tagging, finding and making the controller's own objects."""

    net: NetworkBackend
    refs: ClusterRefs

    def _tags(self, what: str) -> list[str]:
        return [self.refs.tag, f"netbay-k8s={what}"]

    def _list(self, member: str, what: str) -> list[dict[str, Any]]:
        """What this controller made of ``member`` for ``what``: by its tags, plus what lost
        them (see :meth:`_untagged`)."""
        found = self.net.list(member, tags=",".join(self._tags(what)))
        return found + self._untagged(member, what, {o["id"] for o in found})

    def _untagged(self, member: str, what: str, seen: set[str]) -> list[dict[str, Any]]:
        """Objects made but not yet tagged: a Neutron that refuses ``tags`` on POST takes them
        in a second call, and a controller killed between the two leaves an object no tag
        finds. Its own marks find it — a pod's port by its device id (derived from the
        cluster and the port's name), a network or subnet by its description — and it is
        tagged now, so it is adopted (or deleted) like the rest."""
        if member == "port" and what == "pod":
            mine = [p for p in self.net.list("port", device_owner=POD_OWNER)
                    if p["id"] not in seen and "/" in (p.get("name") or "")
                    and p.get("device_id") == self._device(*p["name"].split("/", 1))]
        elif member in ("network", "subnet") and what == "network":
            mine = [o for o in self.net.list(member, description=self._mark()) if o["id"] not in seen]
        else:
            return []
        return [self._tagged(member, obj, self._tags(what)) for obj in mine]

    def _mark(self) -> str:
        return f"netbay k8s {self.refs.tag}"

    def _owned(self, body: dict[str, Any]) -> dict[str, Any]:
        what = body.pop("_what")
        if self.refs.project_id:
            body["project_id"] = self.refs.project_id
        return {**body, "tags": self._tags(what)}

    def _tagged(self, member: str, obj: dict[str, Any], tags: list[str]) -> dict[str, Any]:
        """An object found by its mark or device id whose tags a crash kept from it (made,
        then killed before the backend's second, tagging call) gets them now: the next
        pass finds it by them."""
        if set(tags) <= set(obj.get("tags") or []):
            return obj
        return {**obj, "tags": self.net.set_tags(member, obj["id"], tags)}

    def _make(self, member: str, body: dict[str, Any]) -> dict[str, Any]:
        owned = self._owned(body)
        return self.net.create(member, owned)
    def _device(self, ns: str, name: str) -> str:
        return device_id(self.refs.cluster_id, ns, name)
