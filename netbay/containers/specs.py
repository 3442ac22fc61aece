"""What Docker is given for a Zun container, and what its answers mean for Zun: the app's
create arguments (with its cpu, memory, restart policy and volumes), a port's network and
subnet for the plugin, the status a Docker inspect reads as, and a failure's reason."""

from __future__ import annotations

from typing import Any

from netbay.containers import dockerops, networks, resources
from netbay.containers.neutron import ZunNeutron
from netbay.runtime.labels import CONTAINER as LABEL
from netbay.store.models import Container, ContainerNetwork


def recovered(inspect: dict[str, Any] | None, status: str) -> dict[str, Any]:
    """The container's Zun state from Docker's inspect of its app (None: Docker has none)."""
    if inspect is None:
        if status == "Error":
            return {"task_state": None}
        return {"status": "Error", "task_state": None, "docker_id": "",
                "status_reason": "Docker has no such container any more (netbay restarted meanwhile)."}
    state = inspect["State"]
    if state.get("Paused"):
        now = "Paused"
    elif state.get("Running"):
        now = "Running"
    else:
        now = "Created" if str(state.get("StartedAt", "")).startswith("0001-") else "Stopped"
    return {"status": now, "task_state": None, "docker_id": inspect["Id"], "status_reason": ""}


def sandbox_name(container_id: str) -> str:
    return f"zun-sandbox-{container_id}"


def app_spec(c: Container) -> dict[str, Any]:
    """What Docker's create takes for the app container (the sandbox has the hostname)."""
    host = dockerops.host_config(c.cpu, c.memory, c.restart_policy, resources.binds(c.mounts))
    return dict(image=c.image, command=c.command or None, name=f"zun-{c.id}",
                **{k: v for k, v in (("environment", c.environment), ("labels", {**c.labels, LABEL: c.id}),
                                     ("working_dir", c.workdir), ("host", host)) if v})


def port_plan(s: Any, att: Any, neutron: ZunNeutron) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    """(network, subnets, port) as :class:`DockerRuntime` takes them, read from the backend."""
    cnet = s.get(ContainerNetwork, att.container_network_id)
    subnets = networks.docker_subnets(neutron, cnet)
    port = neutron.port(att.port_id)
    return ({"id": cnet.network_id},
            [{"id": sub["id"], "cidr": sub["cidr"], "gateway_ip": sub["gateway_ip"]} for sub in subnets],
            {"id": port["id"], "network_id": port["network_id"], "mac_address": port["mac_address"],
             "fixed_ips": [{"ip_address": f["ip_address"]} for f in port["fixed_ips"]]})


def reason(exc: Exception) -> str:
    explanation = getattr(exc, "explanation", None)
    return f"Docker internal error: {explanation}." if explanation else str(exc) or type(exc).__name__
