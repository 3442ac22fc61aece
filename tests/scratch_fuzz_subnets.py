import httpx
from hypothesis import given, settings, HealthCheck, strategies as st
from conftest import unique

ips = st.sampled_from(["10.0.0.1", "10.0.0.0", "10.0.0.255", "2001:db8::1", "::", "0.0.0.0", "255.255.255.255", "10.0.0.0/24", "x", "", "10.0.0.1 "])
cidrs = st.sampled_from(["10.0.0.0/24", "10.0.0.5/24", "10.0.0.0/32", "10.0.0.0/31", "0.0.0.0/0", "::/0", "2001:db8::/64", "2001:db8::/128", "224.0.0.0/24", "10.0.0.0/33", "abc", "10.0.0.0", "fe80::/64", "::1/128"])
scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 200), st.text(max_size=5), ips, cidrs, st.floats(allow_nan=False))
values = st.recursive(scalars, lambda c: st.one_of(st.lists(c, max_size=3), st.dictionaries(st.sampled_from(["start", "end", "destination", "nexthop", "x"]), c, max_size=3)), max_leaves=6)
pool_v = st.lists(st.fixed_dictionaries({"start": ips, "end": ips}), max_size=3)
route_v = st.lists(st.fixed_dictionaries({"destination": cidrs, "nexthop": ips}), max_size=3)
sub_keys = {"cidr": st.one_of(cidrs, values), "ip_version": st.one_of(st.sampled_from([4, 6, "4"]), values), "gateway_ip": st.one_of(ips, values),
            "allocation_pools": st.one_of(pool_v, values), "dns_nameservers": st.one_of(st.lists(ips, max_size=3), values),
            "host_routes": st.one_of(route_v, values), "enable_dhcp": st.one_of(st.booleans(), values), "prefixlen": st.one_of(st.integers(-1, 140), values),
            "ipv6_ra_mode": st.one_of(st.sampled_from(["slaac", "dhcpv6-stateful", "dhcpv6-stateless"]), values),
            "ipv6_address_mode": st.one_of(st.sampled_from(["slaac", "dhcpv6-stateful", "dhcpv6-stateless"]), values),
            "use_default_subnetpool": st.one_of(st.booleans(), values), "name": values}
pool_keys = {"prefixes": st.one_of(st.lists(cidrs, max_size=3), values), "min_prefixlen": st.one_of(st.integers(-1, 140), values),
             "max_prefixlen": st.one_of(st.integers(-1, 140), values), "default_prefixlen": st.one_of(st.integers(-1, 140), values),
             "default_quota": st.one_of(st.integers(-1, 10**12), values), "is_default": values, "shared": values, "address_scope_id": values}

def sub(keys):
    return st.dictionaries(st.sampled_from(sorted(keys)), st.nothing()).flatmap(lambda _: st.fixed_dictionaries({}, optional=keys))

def test_fuzz(server):
    c = server.http()
    net = c.post("/networks", json={"network": {"name": unique("f")}}).json()["network"]["id"]
    pool = c.post("/subnetpools", json={"subnetpool": {"prefixes": ["10.200.0.0/16"], "default_prefixlen": 24}}).json()["subnetpool"]["id"]
    s0 = c.post("/subnets", json={"subnet": {"network_id": net, "cidr": "10.0.0.0/24", "ip_version": 4}}).json()["subnet"]["id"]
    bad = []

    @settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.fixed_dictionaries({}, optional=sub_keys), st.booleans(), st.integers(0, 3))
    def run_sub(body, with_pool, op):
        if op == 0:
            r = c.post("/subnets", json={"subnet": {"network_id": net, **({"subnetpool_id": pool} if with_pool else {}), **body}})
            if r.status_code == 201:
                c.delete(f"/subnets/{r.json()['subnet']['id']}")
        elif op == 1:
            body = {k: v for k, v in body.items() if k in {"name", "gateway_ip", "allocation_pools", "dns_nameservers", "host_routes", "enable_dhcp"}}
            r = c.put(f"/subnets/{s0}", json={"subnet": body})
        elif op == 2:
            r = c.get("/subnets", params={k: str(v) for k, v in body.items() if not isinstance(v, (list, dict))})
        else:
            r = c.post("/subnets", json={"subnet": body})
        if r.status_code >= 500:
            bad.append((op, body, r.text))

    @settings(max_examples=800, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.fixed_dictionaries({}, optional=pool_keys), st.booleans())
    def run_pool(body, update):
        if update:
            body.pop("shared", None)
            r = c.put(f"/subnetpools/{pool}", json={"subnetpool": body})
        else:
            r = c.post("/subnetpools", json={"subnetpool": body})
            if r.status_code == 201:
                c.delete(f"/subnetpools/{r.json()['subnetpool']['id']}")
        if r.status_code >= 500:
            bad.append(("pool", body, r.text))

    run_sub()
    run_pool()
    assert not bad, bad[:5]
