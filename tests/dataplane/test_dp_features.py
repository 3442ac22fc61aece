"""Kernel feature detection: config and probes agree, and the probe cleans up."""

from __future__ import annotations

import os

import pytest

from netbay.dataplane import features, netns

CONFIG = "/proc/config.gz"


@pytest.fixture(scope="module")
def detected() -> dict[str, features.Feature]:
    return features.detect()


def test_every_feature_is_reported(detected):
    assert set(detected) == {s.name for s in features.FEATURES}
    for name, f in detected.items():
        assert isinstance(f.available, bool)
        assert f.how == "probe", (name, f)
        assert f.detail


def test_probe_namespace_is_deleted(detected):
    assert not netns.exists(features.probe_namespace())
    assert not [n for n in netns.list(netns.PREFIX + "probe-")
                if n == features.probe_namespace()]


def test_what_every_netbay_host_needs(detected):
    for name in ("veth", "bridge", "nf_tables"):
        assert detected[name].available, detected[name]


@pytest.mark.skipif(not os.path.exists(CONFIG), reason=f"{CONFIG} absent: cannot tell what "
                    "this kernel was built with")
def test_this_machine_vxlan_yes_ipip_no(detected):
    cfg = features.kernel_config(CONFIG)
    if cfg.get("CONFIG_VXLAN") == "y":
        assert detected["vxlan"].available is True
    if cfg.get("CONFIG_NET_IPIP", "n") == "n":
        assert detected["ipip"].available is False
        assert "CONFIG_NET_IPIP is not set" in detected["ipip"].detail
    if cfg.get("CONFIG_BRIDGE_NETFILTER") == "y":
        assert detected["br_netfilter"].available is True
    if cfg.get("CONFIG_NF_TABLES") == "y":
        assert detected["nf_tables"].available is True


@pytest.mark.skipif(not os.path.exists(CONFIG), reason=f"{CONFIG} absent")
def test_probe_agrees_with_builtin_config(detected):
    """Built in (=y) means the probe must succeed; not set means it must fail.
    (=m may go either way: the module may be absent or not loadable.)"""
    cfg = features.kernel_config(CONFIG)
    for spec in features.FEATURES:
        values = [cfg.get(o, "n") for o in spec.config]
        if all(v == "y" for v in values):
            assert detected[spec.name].available, detected[spec.name]
        elif any(v == "n" for v in values):
            assert not detected[spec.name].available, detected[spec.name]


def test_config_only_mode():
    r = features.detect(probe=False, only=["vxlan", "ipip"])
    assert set(r) == {"vxlan", "ipip"}
    assert all(f.how == "config" for f in r.values())


def test_missing_config_without_probe_is_unknown(tmp_path):
    r = features.detect(probe=False, only=["vxlan"], config_path=str(tmp_path / "none"))
    assert r["vxlan"].available is False
    assert "unknown" in r["vxlan"].detail
