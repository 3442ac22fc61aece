"""The haproxy provider's rendered configuration, checked by haproxy itself (``-c``).

Every option the API lets through for the haproxy provider (each rule type and
compare type, every action, persistence, PROXY pools, allowed CIDRs, headers,
limits) is rendered into one configuration, which the real haproxy must accept;
the lines that carry the semantics are asserted too. No namespace, no root.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from netbay.dataplane.lb.haproxy import render
from netbay.dataplane.lb.spec import (
    HAPROXY,
    L7PolicySpec,
    L7RuleSpec,
    ListenerSpec,
    LoadBalancerSpec,
    MemberSpec,
    PoolSpec,
)

pytestmark = pytest.mark.skipif(shutil.which("haproxy") is None and not Path("/usr/sbin/haproxy").exists(),
                                reason="haproxy is not installed (scripts/setup.sh installs it)")

M1 = MemberSpec(id="m1", address="10.0.0.11", port=8080, weight=3)
M2 = MemberSpec(id="m2", address="10.0.0.12", port=8080)
DOWN = MemberSpec(id="m3", address="10.0.0.13", port=8080, enabled=False)
SPARE = MemberSpec(id="m4", address="10.0.0.14", port=8080, backup=True)
RULES = tuple(
    L7RuleSpec(id=f"r{i}", type=t, compare_type=c, value=v, key=k, invert=inv)
    for i, (t, c, v, k, inv) in enumerate([
        ("PATH", "STARTS_WITH", "/api", None, False),
        ("PATH", "REGEX", "^/v[0-9]+/", None, False),
        ("HOST_NAME", "EQUAL_TO", "api.example.com", None, False),
        ("HOST_NAME", "ENDS_WITH", ".example.com", None, True),
        ("HEADER", "CONTAINS", "beta", "X-Channel", False),
        ("COOKIE", "EQUAL_TO", "1", "canary", False),
        ("FILE_TYPE", "EQUAL_TO", "jpg", None, False),
        ("FILE_TYPE", "REGEX", "(png|gif)$", None, False),
    ]))


def spec() -> LoadBalancerSpec:
    pools = (
        PoolSpec(id="web", algorithm="LEAST_CONNECTIONS", members=(M1, M2, DOWN), protocol="HTTP",
                 persistence="HTTP_COOKIE"),
        PoolSpec(id="api", algorithm="SOURCE_IP", members=(M1,), protocol="PROXY", persistence="APP_COOKIE",
                 cookie_name="JSESSIONID"),
        PoolSpec(id="tls", algorithm="ROUND_ROBIN", members=(M2,), protocol="HTTPS", persistence="SOURCE_IP"),
        PoolSpec(id="v2", members=(M2, SPARE), protocol="PROXYV2"),
    )
    policies = (
        L7PolicySpec(id="p1", action="REJECT", position=1, rules=RULES[3:4]),
        L7PolicySpec(id="p2", action="REDIRECT_TO_POOL", position=2, pool_id="api", rules=RULES[0:3]),
        L7PolicySpec(id="p3", action="REDIRECT_TO_URL", position=3, url="https://example.com/x", code=301,
                     rules=RULES[4:5]),
        L7PolicySpec(id="p4", action="REDIRECT_PREFIX", position=4, url="https://static.example.com", code=308,
                     rules=RULES[5:8]),
        L7PolicySpec(id="p5", action="REJECT", position=5, rules=()),   # no rules: matches nothing
    )
    listeners = (
        ListenerSpec(id="http", protocol="tcp", port=80, pool_id="web", kind="HTTP", connection_limit=100,
                     timeouts=(1000, 2000, 3000, 0), allowed_cidrs=("10.0.0.0/8", "192.168.1.7/32"),
                     insert_headers=(("X-Forwarded-For", "true"), ("X-Forwarded-Port", "true"),
                                     ("X-Forwarded-Proto", "true")), l7policies=policies),
        ListenerSpec(id="https", protocol="tcp", port=443, pool_id="tls", kind="HTTPS"),
        ListenerSpec(id="tcp", protocol="tcp", port=81, pool_id="v2", kind="TCP", timeouts=(50000, 5000, 50000, 500)),
        ListenerSpec(id="dns", protocol="udp", port=53, pool_id=None, kind="UDP"),
        ListenerSpec(id="prom", protocol="tcp", port=9100, kind="PROMETHEUS"),
        ListenerSpec(id="off", protocol="tcp", port=82, pool_id="web", kind="HTTP", enabled=False),
    )
    return LoadBalancerSpec(id="lb", ns="nb-lb-x", vip_address="10.0.0.5", listeners=listeners, pools=pools,
                            driver=HAPROXY)


def test_rendered_configuration_is_valid_haproxy(tmp_path: Path) -> None:
    text = render(spec(), tmp_path, lambda pool, m: m.enabled and m.weight > 0)
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(text)
    binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
    done = subprocess.run([binary, "-c", "-f", str(cfg)], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stdout + done.stderr + "\n" + text
    lines = [ln.strip() for ln in text.splitlines()]
    # Frontends: one per enabled TCP-family listener; UDP and the disabled one are not haproxy's.
    assert [ln for ln in lines if ln.startswith("frontend ")] == ["frontend http", "frontend https", "frontend tcp",
                                                                   "frontend prom"]
    assert "bind 10.0.0.5:80" in lines and "maxconn 100" in lines and "timeout client 1000" in lines
    assert "tcp-request connection reject unless { src 10.0.0.0/8 192.168.1.7/32 }" in lines
    assert "option forwardfor" in lines and "http-request set-header X-Forwarded-Port 80" in lines
    assert "tcp-request inspect-delay 500" in lines
    # Policies in order: deny, redirects, then pools; the rule-less one is absent.
    deny = lines.index("http-request deny if !r_r3")
    url = lines.index("redirect location https://example.com/x code 301 if r_r4")
    prefix = lines.index("redirect prefix https://static.example.com code 308 if r_r5 r_r6 r_r7")
    use = lines.index("use_backend http:api if r_r0 r_r1 r_r2")
    assert deny < url < prefix < use < lines.index("default_backend http:web")
    assert "acl r_r6 path_end -i .jpg" in lines and "acl r_r4 req.hdr(X-Channel) -m sub beta" in lines
    # Backends in the frontend's mode, with the pool's algorithm, persistence and PROXY.
    web = lines[lines.index("backend http:web"):]
    assert web[1:3] == ["mode http", "balance leastconn"] and "cookie SRV insert indirect nocache" in web
    assert "server m1 10.0.0.11:8080 weight 3 cookie m1" in web
    assert not any("m3" in ln for ln in lines)   # admin-down: no server line
    api = lines[lines.index("backend http:api"):]
    assert "stick match req.cook(JSESSIONID)" in api and api[2] == "balance source"
    assert "server m1 10.0.0.11:8080 weight 3 send-proxy" in api
    tls = lines[lines.index("backend https:tls"):]
    assert tls[1] == "mode tcp" and "stick on src" in tls
    v2 = lines[lines.index("backend tcp:v2"):]
    assert "server m2 10.0.0.12:8080 weight 1 send-proxy-v2" in v2
    assert "server m4 10.0.0.14:8080 weight 1 send-proxy-v2 backup" in v2   # only while m2 cannot serve
    # A PROMETHEUS listener: haproxy's exporter on /metrics, nothing else, no backend.
    prom = lines[lines.index("frontend prom"):]
    assert prom[2] == "mode http" and "http-request use-service prometheus-exporter if { path /metrics }" in prom


def test_a_disabled_load_balancer_serves_nothing(tmp_path: Path) -> None:
    from dataclasses import replace

    text = render(replace(spec(), enabled=False), tmp_path, lambda pool, m: True)
    assert "frontend" not in text


def test_an_ipv6_vip_binds_bracketed_and_keeps_its_family_members(tmp_path: Path) -> None:
    """IPv6 (issue 28): the VIP bound and the members reached as ``[addr]:port``; members of
    the other family left out (the namespace has only the VIP's family); SOURCE_IP persistence
    keys an ``ipv6`` stick table. haproxy accepts it."""
    from dataclasses import replace

    m6 = MemberSpec(id="m6", address="fd00:6::11", port=8080)
    pools = (PoolSpec(id="tls", members=(M1, m6), protocol="HTTPS", persistence="SOURCE_IP"),)
    listeners = (ListenerSpec(id="https", protocol="tcp", port=443, pool_id="tls", kind="HTTPS"),)
    text = render(replace(spec(), vip_address="fd00:6::5", listeners=listeners, pools=pools), tmp_path,
                  lambda pool, m: True)
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(text)
    binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
    done = subprocess.run([binary, "-c", "-f", str(cfg)], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stdout + done.stderr + "\n" + text
    lines = [ln.strip() for ln in text.splitlines()]
    assert "bind [fd00:6::5]:443" in lines and "stick-table type ipv6 size 10k" in lines
    assert "server m6 [fd00:6::11]:8080 weight 1" in lines and not any("m1" in ln for ln in lines)
