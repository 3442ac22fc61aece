"""nftables JSON building blocks, the security-group tables' names and the limits."""

from __future__ import annotations

import ipaddress
from typing import Any

TABLE = "nb_sg"              # bridge and inet families
ZONE_TABLE = "nb_sg_zone"    # inet; its maps use ``typeof``, which nft 1.0.6 JSON cannot define
MAX_MARK = 0xFFFF            # port marks: low half of the packet mark
MAX_ZONE = 0xFFFF
MAX_TAG = 0xFFFF             # group tags: high half, while a port's rules are evaluated
MAX_GROUPS = 16              # security groups per filtered port (slot maps)
LOW, HIGH = 0x0000FFFF, 0xFFFF0000


def nft_meta(key: str) -> dict:
    return {"meta": {"key": key}}


def nft_payload(proto: str, fld: str) -> dict:
    return {"payload": {"protocol": proto, "field": fld}}


def nft_match(left: Any, right: Any, op: str = "==") -> dict:
    return {"match": {"op": op, "left": left, "right": right}}


def nft_set_mark(value: Any) -> dict:
    return {"mangle": {"key": nft_meta("mark"), "value": value}}


def nft_concat(items: list | tuple) -> Any:
    return items[0] if len(items) == 1 else {"concat": list(items)}


def nft_obj(kind: str, family: str, table: str = TABLE, **body: Any) -> dict:
    return {kind: {"family": family, "table": table, **body}}


def nft_rule(family: str, chain: str, expr: list) -> dict:
    return {"add": nft_obj("rule", family, chain=chain, expr=expr)}


def nft_nfproto(fam: int) -> dict:
    return nft_match(nft_meta("nfproto"), "ipv4" if fam == 4 else "ipv6")


def max_plen(fam: int) -> int:
    return 32 if fam == 4 else 128


def masked(expr: dict, fam: int, plen: int) -> dict:
    if plen == max_plen(fam):
        return expr
    net = ipaddress.ip_network(f"{'0.0.0.0' if fam == 4 else '::'}/{plen}")
    return {"&": [expr, str(net.netmask)]}


def addr_type(fam: int) -> str:
    return "ipv4_addr" if fam == 4 else "ipv6_addr"
