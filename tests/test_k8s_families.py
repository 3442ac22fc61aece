"""A Service's IP families (issue 28 item 4): Kubernetes' ipFamilyPolicy / ipFamilies
defaulting and validation against a single-stack and a dual-stack cluster, and the
manifest source's refusal before anything is written."""

from __future__ import annotations

import pytest

from netbay.k8s.families import FamilyError, address_of, resolve
from netbay.k8s.objects import ManifestError, desired, parse

V4, DUAL = ("IPv4",), ("IPv4", "IPv6")


def service(**spec: object):
    lines = "".join(f"  {k}: {v}\n" for k, v in spec.items())
    text = f"apiVersion: v1\nkind: Service\nmetadata: {{name: s, namespace: n}}\nspec:\n{lines}  ports: [{{port: 80}}]\n"
    return desired(parse(text)).services[("n", "s")]


@pytest.mark.parametrize("spec, cluster, families", [
    ({}, V4, V4),
    ({}, DUAL, V4),                                           # SingleStack by default: the primary family
    ({"ipFamilyPolicy": "PreferDualStack"}, V4, V4),          # prefers: one where the cluster has one
    ({"ipFamilyPolicy": "PreferDualStack"}, DUAL, DUAL),
    ({"ipFamilyPolicy": "RequireDualStack"}, DUAL, DUAL),
    ({"ipFamilies": "[IPv6]"}, DUAL, ("IPv6",)),
    ({"ipFamilies": "[IPv6]", "ipFamilyPolicy": "PreferDualStack"}, DUAL, ("IPv6", "IPv4")),
    ({"ipFamilies": "[IPv6, IPv4]"}, DUAL, ("IPv6", "IPv4")),  # two families: RequireDualStack by default
    ({"clusterIP": "fd00:96::7"}, DUAL, ("IPv6",)),            # the family of the given cluster IP
    ({"clusterIPs": "[10.96.0.7, 'fd00:96::7']"}, DUAL, DUAL),
])
def test_families_as_kubernetes_defaults_them(spec: dict, cluster: tuple, families: tuple) -> None:
    assert resolve(service(**spec), cluster) == families


@pytest.mark.parametrize("spec, cluster, message", [
    ({"ipFamilyPolicy": "RequireDualStack"}, V4,
     'spec.ipFamilyPolicy: Invalid value: "RequireDualStack": this cluster is not configured for dual-stack'),
    ({"ipFamilies": "[IPv6]"}, V4, 'spec.ipFamilies[0]: Invalid value: "IPv6": not configured on this cluster'),
    ({"clusterIP": "fd00:96::7"}, V4, 'spec.ipFamilies[0]: Invalid value: "IPv6": not configured on this cluster'),
    ({"ipFamilies": "[IPv4, IPv6]", "ipFamilyPolicy": "SingleStack"}, DUAL,
     "must be 'RequireDualStack' or 'PreferDualStack' when multiple 'ipFamilies' are specified"),
    ({"ipFamilies": "[IPv4, IPv4]"}, DUAL, 'spec.ipFamilies[1]: Duplicate value: "IPv4"'),
    ({"ipFamilies": "[IPv5]"}, DUAL, 'spec.ipFamilies[0]: Unsupported value: "IPv5"'),
    ({"ipFamilyPolicy": "Both"}, DUAL, 'spec.ipFamilyPolicy: Unsupported value: "Both"'),
    ({"ipFamilies": "[IPv4]", "clusterIP": "fd00:96::7"}, DUAL, "must match the family of spec.clusterIPs[0]"),
])
def test_refusals_name_the_field_and_family(spec: dict, cluster: tuple, message: str) -> None:
    with pytest.raises(FamilyError, match="^Service n/s: ") as info:
        resolve(service(**spec), cluster)
    assert message in str(info.value)


def test_cluster_ips_must_start_with_the_cluster_ip_and_be_addresses() -> None:
    with pytest.raises(ManifestError, match="spec.clusterIPs.0. 'fd00:96::7' must be spec.clusterIP '10.96.0.7'"):
        service(clusterIP="10.96.0.7", clusterIPs="['fd00:96::7']")
    with pytest.raises(ManifestError, match="is not an IPv4 or IPv6 address"):
        service(clusterIPs="[10.96.0.7, nope]")


def test_address_of_picks_the_family() -> None:
    port = {"fixed_ips": [{"ip_address": "10.10.0.5", "subnet_id": "a"}, {"ip_address": "fd00:10::5", "subnet_id": "b"}]}
    assert address_of(port, "IPv4") == ("10.10.0.5", "a")
    assert address_of(port, "IPv6") == ("fd00:10::5", "b")
    assert address_of({"fixed_ips": port["fixed_ips"][:1]}, "IPv6") is None


def test_the_manifest_source_refuses_before_anything_is_written() -> None:
    """``Controller.refuse`` (what ``netbay k8s apply`` asks first) names the Service and
    Kubernetes' field error; a dual-stack cluster takes the same manifest."""
    from types import SimpleNamespace

    from netbay.k8s.services import refuse_without_lbs

    text = ("apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop}\n"
            "spec: {ipFamilyPolicy: RequireDualStack, selector: {app: web}, ports: [{port: 80}]}\n")
    want = desired(parse(text))
    single = SimpleNamespace(lbs=object(), refs=SimpleNamespace(families=V4))
    with pytest.raises(FamilyError, match=r'^Service shop/web: spec.ipFamilyPolicy: Invalid value: "RequireDualStack"'):
        refuse_without_lbs(single, want)
    refuse_without_lbs(SimpleNamespace(lbs=object(), refs=SimpleNamespace(families=DUAL)), want)
