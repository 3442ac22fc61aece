"""OpenStack Heat from PyPI, for checking netbay's HOT export with Heat's own code.

- Installed once per machine into a virtualenv of its own (``$NETBAY_HEAT_DIR``,
  default ``~/.cache/netbay/openstack-heat``), pinned to the release of the same
  OpenStack series as the peers' Keystone and Neutron (``openstack_cloud.PINS``),
  under a file lock so parallel runs share one install.
- Validation is Heat's own API: ``POST /v1/{project}/validate``, what ``openstack
  orchestration template validate -t FILE`` sends. Heat 27 ships no ``heat-all``, and
  ``heat-wsgi-api`` reaches ``heat-engine`` over a message bus, which this machine
  does not run; so one process (:data:`_ONE_PROCESS`) serves Heat's WSGI application
  (``heat.wsgi.api``: paste pipeline, keystonemiddleware, Heat's context and policy)
  with the standard library's WSGI server on 127.0.0.1 and runs Heat's ``EngineService`` beside it, the two talking RPC over
  oslo.messaging's in-process ``fake:/`` transport. Heat's database is SQLite
  (``heat-manage db_sync``). Started and stopped by PID (its process group).
- Heat checks the caller's catalog for each resource type's service and asks Neutron
  for its extensions: heat-api is registered in the peers' real Keystone (a service
  user ``heat``, an ``orchestration`` endpoint) and Neutron is the peers' real Neutron.
  The other services a Magnum cloud has (Nova, Octavia, Glance, Cinder) are catalog
  entries only — validation never calls them; their endpoints lead nowhere. All of it
  sits in a region of its own (:data:`REGION`), so the shared cloud keeps having no
  Nova and no Octavia in ``RegionOne`` for every other test, and is removed afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.children import die_with_parent
from tests.peers import openstack_cloud as peers

PINS = ("openstack-heat==27.0.1",)
INSTALL_TIMEOUT = 1500
VALIDATE_TIMEOUT = 300
# The services of a cloud Magnum runs on (catalog type, name): what the export's resource types need.
CATALOG = (("network", "neutron"), ("compute", "nova"), ("load-balancer", "octavia"),
           ("image", "glance"), ("volume", "cinder"), ("volumev3", "cinderv3"))
HEAT_PASSWORD = "peer-heat-secret"
BOOT_TIMEOUT = 120
NOWHERE = "http://127.0.0.1:9"   # the discard port: nothing is ever asked there
REGION = "HeatCheck"


def heat_dir() -> Path:
    return Path(os.environ.get("NETBAY_HEAT_DIR", Path.home() / ".cache" / "netbay" / "openstack-heat"))


def install() -> Path:
    """Heat's virtualenv, made on first use."""
    return peers.venv_with(heat_dir(), PINS, INSTALL_TIMEOUT)


@dataclass
class Heat:
    """A running heat-api (+ engine) and where its ``openstack`` CLI is."""

    url: str
    venv: Path
    clouds_yaml: Path   # the cloud as ``peer``, in :data:`REGION`

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        """``openstack …`` of Heat's virtualenv (python-heatclient's commands), against this Heat."""
        env = {**{k: v for k, v in os.environ.items() if not k.startswith("OS_")},
               "OS_CLIENT_CONFIG_FILE": str(self.clouds_yaml), "OS_CLOUD": "peer"}
        return subprocess.run([str(self.venv / "bin" / "openstack"), *args], capture_output=True, text=True,
                              timeout=VALIDATE_TIMEOUT, env=env)


@contextlib.contextmanager
def heat_api(cloud: peers.Cloud, work: Path) -> Iterator[Heat]:
    """Heat's API and engine for the peers' cloud, registered in its Keystone (see above)."""
    venv = install()
    work.mkdir(parents=True, exist_ok=True)
    conn = cloud.connection()
    made: list[tuple[str, str]] = []   # (kind, id), removed in reverse
    proc = None
    try:
        service_project = conn.identity.find_project("service", ignore_missing=False)
        user = conn.identity.create_user(name="heat", password=HEAT_PASSWORD, domain_id="default",
                                         default_project_id=service_project.id)
        made.append(("user", user.id))
        conn.identity.assign_project_role_to_user(service_project, user, conn.identity.find_role("admin"))
        conn.identity.create_region(id=REGION)
        made.append(("region", REGION))
        port = peers._free_port()
        url = f"http://127.0.0.1:{port}"
        services = [*CATALOG, ("orchestration", "heat")]
        for kind, name in services:
            service = conn.identity.create_service(name=f"{name}-heatcheck", type=kind)
            made.append(("service", service.id))
            target = {"network": cloud.network_url, "orchestration": f"{url}/v1/%(project_id)s"}.get(kind, NOWHERE)
            endpoint = conn.identity.create_endpoint(service_id=service.id, interface="public", url=target,
                                                     region_id=REGION)
            made.append(("endpoint", endpoint.id))
        conf = _heat_conf(work, venv, cloud)
        subprocess.run([str(venv / "bin" / "heat-manage"), "--config-file", str(conf), "db_sync"], check=True,
                       capture_output=True, timeout=300)
        (work / "heat_one.py").write_text(_ONE_PROCESS)
        log = work / "heat.log"
        proc = subprocess.Popen([str(venv / "bin" / "python"), str(work / "heat_one.py"), str(port), str(conf)],
                                stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=die_with_parent)  # noqa: PLW1509 - prctl only, before exec
        _wait_ready(proc, url, log)
        clouds = work / "clouds.yaml"
        clouds.write_text(json.dumps({"clouds": {"peer": {"auth": cloud.auth(), "region_name": REGION,
                                                          "identity_api_version": 3}}}))
        yield Heat(url, venv, clouds)
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        for kind, ident in reversed(made):
            getattr(conn.identity, f"delete_{kind}")(ident, ignore_missing=True)
        conn.close()


