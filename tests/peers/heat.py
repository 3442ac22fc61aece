"""OpenStack Heat from PyPI, for checking netbay's HOT export with Heat's own code.

- Installed once per machine into a virtualenv of its own (``$NETBAY_HEAT_DIR``,
  default ``~/.cache/netbay/openstack-heat``), pinned to the release of the same
  OpenStack series as the peers' Keystone and Neutron (``openstack_cloud.PINS``),
  under a file lock so parallel runs share one install.
- Validation is Heat's engine, in a subprocess of that virtualenv:
  ``EngineService.validate_template`` — the code behind ``POST /validate``
  (``openstack orchestration template validate``): template parsing, parameter
  constraints, every resource's type, properties schema and references. Why not
  ``heat-api`` itself: Heat 27 ships no ``heat-all`` any more, and ``heat-wsgi-api``
  reaches ``heat-engine`` only over a message bus (no ``fake:/`` transport between
  two processes), which this machine does not run.
- Heat refuses a resource type whose service the caller's catalog lacks, and asks
  Neutron which extensions it has (routers, security groups…), so the caller is a
  token of the peers' real Keystone, and Neutron is the peers' real Neutron. The
  other services a Magnum cloud has (Nova, Octavia, Glance, Cinder) are catalog
  entries only — validation never calls them; their endpoints lead nowhere — in a
  region of their own, so the shared cloud still has no Nova or Octavia for every
  other test.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx

from tests.peers import openstack_cloud as peers

PINS = ("openstack-heat==27.0.1",)
INSTALL_TIMEOUT = 1500
VALIDATE_TIMEOUT = 300
# The services of a cloud Magnum runs on (catalog type, name): what the export's resource types need.
CATALOG = (("network", "neutron"), ("compute", "nova"), ("load-balancer", "octavia"),
           ("orchestration", "heat"), ("image", "glance"), ("volume", "cinder"), ("volumev3", "cinderv3"))
NOWHERE = "http://127.0.0.1:9"   # the discard port: nothing is ever asked there
REGION = "HeatCheck"


def heat_dir() -> Path:
    return Path(os.environ.get("NETBAY_HEAT_DIR", Path.home() / ".cache" / "netbay" / "openstack-heat"))


def install() -> Path:
    """Heat's virtualenv, made on first use."""
    root = heat_dir()
    root.mkdir(parents=True, exist_ok=True)
    venv, stamp = root / "venv", root / "installed"
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.exists() and stamp.read_text() == "\n".join(PINS):
            return venv
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", "--clear", str(venv)], check=True, timeout=120)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", *PINS],
                       check=True, timeout=INSTALL_TIMEOUT)
        stamp.write_text("\n".join(PINS))
    return venv


@contextlib.contextmanager
def catalog(cloud: peers.Cloud) -> Iterator[None]:
    """The services of :data:`CATALOG` in the cloud's Keystone, in a region of their own
    (:data:`REGION`, with the cloud's real Neutron there too): Heat looks there, while
    everything else on that cloud keeps seeing ``RegionOne`` without Nova or Octavia.
    All removed again afterwards."""
    conn = cloud.connection()
    made: list[tuple[str, str]] = []   # (kind, id), removed in reverse
    try:
        conn.identity.create_region(id=REGION)
        made.append(("region", REGION))
        for kind, name in CATALOG:
            service = conn.identity.create_service(name=f"{name}-heatcheck", type=kind)
            made.append(("service", service.id))
            url = cloud.network_url if kind == "network" else NOWHERE
            endpoint = conn.identity.create_endpoint(service_id=service.id, interface="public", url=url,
                                                     region_id=REGION)
            made.append(("endpoint", endpoint.id))
        yield
    finally:
        for kind, ident in reversed(made):
            getattr(conn.identity, f"delete_{kind}")(ident, ignore_missing=True)
        conn.close()


def token(ks: peers.Cloud) -> dict[str, Any]:
    """A project-scoped token of the cloud ``ks`` and its body (with the catalog), as
    heat-api's auth middleware hands them to the engine."""
    user = {"name": "admin", "domain": {"id": "default"}, "password": ks.admin_password}
    body = {"auth": {"identity": {"methods": ["password"], "password": {"user": user}},
                     "scope": {"project": {"name": "admin", "domain": {"id": "default"}}}}}
    r = httpx.post(f"{ks.auth_url}/auth/tokens", json=body, timeout=30)
    r.raise_for_status()
    return {"auth_url": ks.auth_url, "token": r.headers["X-Subject-Token"], "token_info": r.json()}


# Runs in Heat's virtualenv: {"auth": token(), "templates": {name: [template, parameters]}} on
# stdin; {name: Heat's answer} on stdout (``{"Error": …}`` where Heat refuses it).
_VALIDATOR = r"""
import json, sys
from oslo_config import cfg
from heat.common import config  # noqa: F401 - registers Heat's options
from heat.common import context
from heat.engine import resources, service

cfg.CONF([], project="heat", default_config_files=[])
resources.initialise()
job = json.load(sys.stdin)
auth = job["auth"]
info = auth["token_info"]["token"]
engine = service.EngineService("localhost", "engine")
out = {}
for name, (template, parameters) in job["templates"].items():
    ctx = context.RequestContext(auth_token=auth["token"], auth_token_info=auth["token_info"],
                                 auth_url=auth["auth_url"], project_id=info["project"]["id"],
                                 user_id=info["user"]["id"], region_name=job["region"])
    try:
        out[name] = engine.validate_template(ctx, template, {"parameters": parameters})
    except Exception as exc:  # an RPC-expected error (the API would answer 400 with it)
        cause = getattr(exc, "exc_info", None)
        out[name] = {"Error": str(cause[1]) if cause else f"{type(exc).__name__}: {exc}"}
json.dump(out, sys.stdout, default=str)
"""


def validate(venv: Path, auth: Mapping[str, Any],
             templates: Mapping[str, tuple[Mapping[str, Any], Mapping[str, Any]]]) -> dict[str, Any]:
    """Heat's answer per template: its parameters (valid) or ``{"Error": …}``."""
    job = json.dumps({"auth": dict(auth), "region": REGION, "templates": {k: list(v) for k, v in templates.items()}})
    p = subprocess.run([str(venv / "bin" / "python"), "-c", _VALIDATOR], input=job, capture_output=True,
                       text=True, timeout=VALIDATE_TIMEOUT)
    if p.returncode != 0:
        raise RuntimeError(f"Heat's validator failed (rc {p.returncode}):\n{p.stderr[-4000:]}")
    return json.loads(p.stdout)
