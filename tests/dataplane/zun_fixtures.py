"""The container API's dataplane modules' fixtures: a private dockerd (``daemon``), a netbay
server told where Docker is and which network driver to use (``cloud``: ``NETBAY_DOCKER_HOST``,
``NETBAY_DOCKER_DRIVER`` named ``PLUGIN``, prefix tag ``zn``), the libnetwork plugin
(``plugin``) and Zun's API (``zun``). Used by test_dp_containers.py, test_dp_containers_v6.py,
test_dp_container_sandbox.py and test_dp_container_actions.py; Docker's own driver tests
use :mod:`.docker_fixtures`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from zunhelp import zun_http

from . import dockerd as dk
from .agent_fixtures import Cloud, make_cloud, wait_for
from .docker_fixtures import Plugin, daemon, plugin_env  # noqa: F401 - daemon: a module fixture, shared
from .dp_helpers import RUN_ID

PLUGIN = f"nbt{RUN_ID}zn"


def docker_cloud(daemon: dk.Dockerd, tmp: Path, tag: str, driver: str,
                 sandbox_image: str | None = None) -> Iterator[Cloud]:
    """A server (prefix tag ``tag``) told where Docker is and which network driver to use;
    its sandboxes use ``sandbox_image``, else the app's image (the default ``busybox`` is
    missing from the private dockerd). This process's environment is restored once the
    server has started with it."""
    saved = {k: os.environ.get(k) for k in ("NETBAY_DOCKER_HOST", "NETBAY_DOCKER_DRIVER", "NETBAY_SANDBOX_IMAGE")}
    os.environ.update(NETBAY_DOCKER_HOST=daemon.host, NETBAY_DOCKER_DRIVER=driver)
    os.environ.pop("NETBAY_SANDBOX_IMAGE", None)
    if sandbox_image:
        os.environ["NETBAY_SANDBOX_IMAGE"] = sandbox_image
    made = make_cloud(tmp, tag)
    try:
        cloud = next(made)  # the server starts with the environment above
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    yield cloud
    next(made, None)


@pytest.fixture(scope="module")
def cloud(daemon: dk.Dockerd, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Cloud]:
    """The server; a module's ``SANDBOX_IMAGE`` is its sandbox image."""
    yield from docker_cloud(daemon, tmp_path_factory.mktemp("containers"), "zn", PLUGIN,
                            getattr(request.module, "SANDBOX_IMAGE", None))


@pytest.fixture(scope="module")
def plugin(cloud: Cloud, daemon: dk.Dockerd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Plugin]:
    p = Plugin(PLUGIN, cloud.server.url, cloud.names.prefix, plugin_env(cloud.server),
               tmp_path_factory.mktemp("plugin") / "plugin.log", ("--docker-host", daemon.host))
    p.start()
    try:
        yield p
    finally:
        dk.clear(daemon)   # while the plugin answers: after, dockerd waits ~30 s on it per network
        p.stop()


@pytest.fixture(scope="module")
def zun(cloud: Cloud, plugin: Plugin) -> Any:
    return zun_http(cloud.server, cloud.server.token())


def wait_container(zun: Any, uuid: str, status: str, timeout: float = 60) -> dict:
    def check() -> dict | None:
        c = zun.get(f"/containers/{uuid}").json()
        assert c["status"] != "Error" or status == "Error", (c["status_reason"], c)
        return c if c["status"] == status and c["task_state"] is None else None
    return wait_for(check, timeout, 0.1, f"container {uuid} {status}")


def docker_container(daemon: dk.Dockerd, c: dict) -> Any:
    return daemon.client.containers.get(c["container_id"])