def _heat_conf(work: Path, venv: Path, cloud: peers.Cloud) -> Path:
    conf = work / "heat.conf"
    conf.write_text(f"""[DEFAULT]
transport_url = fake:/
host = heatcheck
region_name_for_services = {REGION}
[database]
connection = sqlite:///{work}/heat.db
[paste_deploy]
api_paste_config = {venv}/etc/heat/api-paste.ini
[keystone_authtoken]
www_authenticate_uri = {cloud.auth_url}
auth_url = {cloud.auth_url}
auth_type = password
username = heat
password = {HEAT_PASSWORD}
project_name = service
user_domain_name = Default
project_domain_name = Default
interface = public
region_name = RegionOne
[clients_keystone]
auth_uri = {cloud.auth_url}
""")
    return conf


def _wait_ready(proc: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + BOOT_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"heat-api exited at start; see {log}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url + "/", timeout=2).status_code < 500:
                return
        time.sleep(0.3)
    raise TimeoutError(f"heat-api not up in {BOOT_TIMEOUT} s; see {log}")


def token(ks: peers.Cloud) -> dict[str, Any]:
    """A project-scoped token of the cloud ``ks`` (admin in ``admin``) and its body."""
    user = {"name": "admin", "domain": {"id": "default"}, "password": ks.admin_password}
    body = {"auth": {"identity": {"methods": ["password"], "password": {"user": user}},
                     "scope": {"project": {"name": "admin", "domain": {"id": "default"}}}}}
    r = httpx.post(f"{ks.auth_url}/auth/tokens", json=body, timeout=30)
    r.raise_for_status()
    return {"auth_url": ks.auth_url, "token": r.headers["X-Subject-Token"], "token_info": r.json()}


# heat-api's WSGI application and heat-engine in one process (Heat's virtualenv):
# argv = port, heat.conf.
_ONE_PROCESS = r"""
import sys
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIServer, make_server

port, conf = int(sys.argv[1]), sys.argv[2]
sys.argv = [sys.argv[0], "--config-file", conf]   # oslo.config reads the command line

from heat.wsgi.api import application   # noqa: E402 - Heat's API (config, messaging on fake:/)
from oslo_config import cfg             # noqa: E402
from heat.engine import service         # noqa: E402
from heat.rpc import api as rpc_api     # noqa: E402

engine = service.EngineService(cfg.CONF.host, rpc_api.ENGINE_TOPIC)
engine.start()                          # its RPC server on the same in-process transport


class Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True


make_server("127.0.0.1", port, application, server_class=Server).serve_forever()
"""


def validate(heat: Heat, auth: Mapping[str, Any], template: Mapping[str, Any],
             parameters: Mapping[str, Any]) -> tuple[int, Any]:
    """``POST /v1/{project}/validate`` as python-heatclient sends it: (status, Heat's answer)."""
    return _post_validate(heat, auth, {"template": dict(template), "environment": {"parameters": dict(parameters)}})


def validate_files(heat: Heat, auth: Mapping[str, Any], template: str, environment: str) -> tuple[int, Any]:
    """``POST /v1/{project}/validate`` with a template file's and an environment file's text:
    Heat's API parses both itself (its ``template_format`` and ``environment_format``) —
    what ``openstack orchestration template validate -t FILE -e ENV`` checks, without a
    CLI process (1.7-1.9 s of CPU to start, about 15 s of wall on a loaded machine)."""
    return _post_validate(heat, auth, {"template": template, "environment": environment})


def _post_validate(heat: Heat, auth: Mapping[str, Any], body: dict[str, Any]) -> tuple[int, Any]:
    project = auth["token_info"]["token"]["project"]["id"]
    r = httpx.post(f"{heat.url}/v1/{project}/validate", headers={"X-Auth-Token": auth["token"]},
                   json=body, timeout=VALIDATE_TIMEOUT)
    return r.status_code, r.json()
