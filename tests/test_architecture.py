"""The package layout is the architecture: no import cycle between netbay's packages.

Every ``import netbay.x…`` / ``from netbay.x… import`` in ``netbay/<pkg>/`` is an edge
``pkg → x`` (lazy imports inside functions count too: a cycle through them is still
a cycle). The graph must be acyclic, e.g. the drivers build on the dataplane and the
agent composes both, never the other way round.
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "netbay"


def import_nodes(path: Path) -> list[ast.Import | ast.ImportFrom | ast.keyword]:
    """The ``import`` statements (lazy ones too) and keyword arguments of ``path``: what
    every reader below looks at. Parsed once per file content: the tree is ~400 files
    and each test reads all of it (was a minute of this module's run on a loaded machine)."""
    return _nodes(str(path), path.read_text())


@functools.cache
def _nodes(name: str, text: str) -> list[ast.Import | ast.ImportFrom | ast.keyword]:
    return [node for node in ast.walk(ast.parse(text, name))
            if isinstance(node, (ast.Import, ast.ImportFrom, ast.keyword))]


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, lazily or not; ``from a.b import c`` names both
    ``a.b`` and ``a.b.c`` (``c`` may be a module)."""
    names: set[str] = set()
    for node in import_nodes(path):
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


def module_name(path: Path, root: Path = ROOT) -> str:
    """``netbay/a/b.py`` → ``netbay.a.b``; a package's ``__init__.py`` is the package."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_imports(root: Path = ROOT) -> dict[str, set[str]]:
    """Module → the modules of the same tree it imports, lazily or not, relative or absolute.

    ``from a import b`` is an edge to ``a.b`` when that is a module, else to ``a``
    (the package's ``__init__``): what the import really needs run first.
    """
    paths = {module_name(path, root): path for path in root.rglob("*.py")}
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in import_nodes(path):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                for alias in node.names:
                    target = f"{base}.{alias.name}" if f"{base}.{alias.name}" in paths else base
                    if target in paths and target != name:
                        edges[name].add(target)
            elif isinstance(node, ast.Import):
                edges[name].update(a.name for a in node.names if a.name in paths and a.name != name)
    loader = f"{root.name}.drivers.registry"
    if loader in paths:
        edges[loader].update(m for m in factory_modules(root) if m in paths and m != loader)
    return edges


def factory_modules(root: Path = ROOT) -> set[str]:
    """The modules of every ``factory="module:Class"`` a driver declares: the registry's
    :func:`~netbay.drivers.registry.make` imports them by name (``importlib``), an import
    no ``import`` statement shows, so :func:`module_imports` adds it as the edge
    registry → module."""
    found = set()
    for path in root.rglob("*.py"):
        for node in import_nodes(path):
            if (isinstance(node, ast.keyword) and node.arg == "factory" and isinstance(node.value, ast.Constant)
                    and isinstance(node.value.value, str) and ":" in node.value.value):
                found.add(node.value.value.partition(":")[0])
    return found


def test_registered_factories_are_edges_of_the_module_graph():
    """Every driver the registry holds has its factory seen by the reader (none hides)."""
    import netbay.drivers  # noqa: F401  (registers the drivers)
    from netbay.drivers import registry

    registered = {spec.factory.partition(":")[0] for spec in registry.DRIVERS.values() if spec.factory}
    assert "netbay.drivers.flannel.driver" in registered   # really read
    assert registered <= factory_modules()
    assert registered <= module_imports()["netbay.drivers.registry"]


def test_a_cycle_through_a_factory_string_is_found(tmp_path):
    """A driver module that imports its package, which imports the registry: the
    registry → driver edge only a factory string makes closes the loop."""
    drivers = tmp_path / "netbay" / "drivers"
    (drivers / "toy").mkdir(parents=True)
    for init in (tmp_path / "netbay", drivers):
        (init / "__init__.py").write_text("")
    (drivers / "registry.py").write_text("import importlib\n\nclass DriverSpec:\n    pass\n")
    (drivers / "toy" / "__init__.py").write_text(
        "from netbay.drivers.registry import DriverSpec\n"
        "SPEC = DriverSpec(name='toy', factory='netbay.drivers.toy.driver:Toy')\n")
    (drivers / "toy" / "driver.py").write_text("from netbay.drivers.toy import SPEC\n\nclass Toy:\n    pass\n")
    cycle = find_cycle(module_imports(tmp_path / "netbay"))
    assert cycle is not None and "netbay.drivers.registry" in cycle and "netbay.drivers.toy.driver" in cycle, cycle
    (drivers / "toy" / "driver.py").write_text("class Toy:\n    pass\n")
    assert find_cycle(module_imports(tmp_path / "netbay")) is None


def test_module_reader_sees_lazy_and_relative_imports(tmp_path):
    """A cycle closed by an import inside a function, through a relative import, is found."""
    pkg = tmp_path / "netbay" / "pkg"
    pkg.mkdir(parents=True)
    (tmp_path / "netbay" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from netbay.pkg.b import thing\n")
    (pkg / "b.py").write_text("def thing():\n    from .c import other\n    return other\n")
    (pkg / "c.py").write_text("def other():\n    from netbay.pkg import a\n    return a\n")
    edges = module_imports(tmp_path / "netbay")
    assert edges["netbay.pkg.b"] == {"netbay.pkg.c"} and edges["netbay.pkg.c"] == {"netbay.pkg.a"}
    assert find_cycle(edges) == ["netbay.pkg.a", "netbay.pkg.b", "netbay.pkg.c", "netbay.pkg.a"]
    (pkg / "c.py").write_text("def other():\n    return 1\n")
    assert find_cycle(module_imports(tmp_path / "netbay")) is None


def test_no_import_cycle_between_modules():
    """Within a package too (function-level imports included): a module that needs one
    above it takes the dependency passed in, or the shared part moves down."""
    edges = module_imports()
    assert "netbay.network.ports" in edges["netbay.network.registry"]   # the graph is really read
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle between modules: " + " → ".join(cycle)


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
        for node in import_nodes(path):
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


def test_drivers_use_the_dataplanes_public_netlink_surface():
    """One netlink codec (:mod:`netbay.dataplane.rtnl`): the drivers import no private
    name of the dataplane, and no netlink library of their own."""
    found = imports_of("drivers")
    assert "netbay.dataplane:rtnl" in found["pods.py"]   # really read
    private = {m: sorted(i for i in names if i.startswith("netbay.dataplane") and i.partition(":")[2].startswith("_"))
               for m, names in found.items()}
    assert {m: v for m, v in private.items() if v} == {}
    for path in (ROOT / "drivers").rglob("*.py"):
        assert not {n for n in imported_modules(path) if n.split(".")[0] == "pyroute2"}, path
