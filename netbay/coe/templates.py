"""Cluster templates (and their legacy name, baymodels) with Magnum's rules.

- ``coe`` is mandatory; an omitted ``network_driver`` becomes the COE's default and
  is stored; the driver must be supported for the COE, then allowed by the
  operator (``netbay.coe.coes``), both worded as Magnum words them.
- Labels the driver reads are checked against the registry (beyond Magnum) and
  stored as read (``" vxlan"`` → ``vxlan``); others are kept and reported as
  ``labels_ignored``. The driver's pod and service ranges must be routable beside
  the external network and the private subnet (:func:`check_routes`), checked
  again at cluster create with the cluster's own labels and subnet.
- ``public``/``hidden`` need admin; a member sees its project's templates and the
  public ones (public hidden ones only by uuid or name, as in Magnum).
- A template that clusters use changes only ``name``, ``public`` and ``hidden``
  and cannot be deleted (``ClusterTemplate X is referenced by …``, 400).
- ``image_id`` and ``keypair_id`` are optional (Magnum requires them); a
  ``keypair_id`` given must name one of the caller's keypairs (``os-keypairs``),
  as Magnum checks it with Nova; there is no Glance here.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import exists, or_, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from netbay.coe import common, fields, labels, patch, references
from netbay.drivers import registry
from netbay.coe.coes import COE_ENUM, CoeConfig
from netbay.coe.fields import Attr
from netbay.context import Context
from netbay.errors import BadRequest, Forbidden
from netbay.store.models import Cluster, ClusterTemplate, utcnow

KIND = common.Kind("ClusterTemplate", "ClusterTemplates", "ClusterTemplate")
_S = Attr("str", min=1, max=255)


def schema(legacy: bool = False) -> dict[str, Attr]:
    """The writable attributes; a baymodel's labels are strings only and its DNS one IPv4."""
    return {
        "name": _S,
        "coe": Attr("enum", choices=COE_ENUM, mandatory=True),
        "image_id": _S,
        "flavor_id": _S,
        "master_flavor_id": _S,
        "keypair_id": _S,
        "external_network_id": _S,
        "fixed_network": _S,
        "fixed_subnet": _S,
        "network_driver": _S,
        "volume_driver": _S,
        "docker_storage_driver": _S,
        "http_proxy": _S,
        "https_proxy": _S,
        "no_proxy": _S,
        "insecure_registry": _S,
        "cluster_distro": _S,
        "dns_nameserver": Attr("ipv4" if legacy else "dns_list", min=1, max=255),
        "apiserver_port": Attr("int", min=1024, max=65535),
        "docker_volume_size": Attr("int", min=1),
        "labels": Attr("labels", scalar_labels=not legacy),
        "tls_disabled": Attr("bool", default=False),
        "public": Attr("bool", default=False),
        "hidden": Attr("bool", default=False),
        "registry_enabled": Attr("bool", default=False),
        "master_lb_enabled": Attr("bool", default=False),
        "floating_ip_enabled": Attr("bool", default=True),
        "server_type": Attr("enum", choices=("vm", "bm"), default="vm"),
        "tags": Attr("str", min=0, max=255),
    }


READONLY = frozenset({"uuid", "links", "created_at", "updated_at", "project_id", "user_id",
                      "labels_ignored", "driver"})
# Magnum's ClusterTemplatePatchType: besides the mandatory ``coe`` (and image_id,
# which is optional here), these cannot be removed.
NON_REMOVABLE = frozenset({"/network_driver", "/external_network_id", "/tls_disabled", "/public",
                           "/server_type", "/coe", "/registry_enabled", "/cluster_distro", "/hidden"})
CHANGEABLE_IN_USE = frozenset({"name", "public", "hidden"})
VOLUME_DRIVERS = {"kubernetes": ("cinder",), "swarm": ("rexray",), "swarm-mode": ("rexray",),
                  "mesos": ("rexray",)}


# --- reading -------------------------------------------------------------------------------------


def _visible(ctx: Context, *, listing: bool) -> Any:
    """Own templates and public ones (a list leaves out public hidden ones), admin all."""
    stmt = select(ClusterTemplate)
    if ctx.is_admin:
        return stmt
    public: ColumnElement[bool] = ClusterTemplate.public.is_(True)
    if listing:
        public = public & ClusterTemplate.hidden.is_(False)
    return stmt.where(or_(ClusterTemplate.project_id == ctx.project_id, public))


def get(session: Session, ctx: Context, ident: str, *, for_update: bool = False) -> ClusterTemplate:
    return common.find(session, ClusterTemplate, _visible(ctx, listing=False), ident, KIND,
                       for_update=for_update)


def list_page(session: Session, ctx: Context, p: common.Paging) -> tuple[list[dict[str, Any]], str | None]:
    return common.page(session, ClusterTemplate, _visible(ctx, listing=True), p, KIND, render)


def in_use(session: Session, template_id: str) -> bool:
    return bool(session.scalar(select(exists().where(Cluster.cluster_template_id == template_id))))


def render(t: ClusterTemplate) -> dict[str, Any]:
    out = {name: getattr(t, name) for name in schema()}
    out.update(uuid=t.id, project_id=t.project_id, user_id=t.user_id, labels=dict(t.labels or {}),
               labels_ignored=labels.ignored(t.labels or {}, t.network_driver),
               created_at=common.timestamp(t.created_at), updated_at=common.timestamp(t.updated_at))
    return out


