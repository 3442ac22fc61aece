"""PLACEHOLDER: to be written."""

from __future__ import annotations

from netbay.network.resource import Resource
from netbay.network.types import Body
from netbay.store.models import Subnet


class SubnetsCreate(Body):
    pass


class Subnets(Resource):
    member = "subnet"
    collection = "subnets"
    model = Subnet
    create_body = SubnetsCreate

    def remove(self, session, subnet) -> None:  # noqa: ANN001
        session.delete(subnet)
