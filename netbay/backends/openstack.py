"""A real cloud's Neutron behind the seam, through openstacksdk.

The connection comes from ``clouds.yaml`` (``cloud=NAME``, as every OpenStack
tool reads it) or is handed in. Bodies go to openstacksdk's proxies under
Neutron's own attribute names (the sdk maps them), and results come back under
those names (``to_dict(original_names=True)``), so callers see exactly the JSON
the embedded backend returns. The cloud's errors become ``netbay.errors`` with
the cloud's status, ``NeutronError.type`` and message: a rollback upstream can
name what the cloud refused.
"""

from __future__ import annotations

import builtins
import contextlib

from collections.abc import Callable, Mapping
from typing import Any

import openstack
from keystoneauth1 import exceptions as auth_errors
from openstack import exceptions as sdk_errors
from openstack.resource import Resource as SdkResource

from netbay import errors
from netbay.backends.seam import CLOUD
from netbay.backends.cloudscope import ProjectScoped

# Neutron member -> the name openstacksdk's network proxy uses for it.
_SDK_NAME = {
    "network": "network", "subnet": "subnet", "subnetpool": "subnet_pool", "port": "port",
    "router": "router", "floatingip": "ip", "security_group": "security_group",
    "security_group_rule": "security_group_rule",
}
# Plural proxy methods where they are not simply name + "s".
_SDK_LIST = {"subnet_pool": "subnet_pools", "ip": "ips"}


