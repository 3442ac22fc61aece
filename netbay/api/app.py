"""The HTTP application: one FastAPI app serving every API family."""

from __future__ import annotations

import asyncio
import logging
import os
from contextlib import asynccontextmanager

from fastapi import FastAPI

from netbay.api import (amphorae, changes, clusternets, compute, container, containerinfra, errors, identity,
                        loadbalancer, metering, network, pods, sandboxes, status)
from netbay.bodylimit import BodyLimit
from netbay.changes import ChangeFeed
from netbay.identity.service import Identity
from netbay.coe.conductor import EmbeddedConductor, NoConductor
from netbay.identity.tokens import DEFAULT_TTL, Tokens, service_token
from netbay.store.db import Store

log = logging.getLogger("netbay")


def create_app(
    store: Store, *, noauth: bool = False, public_url: str | None = None, token_ttl: int = DEFAULT_TTL,
    self_url: str | None = None, network_backend: tuple[str, str | None] = ("embedded", None),
) -> FastAPI:
    """The application. ``self_url`` (where this server answers) enables the cluster
    conductor, which builds clusters through the server's own APIs, or makes their
    network in a cloud's Neutron (``network_backend=("openstack", cloud)``)."""
    feed = ChangeFeed(store)
    conductor = EmbeddedConductor(store, network=network_backend) if self_url else NoConductor()

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # noqa: ANN202
        feed.bind(asyncio.get_running_loop())
        if isinstance(conductor, EmbeddedConductor) and self_url:
            conductor.start(self_url, service_token(store, app.state.tokens))
        try:
            yield
        finally:
            if isinstance(conductor, EmbeddedConductor):
                await asyncio.to_thread(conductor.stop, 5.0)

    app = FastAPI(
        title="netbay",
        version="0.1.0",
        description="OpenStack-compatible networking for containers on one machine.",
        lifespan=lifespan,
    )
    identity_service = Identity(store)
    app.state.store = store
    app.state.identity = identity_service
    app.state.tokens = Tokens(store, identity_service.token_key(), ttl=token_ttl, external=_external_keystone())
    app.state.feed = feed
    app.state.noauth = noauth
    app.state.public_url = public_url.rstrip("/") if public_url else None
    if noauth:
        log.warning("NOAUTH MODE: every request acts as admin. Never expose this server.")
    errors.install(app)
    app.add_middleware(BodyLimit, refuse=errors.refuse_body)  # every route, before auth and parsing
    app.include_router(identity.router)
    network.install(app)
    loadbalancer.install(app)
    amphorae.install(app)  # Octavia's amphora admin API over the haproxy namespaces
    containerinfra.install(app, conductor)
    compute.install(app)  # os-keypairs only
    container.install(app, network=network_backend)
    app.include_router(changes.router)
    app.include_router(sandboxes.router)
    app.include_router(pods.router)
    app.include_router(clusternets.router)
    app.include_router(status.router)
    app.include_router(metering.router)   # /netbay/v1/metering: the routers' metering counts
    return app


def _external_keystone():  # noqa: ANN202
    """A real cloud's Keystone whose tokens netbay also accepts (``NETBAY_EXTERNAL_KEYSTONE``)."""
    url = os.environ.get("NETBAY_EXTERNAL_KEYSTONE")
    if not url:
        return None
    from netbay.identity.external import ExternalKeystone

    log.info("accepting tokens of the Keystone at %s", url)
    return ExternalKeystone(url)
