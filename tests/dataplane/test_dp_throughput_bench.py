"""bench/throughput.py: its result parser, and its topologies passing TCP both ways.

Cheap (a few seconds): the bare veth pair and the bridge topology of the bench, each
with a 1 s iperf3 run in each direction; no server. Skipped without iperf3.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys

import pytest

from netbay.dataplane import bigtcp, fabric

from .dp_helpers import PREFIX

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "throughput.py")


@pytest.fixture(scope="module")
def tp():
    spec = importlib.util.spec_from_file_location("nb_bench_throughput", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, mod)
    spec.loader.exec_module(mod)
    return mod


def test_parse_iperf(tp) -> None:
    out = {"start": {"test_start": {"reverse": 1}},
           "end": {"sum_sent": {"bits_per_second": 2.5e10, "retransmits": 3},
                   "sum_received": {"bits_per_second": 2.4e10, "bytes": 3_000_000_000, "seconds": 1.0},
                   "cpu_utilization_percent": {"host_total": 50.0, "remote_total": 40.0}}}
    r = tp.parse_iperf(json.dumps(out))
    assert r["gbps"] == pytest.approx(24.0) and r["sent_gbps"] == pytest.approx(25.0)
    assert (r["retransmits"], r["cpu_client"], r["cpu_server"], r["reverse"]) == (3, 50.0, 40.0, True)
    with pytest.raises(tp.IperfError, match="unable to connect"):
        tp.parse_iperf(json.dumps({"start": {}, "end": {}, "error": "unable to connect to server"}))
    with pytest.raises(tp.IperfError, match="JSON"):
        tp.parse_iperf("iperf3: error")
    s = tp.summarize({"veth": [{"rep": 0, "gbps": 10.0, "retransmits": 0, "cpu_client": 1, "cpu_server": 1}],
                      "netbay": [{"rep": 0, "gbps": 9.5, "retransmits": 0, "cpu_client": 1, "cpu_server": 1}]})
    assert s["netbay"]["ratio_veth"] == pytest.approx(0.95) and "MET" in tp.table(s, 0.9)


@pytest.mark.skipif(shutil.which("iperf3") is None, reason="iperf3 not installed")
def test_topologies_pass_tcp_both_ways(tp) -> None:
    from netbay.dataplane import netns

    prefix = f"{PREFIX}tp-"
    iperf = tp.Iperf()
    try:
        pairs = [tp.bare_veth(prefix), tp.bare_bridge(prefix)]
        assert pairs[0].details["gso"]["gso_max_size"] == 65536  # the baseline keeps kernel defaults
        if bigtcp.gso_max_size("fabric"):  # the bridge path has the fabric's port veths
            assert pairs[1].details["gso"]["gso_ipv4_max_size"] == fabric.GSO_MAX_SIZE
        for p in pairs:
            iperf.serve(p.server_ns, p.server_ip)
            for reverse in (False, True):
                r = iperf.run(p.client_ns, p.server_ip, 1, reverse=reverse)
                assert r["reverse"] is reverse
                assert r["gbps"] > 0.05 and r["bytes"] > 1_000_000, (p.name, reverse, r)
    finally:
        iperf.close()
        tp.cleanup(prefix)
    assert not netns.list(prefix)
