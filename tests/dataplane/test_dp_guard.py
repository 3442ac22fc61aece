"""The host guard itself: what counts as "the root namespace changed"."""

from __future__ import annotations

from .dp_helpers import RUN_ID, diff_snapshots, root_snapshot


def _snap(**lines: list[str]) -> dict[str, set[str]]:
    base = {k: set() for k in ("ip -o link", "ip -o addr", "ip route", "ip -6 route",
                               "nft list tables")}
    for k, v in lines.items():
        base[k.replace("_", " ")] = set(v)
    return base


def test_changes_are_failures_unless_clearly_foreign():
    before = _snap()
    after = {
        "ip -o link": {f"9: v{RUN_ID}@if2: <BROADCAST> mtu 1500",    # ours: fail
                       "10: docker0: <NO-CARRIER> mtu 1500",          # dockerd: tolerated
                       "11: eth7: <BROADCAST> mtu 1500"},             # unknown: fail
        "ip -o addr": {"4: eth0 inet 10.0.0.1/24 scope global eth0"},  # our range: fail
        "ip route": set(), "ip -6 route": set(),
        "nft list tables": {"table ip nat", f"table inet nbt{RUN_ID}"},
    }
    bad, foreign = diff_snapshots(before, after)
    assert any(f"v{RUN_ID}" in b for b in bad)
    assert any("eth7" in b for b in bad)
    assert any("10.0.0.1/24" in b for b in bad)
    assert any(f"nbt{RUN_ID}" in b for b in bad)
    assert any("docker0" in f for f in foreign)
    assert any("table ip nat" in f for f in foreign)
    assert not any("docker0" in b for b in bad)


def test_snapshot_is_stable():
    """Two snapshots of an unchanged root namespace agree. Other workers may change it
    between two (a container's end waits in the root namespace for Docker to move it: a
    whole run saw one), so up to five pairs are taken; a snapshot that is not stable (a
    counter in it, say) never agrees."""
    diffs = []
    for _ in range(5):
        diff = diff_snapshots(root_snapshot(), root_snapshot())
        if diff == ([], []):
            return
        diffs.append(diff)
    raise AssertionError(diffs)
