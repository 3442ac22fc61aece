"""Unit tests of label parsing and checking, and of the JSON patch (no server).

CLI labels must parse exactly as python-magnumclient parses them: its own
``format_labels`` is the oracle when it is installed."""

from __future__ import annotations

import ipaddress
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from netbay.coe import labels, patch
from netbay.drivers import cidrs, registry
from netbay.errors import BadRequest

# --- CLI parsing ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("values, expected", [
    (None, {}),
    ([], {}),
    (["a=1"], {"a": "1"}),
    (["a=1,b=2"], {"a": "1", "b": "2"}),
    (["a=1;b=2"], {"a": "1", "b": "2"}),
    (["a=1", "b=2,3"], {"a": "1", "b": "2,3"}),  # several --labels: no comma splitting
    (["a=b=c"], {"a": "b=c"}),  # one value, two '=': split on , and ; (none here), then first '='
    (["a=1", "a=2"], {"a": "1,2"}),  # repeated keys are joined
    (["a=x,y"], {"a": "x,y"}),  # a single '=' is never split
    (["a="], {"a": ""}),
    (["=v"], {"": "v"}),
    (["flannel_backend=vxlan,flannel_network_subnetlen=24"],
     {"flannel_backend": "vxlan", "flannel_network_subnetlen": "24"}),
])
def test_format_labels(values, expected):
    assert labels.format_labels(values) == expected


@pytest.mark.parametrize("values", [["novalue"], ["a=1,b=2,c"], ["a=1", "b"]])
def test_format_labels_refuses_pairs_without_equals(values):
    with pytest.raises(labels.LabelSyntaxError, match="labels must be a list of KEY=VALUE not"):
        labels.format_labels(values)


_pieces = st.text(alphabet=string.ascii_letters + string.digits + "=,;_-./ ", max_size=25)


@settings(max_examples=400, deadline=None)
@given(st.lists(_pieces, max_size=4), st.booleans())
def test_format_labels_is_magnumclients(values, parse_comma):
    utils = pytest.importorskip("magnumclient.common.utils")
    from magnumclient import exceptions as mexc

    try:
        expected = utils.format_labels(list(values), parse_comma=parse_comma)
    except mexc.CommandError as exc:
        with pytest.raises(labels.LabelSyntaxError) as ours:
            labels.format_labels(values, parse_comma=parse_comma)
        assert str(ours.value) == str(exc)
    else:
        assert labels.format_labels(values, parse_comma=parse_comma) == expected


# --- the API's checks ---------------------------------------------------------------------------------------


def test_patch_values_accept_a_dict_or_its_str():
    assert labels.from_patch_value({"a": "b"}) == {"a": "b"}
    assert labels.from_patch_value("{'a': 'b'}") == {"a": "b"}
    for bad in ("a=b", "[1]", "__import__('os')", 5, None, "{"):
        with pytest.raises(ValueError):
            labels.from_patch_value(bad)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=30), st.one_of(st.text(max_size=30), st.integers(), st.floats(),
                                                       st.booleans()), max_size=6),
       st.sampled_from([None, "flannel", "calico", "docker", "nonsense"]))
def test_check_only_ever_refuses_with_a_400_and_keeps_every_label(given_labels, driver):
    try:
        checked = labels.check(given_labels, driver)
    except BadRequest as exc:
        assert "label" in exc.message.lower() or "Label" in exc.message
        return
    assert checked.labels == given_labels
    known = registry.known_labels(registry.DRIVERS.get(driver or ""))
    assert checked.ignored == sorted(k for k in given_labels if k not in known)


@settings(max_examples=200, deadline=None)
@given(st.ip_addresses(v=4), st.integers(min_value=0, max_value=32))
def test_cidr_labels_accept_exactly_ipv4_networks(address, prefix):
    spec = registry.get("flannel").label("flannel_network_cidr")
    text = f"{address}/{prefix}"
    network = ipaddress.ip_network(text, strict=False)
    if network.network_address == address and cidrs.unusable(network) is None:
        assert spec.check(text) == str(network)
    else:
        with pytest.raises(registry.LabelError, match="flannel_network_cidr"):
            spec.check(text)


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=-5, max_value=40))
def test_subnetlen_range_and_fit(n):
    spec = registry.get("flannel").label("flannel_network_subnetlen")
    if 8 <= n <= 30:
        assert spec.check(str(n)) == str(n)
        if n > 16:  # longer than the default /16 network
            assert labels.check({"flannel_network_subnetlen": n}, "flannel").ignored == []
        else:
            with pytest.raises(BadRequest, match="flannel_network_subnetlen"):
                labels.check({"flannel_network_subnetlen": n}, "flannel")
    else:
        with pytest.raises(registry.LabelError):
            spec.check(n)


def test_subnetlen_not_longer_than_network_is_refused():
    with pytest.raises(BadRequest, match="must be longer than the prefix"):
        labels.check({"flannel_network_subnetlen": 16}, "flannel")
    with pytest.raises(BadRequest, match="must be longer"):
        labels.check({"flannel_network_cidr": "10.1.0.0/24", "flannel_network_subnetlen": "20"}, "flannel")
    assert labels.check({"flannel_network_cidr": "10.0.0.0/8", "flannel_network_subnetlen": 16}, "flannel")


def test_enum_labels_are_case_sensitive_and_numbers_are_not_strings_of_choices():
    spec = registry.get("calico").label("calico_ipv4pool_ipip")
    assert spec.check("CrossSubnet") == "CrossSubnet"
    for bad in ("crosssubnet", "ALWAYS", 1, True, None, [], {}):
        with pytest.raises(registry.LabelError):
            spec.check(bad)


# --- JSON patch ------------------------------------------------------------------------------------------


def _ops(*ops):
    return patch.parse(list(ops), internal=patch.INTERNAL, mandatory=frozenset({"/coe"}))


def test_patch_apply_basics():
    doc = {"name": "a", "labels": {"x": "1"}, "flavor_id": None, "public": False}
    out = patch.apply(doc, _ops({"op": "add", "path": "/flavor_id", "value": "m1"},
                                {"op": "add", "path": "/labels/y", "value": "2"},
                                {"op": "replace", "path": "/labels/x", "value": "3"},
                                {"op": "remove", "path": "/public"}), {"public": False})
    assert out == {"name": "a", "labels": {"x": "3", "y": "2"}, "flavor_id": "m1", "public": False}
    assert doc["labels"] == {"x": "1"}  # the input is left alone


def test_patch_add_labels_to_none():
    out = patch.apply({"labels": None}, _ops({"op": "add", "path": "/labels/a", "value": "b"}), {})
    assert out == {"labels": {"a": "b"}}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.fixed_dictionaries({"op": st.sampled_from(["add", "replace", "remove", "copy"]),
                                       "path": st.sampled_from(["/name", "/labels", "/labels/a", "/uuid", "/coe",
                                                                "/x/y/z", "name", "/", ""]),
                                       "value": st.one_of(st.none(), st.text(max_size=5), st.integers())}),
                max_size=4))
def test_patch_never_fails_with_anything_but_a_400(ops):
    doc = {"name": "a", "labels": {"a": "1"}, "coe": "kubernetes"}
    try:
        patch.apply(doc, _ops(*ops), {})
    except BadRequest:
        pass
