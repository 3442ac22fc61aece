"""PLACEHOLDER: to be written."""

from __future__ import annotations

from netbay.network.resource import Resource
from netbay.network.types import Body
from netbay.store.models import Port


class PortsCreate(Body):
    pass


class Ports(Resource):
    member = "port"
    collection = "ports"
    model = Port
    create_body = PortsCreate