class OpenStackBackend:
    """Neutron of the cloud ``cloud`` (clouds.yaml), or of an open ``connection``."""

    name = "openstack"
    traits = CLOUD

    def __init__(self, cloud: str | None = None, connection: openstack.connection.Connection | None = None,
                 **config: Any) -> None:
        self.conn = connection or openstack.connect(cloud=cloud, **config)
        self.net = self.conn.network
        self._untagged_posts: set[str] = set()  # members this Neutron refuses ``tags`` on POST for

    def for_context(self, context: Any) -> Any:
        """This cloud as the caller of ``context`` sees it: its project's objects (creates
        carry the project), or everything for a caller with the admin role, as Neutron
        treats each (:mod:`netbay.backends.cloudscope` says why the clouds.yaml
        credentials act, not the caller's token)."""
        return ProjectScoped(self, context.project_id, admin=context.is_admin)

    def for_project(self, project_id: str) -> Any:
        """This cloud as a member of ``project_id`` sees it (a cluster's owner, a job's project)."""
        return ProjectScoped(self, project_id)

    @property
    def project_id(self) -> str:
        """The project whose objects this backend makes (the credentials' scope)."""
        return sdk_call(lambda: self.conn.current_project_id)

    # -- CRUD ------------------------------------------------------------------------------

    def create(self, member: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Tags go in the body where the cloud's Neutron takes them on POST. Where it refuses
        them (``Attribute 'tags' not allowed in POST``, e.g. security groups) or drops them
        (ports without ML2's ``tag_ports_during_bulk_creation``), the object is made and then
        tagged in a second call — or deleted again if that fails, so a caller always gets
        its object tagged or nothing."""
        make = getattr(self.net, f"create_{_sdk(member)}")
        wanted = list(body.get("tags") or ())
        obj = None
        if wanted and member not in self._untagged_posts:
            try:
                obj = sdk_call(lambda: plain(make(**body)))
            except errors.BadRequest as exc:
                if "'tags' not allowed" not in exc.message:
                    raise
                self._untagged_posts.add(member)
        if obj is None:
            obj = sdk_call(lambda: plain(make(**{k: v for k, v in body.items() if k != "tags"})))
        have = list(obj.get("tags") or ())
        if not set(wanted) <= set(have):
            try:
                obj["tags"] = self.set_tags(member, obj["id"], have + [t for t in wanted if t not in have])
            except BaseException:
                with contextlib.suppress(errors.NetbayError):
                    self.delete(member, obj["id"])
                raise
        return obj

    def show(self, member: str, obj_id: str) -> dict[str, Any]:
        return sdk_call(lambda: plain(getattr(self.net, f"get_{_sdk(member)}")(obj_id)))

    def list(self, member: str, **filters: Any) -> list[dict[str, Any]]:
        name = _sdk(member)
        method = getattr(self.net, _SDK_LIST.get(name, name + "s"))
        return sdk_call(lambda: [plain(o) for o in method(**filters)])

    def update(self, member: str, obj_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return sdk_call(lambda: plain(getattr(self.net, f"update_{_sdk(member)}")(obj_id, **body)))

    def delete(self, member: str, obj_id: str) -> None:
        sdk_call(lambda: getattr(self.net, f"delete_{_sdk(member)}")(obj_id, ignore_missing=False))

    # -- beyond CRUD -----------------------------------------------------------------------

    def add_router_interface(self, router_id: str, *, subnet_id: str | None = None,
                             port_id: str | None = None) -> dict[str, Any]:
        return sdk_call(lambda: self.net.add_interface_to_router(router_id, subnet=subnet_id, port=port_id))

    def remove_router_interface(self, router_id: str, *, subnet_id: str | None = None,
                                port_id: str | None = None) -> dict[str, Any]:
        return sdk_call(lambda: self.net.remove_interface_from_router(router_id, subnet=subnet_id,
                                                                   port=port_id))

    def set_tags(self, member: str, obj_id: str, tags: builtins.list[str]) -> builtins.list[str]:
        def run() -> list[str]:
            try:   # the PUT needs only the URL: no GET first (a missing object's 404 comes from the PUT)
                obj = _by_id(member, obj_id)
            except errors.BadRequest:   # a member :func:`_by_id` does not know: fetched for its URL
                obj = getattr(self.net, f"get_{_sdk(member)}")(obj_id)
            return list(self.net.set_tags(obj, list(tags)).tags)

        return sdk_call(run)

    def add_tag(self, member: str, obj_id: str, tag: str) -> None:
        sdk_call(lambda: _by_id(member, obj_id).add_tag(self.net, tag))

    def remove_tag(self, member: str, obj_id: str, tag: str) -> None:
        sdk_call(lambda: _by_id(member, obj_id).remove_tag(self.net, tag))

    def close(self) -> None:
        self.conn.close()

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "auth_url": self.conn.config.get_auth_args().get("auth_url"),
                "network": sdk_call(lambda: self.net.get_endpoint()),
                "project_id": sdk_call(lambda: self.conn.current_project_id)}


def _sdk(member: str) -> str:
    try:
        return _SDK_NAME[member]
    except KeyError:
        raise errors.BadRequest(f"unknown network resource {member!r}") from None


def _by_id(member: str, obj_id: str) -> Any:
    """The sdk resource of an id, without fetching it (a tag call needs only its URL)."""
    from openstack.network.v2 import floating_ip, network, port, router, security_group, subnet, subnet_pool

    classes = {"network": network.Network, "subnet": subnet.Subnet, "subnetpool": subnet_pool.SubnetPool,
               "port": port.Port, "router": router.Router, "floatingip": floating_ip.FloatingIP,
               "security_group": security_group.SecurityGroup}
    _sdk(member)
    if member not in classes:
        raise errors.BadRequest(f"{member} has no tags")
    return classes[member].new(id=obj_id)


def plain(obj: SdkResource) -> dict[str, Any]:
    """An sdk resource as Neutron's JSON object (Neutron's attribute names)."""
    return obj.to_dict(original_names=True, computed=False, headers=False)


def sdk_call(fn: Callable[[], Any]) -> Any:
    """Run an sdk call; the cloud's refusal becomes the matching ``netbay.errors``."""
    try:
        return fn()
    except sdk_errors.HttpException as exc:
        raise _translate(exc) from exc
    except sdk_errors.ResourceNotFound as exc:  # raised without a response by some lookups
        raise errors.NotFound(str(exc)) from exc
    except (sdk_errors.SDKException, auth_errors.ClientException) as exc:  # no answer, or no usable one
        err = errors.NetbayError(f"{type(exc).__name__}: {exc}", kind="CloudUnreachable")
        err.status = 502
        raise err from exc


def _translate(exc: sdk_errors.HttpException) -> errors.NetbayError:
    kind, message = None, exc.details or exc.message
    response = getattr(exc, "response", None)
    if response is not None:
        try:
            body = response.json()
        except ValueError:
            body = None
        if isinstance(body, dict) and isinstance(body.get("NeutronError"), dict):
            kind = body["NeutronError"].get("type") or None
            message = body["NeutronError"].get("message") or message
    return errors.from_status(exc.status_code or 502, str(message), kind)
