"""PLACEHOLDER: to be written."""

from __future__ import annotations

from netbay.network.resource import Resource
from netbay.network.types import Body
from netbay.store.models import Router


class RoutersCreate(Body):
    pass


class Routers(Resource):
    member = "router"
    collection = "routers"
    model = Router
    create_body = RoutersCreate