# --- writing -------------------------------------------------------------------------------------


def _validate(session: Session, ctx: Context, config: CoeConfig, values: dict[str, Any], net: Any = None) -> None:
    """The rules a template's whole set of values must meet (create, and after a patch)."""
    coe = values["coe"]
    config.validate_server_type(coe, values["server_type"])
    if not values.get("network_driver"):
        values["network_driver"] = config.default_driver(coe)
    config.validate_network_driver(coe, values["network_driver"])
    if values.get("volume_driver"):
        supported = VOLUME_DRIVERS.get(coe, ())
        if values["volume_driver"] not in supported:
            raise BadRequest(f"Volume driver type {values['volume_driver']} is not supported, expecting a "
                             f"{'/'.join([*supported, 'unspecified'])} volume driver.")
    if values.get("docker_storage_driver") == "devicemapper" and (values.get("docker_volume_size") or 0) < 3:
        raise BadRequest(f"docker volume size {values.get('docker_volume_size')} GB is not valid, expecting "
                         "minimum value 3GB for devicemapper storage driver.")
    references.check(session, ctx, values, net)   # Magnum's validate_os_resources, then netbay's label checks
    values["labels"] = labels.check(values.get("labels") or {}, values["network_driver"]).labels
    check_routes(session, values["network_driver"], values["labels"], external=values.get("external_network_id"),
                 fixed_network=values.get("fixed_network"), fixed_subnet=values.get("fixed_subnet"), net=net)


def check_routes(session: Session, driver: str | None, checked: dict[str, Any], *, external: str | None,
                 fixed_network: str | None, fixed_subnet: str | None, net: Any = None) -> None:
    """400 if the driver's pod/service ranges in ``checked`` labels overlap the external
    network or the private subnet in a way it cannot route (see ``labels.routing_problem``);
    the private subnet is the named ``fixed_subnet``, else the one netbay makes from
    ``fixed_subnet_cidr`` (unknown when only a ``fixed_network`` is named)."""
    if fixed_subnet:
        fixed_cidr = references.subnet_cidr(session, fixed_subnet, net)
    elif fixed_network:
        fixed_cidr = None
    else:
        fixed_cidr = str(checked.get("fixed_subnet_cidr") or registry.known_labels(None)["fixed_subnet_cidr"].default)
    problem = labels.routing_problem(checked, driver, fixed_cidr, references.external_cidrs(session, external, net))
    if problem:
        raise BadRequest(problem)


def _publish_allowed(ctx: Context) -> None:
    if not ctx.is_admin:
        raise Forbidden("Not authorized to set public or hidden flag for cluster template.")


def create(session: Session, ctx: Context, config: CoeConfig, body: Any, *, legacy: bool = False,
           argument: str = "cluster_template", net: Any = None) -> ClusterTemplate:
    """``net``: the backend the template's network names live in (``None``: netbay's own)."""
    values = fields.parse(body, schema(legacy), argument, READONLY)
    values["labels"] = dict(values.get("labels") or {})
    _validate(session, ctx, config, values, net)   # the keypair is not checked here: a cluster's is
    if values["public"] or values["hidden"]:
        _publish_allowed(ctx)
    values["name"] = values.get("name") or common.generate_name("template")
    template = ClusterTemplate(project_id=ctx.project_id, user_id=ctx.user_id, **values)
    session.add(template)
    session.flush()
    return template


def update(session: Session, ctx: Context, config: CoeConfig, ident: str, raw_patch: Any, *,
           legacy: bool = False, net: Any = None) -> ClusterTemplate:
    ops = patch.parse(raw_patch, internal=patch.INTERNAL,
                      mandatory=NON_REMOVABLE | {"/coe"})
    template = get(session, ctx, ident, for_update=True)
    if not ctx.is_admin and template.project_id != ctx.project_id:
        raise common.policy_denied("clustertemplate:update")
    attrs = schema(legacy)
    before = {name: getattr(template, name) for name in attrs}
    before["labels"] = dict(template.labels or {})
    defaults = {name: attr.default for name, attr in attrs.items()}
    after = fields.recheck(patch.apply(before, ops, defaults), attrs)
    after["labels"] = dict(after.get("labels") or {})
    # Removed (or nulled) like any unset attribute; a template always has a name, as on create.
    after["name"] = after.get("name") or common.generate_name("template")
    _validate(session, ctx, config, after, net)
    changed = {name for name in attrs if after.get(name) != before.get(name)}
    if not changed:
        return template
    if changed & {"public", "hidden"}:
        _publish_allowed(ctx)
    if not changed <= CHANGEABLE_IN_USE and in_use(session, template.id):
        raise referenced(template.id)
    for name in changed:
        setattr(template, name, after[name])
    template.updated_at = utcnow()
    session.flush()
    return template


def delete(session: Session, ctx: Context, ident: str) -> None:
    template = get(session, ctx, ident, for_update=True)
    if not ctx.is_admin and template.project_id != ctx.project_id:
        raise common.policy_denied("clustertemplate:delete")
    if in_use(session, template.id):
        raise referenced(template.id)
    session.delete(template)
    session.flush()


def referenced(template_id: str) -> BadRequest:
    return BadRequest(f"ClusterTemplate {template_id} is referenced by one or multiple clusters.")
