"""The Neutron-compatible network API v2.0, built from the resource registry.

Each ``Resource`` becomes a ``Collection`` (list / show / create, single and bulk /
update / delete, mounted by :mod:`netbay.api.collections`) with the ``/tags``
sub-resource. Queries and bodies are parsed here so that every refusal is worded
as Neutron words it; the business rules live in ``netbay.network``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, FastAPI, Request

from netbay.api.collections import Bulk, Collection, mount
from netbay.api.plainroutes import serve_plainly
from netbay.api.network.bodies import parse_member, parse_members
from netbay.api.network.quotas import enforce_create
from netbay.errors import BadRequest, PreconditionFailed, not_found
from netbay.network.registry import RESOURCES, Resource
from netbay.network.resource import ListQuery, Page, to_bool
from netbay.api.urls import public_root

router = APIRouter(prefix="/network", tags=["network"])

_LIST_PARAMS = {"fields", "sort_key", "sort_dir", "limit", "marker", "page_reverse"}



@router.get("", include_in_schema=False)
@router.get("/")
def versions(request: Request) -> dict[str, Any]:
    return {
        "versions": [
            {"id": "v2.0", "status": "CURRENT",
             "links": [{"rel": "self", "href": f"{public_root(request)}/network/v2.0/"}]}
        ]
    }


@router.get("/v2.0")
@router.get("/v2.0/", include_in_schema=False)
def resources(request: Request) -> dict[str, Any]:
    base = f"{public_root(request)}/network/v2.0"
    return {
        "resources": [
            {"name": r.member, "collection": r.collection,
             "links": [{"rel": "self", "href": f"{base}/{r.path_prefix}{r.collection}"}]}
            for r in RESOURCES
        ]
    }


EXTENSIONS = [
    ("external-net", "Neutron external network", "Adds external network attribute to network resource."),
    ("router", "Neutron L3 Router", "Router abstraction for basic L3 forwarding between L2 networks and gateways."),
    ("ext-gw-mode", "Neutron L3 Configurable external gateway mode", "Extension of the router abstraction for specifying whether SNAT should occur on the external gateway"),
    ("security-group", "security-group", "The security groups extension."),
    ("port-security", "Port Security", "Provides port security"),
    ("allowed-address-pairs", "Allowed Address Pairs", "Provides allowed address pairs"),
    ("subnet_allocation", "Subnet Allocation", "Enables allocation of subnets from a subnet pool"),
    ("standard-attr-revisions", "Resource revision numbers", "This extension will display the revision number of neutron resources."),
    ("standard-attr-timestamp", "Resource timestamps", "Adds created_at and updated_at fields to all Neutron resources that have Neutron standard attributes."),
    ("standard-attr-description", "standard-attr-description", "Extension to add descriptions to standard attributes"),
    ("standard-attr-tag", "Tag support for resources with standard attribute", "Enables to set tag on resources with standard attribute."),
    ("binding", "Port Binding", "Expose port bindings of a virtual port to external application"),
    ("net-mtu", "Network MTU", "Provides MTU attribute for a network resource."),
    ("filter-validation", "Filter parameters validation", "Provides validation on filtering parameters."),
    ("pagination", "Pagination support", "Extension that indicates that pagination is enabled."),
    ("sorting", "Sorting support", "Extension that indicates that sorting is enabled."),
    ("fields", "Fields", "Support for the fields query parameter."),
    ("project-id", "project_id field enabled", "Extension that indicates that project_id field is enabled."),
    ("provider", "Provider Network", "Expose mapping of virtual networks to physical networks"),
    ("net-mtu-writable", "Network MTU (writable)", "Provides a writable MTU attribute for a network resource."),
    ("revision-if-match", "If-Match constraints based on revision_number",
     "Extension indicating that If-Match based on revision_number is supported."),
    ("subnet-external-network", "Subnet belongs to an external network",
     "Informs if the subnet belongs to an external network"),
    ("quotas", "Quota management support", "Expose functions for quotas management per project"),
    ("quota_details", "Quota details management support", "Expose functions for quotas usage statistics per project"),
    ("rbac-policies", "RBAC Policies", "Allows creation and modification of policies that control tenant access to resources."),
    ("trunk", "Trunk Extension", "Provides support for trunk ports"),
    ("stateful-security-group", "Stateful security group", "Indicates if the security group is stateful or not"),
    ("taas", "Neutron Tap as a Service", "Neutron Tap as a Service Extension."),
    # -- issue 29, neutron1: API-only extensions (one block; the dataplane ones are another's) --
    ("ip-substring-filtering", "IP address substring filtering",
     "Provides IP address substring filtering when listing ports"),
    ("tag-ports-during-bulk-creation", "Tag Ports During Bulk Creation",
     "Allow to tag ports during bulk creation"),
    ("default-subnetpools", "Default Subnetpools", "Provides ability to mark and use a subnetpool as the default."),
    ("subnetpool-prefix-ops", "Subnet Pool Prefix Operations",
     "Provides support for adjusting the prefix list of subnet pools"),
    ("network-ip-availability", "Network IP Availability",
     "Provides IP availability data for each network and subnet."),
    ("network-ip-availability-details", "Network IP Availability Details",
     "Add ip_availability_details attribute to network_ip_availabilities"),
    ("quota-check-limit-default", "Quota engine limit check by default",
     "By default, the Neutron quota engine checks the resource usage before applying a new quota limit"),
    ("address-scope", "Address scope", "Address scopes extension."),
    ("subnet-service-types", "Subnet service types", "Provides ability to set the subnet service_types field"),
    ("rbac-security-groups", "Add security_group type to network RBAC",
     "Add security_group type to network RBAC"),
    ("rbac-subnetpool", "Add subnetpool type to network RBAC", "Add subnetpool type to network RBAC"),
    ("extra_dhcp_opt", "Neutron Extra DHCP options",
     "Extra options configuration for DHCP. For example PXE boot options to DHCP clients can be specified "
     "(e.g. tftp-server, server-ip-address, bootfile-name)"),
    # -- end of neutron1's block --
    # -- neutron2: extensions with a dataplane meaning -----------------------------------------
    ("extraroute", "Neutron Extra Route", "Extra routes configuration for L3 router"),
    ("extraroute-atomic", "Atomically add/remove extra routes",
     "Edit extra routes of a router on server side by atomically adding/removing extra routes"),
    ("floating-ip-port-forwarding", "Floating IP Port Forwarding",
     "Allow port forwarding from floating IP port to an internal port"),
    ("floating-ip-port-forwarding-port-ranges", "Floating IP Port Forwarding support port ranges",
     "Add support to port ranges"),
    ("expose-port-forwarding-in-fip", "Expose port forwardings in floating IP",
     "Expose on floating IP GET requests the port forwardings the floating IP has"),
    ("qos", "Quality of Service", "The Quality of Service extension."),
    ("qos-rule-type-details", "QoS rule type details", "Expose details about QoS rule types supported by "
     "loaded backend drivers"),
    ("qos-default", "QoS default policy", "Expose the QoS default policy per project"),
    ("qos-fip", "Floating IP QoS", "The floating IP Quality of Service extension"),
    ("qos-port-network-policy", "QoS port network policy extension",
     "Adds a the QoS network ID to the port definition"),
    ("qos-bw-limit-direction", "Direction for QoS bandwidth limit rule",
     "Allow to configure QoS bandwidth limit rule with specific direction: ingress or egress"),
    ("qos-bw-minimum-ingress", "Ingress direction for QoS minimum bandwidth rule",
     "Allows to configure QoS minimum bandwidth rule with ingress direction."),
    ("address-group", "Address group", "Support address group"),
    ("security-groups-default-rules", "Default rules for security groups",
     "Configure set of security group rules used as default security group rules"),
    ("dns-integration", "DNS Integration", "Provides integration with DNS."),
    ("metering", "Neutron Metering", "Neutron Metering extension."),
    ("metering_source_and_destination_fields", "Neutron Metering with source and destination filtering",
     "Neutron Metering extension that enables the use of source and destination IP prefixes."),
    # -- end neutron2 --------------------------------------------------------------------------
    # -- neutron5 --------------------------------------------------------------------------------
    ("qos-rules-alias", "Quality of Service rules alias API", "API to enable GET, PUT and DELETE operations on "
     "QoS policy rules without specifying policy ID"),
    ("vlan-transparent", "Vlantransparent", "Provides Vlan Transparent Networks"),
    ("qinq", "QinQ networks", "Expose network 'qinq' attribute in the API. This allows to configure network to "
     "allow vlan in vlan configuration using 0x88a8 ethertype (QinQ)."),
    ("port-resource-request", "Port Resource Request", "Expose resource request to Port"),
    ("port-resource-request-groups", "Port Resource Request Groups", "Support requesting multiple groups of "
     "resources and traits from the same RP subtree in resource_request"),
    # what netbay had and did not list (checked against the peer: tests/test_neutron_peer_shapes.py)
    ('empty-string-filtering', 'Empty String Filtering Extension',
     'Allow filtering by attributes with empty string value'),
    ('floating-ip-port-forwarding-description', 'Floating IP Port Forwarding new attribute description',
     'Add a description field to Port Forwarding rules'),
    ('floating-ip-port-forwarding-detail', 'Floating IP port forwarding detail',
     "Allow list floating ip return more port forwarding data, include'id' and 'internal_port_id'"),
    ('fip-port-details', 'Floating IP Port Details Extension',
     'Add port_details attribute to Floating IP resource'),
    ('port-security-groups-filtering', 'Port filtering on security groups',
     'Provides security groups filtering when listing ports'),
    ('security-groups-remote-address-group', 'Remote address group id field for security group rules',
     'Add new field of remote address group id in SG rules'),
    ('security-groups-rules-belongs-to-default-sg',
     "Security group rule belongs to the project's default security group",
     "Flag to determine if the security group rule belongs to the project's default security group"),
    ('security-groups-shared-filtering', 'Security group filtering on the shared field',
     'Support filtering security groups on the shared field'),
    ('tag-creation', 'Tag creation extension',
     'Allow to create multiple tags for a resource'),
    ('qos-rule-type-filter', 'Allow to filter the list of QoS rule types',
     'Allows to filter the QoS rule type list adding two new flags. "all_rules" prints all implemented QoS rule '
     'types."all_supported" prints all supported QoS rule types by the loaded mechanism drivers'),
    ("quota-check-limit", "Quota engine limit check",
     "Support for checking the resource usage before applying a new quota limit"),
    # -- end neutron5 ----------------------------------------------------------------------------
    ("netbay-batch", "netbay batch", "POST /v2.0/batch: several writes of this API in one transaction."),
]


@router.get("/v2.0/extensions")
def extensions() -> dict[str, Any]:
    return {
        "extensions": [
            {"alias": a, "name": n, "description": d, "links": [], "updated": "2013-01-01T10:00:00-00:00"}
            for a, n, d in EXTENSIONS
        ]
    }


@router.get("/v2.0/extensions/{alias}")
def extension(alias: str) -> dict[str, Any]:
    for a, n, d in EXTENSIONS:
        if a == alias:
            return {"extension": {"alias": a, "name": n, "description": d, "links": [],
                                  "updated": "2013-01-01T10:00:00-00:00"}}
    raise not_found("extension", alias)


def parse_list_query(request: Request) -> ListQuery:
    filters: dict[str, list[str]] = {}
    fields: list[str] = []
    sort_keys: list[str] = []
    sort_dirs: list[str] = []
    limit = marker = None
    page_reverse = False
    for key, value in request.query_params.multi_items():
        if "\x00" in value or "\x00" in key:
            raise BadRequest("Query parameters must not contain NUL characters")
        if key == "fields":
            fields.extend(v for v in value.split(",") if v)
        elif key == "sort_key":
            sort_keys.append(value)
        elif key == "sort_dir":
            if value not in {"asc", "desc"}:
                raise BadRequest(f"['{value}'] is invalid value for sort_dirs, valid value is 'asc' and 'desc'")
            sort_dirs.append(value)
        elif key == "limit":
            try:
                limit = int(value)
            except ValueError:
                raise _bad_limit(value) from None
            if limit < 0:
                raise _bad_limit(value)
        elif key == "marker":
            marker = value
        elif key == "page_reverse":
            page_reverse = to_bool(value)
        else:
            filters.setdefault(key, []).append(value)
    if len(sort_dirs) != len(sort_keys):  # Neutron takes no default direction
        raise BadRequest("The number of sort_keys and sort_dirs must be same")
    sort = list(zip(sort_keys, sort_dirs))
    return ListQuery(filters, fields, sort, limit or None, marker, page_reverse)


def _bad_limit(value: str) -> BadRequest:
    return BadRequest(f"Bad limit request: Limit must be an integer 0 or greater and not '{value}'.",
                      kind="BadRequest")


def neutron_listing(request: Request, key: str, page: Page, query: ListQuery) -> dict[str, Any]:
    """A Neutron list body: the items, and ``<key>_links`` when the page has any."""
    body: dict[str, Any] = {key: page.items}
    links = _links(request, page, query)
    if links:
        body[f"{key}_links"] = links
    return body


def _links(request: Request, page: Page, query: ListQuery) -> list[dict[str, str]]:
    """Neutron's pagination links (``api_common.get_pagination_links``): ``next`` unless a
    forward page holds fewer than ``limit`` items, ``previous`` unless a reverse one does;
    each keeps the other query parameters in order and adds its marker last."""
    if not page.limit:
        return []
    url = f"{public_root(request)}{request.url.path}"
    params = [(k, v) for k, v in request.query_params.multi_items() if k != "marker"]
    short = len(page.items) < page.limit
    links = []
    if not (short and not query.page_reverse):
        forward = [(k, v) for k, v in params if k != "page_reverse"]
        forward += [("marker", page.last_id)] if page.last_id else []
        links.append({"rel": "next", "href": f"{url}?{urlencode(forward)}"})
    if not (short and query.page_reverse):
        backward = [(k, v) for k, v in params if k != "page_reverse"]
        backward += ([("marker", page.first_id)] if page.first_id else []) + [("page_reverse", "True")]
        links.append({"rel": "previous", "href": f"{url}?{urlencode(backward)}"})
    return links


def _body_schema(member: str, model: Any) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": {
        "type": "object", "required": [member],
        "properties": {member: model.model_json_schema(by_alias=True)}}}}}}


def _if_match(request: Request) -> dict[str, Any]:
    return {"expected": revision_constraint(request)}


def collection(resource: Resource) -> Collection:
    """The Neutron collection of ``resource``: Neutron's list query and links, bulk
    create, quotas, ``If-Match`` on update and delete, admin-only attributes hidden."""
    member = resource.member

    def create_many(s: Any, ctx: Any, bodies: list[Any]) -> list[dict[str, Any]]:
        enforce_create(s, ctx, member, bodies)
        objs = [resource.create(s, ctx, b) for b in bodies]
        return [resource.for_caller(ctx, resource.rendered(s, o)) for o in objs]

    def update(s: Any, ctx: Any, item_id: str, body: Any, *, expected: int | None) -> dict[str, Any]:
        if expected is not None:
            check_revision(resource, s, ctx, item_id, expected)
        return resource.for_caller(ctx, resource.rendered(s, resource.update(s, ctx, item_id, body)))

    def delete(s: Any, ctx: Any, item_id: str, *, expected: int | None) -> None:
        if expected is not None:
            check_revision(resource, s, ctx, item_id, expected)
        resource.delete(s, ctx, item_id)

    updatable = resource.update_body is not None
    return Collection(
        segment=resource.collection, member=member, key=resource.collection.replace("-", "_"),
        prefix="/v2.0/" + resource.path_prefix.rstrip("/") if resource.path_prefix else "/v2.0",
        query=parse_list_query, listing=neutron_listing,
        parse=lambda raw, method: parse_member(raw, resource, method),
        list=resource.list, show=resource.show,
        create=lambda s, ctx, body: create_many(s, ctx, [body])[0],
        update=update if updatable else None, delete=delete,
        before_read=resource.before_read,
        bulk=Bulk(parse=lambda raw: parse_members(raw, resource), create=create_many),
        update_options=_if_match, delete_options=_if_match,
        create_schema=_body_schema(member, resource.create_body),
        update_schema=_body_schema(member, resource.update_body) if updatable else None,
    )


def revision_constraint(request: Request) -> int | None:
    """``If-Match: revision_number=N`` (Neutron's revision-if-match), else None."""
    header = request.headers.get("if-match")
    if not header:
        return None
    wanted = None
    for tag in (t.strip().removeprefix("W/").strip('"') for t in header.split(",")):
        if not tag.startswith("revision_number="):
            continue
        if wanted is not None:
            raise BadRequest("Bad if-match request: Multiple revision_number etags are not supported.",
                             kind="BadRequest")  # neutron-lib's BadRequest, not the API's HTTPBadRequest
        try:
            wanted = int(tag.removeprefix("revision_number="))
        except ValueError:
            raise BadRequest("Bad if-match request: Revision number etag must be in the format of "
                             "revision_number=<int>.", kind="BadRequest") from None
    return wanted


def check_revision(resource: Resource, session: Any, ctx: Any, item_id: str, expected: int) -> None:
    """412 unless the row is at ``expected``; the row is locked, so the check holds to commit."""
    current = resource.get(session, ctx, item_id, for_update=True).revision_number
    if current != expected:
        raise PreconditionFailed(f"Constrained to {expected}, but current revision is {current}",
                                 kind="RevisionNumberConstraintFailed")


def install(app: FastAPI) -> None:
    from netbay.api.network import actions, batch, ip_availability, portforwardings, qos, quotas, trunk_actions
    from netbay.api.network.tags import mount_tags

    app.include_router(router)
    collections = APIRouter(prefix="/network", tags=["network"])
    for resource in RESOURCES:
        coll = collection(resource)
        mount(collections, coll)
        if resource.has_tags:
            mount_tags(collections, resource, coll.path)
    actions.mount(collections)
    trunk_actions.mount(collections)
    ip_availability.mount(collections)
    portforwardings.mount(collections, parse_list_query, neutron_listing)
    qos.mount(collections)
    quotas.mount(collections)
    batch.mount(collections)
    app.include_router(collections)
    # The routes above document the API; these answer it (see ``plainroutes``).
    serve_plainly(app, "/network", [*router.routes, *collections.routes])
