"""Clusters (and their legacy name, bays) with Magnum's rules.

- ``cluster_template_id`` (uuid or name) is mandatory; an unknown one is a 400.
- Unset values come from the template: ``keypair`` ← ``keypair_id``, ``labels``
  (cluster labels replace the template's unless ``merge_labels``), flavors,
  ``docker_volume_size``, ``fixed_network``/``fixed_subnet``,
  ``floating_ip_enabled``, ``master_lb_enabled``.
- ``master_count`` > 1 needs ``master_lb_enabled``.
- Only ``node_count`` may be patched, and only in a ``*_COMPLETE`` state.
- ``node_count`` is at least 0; 0 needs microversion 1.10 (Magnum's rule).
- Create stores ``CREATE_IN_PROGRESS`` and hands the cluster to the conductor;
  delete removes the row (until the executor exists: see ``conductor``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from netbay.coe import certificates, clusternet, common, fields, labels, patch, references, templates
from netbay.coe.fields import Attr
from netbay.drivers import registry
from netbay.context import Context
from netbay.errors import BadRequest, Forbidden, NotFound
from netbay.store.models import Cluster, ClusterTemplate, utcnow

KIND = common.CLUSTER
NAME = Attr("str", min=1, max=242, pattern=r"^[a-zA-Z][a-zA-Z0-9_.-]*$")
_S = Attr("str", min=1, max=255)

STATUSES = frozenset(
    f"{action}_{state}"
    for action in ("CREATE", "UPDATE", "DELETE", "RESUME", "RESTORE", "ROLLBACK", "SNAPSHOT", "CHECK", "ADOPT")
    for state in ("IN_PROGRESS", "COMPLETE", "FAILED")
)
# Magnum's conductor updates a cluster only from these.
UPDATABLE = frozenset({"CREATE_COMPLETE", "UPDATE_COMPLETE", "RESUME_COMPLETE", "RESTORE_COMPLETE",
                       "ROLLBACK_COMPLETE", "SNAPSHOT_COMPLETE", "CHECK_COMPLETE", "ADOPT_COMPLETE"})
PATCHABLE = frozenset({"node_count"})
# node_count may be 0 (WSME's minimum), but Magnum takes a cluster to zero workers only
# from microversion 1.10 (``zero_nodes``); below, create and patch refuse it so.
ZERO_NODES = "Resizing a nodegroup to zero is not supported in the provided microversion."
# Bays name two attributes differently.
BAY_NAMES = {"cluster_template_id": "baymodel_id", "create_timeout": "bay_create_timeout"}

_SCHEMA: dict[str, Attr] = {
    "name": NAME,
    "cluster_template_id": Attr("text", mandatory=True),
    "node_count": Attr("int", min=0, default=1),
    "master_count": Attr("int", min=1, default=1),
    "create_timeout": Attr("int", min=0, default=60),
    "docker_volume_size": Attr("int", min=1),
    "labels": Attr("labels"),
    "master_flavor_id": _S,
    "flavor_id": _S,
    "discovery_url": Attr("str", min=0, max=255),
    "keypair": _S,
    "fixed_network": _S,
    "fixed_subnet": _S,
    "floating_ip_enabled": Attr("bool"),
    "master_lb_enabled": Attr("bool"),
    "merge_labels": Attr("bool", default=False),
}
_BAY_ONLY = ("name", "cluster_template_id", "node_count", "master_count", "create_timeout",
             "docker_volume_size", "labels", "master_flavor_id", "flavor_id", "discovery_url")
OUTPUTS = ("stack_id", "status", "status_reason", "api_address", "node_addresses", "master_addresses",
           "coe_version", "container_version", "health_status", "health_status_reason", "faults")
READONLY = frozenset({"uuid", "links", "project_id", "user_id", "created_at", "updated_at", "labels_ignored",
                      "labels_overridden", "labels_added", "labels_skipped", "bay_faults", *OUTPUTS})
# Magnum's ClusterPatchType internal attributes.
INTERNAL = patch.INTERNAL | frozenset({"/api_address", "/node_addresses", "/master_addresses", "/stack_id",
                                       "/ca_cert_ref", "/magnum_cert_ref", "/trust_id", "/trustee_user_name",
                                       "/trustee_password", "/trustee_user_id"})
SUMMARY = ("uuid", "name", "cluster_template_id", "keypair", "docker_volume_size", "labels", "node_count",
           "status", "master_flavor_id", "flavor_id", "create_timeout", "master_count", "stack_id",
           "health_status", "labels_ignored")
BAY_SUMMARY = ("uuid", "name", "baymodel_id", "node_count", "status", "bay_create_timeout", "master_count",
               "stack_id")


def schema(legacy: bool = False) -> dict[str, Attr]:
    """Writable attributes under their external names (a bay's are fewer and renamed)."""
    if not legacy:
        return dict(_SCHEMA)
    return {BAY_NAMES.get(name, name): _SCHEMA[name] for name in _BAY_ONLY}


def _internal(values: dict[str, Any]) -> dict[str, Any]:
    back = {v: k for k, v in BAY_NAMES.items()}
    return {back.get(k, k): v for k, v in values.items()}


# --- reading -------------------------------------------------------------------------------------


get = common.get_cluster


def list_page(session: Session, ctx: Context, p: common.Paging, *, detail: bool,
              legacy: bool = False) -> tuple[list[dict[str, Any]], str | None]:
    templates_by_id: dict[str, str] = {}

    def one(c: Cluster) -> dict[str, Any]:
        full = render(session, c, legacy=legacy, drivers=templates_by_id)
        if detail:
            return full
        return {k: full[k] for k in (BAY_SUMMARY if legacy else SUMMARY) if k in full}

    return common.page(session, Cluster, common.scoped(Cluster, ctx), p, KIND, one)


def render(session: Session, c: Cluster, *, legacy: bool = False,
           drivers: dict[str, str] | None = None) -> dict[str, Any]:
    """The cluster as Magnum shows it, plus ``labels_ignored`` (netbay)."""
    cache = drivers if drivers is not None else {}
    if c.cluster_template_id not in cache:
        cache[c.cluster_template_id] = session.scalar(
            select(ClusterTemplate.network_driver).where(ClusterTemplate.id == c.cluster_template_id)) or ""
    out: dict[str, Any] = {name: getattr(c, name) for name in _SCHEMA if name != "merge_labels"}
    out.update({name: getattr(c, name) for name in OUTPUTS})
    out.update(uuid=c.id, project_id=c.project_id, user_id=c.user_id, labels=dict(c.labels or {}),
               labels_ignored=labels.ignored(c.labels or {}, cache[c.cluster_template_id]),
               created_at=common.timestamp(c.created_at), updated_at=common.timestamp(c.updated_at))
    if legacy:
        out = {BAY_NAMES.get(k, k): v for k, v in out.items()}
        out["bay_faults"] = out.pop("faults")
    return out


# --- writing -------------------------------------------------------------------------------------


def _template_for_create(session: Session, ctx: Context, ident: str) -> ClusterTemplate:
    try:
        return templates.get(session, ctx, ident)
    except NotFound as exc:  # Magnum: a 404 is wrong for a POST; the body is what is bad
        raise BadRequest(exc.message) from None


def create(session: Session, ctx: Context, body: Any, *, legacy: bool = False,
           zero_nodes: bool = False, net: Any = None) -> Cluster:
    """``net``: the backend the cluster's network names live in (``None``: netbay's own)."""
    argument = "bay" if legacy else "cluster"
    values = _internal(fields.parse(body, schema(legacy), argument, READONLY))
    if values["node_count"] == 0 and not zero_nodes:
        raise BadRequest(ZERO_NODES)
    template = _template_for_create(session, ctx, values["cluster_template_id"])
    if template.hidden and not ctx.is_admin:   # Magnum: a hidden template makes clusters for admins only
        raise Forbidden("Not authorized.")
    # Lock the template against a concurrent delete (PostgreSQL: FOR SHARE).
    session.execute(select(ClusterTemplate.id).where(ClusterTemplate.id == template.id)
                    .with_for_update(read=True))
    merge = bool(values.pop("merge_labels", False))
    if not values.get("labels"):   # Magnum: absent or empty labels are the template's
        values["labels"] = dict(template.labels or {})
    elif merge:
        values["labels"] = {**(template.labels or {}), **values["labels"]}
    if values.get("keypair") is None:
        values["keypair"] = template.keypair_id
    for attr in ("floating_ip_enabled", "master_lb_enabled"):
        if values.get(attr) is None:
            values[attr] = getattr(template, attr)
    for attr in ("docker_volume_size", "master_flavor_id", "flavor_id", "fixed_network", "fixed_subnet"):
        if not values.get(attr):
            values[attr] = getattr(template, attr)
    # Magnum's checks in Magnum's order (attr_validator.validate_os_resources: the network
    # names, then the keypair; validate_master_count), then netbay's own (docs/magnum.md).
    references.check(session, ctx, {"external_network_id": template.external_network_id,
                                    "fixed_network": values["fixed_network"],
                                    "fixed_subnet": values["fixed_subnet"]}, net)
    references.keypair(session, ctx, values["keypair"])
    if values["master_count"] > 1 and not values["master_lb_enabled"]:
        raise BadRequest("master_count must be 1 when master_lb_enabled is False")
    checked = labels.check(values["labels"], template.network_driver)   # the one parse of the labels
    values["labels"], values["driver_config"] = checked.labels, registry.stored(checked.config)
    templates.check_routes(session, template.network_driver, values["labels"],
                           external=template.external_network_id, fixed_network=values["fixed_network"],
                           fixed_subnet=values["fixed_subnet"], net=net)
    _check_room(session, values["labels"], values["fixed_subnet"], values["master_count"],
                values["node_count"], values["master_lb_enabled"], net=net)
    no_leases = clusternet.room_problem(template.network_driver, checked.config, values["master_count"],
                                        values["node_count"])
    if no_leases:
        raise BadRequest(no_leases)
    values["cluster_template_id"] = template.id
    values["name"] = values.get("name") or common.generate_name("cluster")
    cluster = Cluster(project_id=ctx.project_id, user_id=ctx.user_id, status="CREATE_IN_PROGRESS",
                      status_reason=None, revision_number=1, **values)
    session.add(cluster)
    session.flush()
    certificates.issue_ca(session, cluster)
    return cluster


def update(session: Session, ctx: Context, ident: str, raw_patch: Any, *, legacy: bool = False,
           zero_nodes: bool = False, net: Any = None) -> Cluster:
    """``net``: as for :func:`create` (where the cluster's subnet is)."""
    mandatory = frozenset({"/" + BAY_NAMES["cluster_template_id"] if legacy else "/cluster_template_id"})
    ops = patch.parse(raw_patch, internal=INTERNAL, mandatory=mandatory)
    cluster = get(session, ctx, ident, for_update=True)
    if not ctx.is_admin and cluster.project_id != ctx.project_id:
        raise common.policy_denied("cluster:update")
    attrs = schema(legacy)
    attrs.pop("merge_labels", None)
    current = render(session, cluster, legacy=legacy)
    before = {name: current.get(name) for name in attrs}
    defaults = {name: attr.default for name, attr in attrs.items()}
    after = fields.recheck(patch.apply(before, ops, defaults), attrs)
    changed = {name for name in attrs if after.get(name) != before.get(name)}
    refused = sorted(changed - PATCHABLE)
    if refused:
        raise BadRequest(f"cannot change cluster property(ies) {', '.join(refused)}.")
    if after["node_count"] == 0 and not zero_nodes:
        raise BadRequest(ZERO_NODES)
    if cluster.status not in UPDATABLE:
        raise BadRequest(f'Updating a cluster when status is "{cluster.status}" is not supported.')
    if not changed:
        return cluster
    if after["node_count"] > cluster.node_count:
        _check_room(session, cluster.labels or {}, cluster.fixed_subnet, cluster.master_count,
                    after["node_count"], cluster.master_lb_enabled, net=net, already=cluster.master_count
                    + cluster.node_count + (2 if cluster.master_lb_enabled else 0))
    cluster.node_count = after["node_count"]
    cluster.status = "UPDATE_IN_PROGRESS"
    cluster.status_reason = None
    cluster.revision_number += 1
    cluster.updated_at = utcnow()
    session.flush()
    return cluster


def _check_room(session: Session, labels: dict[str, Any], fixed_subnet: str | None, masters: int, nodes: int,
                master_lb: bool, *, net: Any = None, already: int = 0) -> None:
    """400 unless the private subnet has an address for every node and load balancer VIP
    (Magnum finds out in Heat, minutes later; nothing is made here before the check).
    A ``fixed_subnet`` is asked where it is (``net``, or netbay's own tables); the subnet
    netbay will make is known from the labels. ``already``: addresses the cluster holds
    on it now (a scale needs only the rest)."""
    import ipaddress

    needed = masters + nodes + (2 if master_lb else 0)
    if fixed_subnet:
        found = _subnet_room(session, fixed_subnet, net)
        if found is None:
            return  # references.check has already said what is wrong with it
        cidr, free = found
        room = free + already
    else:
        cidr = str(labels.get("fixed_subnet_cidr") or "10.0.0.0/24")
        room = max(ipaddress.ip_network(cidr, strict=False).num_addresses - 3, 0)  # network, gateway, broadcast
    if needed > room:
        raise BadRequest(f"A cluster of {masters} master(s) and {nodes} node(s)"
                         + (" with its two load balancers" if master_lb else "")
                         + f" needs {needed} addresses on its private subnet {cidr}, which has room for "
                         f"{room}. Use a larger fixed_subnet_cidr or fewer nodes.")


def _subnet_room(session: Session, ident: str, net: Any) -> tuple[str, int] | None:
    """(cidr, addresses of its allocation pools not yet allocated) of the subnet ``ident``
    (id or name): in ``net`` — its ports' fixed IPs on it — or in netbay's own tables."""
    from netbay.network import ipam
    from netbay.store.models import IPAllocation, Subnet

    if net is not None:
        found = references.named(net, "subnet", ident)
        if len(found) != 1:
            return None
        subnet = found[0]
        used = sum(1 for port in net.list("port", network_id=subnet["network_id"])
                   for ip in port.get("fixed_ips") or () if ip.get("subnet_id") == subnet["id"])
        return subnet["cidr"], ipam.pool_size(subnet.get("allocation_pools") or []) - used
    row = session.scalars(select(Subnet).where((Subnet.id == ident) | (Subnet.name == ident))).first()
    if row is None:
        return None
    used = session.scalar(select(func.count()).select_from(IPAllocation)
                          .where(IPAllocation.subnet_id == row.id)) or 0
    return row.cidr, ipam.pool_size(row.allocation_pools or []) - used


def delete(session: Session, ctx: Context, ident: str, *, teardown: bool = True) -> str:
    """Mark the cluster ``DELETE_IN_PROGRESS`` for the conductor, which tears its
    resources down and removes the row at the end; without one (``teardown=False``)
    the row goes at once. Returns the cluster's id."""
    cluster = get(session, ctx, ident, for_update=True)
    if not ctx.is_admin and cluster.project_id != ctx.project_id:
        raise common.policy_denied("cluster:delete")
    if teardown:
        cluster.status, cluster.status_reason = "DELETE_IN_PROGRESS", None
        cluster.updated_at = utcnow()
    else:
        session.delete(cluster)
    session.flush()
    return cluster.id


def set_status(session: Session, cluster_id: str, report: str) -> bool:
    """What the conductor reports: ``"CREATE_COMPLETE"`` or ``"CREATE_FAILED: why"``.

    Also the ``clusters`` kind of ``PUT /netbay/v1/status``; returns whether it changed."""
    status, _, reason = report.partition(":")
    status = status.strip()
    if status not in STATUSES:
        raise BadRequest(f"Invalid cluster status '{status}': expected one of {', '.join(sorted(STATUSES))}.")
    cluster = session.get(Cluster, cluster_id, with_for_update=True)
    if cluster is None:
        return False
    new_reason = reason.strip() or None
    if (cluster.status, cluster.status_reason) == (status, new_reason):
        return False
    cluster.status, cluster.status_reason = status, new_reason
    cluster.updated_at = utcnow()
    return True
