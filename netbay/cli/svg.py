"""The cluster topology as an SVG picture: a small layered layout, no dependency.

Layers from top to bottom — external network, router, private network(s), then a
column per load balancer and per node (masters, then minions) with the node's pods
stacked under it. Every box of a layer has the same width and every label is cut to
fit its box, so nothing overlaps whatever the names; lines are drawn first, boxes
over them. Text is monospace, so a label's width is its length times one advance.
The result is plain SVG 1.1 (valid XML; opens in any browser).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from xml.sax.saxutils import escape, quoteattr

from netbay.cli.topology import LoadBalancer, Network, Node, Pod, Topology

FONT = 12          # px
ADVANCE = 7.3      # px per character of a 12 px monospace font (DejaVu Sans Mono: 7.22)
LINE = 16          # px between baselines
PAD = 8            # inside a box
MAX_CHARS = 34     # a label in a column longer than this is cut
WIDE_CHARS = 60    # the same for the boxes alone in their layer (external, router, network)
GAP = 28           # between columns
VGAP = 46          # between layers
POD_GAP = 10       # between pods of a column
INDENT = 22        # pods hang off a spine left of them
MARGIN = 24
FOOTER_CHARS = 130

FILL = {"external": "#e3f2fd", "router": "#eceff1", "network": "#e0f7fa", "master": "#ede7f6",
        "minion": "#e8f5e9", "pod": "#fffde7", "loadbalancer": "#fff3e0"}
OK, WARN, BAD, NEUTRAL = "#2e7d32", "#ef6c00", "#c62828", "#607d8b"


def status_colour(status: str | None) -> str:
    s = (status or "").upper()
    if s.endswith(("ERROR", "FAILED")):
        return BAD
    if s.endswith(("BUILD", "DOWN", "IN_PROGRESS", "PENDING_CREATE", "PENDING_UPDATE", "OFFLINE", "DEGRADED")):
        return WARN
    if s.endswith(("ACTIVE", "ONLINE", "COMPLETE")):
        return OK
    return NEUTRAL


def fit(text: str, limit: int = MAX_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def text_width(text: str) -> float:
    return len(text) * ADVANCE


@dataclass
class Box:
    lines: list[str]
    kind: str
    status: str | None = None
    limit: int = MAX_CHARS
    x: float = 0.0
    y: float = 0.0
    w: float = 0.0
    full: list[str] = field(default_factory=list)   # the labels uncut (the box's tooltip)

    def __post_init__(self) -> None:
        self.full = [line for line in self.lines if line]
        self.lines = [fit(line, self.limit) for line in self.full]

    @property
    def natural_width(self) -> float:
        return max(text_width(line) for line in self.lines) + 2 * PAD

    @property
    def h(self) -> float:
        return len(self.lines) * LINE + 2 * PAD - (LINE - FONT) + 4

    @property
    def cx(self) -> float:
        return self.x + self.w / 2

    @property
    def bottom(self) -> float:
        return self.y + self.h


@dataclass
class Column:
    head: Box
    pods: list[Box] = field(default_factory=list)


# --- boxes from the topology ------------------------------------------------------------------------------


def node_box(node: Node) -> Box:
    lines = [node.name, f"{node.role}  {node.status}"]
    for i in node.interfaces:
        lines.append(f"{i.name} {', '.join(i.addresses) or '-'}")
        if i.floating_ip:
            lines.append(f"floating {i.floating_ip}")
    if node.lease:
        lines.append(f"lease {node.lease}")
    if node.address6:
        lines.append(f"node IPv6 {node.address6}")
    lines.append(f"{len(node.pods)} pod{'s' if len(node.pods) != 1 else ''}")
    return Box(lines, node.role, node.status)


def pod_box(pod: Pod) -> Box:
    return Box([f"pod {pod.name}", f"{pod.address}  {pod.status}"], "pod", pod.status)


def lb_box(lb: LoadBalancer, by_address: dict[str, str]) -> Box:
    if lb.gone:
        return Box([f"load balancer {lb.name}", "(gone)"], "loadbalancer", None)
    lines = [lb.name, f"load balancer {lb.status}/{lb.operating_status}", f"VIP {lb.vip or '-'}"]
    if lb.floating_ip:
        lines.append(f"floating {lb.floating_ip}")
    for listener in lb.listeners:
        members = ", ".join(by_address.get(m.address, m.address) for m in listener.members) or "no members"
        lines.append(f"{listener.protocol}:{listener.port} -> {members}")
    return Box(lines, "loadbalancer", lb.status)


def network_box(net: Network) -> Box:
    lines = [f"network {net.name}"]
    lines += [f"subnet {s.cidr} gw {s.gateway or '-'}" for s in net.subnets]
    if net.container_network:
        lines.append(net.container_network)
    if net.mtu:
        lines.append(f"mtu {net.mtu}")
    return Box(lines, "network", None, limit=WIDE_CHARS)


def _short_name(node: Node, cluster: str) -> str:
    return node.name.removeprefix(f"{cluster}-")


# --- layout and drawing ------------------------------------------------------------------------------------


def render(topo: Topology) -> str:
    """The topology as an SVG document."""
    by_address = {n.address: _short_name(n, topo.name) for n in topo.nodes if n.address}
    groups: list[tuple[Box, list[Column]]] = []
    for net in topo.networks:
        columns = [Column(lb_box(lb, by_address)) for lb in net.loadbalancers]
        columns += [Column(node_box(n), [pod_box(p) for p in n.pods]) for n in [*net.masters, *net.minions]]
        groups.append((network_box(net), columns))
    top: list[Box] = []
    if topo.external is not None:
        top.append(Box([f"external network {topo.external.name}", ", ".join(topo.external.cidrs)], "external",
                       limit=WIDE_CHARS))
    if topo.router is not None:
        r = topo.router
        top.append(Box([f"router {r.name}", r.status, f"gateway {', '.join(r.gateway_ips) or '-'}"
                        + (", SNAT" if r.snat else "")], "router", r.status, limit=WIDE_CHARS))

    # One width per kind of layer: every column alike, every pod alike.
    heads = [c.head for _, cols in groups for c in cols]
    pods = [p for c in (c for _, cols in groups for c in cols) for p in c.pods]
    col_w = max([b.natural_width for b in heads] + [p.natural_width + INDENT for p in pods] + [140])
    for b in heads:
        b.w = col_w
    for p in pods:
        p.w = col_w - INDENT
    for b in top + [g for g, _ in groups]:
        b.w = max(b.natural_width, 160)

    title = fit(f"cluster {topo.name}  {topo.status}  {topo.coe}/{topo.driver}  api {topo.api_address or '-'}",
                FOOTER_CHARS)
    y: float = MARGIN + 36
    for b in top:
        b.y = y
        y = b.bottom + VGAP
    net_y = y
    head_y = net_y + max((g.h for g, _ in groups), default=0) + VGAP

    # Horizontal: network blocks side by side, columns inside each.
    x = float(MARGIN)
    for net_box, cols in groups:
        span = max(len(cols) * col_w + max(0, len(cols) - 1) * GAP, net_box.w)
        start = x + (span - (len(cols) * col_w + max(0, len(cols) - 1) * GAP)) / 2
        for i, c in enumerate(cols):
            c.head.x, c.head.y = start + i * (col_w + GAP), head_y
        net_box.x, net_box.y = x + (span - net_box.w) / 2, net_y
        x += span + 2 * GAP
    content_right = x - 2 * GAP if groups else MARGIN + max((b.w for b in top), default=0)
    centre = (MARGIN + content_right) / 2
    for b in top:
        b.x = centre - b.w / 2
    shift = max(0.0, MARGIN - min((b.x for b in top), default=MARGIN))
    row_h = max((c.head.h for _, cols in groups for c in cols), default=0)
    bottom = head_y + (row_h if heads else 0)
    for _, cols in groups:
        for c in cols:
            py = head_y + row_h + VGAP / 2
            for p in c.pods:
                p.x, p.y = c.head.x + INDENT, py
                py = p.bottom + POD_GAP
            bottom = max(bottom, py)
    everything = top + [g for g, _ in groups] + heads + pods
    for b in everything:
        b.x += shift

    footer = [f"{g.name}: {g.rules}" for g in topo.security_groups]
    if topo.stray_pods:
        footer.append("pods on nodes not shown: " + ", ".join(f"{p.name} {p.address} ({p.node})"
                                                               for p in topo.stray_pods))
    footer = [fit(line, FOOTER_CHARS) for line in footer]
    footer_y = bottom + VGAP
    width = max([b.x + b.w for b in everything] + [MARGIN + text_width(title) * 16 / FONT]
                + [MARGIN + text_width(f) for f in ["security groups"] + footer]) + MARGIN
    height = footer_y + (len(footer) + 2) * LINE + MARGIN

    out: list[str] = []
    out.append(f'<svg xmlns="http://www.w3.org/2000/svg" version="1.1" width="{width:.0f}" height="{height:.0f}" '
               f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="DejaVu Sans Mono, Menlo, Consolas, monospace" '
               f'font-size="{FONT}" xml:space="preserve">')
    out.append(f"<title>{escape(f'cluster {topo.name} topology')}</title>")
    out.append(f'<rect x="0" y="0" width="{width:.0f}" height="{height:.0f}" fill="#ffffff"/>')
    out.append(f'<text x="{MARGIN}" y="{MARGIN + 14}" font-size="16" font-weight="bold">{escape(title)}</text>')

    # Lines under the boxes: each layer to the next, networks to their columns, nodes to their pods.
    edges = out.append
    for upper, lower in zip(top, top[1:]):
        edges(_line(upper.cx, upper.bottom, lower.cx, lower.y))
    if top and groups:
        _bus(out, top[-1], [g for g, _ in groups])
    for net_box, cols in groups:
        if cols:
            _bus(out, net_box, [c.head for c in cols])
        for c in cols:
            if c.pods:
                spine = c.head.x + INDENT / 2
                last = c.pods[-1].y + c.pods[-1].h / 2
                edges(_line(spine, c.head.bottom, spine, last))
                for p in c.pods:
                    edges(_line(spine, p.y + p.h / 2, p.x, p.y + p.h / 2))
    for b in everything:
        _box(out, b)

    out.append(f'<text x="{MARGIN}" y="{footer_y:.0f}" font-weight="bold">security groups</text>')
    for i, line in enumerate(footer):
        out.append(f'<text x="{MARGIN}" y="{footer_y + (i + 1) * LINE:.0f}">{escape(line)}</text>')
    legend = "border: green ACTIVE/ONLINE, amber BUILD/DOWN, red ERROR"
    out.append(f'<text x="{MARGIN}" y="{footer_y + (len(footer) + 1.5) * LINE:.0f}" fill="{NEUTRAL}">'
               f"{escape(legend)}</text>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _line(x1: float, y1: float, x2: float, y2: float) -> str:
    return (f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="#90a4ae" '
            f'stroke-width="1.5"/>')


def _bus(out: list[str], parent: Box, children: list[Box]) -> None:
    """``parent`` down to a horizontal bus, the bus down to each child."""
    mid = min(c.y for c in children) - VGAP / 2
    xs = [c.cx for c in children] + [parent.cx]
    out.append(_line(parent.cx, parent.bottom, parent.cx, mid))
    out.append(_line(min(xs), mid, max(xs), mid))
    for c in children:
        out.append(_line(c.cx, mid, c.cx, c.y))


def _box(out: list[str], b: Box) -> None:
    stroke = status_colour(b.status) if b.status is not None else NEUTRAL
    out.append(f'<g class={quoteattr(b.kind)}>')
    out.append(f"<title>{escape(' | '.join(b.full))}</title>")
    out.append(f'<rect x="{b.x:.1f}" y="{b.y:.1f}" width="{b.w:.1f}" height="{b.h:.1f}" rx="6" '
               f'fill="{FILL.get(b.kind, "#ffffff")}" stroke="{stroke}" stroke-width="1.5"/>')
    for i, line in enumerate(b.lines):
        weight = ' font-weight="bold"' if i == 0 else ""
        out.append(f'<text x="{b.x + PAD:.1f}" y="{b.y + PAD + FONT + i * LINE:.1f}"{weight}>{escape(line)}</text>')
    out.append("</g>")
