"""The HTTP application: one FastAPI app serving every API family."""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager

from fastapi import FastAPI

from netbay.api import changes, containerinfra, errors, identity, loadbalancer, network, sandboxes, status
from netbay.changes import ChangeFeed
from netbay.identity.service import Identity
from netbay.identity.tokens import DEFAULT_TTL, Tokens
from netbay.store.db import Store

log = logging.getLogger("netbay")


def create_app(
    store: Store, *, noauth: bool = False, public_url: str | None = None, token_ttl: int = DEFAULT_TTL
) -> FastAPI:
    feed = ChangeFeed(store)

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # noqa: ANN202
        feed.bind(asyncio.get_running_loop())
        yield

    app = FastAPI(
        title="netbay",
        version="0.1.0",
        description="OpenStack-compatible networking for containers on one machine.",
        lifespan=lifespan,
    )
    identity_service = Identity(store)
    app.state.store = store
    app.state.identity = identity_service
    app.state.tokens = Tokens(store, identity_service.token_key(), ttl=token_ttl)
    app.state.feed = feed
    app.state.noauth = noauth
    app.state.public_url = public_url.rstrip("/") if public_url else None
    if noauth:
        log.warning("NOAUTH MODE: every request acts as admin. Never expose this server.")
    errors.install(app)
    app.include_router(identity.router)
    network.install(app)
    loadbalancer.install(app)
    containerinfra.install(app)
    app.include_router(changes.router)
    app.include_router(sandboxes.router)
    app.include_router(status.router)
    return app
