"""The package layout is the architecture: no import cycle between netbay's packages.

Every ``import netbay.x…`` / ``from netbay.x… import`` in ``netbay/<pkg>/`` is an edge
``pkg → x`` (lazy imports inside functions count too: a cycle through them is still
a cycle). The graph must be acyclic, e.g. the drivers build on the dataplane and the
agent composes both, never the other way round.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "netbay"


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, lazily or not; ``from a.b import c`` names both
    ``a.b`` and ``a.b.c`` (``c`` may be a module)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def package_imports() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).parts
        if len(parts) < 2:
            continue   # top-level modules (errors.py, context.py…) are leaves by convention
        pkg = parts[0]
        for name in imported_modules(path):
            bits = name.split(".")
            if bits[0] == "netbay" and len(bits) > 1 and (ROOT / bits[1]).is_dir() and bits[1] != pkg:
                edges[pkg].add(bits[1])
    return edges


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path (first node repeated at the end), or None."""
    colour: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        colour[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if colour.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if colour.get(nxt) is None:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        colour[node] = 2
        return None

    for start in sorted(edges):
        if colour.get(start) is None:
            found = visit(start)
            if found:
                return found
    return None


def test_finder_sees_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}}) is None


def test_no_import_cycle_between_packages():
    edges = package_imports()
    assert edges["agent"] >= {"dataplane", "drivers"}   # the graph is really read
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle between packages: " + " → ".join(cycle)


def test_clients_of_netbays_api_do_not_reach_into_the_cluster_executor():
    """``Api``/``ApiError``/``NET``/``LB``/``gone_ok`` are a client of netbay's own API
    (:mod:`netbay.client`); the Kubernetes mapping, the plugins, the
    containers and the CLI take them from there, not from the Heat stand-in's insides."""
    paths = [path for where in ("k8s", "plugins", "containers", "cli") for path in (ROOT / where).rglob("*.py")]
    assert len(paths) > 20   # the packages are really read
    for path in paths:
        wrong = imported_modules(path) & {"netbay.coe.executor", "netbay.coe.handlers.base"}
        assert not wrong, f"{path.relative_to(ROOT)} imports {sorted(wrong)}"


# Neutron's own tables: a controller above the seam reads and writes them through it.
NEUTRON_MODELS = {"Network", "Subnet", "SubnetPool", "Port", "IPAllocation", "SecurityGroup",
                  "SecurityGroupRule", "Router", "FloatingIP"}


def imports_of(pkg: str) -> dict[str, set[str]]:
    """Each module's ``netbay.…`` imports (lazy ones too): module or ``module:Name``."""
    out: dict[str, set[str]] = defaultdict(set)
    for path in (ROOT / pkg).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("netbay"):
                out[path.name].add(node.module)
                out[path.name].update(f"{node.module}:{a.name}" for a in node.names)
            elif isinstance(node, ast.Import):
                out[path.name].update(a.name for a in node.names if a.name.startswith("netbay"))
    return out


def test_zun_containers_reach_the_network_only_through_the_seam():
    """Issue 14: Zun's container API makes its ports and reads networks and security
    groups through ``NetworkBackend``, so they can be a cloud's."""
    found = imports_of("containers")
    assert "netbay.containers.neutron:ZunNeutron" in found["containers.py"]   # really read
    direct = {m: sorted(i for i in names if i.startswith("netbay.network")
                        or i.partition(":")[2] in NEUTRON_MODELS and i.startswith("netbay.store.models"))
              for m, names in found.items()}
    # placement.py reads a cluster node's port (the cluster's network, not the container's).
    assert {m: v for m, v in direct.items() if v and m != "placement.py"} == {}
