"""``netbay cluster`` driven as a user drives it (the real CLI, in the test process) against a
real server: create with the live view, list, show, scale, HOT export, topology (and
its SVG picture), delete; a failing create; pods without an agent (placed, never
ACTIVE: the wait is bounded) and the connectivity matrix refusing to run without the
agent's namespaces; and the README's main job, ``scripts/demo.sh``.

The server runs without the dataplane agent, so the templates have no master load
balancer (nothing would settle it).
"""

from __future__ import annotations

import re
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from clihelp import check_svg_readable, cli_here, ok
from conftest import start_server, stop_server, unique

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def template(server) -> str:
    name = unique("k8s")
    ok(cli_here(server, "cluster-template", "create", name, "--coe", "kubernetes", "--network-driver", "flannel",
           "--labels", "flannel_backend=vxlan,flannel_network_subnetlen=24", "--external-network", "public",
           "--floating-ip-enabled"))
    return name


def test_cluster_lifecycle_through_the_cli(server, ci, template, tmp_path) -> None:
    name = unique("c")
    out = ok(cli_here(server, "cluster", "create", name, "--cluster-template", template, "--node-count", "2",
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

    listed = ok(cli_here(server, "cluster", "list"))
    assert name in listed and cluster["uuid"] in listed and "CREATE_COMPLETE" in listed
    for ident in (name, cluster["uuid"]):
        shown = ok(cli_here(server, "cluster", "show", ident))
        for field in ("api_address", "master_addresses", "node_addresses", "status_reason"):
            assert field in shown
        assert cluster["api_address"] in shown and cluster["node_addresses"][0] in shown
        assert "Stack CREATE completed successfully" in shown

    # Topology: external network → router → private network/subnet → nodes, addresses.
    topo = ok(cli_here(server, "cluster", "topology", name))
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

    # The same topology as a picture: valid XML, readable, naming every node and address.
    svg = tmp_path / "pictures" / "topo.svg"
    out = ok(cli_here(server, "cluster", "topology", name, "--svg", str(svg)))
    assert f"topology picture written to {svg}" in out
    text = check_svg_readable(svg)
    for node in ("kube_master_0", "kube_minion_0", "kube_minion_1"):
        assert f"{name}-{node}" in text
    for address in cluster["node_addresses"] + cluster["master_addresses"]:
        assert address in text
    assert "external network public" in text and f"router {name}-extrouter" in text

    # The HOT export: two YAML files a real Heat takes.
    out_dir = tmp_path / "export"
    exported = ok(cli_here(server, "cluster", "template-export", name, "--output-dir", str(out_dir)))
    hot_file, env_file = out_dir / f"{name}-template.yaml", out_dir / f"{name}-env.yaml"
    assert str(hot_file) in exported and str(env_file) in exported
    hot = yaml.safe_load(hot_file.read_text())
    env = yaml.safe_load(env_file.read_text())
    assert hot["heat_template_version"] and hot["resources"]
    assert sum(1 for r in hot["resources"].values() if r["type"] == "OS::Nova::Server") == 3
    assert env["parameters"]["number_of_minions"] == 2
    assert set(env["parameters"]) <= set(hot["parameters"])

    # Scale with the same live view.
    out = ok(cli_here(server, "cluster", "update", name, "--node-count", "3", "--timeout", "120"))
    assert any(line.startswith(f"cluster {name} UPDATE_COMPLETE in ") for line in out.splitlines()), out
    assert "kube_minion_2" in out
    assert len(ci.get(f"/clusters/{name}").json()["node_addresses"]) == 3

    # Delete waits until the cluster is gone.
    out = ok(cli_here(server, "cluster", "delete", name, "--timeout", "120"))
    assert f"cluster {name} deleted in " in out
    assert ci.get(f"/clusters/{cluster['uuid']}").status_code == 404
    r = cli_here(server, "cluster", "show", name)
    assert r.returncode == 1 and "could not be found" in r.stderr


def test_a_failing_create_exits_non_zero_with_the_reason(server, ci, template) -> None:
    name = unique("bad")
    # The private subnet overlaps the external network's: the router interface is refused.
    r = cli_here(server, "cluster", "create", name, "--cluster-template", template, "--node-count", "1",
            "--labels", "fixed_subnet_cidr=172.24.4.0/24", "--timeout", "120")
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"cluster {name} CREATE_FAILED in " in r.stdout
    reason = ci.get(f"/clusters/{name}").json()["status_reason"]
    assert "OS::Neutron" in reason
    assert "CREATE_FAILED" in r.stderr and " ".join(reason.split()) in " ".join(r.stderr.split())
    ok(cli_here(server, "cluster", "delete", name, "--timeout", "120"))
    assert ci.get(f"/clusters/{name}").status_code == 404


def test_no_wait_returns_at_once_and_bad_input_is_refused(server, ci, template) -> None:
    name = unique("nw")
    out = ok(cli_here(server, "cluster", "create", name, "--cluster-template", template, "--no-wait"))
    assert "accepted" in out and "CREATE_COMPLETE in" not in out
    uuid = ci.get(f"/clusters/{name}").json()["uuid"]
    assert uuid in out
    # The same cluster, followed by a later command until it settles: delete waits.
    ok(cli_here(server, "cluster", "delete", name, "--timeout", "120"))
    assert ci.get(f"/clusters/{uuid}").status_code == 404

    r = cli_here(server, "cluster", "create", unique("x"), "--cluster-template", template, "--labels", "novalue")
    assert r.returncode == 2 and "KEY=VALUE" in r.stderr
    r = cli_here(server, "cluster", "create", unique("x"), "--cluster-template", "no-such-template")
    assert r.returncode == 1 and "error:" in r.stderr
    r = cli_here(server, "cluster", "topology", "no-such-cluster")
    assert r.returncode == 1 and "could not be found" in r.stderr


def test_pods_without_the_agent(server, ci, template, tmp_path) -> None:
    """No agent: a pod is placed (BUILD) but never plugged in; ``pod create`` waits only
    ``--timeout`` (exit 2); the connectivity matrix refuses, naming what it needs."""
    name = unique("pc")
    ok(cli_here(server, "cluster", "create", name, "--cluster-template", template, "--node-count", "1",
           "--timeout", "120"))
    out = ok(cli_here(server, "pod", "create", "p0", "--cluster", name, "--no-wait"))
    assert "placed on kube_minion_0, address 10.100." in out and "BUILD" in out
    r = cli_here(server, "pod", "create", "p1", "--cluster", name, "--timeout", "1")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "still BUILD after 1 s" in " ".join(r.stderr.split()) and "agent" in r.stderr
    listed = ok(cli_here(server, "pod", "list", "--cluster", name))
    assert "p0" in listed and "p1" in listed and listed.count("BUILD") == 2
    topo = ok(cli_here(server, "cluster", "topology", name, "--svg", str(tmp_path / "p.svg")))
    assert "pod p0 10.100." in topo and "lease 10.100." in topo
    assert "pod p0" in check_svg_readable(tmp_path / "p.svg")
    r = cli_here(server, "cluster", "connectivity", name, "--prefix", "nbnone-")
    assert r.returncode == 1 and "no namespace of cluster" in r.stderr and "agent" in r.stderr
    ok(cli_here(server, "pod", "delete", "p0", "p1", "--cluster", name))
    listed = ok(cli_here(server, "pod", "list", "--cluster", name))
    assert "p0" not in listed and "p1" not in listed
    ok(cli_here(server, "cluster", "delete", name, "--timeout", "120"))


def test_the_wait_is_bounded_by_timeout(tmp_path) -> None:
    """Without a conductor nothing settles the cluster: --timeout ends the wait, exit 2."""
    srv = start_server(f"sqlite:///{tmp_path / 'nb.db'}", tmp_path, extra=("--no-conductor",))
    try:
        ok(cli_here(srv, "cluster-template", "create", "t", "--coe", "kubernetes", "--external-network", "public"))
        r = cli_here(srv, "cluster", "create", "slow", "--cluster-template", "t", "--timeout", "1.5")
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


def _run_demo(env: dict, timeout: float) -> subprocess.CompletedProcess:
    """The demo in a process group of its own. Past ``timeout`` its whole group gets SIGTERM,
    so its EXIT trap still runs ``netbay down``: a plain kill of the shell (what
    ``subprocess.run`` does) left ``netbay up`` running, its agent keeping (and making again)
    the last namespaces — the fabric and the external network's — for ever."""
    proc = subprocess.Popen([str(ROOT / "scripts" / "demo.sh")], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        pytest.fail(f"the demo took more than {timeout:.0f} s (stopped; its cleanup ran):\n{out[-3000:]}{err[-2000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.slow   # the whole demo: 1.5-4.5 min, and as root it runs the dataplane (no quick-tier test)
def test_the_main_job_builds_a_cluster_shows_its_topology_and_leaves_nothing(tmp_path) -> None:
    """``scripts/demo.sh``: as root with its own agent prefix (else API only): a cluster,
    a pod per minion, the connectivity matrix all reachable, the topology as a picture."""
    before = _namespaces()
    picture = tmp_path / "demo-topology.svg"
    env = {**os.environ, "NETBAY_SKIP_SETUP": "1", "NETBAY_DEMO_TIMEOUT": "60", "COLUMNS": "200",
           "NETBAY_DEMO_SVG": str(picture)}
    for key in ("NETBAY_DATA_DIR", "NETBAY_PORT", "NETBAY_KEEP", "NETBAY_DATABASE_URL", "OS_CLOUD"):
        env.pop(key, None)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    r = _run_demo(env, timeout=420)   # ~270 s measured on a loaded 2-core machine
    out = r.stdout
    assert r.returncode == 0, out + r.stderr
    assert "walk-through resources deleted" in out
    assert "cluster k8s CREATE_COMPLETE in " in out
    assert "external network public" in out and "router k8s-extrouter" in out
    assert "masters (1)" in out and "minions (2)" in out
    assert "cluster k8s deleted in " in out
    # A pod on each minion, deleted before the cluster.
    assert "placed on kube_minion_0, address 10.100." in out and "placed on kube_minion_1, address 10.100." in out
    assert "deleted pod web-0" in out and "deleted pod web-1" in out
    assert out.index("deleted pod web-1") < out.index("cluster k8s deleted in ")
    # The picture: kept where the demo says, naming every node and pod.
    assert f"the picture stays after the demo: {picture}" in out
    text = check_svg_readable(picture)
    for label in ("k8s-kube_master_0", "k8s-kube_minion_0", "k8s-kube_minion_1", "pod web-0", "pod web-1"):
        assert label in text, label
    data_dir = next(line.split("data in ")[1].split(",")[0] for line in out.splitlines() if "data in " in line)
    assert not Path(data_dir).exists()
    if "dataplane agent: on" in out:
        prefix = out.split("dataplane agent: on, namespaces ")[1].split("*")[0]
        assert prefix.startswith("nbd") and prefix.endswith("-")
        assert "load balancer k8s-api_lb" in out
        assert "pod web-0 ACTIVE in " in out and "pod web-1 ACTIVE in " in out
        web0 = out.split("placed on kube_minion_0, address ")[1].split()[0]
        assert f"{web0}/24" in out.split("-- ip -4 -brief addr show eth0")[1]   # pod exec: eth0 holds it
        # The matrix: 3 nodes and 2 pods, each to each, every cell reachable.
        matrix = out.split("$ netbay cluster connectivity k8s")[1].split("$ netbay cluster topology")[0]
        assert "pod web-0 @kube_minion_0" in matrix and "minion kube_minion_1" in matrix
        beyond = re.search(r"beyond the cluster \(other networks behind the router, the external network\): "
                           r"(\d+)/(\d+) cells reachable", " ".join(matrix.split()))
        assert beyond and beyond[1] == beyond[2] and int(beyond[1]) > 0, matrix   # pods masqueraded by their node
        assert "external public" in matrix
        if "dockerd: pid" in out:   # two Docker containers too: 3 nodes, 2 pods, 2 containers
            assert "container docker-" in matrix and "@kube_minion_1" in matrix
            assert "all 43 cells within the cluster reachable (6 not routed" in matrix and "✗" not in matrix
            assert matrix.count("✓") == 43 + int(beyond[1])
            assert "dockerd and the Docker driver stopped (by PID)" in out
            web_c1 = out.split("$ docker exec web-c1 ip -4 addr show eth0")[1].split("$ ")[0]
            assert "inet 10.100." in web_c1   # an address of minion 1's lease
            assert "1 packets received" in out.split("$ docker exec web-c1 ping")[1].split("$ ")[0]
        else:
            assert "all 25 cells within the cluster reachable" in matrix and "✗" not in matrix
            assert matrix.count("✓") == 25 + int(beyond[1])
        left = {ns for ns in _namespaces() - before if ns.startswith((prefix, "nb-"))}
        assert not left, f"the demo left namespaces behind: {sorted(left)}"
        run_dir = Path("/run/netbay")
        kept = sorted(p.name for p in run_dir.iterdir() if p.name.startswith(prefix)) if run_dir.is_dir() else []
        assert not kept, f"the demo left files in /run/netbay: {kept}"
        assert "left behind" not in r.stderr, r.stderr
    else:
        assert "connectivity matrix skipped" in out and "pod web-0 ACTIVE" not in out
