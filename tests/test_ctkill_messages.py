"""ctnetlink messages as bytes (netbay/dataplane/ctkill.py): a dumped entry is read
back as the kernel lays it out — IPv4 and IPv6, zone, start time — and its delete names
it by the tuple attribute it came with. The kernel round trip is in
tests/dataplane/test_dp_secgroups.py (test_conntrack_delete_*)."""

from __future__ import annotations

import ipaddress
import socket
import struct

from netbay.dataplane import ctkill


def nla(kind: int, payload: bytes, nested: bool = False) -> bytes:
    raw = struct.pack("=HH", 4 + len(payload), kind | (0x8000 if nested else 0)) + payload
    return raw + b"\0" * (-len(raw) % 4)


def dumped(family: int, src: str, dst: str, zone: int | None, start: int | None) -> tuple[bytes, bytes]:
    v6 = family == socket.AF_INET6
    ip = nla(3 if v6 else 1, ipaddress.ip_address(src).packed) + nla(4 if v6 else 2, ipaddress.ip_address(dst).packed)
    orig = nla(1, nla(1, ip, True) + nla(2, nla(1, b"\x06\0\0\0"), True), True)
    attrs = orig + nla(3, nla(1, ip, True), True)  # a reply tuple: not the one matched
    if zone is not None:
        attrs += nla(18, struct.pack(">H", zone))
    if start is not None:
        attrs += nla(20, nla(1, struct.pack(">Q", start)), True)
    body = struct.pack("=BBH", family, 0, 0) + attrs
    return struct.pack("=IHHII", 16 + len(body), (1 << 8) | 0, 2, 7, 0) + body, orig


def test_a_dumped_entry_is_read_from_its_bytes() -> None:
    chunk, orig = dumped(socket.AF_INET6, "fd00::1", "fd00::2", 9, 1234567890123)
    e = ctkill._entry(chunk)
    assert e is not None
    assert (e.family, e.zone, e.start) == (socket.AF_INET6, 9, 1234567890123)
    assert (e.src, e.dst) == (ipaddress.ip_address("fd00::1"), ipaddress.ip_address("fd00::2"))
    assert e.orig == orig   # the delete names the entry by it

    chunk, _ = dumped(socket.AF_INET, "10.0.0.1", "10.0.0.2", None, None)
    e = ctkill._entry(chunk)
    assert e is not None and (e.zone, e.start, str(e.src), str(e.dst)) == (0, None, "10.0.0.1", "10.0.0.2")
    assert ctkill._entry(chunk[:20]) is None   # no tuple: not matched, never deleted


def test_the_zone_attribute_is_padded() -> None:
    assert ctkill._zone_attr(0x1234) == struct.pack("=HH", 6, 18) + b"\x12\x34\0\0"
