"""Magnum's ``/v1/mservices`` (the conductors) and ``/v1/certificates`` (each cluster's CA),
mounted on the container-infra sub-application; the rules live in
``netbay.coe.mservices`` and ``netbay.coe.certificates``. Who may call them is
``netbay.api.policy``'s business (the conductor list is the admin's)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request, Response

from netbay.api import magnumhttp, versioned
from netbay.api.auth import context
from netbay.api.responses import JSONResponse
from netbay.coe import certificates, clusters, mservices
from netbay.coe.fields import Attr, parse
from netbay.errors import BadRequest, NotFound
from netbay.store.models import ClusterTemplate

_CERT_SCHEMA = {"cluster_uuid": Attr("text"), "bay_uuid": Attr("text"), "csr": Attr("str", min=1),
                "ca_cert_type": Attr("text")}
_CERT_READONLY = frozenset({"pem", "links", "created_at", "updated_at", "project_id", "user_id"})


def mount(sub: FastAPI) -> None:
    def list_mservices(request: Request) -> dict[str, Any]:
        context(request)
        with request.app.state.store.read() as s:
            return {"mservices": mservices.listing(s)}

    def show_certificate(request: Request, ident: str) -> Response:
        ctx = context(request)
        certificates.check_type(request.query_params.get("ca_cert_type"))

        def work(s: Any) -> dict[str, Any]:
            cluster = clusters.get(s, ctx, ident)
            template = s.get(ClusterTemplate, cluster.cluster_template_id)
            return certificates.shown(cluster, certificates.explained(
                cluster, template.coe if template is not None else None, certificates.ca_of(s, cluster).cert_pem))

        return JSONResponse(_linked(request, _write_now(request, work)))

    async def sign_certificate(request: Request) -> Response:
        ctx = context(request)
        values = parse(await versioned.body(request), _CERT_SCHEMA, "certificate", _CERT_READONLY)
        ident = values.get("cluster_uuid") or values.get("bay_uuid")
        if not ident:
            raise BadRequest("Invalid input for field/attribute cluster_uuid. Mandatory field missing.")
        if not values.get("csr"):
            raise BadRequest("Invalid input for field/attribute csr. Mandatory field missing.")
        certificates.check_type(values.get("ca_cert_type"))

        def work(s: Any) -> dict[str, Any]:
            try:
                cluster = clusters.get(s, ctx, ident)
            except NotFound as exc:  # Magnum: a POST naming a missing cluster is a 400
                raise BadRequest(exc.message) from None
            ca = certificates.ca_of(s, cluster)
            return certificates.shown(cluster, certificates.sign(ca.cert_pem, ca.key_pem, values["csr"]),
                                      csr=values["csr"])

        out = _linked(request, await versioned.write(request, work))
        return JSONResponse(out, status_code=201, headers={"Location": out["links"][0]["href"]})

    async def rotate_ca(request: Request, ident: str) -> Response:
        ctx = context(request)

        def work(s: Any) -> str:
            cluster = clusters.get(s, ctx, ident, for_update=True)
            template = s.get(ClusterTemplate, cluster.cluster_template_id)
            if template is not None and template.tls_disabled:
                raise BadRequest("Rotating the CA certificate on a non-TLS cluster is not supported")
            certificates.issue_ca(s, cluster)
            return cluster.id

        return JSONResponse({"uuid": await versioned.write(request, work)}, status_code=202)

    sub.add_api_route("/v1/mservices", list_mservices, methods=["GET"], name="list_mservices")
    sub.add_api_route("/v1/certificates/{ident}", show_certificate, methods=["GET"], name="show_certificate")
    sub.add_api_route("/v1/certificates", sign_certificate, methods=["POST"], status_code=201,
                      name="sign_certificate")
    sub.add_api_route("/v1/certificates/{ident}", rotate_ca, methods=["PATCH"], status_code=202,
                      name="rotate_ca")


def _write_now(request: Request, work: Any) -> Any:
    """A short write from a sync handler (a GET may make a CA for an older cluster)."""
    return request.app.state.store.retrying(work)


def _linked(request: Request, out: dict[str, Any]) -> dict[str, Any]:
    out["links"] = magnumhttp.links(request, "certificates", out["cluster_uuid"])
    return out
