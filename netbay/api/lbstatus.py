"""The load-balancer kinds of ``PUT /netbay/v1/status`` (``netbay.api.status``).

That endpoint takes ``{kind: {id: "<status>"}}``. An Octavia object has two
statuses, so for ``loadbalancers``, ``listeners``, ``pools``, ``members`` and
``healthmonitors`` the string is ``"<provisioning>"``,
``"<provisioning>/<operating>"`` or ``"/<operating>"``, e.g.
``{"loadbalancers": {id: "ACTIVE/ONLINE"}, "members": {id: "/ERROR"}}``.
Settling a load balancer to ``ACTIVE``/``ERROR`` settles its pending tree
(``netbay.lbaas.status``). ``apply`` is the same for callers in-process.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from netbay.api import status
from netbay.errors import BadRequest
from netbay.lbaas import status as lb_status


def parse(value: str) -> dict[str, str]:
    """``"ACTIVE/ONLINE"`` → ``{"provisioning_status": "ACTIVE", "operating_status": "ONLINE"}``."""
    provisioning, slash, operating = value.partition("/")
    report = {k: v for k, v in (("provisioning_status", provisioning),
                                ("operating_status", operating)) if v}
    if not report or (slash and not operating):
        raise BadRequest(f"Invalid load balancer status '{value}': expected '<provisioning>', "
                         "'<provisioning>/<operating>' or '/<operating>'.")
    return report


def apply(session: Session, kind: str, reports: dict[str, Any]) -> list[str]:
    """Apply reports (strings as above, or ``{"provisioning_status", "operating_status"}``
    objects) in the caller's transaction; returns the ids that no longer exist."""
    parsed = {i: parse(v) if isinstance(v, str) else v for i, v in reports.items()}
    return lb_status.report(session, kind, parsed)


def _setter(kind: str) -> status.Setter:
    def setter(session: Session, obj_id: str, value: str) -> bool:
        obj = session.get(lb_status.REPORTABLE[kind].model, obj_id)
        if obj is None:
            parse(value)  # a malformed report is refused even for a deleted object
            return False
        before = (obj.provisioning_status, obj.operating_status, obj.revision_number)
        apply(session, kind, {obj_id: value})
        return (obj.provisioning_status, obj.operating_status, obj.revision_number) != before

    return setter


def install() -> None:
    for kind in lb_status.REPORTABLE:
        status.register(kind, _setter(kind))
