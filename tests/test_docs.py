"""The README stays a front page: short, and every link in it leads somewhere.

(The documentation site's own links are checked by ``mkdocs build --strict`` in
``.ci/run``.)
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def test_readme_is_at_most_200_lines() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move detail to docs/"


def test_readme_links_resolve() -> None:
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    local = [t for t in targets if not re.match(r"[a-z]+://", t)]
    assert local, "the README links to the documentation"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README links to files that are not in the tree: {missing}"


def test_every_docs_page_is_in_the_site_nav() -> None:
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    orphans = [p for p in pages if f": {p}" not in nav]
    assert not orphans, f"pages missing from mkdocs.yml's nav: {orphans}"


def test_benchmarks_table_is_what_the_results_say() -> None:
    """BENCHMARKS.md's headline table is regenerated from bench/results/ (bench/report.py):
    a hand edit, or a result committed without regenerating, fails here."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(ROOT / "bench" / "report.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
