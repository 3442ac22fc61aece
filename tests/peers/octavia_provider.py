"""STAND-IN for a provider's backend (amphorae, OVN) behind Octavia's noop driver.

Run by :mod:`tests.peers.octavia_peer` with Octavia's own virtualenv:
``python octavia_provider.py OCTAVIA_CONF OCTAVIA_URL`` (admin credentials in
``$OCTAVIA_PEER_AUTH``, JSON). The noop driver provisions nothing and reports
nothing; a provider reports what it did through ``octavia-driver-agent``'s
status socket (``octavia_lib.DriverLibrary``). This process does only that:
it asks Octavia's API for objects left ``PENDING_*`` and reports them as a
provider would once done — ``ACTIVE``/``ONLINE`` after a create or update,
``DELETED`` after a delete (a cascade delete takes the load balancer's whole
tree). No load balancing happens: tests on this peer assert API effects.

It asks only when Octavia's SQLite database changed (:class:`DbWatch`: the
database's and its WAL's size and mtime, a ``stat`` every few milliseconds), and
once more a moment after, as a change may be a transaction still committing (a
stat between its frames, its last frame in the same mtime tick): an idle session
costs no HTTP request. (A poll of the API at 10 Hz kept Octavia's uWSGI worker at
~12 % of a core for the whole test session; polling at 10 Hz for half a second
after each change was still ~170 requests, 6.5 s of Octavia's CPU, in two of
tests/test_cloud_k8s.py's scenarios.) A slow poll stays as a backstop.
"""

from __future__ import annotations

import configparser
import json
import os
import sys
import time
from pathlib import Path

from keystoneauth1 import session as ks_session
from keystoneauth1.identity import v3
from octavia_lib.api.drivers.driver_lib import DriverLibrary

KINDS = ("loadbalancers", "listeners", "pools", "healthmonitors")
WATCH = 0.02       # stat period of the database files
TICK = 0.1         # poll period while the database is changing …
CONFIRM = 0.2      # … and one poll this long after the last
BACKSTOP = 10.0    # a poll at least this often, changed or not
MAX_RUNTIME = 6 * 3600   # bounded: the test session is long over by then


class DbWatch:
    """Whether an SQLite database (in WAL mode) changed since the last call: the
    size and mtime of the file and its ``-wal``. Readers do not touch either."""

    def __init__(self, db: Path) -> None:
        self.paths = (db, db.with_name(db.name + "-wal"))
        self.seen: tuple = ()

    def changed(self) -> bool:
        now = tuple(self._stamp(path) for path in self.paths)
        if now == self.seen:
            return False
        self.seen = now
        return True

    @staticmethod
    def _stamp(path: Path) -> tuple[int, int] | None:
        try:
            st = path.stat()
        except FileNotFoundError:
            return None
        return st.st_size, st.st_mtime_ns


def _db_path(conf: configparser.ConfigParser) -> Path:
    """The SQLite file of Octavia's ``[database] connection`` (``sqlite:///PATH?…``)."""
    url = conf["database"]["connection"]
    prefix = "sqlite:///"
    if not url.startswith(prefix):
        raise SystemExit(f"provider stand-in: Octavia's database is not SQLite: {url}")
    return Path("/" + url[len(prefix):].split("?", 1)[0].lstrip("/"))


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
    watch = DbWatch(_db_path(conf))
    start = time.monotonic()
    deadline, last_tick = start + MAX_RUNTIME, 0.0
    changed, confirm_at = False, None
    while (now := time.monotonic()) < deadline:
        changed = watch.changed() or changed
        if changed and now - last_tick >= TICK:              # a change: ask now …
            changed, confirm_at = False, now + CONFIRM
        elif confirm_at is not None and now >= confirm_at:   # … and once more after the last
            confirm_at = None
        elif now - last_tick < BACKSTOP:
            time.sleep(WATCH)
            continue
        last_tick = now
        try:
            _tick(sess, url, lib)
        except Exception as exc:  # noqa: BLE001 - a stand-in keeps reporting; the log says what failed
            print(f"provider stand-in: {type(exc).__name__}: {exc}", flush=True)
        time.sleep(WATCH)


if __name__ == "__main__":
    main()
