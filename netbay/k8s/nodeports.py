"""NodePort: on every node, ``<node address>:<nodePort>`` forwards to the cluster IP.

kube-proxy is not needed: each node's namespace (``names.sandbox(<node>)``, made by
the agent) gets one nftables table, ``ip netbay-k8s-nodeport``, rebuilt atomically
when what it should hold changes — a DNAT per node port to the Service's cluster IP
and port, and masquerade of what it DNATed (with forwarding on in the node) (the load balancer's reply must come back
through the node that translated it). Node ports come from the manifest, else from
30000–32767 by a hash of the Service and port probed to the first free one, so a
port keeps its number while the Services around it change.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Mapping

from netbay.dataplane import links, netns
from netbay.dataplane.nft import Nft
from netbay.k8s.objects import Desired

log = logging.getLogger(__name__)

TABLE = "netbay-k8s-nodeport"
LOW, HIGH = 30000, 32767

Forward = tuple[str, int, str, int]   # (protocol, node port, cluster IP, port)


def plan(want: Desired, vips: Mapping[tuple[str, str], str]) -> list[Forward]:
    """Every node port of the NodePort and LoadBalancer Services that have a cluster IP."""
    taken: set[tuple[str, int]] = set()
    out: list[Forward] = []
    pending = []
    for key, svc in sorted((k, s) for k, s in want.services.items()   # only these sorted: a pass costs them
                           if s.type in ("NodePort", "LoadBalancer") and k in vips):
        for p in svc.ports:
            if p.node_port:
                taken.add((p.protocol, int(p.node_port)))
                out.append((p.protocol, int(p.node_port), vips[key], p.port))
            else:
                pending.append((key, p))
    span = HIGH - LOW + 1
    for key, p in pending:
        start = zlib.crc32(f"{key[0]}/{key[1]}/{p.protocol}/{p.port}".encode()) % span
        for i in range(span):
            port = LOW + (start + i) % span
            if (p.protocol, port) not in taken:
                taken.add((p.protocol, port))
                out.append((p.protocol, port, vips[key], p.port))
                break
    return sorted(out)


def ruleset(forwards: list[Forward]) -> str:
    rules = "\n".join(f"    {proto.lower()} dport {node_port} dnat to {ip}:{port}"
                      for proto, node_port, ip, port in forwards)
    return (f"table ip {TABLE}\nflush table ip {TABLE}\ntable ip {TABLE} {{\n"
            "  chain prerouting {\n    type nat hook prerouting priority -100; policy accept;\n"
            f"{rules}\n  }}\n"
            "  chain output {\n    type nat hook output priority -100; policy accept;\n"
            f"{rules}\n  }}\n"
            "  chain postrouting {\n    type nat hook postrouting priority 100; policy accept;\n"
            "    ct status dnat masquerade\n  }\n}\n")


class NodePorts:
    """Keeps each node's table equal to the plan (rebuilt only when it changes)."""

    def __init__(self) -> None:
        self.applied: dict[str, list[Forward]] = {}

    def converge(self, node_namespaces: list[str], forwards: list[Forward]) -> None:
        for ns in node_namespaces:
            if self.applied.get(ns) == forwards or not netns.exists(ns):
                continue
            with Nft(ns) as nft:
                if forwards:
                    links.sysctl(ns, "net.ipv4.ip_forward", 1)   # the DNATed packet is forwarded
                    nft.run(ruleset(forwards))
                elif any(t == ("ip", TABLE) for t in nft.tables()):
                    nft.run(f"delete table ip {TABLE}")
            self.applied[ns] = forwards
