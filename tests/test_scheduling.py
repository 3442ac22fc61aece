"""tests/scheduling.py hands out work as scripts/test.sh relies on: a real pytest-xdist run
of a small tree of modules (peers-marked, mixed, on the "OVN lab", plain) that records
which worker ran each test, in what order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path


REPO = Path(__file__).resolve().parent.parent

CONFTEST = f"""
import json, os, sys, time
sys.path.insert(0, {str(REPO)!r})
import pytest
from tests import scheduling
from tests.scheduling import pytest_xdist_make_scheduler  # noqa: F401

def pytest_configure(config):
    config.addinivalue_line("markers", "peers: a test against the peers")
    config.addinivalue_line("markers", "ovn: a test on the OVN lab")
    scheduling.configure(config)

def pytest_collection_modifyitems(config, items):
    scheduling.record_peers(config, items)

@pytest.fixture(autouse=True)
def _record(request):
    yield
    with open(os.environ["RAN"], "a") as out:
        out.write(json.dumps([os.environ["PYTEST_XDIST_WORKER"], request.node.nodeid, time.monotonic()]) + "\\n")
"""

PEERS_MODULE = "import pytest\npytestmark = pytest.mark.peers\n\ndef test_one():\n    pass\n\ndef test_two():\n    pass\n"
LAB_MODULE = PEERS_MODULE.replace("pytest.mark.peers", "[pytest.mark.ovn, pytest.mark.peers]")
LAB_ONLY = "import pytest\npytestmark = pytest.mark.ovn\n\ndef test_lab():\n    pass\n"
MIXED = """import time, pytest

@pytest.mark.parametrize("where", ["embedded", pytest.param("openstack", marks=pytest.mark.peers)])
def test_both(where):
    time.sleep(0.2)
"""
PLAIN = "import time\n\ndef test_slow():\n    time.sleep(0.4)\n"


def _tree(root: Path) -> None:
    (root / "conftest.py").write_text(CONFTEST)
    (root / "pytest.ini").write_text("[pytest]\n")
    for lab, text in (("lab/test_lab_a.py", LAB_MODULE), ("lab/test_lab_c.py", LAB_ONLY),
                      ("both/test_lab_b.py", LAB_MODULE)):
        (root / lab).parent.mkdir(parents=True, exist_ok=True)
        (root / lab).write_text(text)
    (root / "suite").mkdir()
    (root / "suite/test_cloud.py").write_text(PEERS_MODULE)
    (root / "suite/test_mixed.py").write_text(MIXED)
    for n in range(12):
        (root / f"suite/test_plain_{n:02d}.py").write_text(PLAIN)


def _env() -> dict[str, str]:
    """This process's environment without what belongs to this run: its controller's list
    folder, and options for it (``PYTEST_ADDOPTS``: a profiler plugin the small tree lacks)."""
    return {k: v for k, v in os.environ.items()
            if k not in ("NETBAY_TEST_PEERS_LIST", "NETBAY_TEST_UNIT_SECONDS", "PYTEST_ADDOPTS", "PYTEST_XDIST_WORKER")}


def _run(root: Path, *args: str, peer_workers: int, **env_more: str) -> list[tuple[str, str]]:
    ran = root / "ran.jsonl"
    ran.unlink(missing_ok=True)
    env = {**_env(), "RAN": str(ran), "NETBAY_TEST_PEER_WORKERS": str(peer_workers), **env_more}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(root),
                        "-c", str(root / "pytest.ini"), "--dist", "loadfile", "--no-loadscope-reorder", *args],
                       cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = sorted((json.loads(line) for line in ran.read_text().splitlines()), key=lambda row: row[2])
    return [(worker, nodeid) for worker, nodeid, _ in rows]


def _is_peers(nodeid: str) -> bool:
    """Taken by the peers' workers only: a peers test, or one on the OVN lab."""
    return "openstack" in nodeid or not ("plain" in nodeid or "embedded" in nodeid)


def test_peers_tests_go_to_the_first_workers_lab_first_and_all_take_the_rest(tmp_path: Path) -> None:
    _tree(tmp_path)
    lists_before = set(Path(tempfile.gettempdir()).glob("nbtest-sched-*"))
    ran = _run(tmp_path, "-n", "3", peer_workers=1)
    assert set(Path(tempfile.gettempdir()).glob("nbtest-sched-*")) <= lists_before   # the workers' lists: removed
    assert len(ran) == 2 + 2 + 1 + 2 + 2 + 12
    peers = [(worker, nodeid) for worker, nodeid in ran if _is_peers(nodeid)]
    assert {worker for worker, _ in peers} == {"gw0"}, peers
    assert sorted(nodeid.split("::")[0] for _, nodeid in peers[:5]) == ["both/test_lab_b.py"] * 2 + \
        ["lab/test_lab_a.py"] * 2 + ["lab/test_lab_c.py"], peers   # the lab first, as one unit
    rest = {worker for worker, nodeid in ran if not _is_peers(nodeid)}
    assert rest == {"gw0", "gw1", "gw2"}, ran   # the peers' worker takes the rest's tail too
    assert ("gw0", "suite/test_mixed.py::test_both[openstack]") in ran


def test_a_run_of_only_peers_tests_uses_every_worker(tmp_path: Path) -> None:
    _tree(tmp_path)
    ran = _run(tmp_path, "-n", "2", "-m", "peers", peer_workers=1)
    assert all(_is_peers(nodeid) for _, nodeid in ran) and len(ran) == 7   # the lab's test_lab: not peers
    assert {worker for worker, _ in ran} == {"gw0", "gw1"}, ran


def test_the_rests_modules_go_longest_first_by_the_seconds_file(tmp_path: Path) -> None:
    """tests/unit_seconds.json's order (here its stand-in's), not the modules' test counts:
    the longest listed first, after the lab's unit; a module not listed after them."""
    _tree(tmp_path)
    seconds = tmp_path / "seconds.json"
    seconds.write_text(json.dumps({"suite/test_plain_07.py": 50, "suite/test_plain_02.py": 40}))
    ran = _run(tmp_path, "-n", "1", "-m", "not peers", peer_workers=1, NETBAY_TEST_UNIT_SECONDS=str(seconds))
    order = [nodeid.split("::")[0] for _, nodeid in ran]
    assert order[:3] == ["lab/test_lab_c.py", "suite/test_plain_07.py", "suite/test_plain_02.py"], order
    assert len(order) == 1 + 1 + 12


def test_without_xdist_the_hooks_stand_aside(tmp_path: Path) -> None:
    _tree(tmp_path)
    env = {**_env(), "RAN": str(tmp_path / "ran.jsonl"), "PYTEST_XDIST_WORKER": "none"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                        "-c", str(tmp_path / "pytest.ini"), "-m", "peers", "-p", "no:xdist"],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "7 passed" in r.stdout, r.stdout + r.stderr
