"""nftables through libnftables' JSON API, inside a test namespace."""

from __future__ import annotations

import subprocess

import pytest

from netbay.dataplane import netns
from netbay.dataplane.nft import Nft, NftError
from .dp_helpers import RUN_ID, ip_netns_exec

TABLE = f"nbt{RUN_ID}"


def test_json_commands_sets_and_listing(make_ns):
    ns = make_ns("nft")
    with Nft(ns) as nft:
        assert nft.run({"nftables": [
            {"add": {"table": {"family": "inet", "name": TABLE}}},
            {"add": {"set": {"family": "inet", "table": TABLE, "name": "blocked",
                             "type": "ipv4_addr"}}},
        ]}) is None
        nft.add_elements("inet", TABLE, "blocked", ["10.0.0.1", "10.0.0.2"])
        nft.add_elements("inet", TABLE, "blocked", ["10.0.0.2"])  # add keeps existing
        assert sorted(nft.list_set("inet", TABLE, "blocked")) == ["10.0.0.1", "10.0.0.2"]
        nft.delete_elements("inet", TABLE, "blocked", ["10.0.0.1"])
        assert nft.list_set("inet", TABLE, "blocked") == ["10.0.0.2"]
        assert ("inet", TABLE) in nft.tables()
        rules = nft.list_ruleset()
        assert any("set" in o and o["set"]["name"] == "blocked" for o in rules)
        # plain nft syntax works too, and echo returns what was added with handles
        out = nft.run(f"add chain inet {TABLE} c_in", echo=True)
        assert out["nftables"][0]["add"]["chain"]["name"] == "c_in"
    # iproute2's view agrees: the table lives in the namespace ...
    r = ip_netns_exec(ns, "nft", "list", "tables")
    assert f"table inet {TABLE}" in r.stdout
    # ... and not in the host's
    host = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True,
                          timeout=10).stdout
    assert TABLE not in host


def test_errors_carry_nfts_message(make_ns):
    ns = make_ns("nft-err")
    nft = Nft(ns)
    with pytest.raises(NftError) as ei:
        nft.run(f"add rule inet {TABLE} nochain drop")
    assert "No such file or directory" in ei.value.error
    assert ei.value.ns == ns
    with pytest.raises(NftError) as ei:
        nft.run("this is not nft")
    assert "syntax error" in ei.value.error
    with pytest.raises(NftError):
        nft.delete_elements("inet", TABLE, "nope", ["10.0.0.1"])
    nft.close()
    with pytest.raises(NftError):
        nft.run("list tables")


def test_transaction_is_atomic(make_ns):
    ns = make_ns("nft-atomic")
    nft = Nft(ns)
    nft.run(f"add table inet {TABLE}; add set inet {TABLE} s {{ type ipv4_addr; }}")
    with pytest.raises(NftError):
        nft.run([
            {"add": {"element": {"family": "inet", "table": TABLE, "name": "s",
                                 "elem": ["10.0.0.7"]}}},
            {"add": {"rule": {"family": "inet", "table": TABLE, "chain": "absent",
                              "expr": [{"drop": None}]}}},
        ])
    assert nft.list_set("inet", TABLE, "s") == []


def test_context_closed_when_namespace_deleted(make_ns):
    ns = make_ns("nft-del")
    nft = Nft(ns)
    nft.run(f"add table inet {TABLE}")
    netns.delete(ns)
    assert nft._ctx is None


def test_home_namespace_is_refused(make_ns, monkeypatch):
    ns = make_ns("nft-home")
    monkeypatch.setattr(netns, "in_home", lambda: True)
    with pytest.raises(PermissionError):
        Nft(ns)


def test_interface_names_resolve_in_the_namespace(make_ns):
    """`iif "x"` is resolved by libnftables at command time: it must see the namespace's
    links, which is why every command runs while the thread is inside."""
    from netbay.dataplane import links

    a, b = make_ns("nft-if-a"), make_ns("nft-if-b")
    links.veth_pair(a, "only-here0", b, "peer0")
    nft = Nft(a)
    nft.run(f"add table inet {TABLE}; add chain inet {TABLE} c "
            f"{{ type filter hook input priority 0; }}; "
            f"add rule inet {TABLE} c iif \"only-here0\" counter")
    rules = [o["rule"] for o in nft.list_ruleset() if "rule" in o]
    assert len(rules) == 1


def test_namespace_recreated_behind_our_back(make_ns):
    a = make_ns("nft-recreate")
    nft = Nft(a)
    nft.run(f"add table inet {TABLE}")
    subprocess.run(["ip", "netns", "del", a], check=True, timeout=10)
    with pytest.raises(NftError) as ei:
        nft.tables()
    assert "does not exist" in ei.value.error
    subprocess.run(["ip", "netns", "add", a], check=True, timeout=10)
    nft2 = Nft(a)
    assert nft2.tables() == []


def test_recreated_namespace_reopens_the_context(make_ns):
    a = make_ns("nft-reopen")
    nft = Nft(a)
    nft.run(f"add table inet {TABLE}")
    subprocess.run(["ip", "netns", "del", a], check=True, timeout=10)
    subprocess.run(["ip", "netns", "add", a], check=True, timeout=10)
    assert nft.tables() == []  # talks to the new namespace
