"""PLACEHOLDER: to be written."""

from __future__ import annotations

from netbay.network.resource import Resource
from netbay.network.types import Body
from netbay.store.models import SubnetPool


class SubnetPoolsCreate(Body):
    pass


class SubnetPools(Resource):
    member = "subnetpool"
    collection = "subnetpools"
    model = SubnetPool
    create_body = SubnetPoolsCreate
