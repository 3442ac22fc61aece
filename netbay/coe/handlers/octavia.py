"""Octavia's Heat types, made through the load-balancer seam (``st.lb``).

``st.lb`` is a :class:`netbay.backends.loadbalancers.LoadBalancerBackend`:
netbay's own Octavia-compatible API on the embedded backend, the cloud's
Octavia on the ``openstack`` backend when its catalog has one. Without an
Octavia these types are refused by name (:func:`netbay.coe.handlers.table`).
Octavia refuses changes to a tree while its load balancer is ``PENDING_*``, so
every child is made and deleted under :meth:`StackContext.lb_change`
(:mod:`netbay.coe.handlers.context`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from netbay.coe.handlers.base import Handler, Refused, gone_ok, or_none

if TYPE_CHECKING:
    from netbay.coe.handlers.context import StackContext
    from netbay.coe.stackrecord import Row


class LBHandler(Handler):
    """One kind of the load-balancer seam (``kind``), bodies in Octavia's vocabulary."""

    kind = ""

    def create(self, st: StackContext, name: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        body = st.owned({"name": st.physical_name(name), "tags": st.tags(name), **self.body(st, props)})
        obj = st.lb.create(self.kind, body)
        return obj["id"], obj

    def body(self, st: StackContext, props: dict[str, Any]) -> dict[str, Any]:
        return {}

    def exists(self, st: StackContext, row: Row) -> dict[str, Any] | None:
        return or_none(lambda: st.lb.show(self.kind, row.physical_id))

    def find(self, st: StackContext, name: str) -> tuple[str, dict[str, Any]] | None:
        found = st.lb.list(self.kind, tags=st.tags(name))
        return (found[0]["id"], found[0]) if found else None

    def delete(self, st: StackContext, pid: str, attrs: dict[str, Any]) -> None:
        gone_ok(lambda: st.lb.delete(self.kind, pid))


class LoadBalancerHandler(LBHandler):
    kind = "loadbalancer"

    def body(self, st: StackContext, props: dict[str, Any]) -> dict[str, Any]:
        return {"vip_subnet_id": st.subnet_id(props["vip_subnet"])}

    def finish(self, st: StackContext, pid: str, attrs: dict[str, Any], props: dict[str, Any]) -> dict[str, Any]:
        return st.wait_lb(pid)

    def delete(self, st: StackContext, pid: str, attrs: dict[str, Any]) -> None:
        with st.lb_lock(pid):
            try:
                st.wait_lb(pid)
            except Refused as exc:
                if exc.status == 404:
                    return
                raise
            gone_ok(lambda: st.lb.delete("loadbalancer", pid, cascade=True))


class LBChildHandler(LBHandler):
    """Listener, pool, health monitor, member: made and deleted one at a time per load balancer."""

    def lb_of(self, st: StackContext, body: dict[str, Any]) -> str:
        raise NotImplementedError

    def parent(self, body_or_attrs: dict[str, Any]) -> str | None:
        """The object's parent in the seam's sense (a member's pool), else None."""
        return None

    def create(self, st: StackContext, name: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        body = st.owned({"name": st.physical_name(name), "tags": st.tags(name), **self.body(st, props)})
        lb_id = self.lb_of(st, body)
        parent = self.parent(body)
        sent = {k: v for k, v in body.items() if parent is None or k != "pool_id"}  # a member's pool is its URL
        obj = st.lb_change(lb_id, lambda: st.lb.create(self.kind, sent, parent=parent))
        return obj["id"], {**obj, "loadbalancer_id": lb_id}

    def exists(self, st: StackContext, row: Row) -> dict[str, Any] | None:
        attrs = or_none(lambda: st.lb.show(self.kind, row.physical_id, parent=self.parent(row.attributes)))
        return None if attrs is None else {**attrs, "loadbalancer_id": row.attributes.get("loadbalancer_id")}

    def find(self, st: StackContext, name: str) -> tuple[str, dict[str, Any]] | None:
        found = super().find(st, name)
        if found is None:
            return None
        return found[0], {**found[1], "loadbalancer_id": self.lb_of_found(st, found[1])}

    def lb_of_found(self, st: StackContext, obj: dict[str, Any]) -> str | None:
        refs = obj.get("loadbalancers") or []
        return refs[0]["id"] if refs else None

    def delete(self, st: StackContext, pid: str, attrs: dict[str, Any]) -> None:
        lb_id = attrs.get("loadbalancer_id")
        remove = lambda: gone_ok(lambda: st.lb.delete(self.kind, pid, parent=self.parent(attrs)))  # noqa: E731
        if lb_id is None:
            remove()
            return
        st.lb_change(lb_id, remove)


class ListenerHandler(LBChildHandler):
    kind = "listener"

    def body(self, st: StackContext, props: dict[str, Any]) -> dict[str, Any]:
        return {"loadbalancer_id": props["loadbalancer"], "protocol": props["protocol"],
                "protocol_port": int(props["protocol_port"])}

    def lb_of(self, st: StackContext, body: dict[str, Any]) -> str:
        return body["loadbalancer_id"]


class PoolHandler(LBChildHandler):
    kind = "pool"

    def body(self, st: StackContext, props: dict[str, Any]) -> dict[str, Any]:
        return {"listener_id": props["listener"], "protocol": props["protocol"],
                "lb_algorithm": props["lb_algorithm"]}

    def lb_of(self, st: StackContext, body: dict[str, Any]) -> str:
        return st.lb.show("listener", body["listener_id"])["loadbalancers"][0]["id"]


def _lb_of_pool(st: StackContext, pool_id: str) -> str:
    return st.lb.show("pool", pool_id)["loadbalancers"][0]["id"]


class HealthMonitorHandler(LBChildHandler):
    kind = "healthmonitor"

    def body(self, st: StackContext, props: dict[str, Any]) -> dict[str, Any]:
        return {"pool_id": props["pool"], "type": props["type"], "delay": int(props["delay"]),
                "max_retries": int(props["max_retries"]), "timeout": int(props["timeout"])}

    def lb_of(self, st: StackContext, body: dict[str, Any]) -> str:
        return _lb_of_pool(st, body["pool_id"])

    def lb_of_found(self, st: StackContext, obj: dict[str, Any]) -> str | None:
        pools = obj.get("pools") or []
        return _lb_of_pool(st, pools[0]["id"]) if pools else None


class MemberHandler(LBChildHandler):
    """Members live under their pool: the pool id is kept in the attributes."""

    kind = "member"

    def body(self, st: StackContext, props: dict[str, Any]) -> dict[str, Any]:
        body = {"pool_id": props["pool"], "address": props["address"], "protocol_port": int(props["protocol_port"])}
        if props.get("subnet"):
            body["subnet_id"] = st.subnet_id(props["subnet"])
        return body

    def parent(self, body_or_attrs: dict[str, Any]) -> str | None:
        return body_or_attrs.get("pool_id")

    def create(self, st: StackContext, name: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        pid, attrs = super().create(st, name, props)
        return pid, {**attrs, "pool_id": props["pool"]}

    def lb_of(self, st: StackContext, body: dict[str, Any]) -> str:
        return _lb_of_pool(st, body["pool_id"])

    def exists(self, st: StackContext, row: Row) -> dict[str, Any] | None:
        found = super().exists(st, row)
        return None if found is None else {**found, "pool_id": row.attributes.get("pool_id")}

    def find(self, st: StackContext, name: str) -> tuple[str, dict[str, Any]] | None:
        return None  # members are listed per pool; a lost member is taken by the cascade delete
