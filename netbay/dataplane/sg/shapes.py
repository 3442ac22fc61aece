"""Shapes: the rules of the egress and ingress shape chains, each with its set, and
a rule's elements in them (see :mod:`netbay.dataplane.secgroups`)."""

from __future__ import annotations

from dataclasses import dataclass

from netbay.dataplane.sg.nftjson import HIGH, addr_type, masked, nft_concat, nft_match, nft_meta, nft_nfproto, nft_payload
from netbay.dataplane.sg.parse import ParsedRule


@dataclass(frozen=True)
class Shape:
    """One rule of the egress or ingress shape chain, and its set."""
    direction: str    # "i" | "e"
    family: int       # 4 | 6
    plen: int | None  # peer prefix length; None: any peer
    kind: str         # "a" any protocol | "p" protocol | "t<k>" port block of 2**k
                      # | "c" icmp type | "cc" icmp type and code

    @property
    def set_name(self) -> str:
        plen = "x" if self.plen is None else self.plen
        return f"{self.direction}{self.family}_{plen}_{self.kind}"

    def expr(self) -> tuple[list, list[str]]:
        """(rule expressions, set key types)."""
        fam = self.family
        peer = nft_payload("ip" if fam == 4 else "ip6", "saddr" if self.direction == "i" else "daddr")
        key: list = [{"&": [nft_meta("mark"), HIGH]}]
        types = ["mark"]
        if self.plen is not None:
            key.append(masked(peer, fam, self.plen))
            types.append(addr_type(fam))
        k = self.kind
        if k == "p":
            key.append(nft_meta("l4proto"))
            types.append("inet_proto")
        elif k.startswith("t"):
            bits = int(k[1:])
            dport = nft_payload("th", "dport")
            mask = (0xFFFF << bits) & 0xFFFF
            key += [nft_meta("l4proto"), dport if bits == 0 else {"&": [dport, mask]}]
            types += ["inet_proto", "inet_service"]
        elif k in ("c", "cc"):
            icmp = "icmp" if fam == 4 else "icmpv6"
            key.append(nft_payload(icmp, "type"))
            types.append(f"{icmp}_type")
            if k == "cc":
                key.append(nft_payload(icmp, "code"))
                types.append(f"{icmp}_code")
        return [nft_nfproto(fam), nft_match(nft_concat(key), "@" + self.set_name), {"accept": None}], types


Atom = tuple[Shape, tuple]


def atoms(rule: ParsedRule, tag: int, plen: int | None, addr: str | None) -> list[Atom]:
    """The shape elements of ``rule`` in a group tagged ``tag``, for one peer prefix."""
    base = (tag << 16,) + ((addr,) if plen is not None else ())
    return [(Shape(rule.direction, rule.family, plen, kind), base + vals)
            for kind, vals in rule.pieces]
