"""The ``openstack`` CLI (in this process: :mod:`tests.osc`) as a user of a test server,
for the modules that check a command's output beside the API's (quotas, trunks, QoS,
TaaS, port forwardings, address groups)."""

from __future__ import annotations

import json
import os
import subprocess

from conftest import ADMIN_PASSWORD, Server

from tests.osc import openstack as run_openstack


def osc_as(server: Server, *args: str, user: str = "admin", password: str = ADMIN_PASSWORD,
           project: str = "admin") -> subprocess.CompletedProcess:
    """``openstack <args>`` as ``user`` in ``project`` (the bootstrap admin by default)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OS_")}
    env.update(OS_AUTH_URL=server.auth_url, OS_USERNAME=user, OS_PASSWORD=password, OS_PROJECT_NAME=project,
               OS_USER_DOMAIN_NAME="Default", OS_PROJECT_DOMAIN_NAME="Default", OS_IDENTITY_API_VERSION="3")
    return run_openstack(*args, env=env)


def osc_json(server: Server, *args: str, **who: str) -> object:
    """``openstack <args> -f json``, which must succeed: its output parsed."""
    r = osc_as(server, *args, "-f", "json", **who)
    assert r.returncode == 0, f"openstack {' '.join(args)}:\n{r.stdout}\n{r.stderr}"
    return json.loads(r.stdout)
