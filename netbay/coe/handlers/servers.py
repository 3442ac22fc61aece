"""Nodes (``OS::Nova::Server``) without Nova.

- embedded: a sandbox of netbay's own API holding the node's ports (the kernel
  dataplane wires them);
- ``openstack`` backend on a cloud whose catalog lists no compute service (with
  one, nodes are its servers: :mod:`netbay.coe.handlers.nova`): a stand-in that claims the node's Neutron ports as Nova would (``device_id``
  = the node's id, ``device_owner`` = ``compute:netbay``). Nothing runs there —
  a Neutron without agents has no dataplane either — but the cloud's API shows
  which ports belong to which node, and deleting the node releases them.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from netbay.client import SANDBOXES
from netbay.coe.handlers.base import Handler, gone_ok, or_none

if TYPE_CHECKING:
    from netbay.coe.handlers.context import StackContext
    from netbay.coe.stackrecord import Row

CLOUD_NODE_OWNER = "compute:netbay"


class ServerHandler(Handler):
    """A node: a sandbox holding its ports (Nova's server without Nova). The sandbox
    has no tags, so its description carries the cluster and resource names."""

    def create(self, st: StackContext, name: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        ports = [n["port"] for n in props.get("networks") or [] if n.get("port")]
        body = st.owned({"name": st.physical_name(name), "description": st.description(name), "ports": ports})
        if (props.get("metadata") or {}).get("labels"):
            body["labels"] = props["metadata"]["labels"]    # the cluster's, on its node
        obj = st.api.call("POST", SANDBOXES, {"sandbox": body})["sandbox"]
        return obj["id"], {**obj, "metadata": props.get("metadata") or {}}

    def exists(self, st: StackContext, row: Row) -> dict[str, Any] | None:
        attrs = or_none(lambda: st.api.call("GET", f"{SANDBOXES}/{row.physical_id}")["sandbox"])
        return None if attrs is None else {**attrs, "metadata": row.attributes.get("metadata") or {}}

    def find(self, st: StackContext, name: str) -> tuple[str, dict[str, Any]] | None:
        found = st.api.call("GET", SANDBOXES, description=st.description(name))["sandboxes"]
        return (found[0]["id"], found[0]) if found else None

    def delete(self, st: StackContext, pid: str, attrs: dict[str, Any]) -> None:
        st.api.gone_ok("DELETE", f"{SANDBOXES}/{pid}")


class CloudNodeHandler(Handler):
    """A node as a claim on its Neutron ports (see the module's docstring); its id is
    derived from the cluster and the node's name, so a restart finds the same claim."""

    def create(self, st: StackContext, name: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        node_id = str(uuid.uuid5(uuid.NAMESPACE_URL, st.description(name)))
        ports = [n["port"] for n in props.get("networks") or [] if n.get("port")]
        for port in ports:
            st.net.update("port", port, {"device_id": node_id, "device_owner": CLOUD_NODE_OWNER})
        return node_id, {"id": node_id, "name": st.physical_name(name), "ports": ports,
                         "metadata": props.get("metadata") or {}}

    def exists(self, st: StackContext, row: Row) -> dict[str, Any] | None:
        ports = list(row.attributes.get("ports") or [])
        held = [p for p in ports if (or_none(lambda: st.net.show("port", p)) or {}).get("device_id")
                == row.physical_id]
        return row.attributes if ports and held == ports else None

    def delete(self, st: StackContext, pid: str, attrs: dict[str, Any]) -> None:
        for port in attrs.get("ports") or []:
            gone_ok(lambda: st.net.update("port", port, {"device_id": "", "device_owner": ""}))
