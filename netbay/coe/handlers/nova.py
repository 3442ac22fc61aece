"""Nodes (``OS::Nova::Server``) as servers of the cloud's Nova, through the compute
seam (``st.servers``): chosen on the ``openstack`` backend where the cloud's catalog
lists a compute service (:func:`netbay.coe.handlers.table`).

A server boots on the node's port, already made in the cloud's Neutron (Nova binds
it: ``device_id`` = the server, ``device_owner`` = ``compute:…``), with the image
and flavor the template names. Nova servers take no Neutron tags, so the server's
metadata carries the cluster's marks (``netbay-cluster``, ``netbay-resource``): a
restart finds a server whose id was never written down by them, and the sweep
deletes by them. A delete waits until the server is gone, as its port is in use
until then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from netbay.backends.servers import active, gone
from netbay.coe.handlers.base import Handler, gone_ok, or_none

if TYPE_CHECKING:
    from netbay.coe.handlers.context import StackContext
    from netbay.coe.stackrecord import Row

CLUSTER_KEY, RESOURCE_KEY = "netbay-cluster", "netbay-resource"


def marked(st: StackContext, name: str | None = None) -> list[dict[str, Any]]:
    """The project's servers whose metadata names this cluster (and resource ``name``, if
    given). Nova filters no list by metadata, so it is read from each server."""
    return [s for s in st.servers.list()
            if (s.get("metadata") or {}).get(CLUSTER_KEY) == st.cluster_id
            and (name is None or s["metadata"].get(RESOURCE_KEY) == name)]


def delete_marked(st: StackContext) -> None:
    """The sweep's part: every server of this cluster, each waited for until gone."""
    if st.servers is None:
        return
    for server in marked(st):
        NovaServerHandler().delete(st, server["id"], server)


class NovaServerHandler(Handler):
    """A node as a server of the cloud's Nova (see the module's docstring)."""

    def create(self, st: StackContext, name: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        ports = [n["port"] for n in props.get("networks") or [] if n.get("port")]
        meta = props.get("metadata") or {}
        marks = {CLUSTER_KEY: st.cluster_id, RESOURCE_KEY: name[:255],
                 **{k: str(meta[k]) for k in ("role", "index") if k in meta}}
        body = {"name": st.physical_name(name), "imageRef": st.servers.image_id(props["image"]),
                "flavorRef": st.servers.flavor_id(props["flavor"]), "networks": [{"port": p} for p in ports],
                "metadata": marks}
        server = st.servers.create(body)
        return server["id"], {"id": server["id"], "name": body["name"], "ports": ports, "metadata": meta,
                              "status": server.get("status") or "BUILD"}

    def finish(self, st: StackContext, pid: str, attrs: dict[str, Any], props: dict[str, Any]) -> dict[str, Any]:
        return {**attrs, "status": active(st.servers, pid, st.server_timeout)["status"]}

    def exists(self, st: StackContext, row: Row) -> dict[str, Any] | None:
        server = or_none(lambda: st.servers.show(row.physical_id))
        if server is None or server.get("status") == "DELETED":
            return None
        return {**row.attributes, "status": server.get("status")}

    def find(self, st: StackContext, name: str) -> tuple[str, dict[str, Any]] | None:
        found = marked(st, name)
        if not found:
            return None
        server = found[0]
        ports = [p["id"] for p in st.net.list("port", device_id=server["id"])]
        meta = {k: v for k, v in server["metadata"].items() if k in ("role", "index")}
        return server["id"], {"id": server["id"], "name": server.get("name"), "ports": ports,
                              "metadata": meta, "status": server.get("status")}

    def delete(self, st: StackContext, pid: str, attrs: dict[str, Any]) -> None:
        gone_ok(lambda: st.servers.delete(pid))
        gone(st.servers, pid, st.server_timeout)
