"""STAND-IN for a provider's backend (amphorae, OVN) behind Octavia's noop driver.

Run by :mod:`tests.peers.octavia_peer` with Octavia's own virtualenv:
``python octavia_provider.py OCTAVIA_CONF OCTAVIA_URL`` (admin credentials in
``$OCTAVIA_PEER_AUTH``, JSON). The noop driver provisions nothing and reports
nothing; a provider reports what it did through ``octavia-driver-agent``'s
status socket (``octavia_lib.DriverLibrary``). This process does only that:
it polls Octavia's API for objects left ``PENDING_*`` and reports them as a
provider would once done — ``ACTIVE``/``ONLINE`` after a create or update,
``DELETED`` after a delete (a cascade delete takes the load balancer's whole
tree). No load balancing happens: tests on this peer assert API effects.
"""

from __future__ import annotations

import configparser
import json
import os
import sys
import time

from keystoneauth1 import session as ks_session
from keystoneauth1.identity import v3
from octavia_lib.api.drivers.driver_lib import DriverLibrary

KINDS = ("loadbalancers", "listeners", "pools", "healthmonitors")
TICK = 0.1
MAX_RUNTIME = 6 * 3600   # bounded: the test session is long over by then


def _done(obj: dict) -> dict | None:
    status = obj.get("provisioning_status", "")
    if status == "PENDING_DELETE":
        return {"id": obj["id"], "provisioning_status": "DELETED"}
    if status.startswith("PENDING_"):
        return {"id": obj["id"], "provisioning_status": "ACTIVE", "operating_status": "ONLINE"}
    return None


def _tick(sess: ks_session.Session, url: str, lib: DriverLibrary) -> None:
    def get(path: str) -> dict:
        r = sess.get(f"{url}/v2/lbaas/{path}", raise_exc=False)
        return r.json() if r.status_code == 200 else {}

    # Octavia puts a load balancer in PENDING_* for every change to it or its children
    # (its lock), so one small list says whether anything waits: the idle tick is one
    # request, not one per kind and pool (a 40-requests/s poll kept Octavia's API busy).
    lbs = get("loadbalancers").get("loadbalancers", [])
    if not any(lb.get("provisioning_status", "").startswith("PENDING_") for lb in lbs):
        return
    found = {kind: get(kind).get(kind, []) if kind != "loadbalancers" else lbs for kind in KINDS}
    members = {pool["id"]: get(f"pools/{pool['id']}/members").get("members", []) for pool in found["pools"]}
    report: dict[str, list] = {kind: [] for kind in (*KINDS, "members")}
    gone = {lb["id"] for lb in found["loadbalancers"] if lb["provisioning_status"] == "PENDING_DELETE"}
    for kind in KINDS:   # parents before children
        for obj in found[kind]:
            parents = {ref["id"] for ref in (*obj.get("loadbalancers", []), *obj.get("pools", []))}
            if kind != "loadbalancers" and parents & gone:   # a cascade delete: the whole tree goes
                report[kind].append({"id": obj["id"], "provisioning_status": "DELETED"})
                gone.add(obj["id"])
            elif (status := _done(obj)) is not None:
                report[kind].append(status)
                if status["provisioning_status"] == "DELETED":
                    gone.add(obj["id"])
    pools_gone = gone
    for pool_id, listed in members.items():
        for member in listed:
            status = {"id": member["id"], "provisioning_status": "DELETED"} if pool_id in pools_gone \
                else _done(member)
            if status is not None:
                report["members"].append(status)
    report = {k: v for k, v in report.items() if v}
    if report:
        lib.update_loadbalancer_status(report)
        print(json.dumps(report), flush=True)


def main() -> None:
    conf_path, url = sys.argv[1], sys.argv[2].rstrip("/")
    conf = configparser.ConfigParser()
    conf.read(conf_path)
    agent = conf["driver_agent"]
    auth = json.loads(os.environ["OCTAVIA_PEER_AUTH"])
    sess = ks_session.Session(auth=v3.Password(**auth))
    lib = DriverLibrary(status_socket=agent["status_socket_path"], stats_socket=agent["stats_socket_path"],
                        get_socket=agent["get_socket_path"])
    deadline = time.monotonic() + MAX_RUNTIME
    while time.monotonic() < deadline:
        try:
            _tick(sess, url, lib)
        except Exception as exc:  # noqa: BLE001 - a stand-in keeps reporting; the log says what failed
            print(f"provider stand-in: {type(exc).__name__}: {exc}", flush=True)
        time.sleep(TICK)


if __name__ == "__main__":
    main()
