"""``netbay cluster`` driven as a user drives it (the real CLI in a subprocess) against a
real server: create with the live view, list, show, scale, HOT export, topology,
delete; a failing create; and the README's main job, ``scripts/demo.sh``.

The server runs without the dataplane agent, so the templates have no master load
balancer (nothing would settle it).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml
from coehelp import ci_client
from conftest import ADMIN_PASSWORD, start_server, stop_server, unique

ROOT = Path(__file__).resolve().parent.parent


def cli(server, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:  # noqa: ANN001
    env = {**os.environ, "OS_AUTH_URL": server.auth_url, "OS_USERNAME": "admin", "OS_PASSWORD": ADMIN_PASSWORD,
           "OS_PROJECT_NAME": "admin", "OS_USER_DOMAIN_NAME": "Default", "OS_PROJECT_DOMAIN_NAME": "Default",
           "OS_IDENTITY_API_VERSION": "3", "COLUMNS": "200"}
    env.pop("OS_CLOUD", None)
    return subprocess.run([sys.executable, "-m", "netbay.cli.main", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


def ok(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


@pytest.fixture(scope="module")
def ci(server) -> httpx.Client:  # noqa: ANN001
    return ci_client(server, server.token())


@pytest.fixture(scope="module")
def template(server) -> str:  # noqa: ANN001
    name = unique("k8s")
    ok(cli(server, "cluster-template", "create", name, "--coe", "kubernetes", "--network-driver", "flannel",
           "--labels", "flannel_backend=vxlan,flannel_network_subnetlen=24", "--external-network", "public",
           "--floating-ip-enabled"))
    return name


def test_cluster_lifecycle_through_the_cli(server, ci, template, tmp_path) -> None:  # noqa: ANN001
    name = unique("c")
    out = ok(cli(server, "cluster", "create", name, "--cluster-template", template, "--node-count", "2",
                 "--timeout", "120"))
    lines = out.splitlines()
    # The live view's last frame: every resource of the stack, complete.
    assert any(line.startswith(f"cluster {name}  CREATE_COMPLETE") for line in lines), out
    assert "kube_master_0" in out and "OS::Nova::Server" in out and "OS::Neutron::Router" in out
    assert any(line.startswith(f"cluster {name} CREATE_COMPLETE in ") for line in lines), out
    cluster = ci.get(f"/clusters/{name}").json()
    assert cluster["status"] == "CREATE_COMPLETE"
    assert f"api_address: {cluster['api_address']}" in out
    assert len(cluster["node_addresses"]) == 2 and len(cluster["master_addresses"]) == 1

    listed = ok(cli(server, "cluster", "list"))
    assert name in listed and cluster["uuid"] in listed and "CREATE_COMPLETE" in listed
    for ident in (name, cluster["uuid"]):
        shown = ok(cli(server, "cluster", "show", ident))
        for field in ("api_address", "master_addresses", "node_addresses", "status_reason"):
            assert field in shown
        assert cluster["api_address"] in shown and cluster["node_addresses"][0] in shown
        assert "Stack CREATE completed successfully" in shown

    # Topology: external network → router → private network/subnet → nodes, addresses.
    topo = ok(cli(server, "cluster", "topology", name))
    assert "external network public" in topo and "172.24.4.0/24" in topo
    assert f"router {name}-extrouter" in topo
    assert f"network {name}-fixed_network" in topo and "10.0.0.0/24" in topo
    assert "masters (1)" in topo and "minions (2)" in topo
    assert f"{name}-kube_master_0" in topo and f"{name}-kube_minion_1" in topo
    for address in cluster["node_addresses"] + cluster["master_addresses"]:
        assert address in topo
    assert "flannel vxlan 10.100.0.0/16" in topo
    assert f"{name}-secgroup_kube_master: tcp 7080" in topo and "tcp 6443" in topo
    assert "load balancer" not in topo  # no master_lb in this template

    # The HOT export: two YAML files a real Heat takes.
    out_dir = tmp_path / "export"
    exported = ok(cli(server, "cluster", "template-export", name, "--output-dir", str(out_dir)))
    hot_file, env_file = out_dir / f"{name}-template.yaml", out_dir / f"{name}-env.yaml"
    assert str(hot_file) in exported and str(env_file) in exported
    hot = yaml.safe_load(hot_file.read_text())
    env = yaml.safe_load(env_file.read_text())
    assert hot["heat_template_version"] and hot["resources"]
    assert sum(1 for r in hot["resources"].values() if r["type"] == "OS::Nova::Server") == 3
    assert env["parameters"]["number_of_minions"] == 2
    assert set(env["parameters"]) <= set(hot["parameters"])

    # Scale with the same live view.
    out = ok(cli(server, "cluster", "update", name, "--node-count", "3", "--timeout", "120"))
    assert any(line.startswith(f"cluster {name} UPDATE_COMPLETE in ") for line in out.splitlines()), out
    assert "kube_minion_2" in out
    assert len(ci.get(f"/clusters/{name}").json()["node_addresses"]) == 3

    # Delete waits until the cluster is gone.
    out = ok(cli(server, "cluster", "delete", name, "--timeout", "120"))
    assert f"cluster {name} deleted in " in out
    assert ci.get(f"/clusters/{cluster['uuid']}").status_code == 404
    r = cli(server, "cluster", "show", name)
    assert r.returncode == 1 and "could not be found" in r.stderr


def test_a_failing_create_exits_non_zero_with_the_reason(server, ci, template) -> None:  # noqa: ANN001
    name = unique("bad")
    # The private subnet overlaps the external network's: the router interface is refused.
    r = cli(server, "cluster", "create", name, "--cluster-template", template, "--node-count", "1",
            "--labels", "fixed_subnet_cidr=172.24.4.0/24", "--timeout", "120")
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"cluster {name} CREATE_FAILED in " in r.stdout
    reason = ci.get(f"/clusters/{name}").json()["status_reason"]
    assert "OS::Neutron" in reason
    assert "CREATE_FAILED" in r.stderr and " ".join(reason.split()) in " ".join(r.stderr.split())
    ok(cli(server, "cluster", "delete", name, "--timeout", "120"))
    assert ci.get(f"/clusters/{name}").status_code == 404


def test_no_wait_returns_at_once_and_bad_input_is_refused(server, ci, template) -> None:  # noqa: ANN001
    name = unique("nw")
    out = ok(cli(server, "cluster", "create", name, "--cluster-template", template, "--no-wait"))
    assert "accepted" in out and "CREATE_COMPLETE in" not in out
    uuid = ci.get(f"/clusters/{name}").json()["uuid"]
    assert uuid in out
    # The same cluster, followed by a later command until it settles: delete waits.
    ok(cli(server, "cluster", "delete", name, "--timeout", "120"))
    assert ci.get(f"/clusters/{uuid}").status_code == 404

    r = cli(server, "cluster", "create", unique("x"), "--cluster-template", template, "--labels", "novalue")
    assert r.returncode == 2 and "KEY=VALUE" in r.stderr
    r = cli(server, "cluster", "create", unique("x"), "--cluster-template", "no-such-template")
    assert r.returncode == 1 and "error:" in r.stderr
    r = cli(server, "cluster", "topology", "no-such-cluster")
    assert r.returncode == 1 and "could not be found" in r.stderr


def test_the_wait_is_bounded_by_timeout(tmp_path) -> None:  # noqa: ANN001
    """Without a conductor nothing settles the cluster: --timeout ends the wait, exit 2."""
    srv = start_server(f"sqlite:///{tmp_path / 'nb.db'}", tmp_path, extra=("--no-conductor",))
    try:
        ok(cli(srv, "cluster-template", "create", "t", "--coe", "kubernetes", "--external-network", "public"))
        r = cli(srv, "cluster", "create", "slow", "--cluster-template", "t", "--timeout", "1.5")
        assert r.returncode == 2, r.stdout + r.stderr
        assert "still CREATE_IN_PROGRESS after 1.5 s" in " ".join(r.stderr.split())
    finally:
        stop_server(srv)


# --- the README's main job ------------------------------------------------------------------------


def _namespaces() -> set[str]:
    if shutil.which("ip") is None:
        return set()
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def test_the_main_job_builds_a_cluster_shows_its_topology_and_leaves_nothing() -> None:
    """``scripts/demo.sh``: as root with its own agent prefix (else API only)."""
    before = _namespaces()
    env = {**os.environ, "NETBAY_SKIP_SETUP": "1", "NETBAY_DEMO_TIMEOUT": "60", "COLUMNS": "200"}
    for key in ("NETBAY_DATA_DIR", "NETBAY_PORT", "NETBAY_KEEP", "NETBAY_DATABASE_URL", "OS_CLOUD"):
        env.pop(key, None)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    r = subprocess.run([str(ROOT / "scripts" / "demo.sh")], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=150)
    out = r.stdout
    assert r.returncode == 0, out + r.stderr
    assert "walk-through resources deleted" in out
    assert "cluster k8s CREATE_COMPLETE in " in out
    assert "external network public" in out and "router k8s-extrouter" in out
    assert "masters (1)" in out and "minions (2)" in out
    assert "cluster k8s deleted in " in out
    data_dir = next(line.split("data in ")[1].split(",")[0] for line in out.splitlines() if "data in " in line)
    assert not Path(data_dir).exists()
    if "dataplane agent: on" in out:
        prefix = out.split("dataplane agent: on, namespaces ")[1].split("*")[0]
        assert prefix.startswith("nbd") and prefix.endswith("-")
        assert "load balancer k8s-api_lb" in out
        left = {ns for ns in _namespaces() - before if ns.startswith((prefix, "nb-"))}
        assert not left, f"the demo left namespaces behind: {sorted(left)}"
