"""``docs/network-drivers.md``, generated from the registry (never edited by hand).

    python -m netbay.coe.docs > docs/network-drivers.md     # or: netbay network-driver docs

The defaults shown are the built-in ones (no operator configuration), so the
document is the same on every machine; a test keeps the committed copy current.
"""

from __future__ import annotations

from netbay.coe import matrix
from netbay.coe.coes import CoeConfig
from netbay.drivers.registry import COMMON_LABELS, DRIVERS, LabelSpec
from netbay.store.labels import MAX_KEY, MAX_LABELS, MAX_TOTAL, MAX_VALUE


def _allowed(spec: LabelSpec) -> str:
    if spec.type == "enum":
        values = [f"`{v}`" for v in spec.allowed] + [f"~~`{v}`~~ (refused)" for v in spec.refused]
        return ", ".join(values)
    if spec.type == "int":
        return f"{spec.minimum}–{spec.maximum}"
    if spec.type == "cidr":
        return "IPv4 CIDR"
    if spec.type == "cidr6":
        return "IPv6 CIDR, or empty (IPv4 only)"
    return "any string"


def _label_rows(specs: tuple[LabelSpec, ...]) -> list[str]:
    rows = ["| label | type | default | allowed | what it does |", "|---|---|---|---|---|"]
    for s in specs:
        rows.append(f"| `{s.key}` | {s.type} | `{s.default}` | {_allowed(s)} | {s.help} |")
    for s in specs:
        for value, why in s.refused.items():
            rows.append("")
            rows.append(f"`{s.key}={value}` is refused (400): {why}")
    return rows


_K8S_SERVICES = {"load-balancers": "a load balancer per Service (VIP = cluster IP)",
                 "nodes": "every node (kube-proxy's nftables maps, node ports too)"}
_K8S_POLICY = {"security-groups": "security groups on the pods' ports", "nodes": "the nodes' nftables (Felix's job)",
               "": "nobody: accepted, reported *not enforced*"}


def render() -> str:
    config = CoeConfig.from_env({})
    coes = matrix.COES
    lines = [
        "# Network drivers",
        "",
        "<!-- Generated from the driver registry (netbay/drivers/) by `python -m netbay.coe.docs`; do not edit. -->",
        "",
        "A cluster template names a COE, optionally a `network_driver` (omitted: the COE's default,",
        "which is then stored) and `labels` that tune the driver. Labels a driver reads are checked",
        "when the template or cluster is created or updated (a bad value is a 400 naming the label",
        "and what it accepts); any other label is kept and reported in `labels_ignored`. A label a",
        "driver reads is stored as it is read: surrounding whitespace dropped and a CIDR in its",
        "canonical form (`\" vxlan\"` is stored as `vxlan`); enum values stay case-sensitive, as",
        "Heat's `allowed_values` are.",
        "",
        "Limits on every `labels` (templates and clusters, create and PATCH; pods and sandboxes),",
        f"400 beyond them: at most {MAX_LABELS} labels, keys of at most {MAX_KEY} characters, values of",
        f"at most {MAX_VALUE} characters, {MAX_TOTAL} bytes as JSON (Magnum keeps labels as JSON in a",
        "TEXT column, which holds 64 KiB).",
        "",
        "Address ranges (every `cidr` label): refused when they reach into loopback `127.0.0.0/8`,",
        "link-local `169.254.0.0/16`, multicast `224.0.0.0/4`, reserved `240.0.0.0/4`, `0.0.0.0/8`,",
        "or are the default route `0.0.0.0/0`. A driver's pod and service ranges must not overlap",
        "the external network's subnets, and the node subnets the driver hands out must not overlap",
        "the cluster's private subnet (`fixed_subnet`, else `fixed_subnet_cidr`): checked when the template is",
        "created or patched and again when a cluster is created, before anything is made. Flannel",
        "keeps its first node subnet free, so `flannel_network_cidr=10.0.0.0/8` beside the default",
        "`10.0.0.0/24` works.",
        "",
        "The same tables, with the server's configuration applied, come from",
        "`GET /container-infra/v1/network-drivers` and `netbay network-driver list|show`.",
        "",
        "## Network Driver Matrix",
        "",
        "| driver | " + " | ".join(coes) + " |",
        "|---|" + "---|" * len(coes),
    ]
    for d in DRIVERS.values():
        marks = []
        for coe in coes:
            if config.default_driver(coe) == d.name:
                marks.append("✔ default")
            else:
                marks.append("✔" if coe in d.coes else "✘")
        lines.append(f"| {d.name} | " + " | ".join(marks) + " |")
    lines += [
        "",
        "`dcos` is accepted as a COE name (Magnum's enum) but refused: "
        "`Requested COE type dcos is not supported.`",
        "",
        "Operators narrow the allowed drivers per COE family (as Magnum's",
        "`[cluster_template] <family>_allowed_network_drivers`) with environment variables of the",
        "server, e.g. `NETBAY_KUBERNETES_ALLOWED_NETWORK_DRIVERS=flannel` (default `all`), and",
        "change a default with `NETBAY_KUBERNETES_DEFAULT_NETWORK_DRIVER`; the families are",
        "`KUBERNETES`, `SWARM` (also `swarm-mode`) and `MESOS`.",
        "",
        "## Kubernetes objects per driver",
        "",
        "What `netbay k8s apply` does with a cluster's Services and NetworkPolicies, as each driver",
        "declares it (`DriverSpec.services`, `DriverSpec.policy`, `DriverSpec.node_ports`; see",
        "docs/kubernetes.md):",
        "",
        "| driver | Services answered by | NetworkPolicy enforced by | NodePorts answer on |",
        "|---|---|---|---|",
        *(f"| {d.name} | {_K8S_SERVICES.get(d.services, '✘ (no Kubernetes objects)')} | "
          f"{_K8S_POLICY.get(d.policy, '')} | {d.node_ports or '✘'} |" for d in DRIVERS.values() if d.takes_k8s),
        "",
        "## Label Matrix",
        "",
        "### Every cluster",
        "",
        *_label_rows(COMMON_LABELS),
    ]
    for d in DRIVERS.values():
        lines += ["", f"### {d.name}", "", d.summary, "", f"COEs: {', '.join(d.coes)}.", ""]
        if d.labels:
            lines += _label_rows(d.labels)
        else:
            lines.append("No labels.")
        if d.beyond_magnum:
            lines += ["", f"Beyond Magnum: {d.beyond_magnum}"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render(), end="")
