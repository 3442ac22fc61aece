"""PLACEHOLDER: to be written."""

from __future__ import annotations

from netbay.network.resource import Resource
from netbay.network.types import Body
from netbay.store.models import FloatingIP


class FloatingIPsCreate(Body):
    pass


class FloatingIPs(Resource):
    member = "floatingip"
    collection = "floatingips"
    model = FloatingIP
    create_body = FloatingIPsCreate
