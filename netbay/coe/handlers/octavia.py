"""Octavia's Heat types, made through netbay's own load-balancer API (``st.api``).

The seam covers the network service only: on the ``openstack`` backend a cloud's
Octavia is not driven yet, so these types are refused there by name (see
:func:`netbay.coe.handlers.table`) and a template without a master load balancer
builds on such a cloud.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from netbay.backends.apiclient import LB, ApiError
from netbay.coe.handlers.base import Handler

if TYPE_CHECKING:
    from netbay.coe.executor import Row, Stack


class ApiHandler(Handler):
    """One collection of netbay's own API (``base``/``collection``, bodies under ``member``)."""

    collection = ""
    member = ""
    base = LB

    def create(self, st: Stack, name: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        body = st.owned({"name": st.physical_name(name), "tags": st.tags(name), **self.body(st, props)})
        obj = st.api.call("POST", f"{self.base}/{self.collection}", {self.member: body})[self.member]
        return obj["id"], obj

    def body(self, st: Stack, props: dict[str, Any]) -> dict[str, Any]:
        return {}

    def exists(self, st: Stack, row: Row) -> dict[str, Any] | None:
        try:
            return st.api.call("GET", f"{self.base}/{self.collection}/{row.physical_id}")[self.member]
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def find(self, st: Stack, name: str) -> tuple[str, dict[str, Any]] | None:
        key = self.collection.replace("-", "_")
        found = st.api.call("GET", f"{self.base}/{self.collection}", tags=",".join(st.tags(name)))[key]
        return (found[0]["id"], found[0]) if found else None

    def delete(self, st: Stack, pid: str, attrs: dict[str, Any]) -> None:
        st.api.gone_ok("DELETE", f"{self.base}/{self.collection}/{pid}")


class LoadBalancerHandler(ApiHandler):
    collection, member = "loadbalancers", "loadbalancer"

    def body(self, st: Stack, props: dict[str, Any]) -> dict[str, Any]:
        return {"vip_subnet_id": st.subnet_id(props["vip_subnet"])}

    def finish(self, st: Stack, pid: str, attrs: dict[str, Any], props: dict[str, Any]) -> dict[str, Any]:
        return st.wait_lb(pid)

    def delete(self, st: Stack, pid: str, attrs: dict[str, Any]) -> None:
        with st.lb_lock(pid):
            try:
                st.wait_lb(pid)
            except ApiError as exc:
                if exc.status == 404:
                    return
                raise
            st.api.gone_ok("DELETE", f"{LB}/loadbalancers/{pid}", cascade="true")


class LBChildHandler(ApiHandler):
    """Listener, pool, health monitor: made and deleted one at a time per load balancer."""

    def lb_of(self, st: Stack, body: dict[str, Any]) -> str:
        raise NotImplementedError

    def create(self, st: Stack, name: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        body = st.owned({"name": st.physical_name(name), "tags": st.tags(name), **self.body(st, props)})
        lb_id = self.lb_of(st, body)
        obj = st.lb_change(lb_id, lambda: st.api.call("POST", self.path(body), {self.member: body})[self.member])
        return obj["id"], {**obj, "loadbalancer_id": lb_id}

    def path(self, body: dict[str, Any]) -> str:
        return f"{LB}/{self.collection}"

    def exists(self, st: Stack, row: Row) -> dict[str, Any] | None:
        attrs = super().exists(st, row)
        return None if attrs is None else {**attrs, "loadbalancer_id": row.attributes.get("loadbalancer_id")}

    def find(self, st: Stack, name: str) -> tuple[str, dict[str, Any]] | None:
        found = super().find(st, name)
        if found is None:
            return None
        return found[0], {**found[1], "loadbalancer_id": self.lb_of_found(st, found[1])}

    def lb_of_found(self, st: Stack, obj: dict[str, Any]) -> str | None:
        refs = obj.get("loadbalancers") or []
        return refs[0]["id"] if refs else None

    def delete(self, st: Stack, pid: str, attrs: dict[str, Any]) -> None:
        lb_id = attrs.get("loadbalancer_id")
        url = f"{LB}/{self.collection}/{pid}"
        if lb_id is None:
            st.api.gone_ok("DELETE", url)
            return
        st.lb_change(lb_id, lambda: st.api.gone_ok("DELETE", url))


class ListenerHandler(LBChildHandler):
    collection, member = "listeners", "listener"

    def body(self, st: Stack, props: dict[str, Any]) -> dict[str, Any]:
        return {"loadbalancer_id": props["loadbalancer"], "protocol": props["protocol"],
                "protocol_port": int(props["protocol_port"])}

    def lb_of(self, st: Stack, body: dict[str, Any]) -> str:
        return body["loadbalancer_id"]


class PoolHandler(LBChildHandler):
    collection, member = "pools", "pool"

    def body(self, st: Stack, props: dict[str, Any]) -> dict[str, Any]:
        return {"listener_id": props["listener"], "protocol": props["protocol"],
                "lb_algorithm": props["lb_algorithm"]}

    def lb_of(self, st: Stack, body: dict[str, Any]) -> str:
        listener = st.api.call("GET", f"{LB}/listeners/{body['listener_id']}")["listener"]
        return listener["loadbalancers"][0]["id"]


def _lb_of_pool(st: Stack, pool_id: str) -> str:
    return st.api.call("GET", f"{LB}/pools/{pool_id}")["pool"]["loadbalancers"][0]["id"]


class HealthMonitorHandler(LBChildHandler):
    collection, member = "healthmonitors", "healthmonitor"

    def body(self, st: Stack, props: dict[str, Any]) -> dict[str, Any]:
        return {"pool_id": props["pool"], "type": props["type"], "delay": int(props["delay"]),
                "max_retries": int(props["max_retries"]), "timeout": int(props["timeout"])}

    def lb_of(self, st: Stack, body: dict[str, Any]) -> str:
        return _lb_of_pool(st, body["pool_id"])

    def lb_of_found(self, st: Stack, obj: dict[str, Any]) -> str | None:
        pools = obj.get("pools") or []
        return _lb_of_pool(st, pools[0]["id"]) if pools else None


class MemberHandler(LBChildHandler):
    """Members live under their pool: the pool id is kept in the attributes."""

    collection, member = "members", "member"

    def body(self, st: Stack, props: dict[str, Any]) -> dict[str, Any]:
        body = {"pool_id": props["pool"], "address": props["address"], "protocol_port": int(props["protocol_port"])}
        if props.get("subnet"):
            body["subnet_id"] = st.subnet_id(props["subnet"])
        return body

    def create(self, st: Stack, name: str, props: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        pid, attrs = super().create(st, name, props)
        return pid, {**attrs, "pool_id": props["pool"]}

    def path(self, body: dict[str, Any]) -> str:
        return f"{LB}/pools/{body.pop('pool_id')}/members"

    def lb_of(self, st: Stack, body: dict[str, Any]) -> str:
        return _lb_of_pool(st, body["pool_id"])

    def exists(self, st: Stack, row: Row) -> dict[str, Any] | None:
        pool = row.attributes.get("pool_id")
        try:
            obj = st.api.call("GET", f"{LB}/pools/{pool}/members/{row.physical_id}")["member"]
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return {**obj, "pool_id": pool, "loadbalancer_id": row.attributes.get("loadbalancer_id")}

    def find(self, st: Stack, name: str) -> tuple[str, dict[str, Any]] | None:
        return None  # members are listed per pool; a lost member is taken by the cascade delete

    def delete(self, st: Stack, pid: str, attrs: dict[str, Any]) -> None:
        url = f"{LB}/pools/{attrs.get('pool_id')}/members/{pid}"
        lb_id = attrs.get("loadbalancer_id")
        if lb_id is None:
            st.api.gone_ok("DELETE", url)
            return
        st.lb_change(lb_id, lambda: st.api.gone_ok("DELETE", url))
