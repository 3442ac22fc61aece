"""``netbay doctor``: the host's kernel features and the driver modes they allow, from
the same declarations the API refuses unrealizable modes with."""

from __future__ import annotations

import json

from clihelp import invoke

from netbay.cli.doctor import modes_report
from netbay.coe.hostcheck import host_features


def test_doctor_reports_features_and_modes_as_json() -> None:
    r = invoke("doctor", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    detected = host_features()
    assert {n: f["available"] for n, f in doc["features"].items()} == {n: f.available for n, f in detected.items()}
    modes = {(m["driver"], m["mode"]): m for m in doc["modes"]}
    assert modes[("flannel", "flannel_backend=host-gw")]["needs"] == []
    assert modes[("flannel", "flannel_backend=vxlan")]["needs"] == ["vxlan"]
    ipip = modes[("calico", "calico_ipv4pool_ipip=Always")]
    assert ipip["needs"] == ["ipip"] and ipip["ok"] == detected["ipip"].available


def test_a_missing_feature_makes_its_modes_unrealizable() -> None:
    everything = {"veth": True, "bridge": True, "br_netfilter": True, "nf_tables": True, "conntrack": True,
                  "nft_nat": True, "vxlan": True, "ipip": True}
    assert all(m["ok"] for m in modes_report(everything))
    no_vxlan = modes_report({**everything, "vxlan": False})
    assert {m["mode"] for m in no_vxlan if not m["ok"]} == {
        "flannel_backend=vxlan", "calico_ipv4pool_vxlan=Always", "calico_ipv4pool_vxlan=CrossSubnet"}
    assert not any(m["ok"] for m in modes_report({**everything, "conntrack": False}))


def test_doctor_lists_trunks_with_what_they_lack() -> None:
    """Trunks are served by the API but realized only with 802.1Q VLANs (and netbay's
    dataplane does not tag subports yet): doctor says which applies here."""
    r = invoke("doctor", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    (trunk,) = [e for e in json.loads(r.stdout)["extensions"] if e["extension"] == "trunk"]
    assert trunk["needs"] == "vlan" and trunk["ok"] is False
    vlan = host_features()["vlan"].available
    assert trunk["reason"] == ("netbay's dataplane does not realize it yet" if vlan else "missing vlan")
    r = invoke("doctor", env={"COLUMNS": "250"})
    assert "trunk" in r.stdout and ("missing vlan" in r.stdout) == (not vlan), r.stdout
