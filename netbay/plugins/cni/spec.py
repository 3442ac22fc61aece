"""CNI 1.0/1.1 as a plugin sees it: environment, configuration, versions, errors, and one
call as the daemon gets it (:class:`Request`).

Standard library only: the ``netbay-cni`` executable imports this on every call. The
checks and their order, codes and messages are those of the reference plugins'
``skel`` (containernetworking/cni ``pkg/skel``), so a runtime gets the same answer
from netbay-cni as from ``bridge`` for the same mistake.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SUPPORTED = ("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")
CURRENT = "1.1.0"

# The spec's well-known error codes (and libcni's catch-all).
INCOMPATIBLE_VERSION = 1
UNSUPPORTED_FIELD = 2
UNKNOWN_CONTAINER = 3
INVALID_ENV = 4
IO_FAILURE = 5
DECODING_FAILURE = 6
INVALID_CONFIG = 7
TRY_AGAIN_LATER = 11
NOT_AVAILABLE = 50
NOT_AVAILABLE_YET = 51
INTERNAL = 999

COMMANDS = ("ADD", "DEL", "CHECK", "VERSION", "STATUS", "GC")
# (variable, commands that need it), in skel's order.
_REQUIRED = (
    ("CNI_COMMAND", set(COMMANDS)),
    ("CNI_CONTAINERID", {"ADD", "CHECK", "DEL"}),
    ("CNI_NETNS", {"ADD", "CHECK"}),
    ("CNI_IFNAME", {"ADD", "CHECK", "DEL"}),
    ("CNI_PATH", {"ADD", "CHECK", "DEL", "GC", "STATUS"}),
)
_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$")
_SEMVER_RE = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")


class CniError(Exception):
    """An error result: ``{"cniVersion", "code", "msg", "details"}`` on stdout, exit 1."""

    def __init__(self, code: int, msg: str, details: str = "") -> None:
        super().__init__(msg)
        self.code, self.msg, self.details = code, msg, details

    def body(self, cni_version: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"cniVersion": cni_version or CURRENT, "code": self.code, "msg": self.msg}
        if self.details:
            out["details"] = self.details
        return out

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> CniError:
        return cls(int(body.get("code") or INTERNAL), str(body.get("msg") or ""), str(body.get("details") or ""))


def version_key(v: str) -> tuple[int, int, int]:
    m = _SEMVER_RE.match(v or "")
    if not m:
        raise CniError(DECODING_FAILURE, f"Invalid version {v!r}")
    return int(m[1]), int(m[2]), int(m[3])


def version_info() -> dict[str, Any]:
    return {"cniVersion": CURRENT, "supportedVersions": list(SUPPORTED)}


def _check_interface_name(name: str) -> None:
    if not name:
        raise CniError(INVALID_ENV, "interface name is empty")
    if len(name) > 15:
        raise CniError(INVALID_ENV, "interface name is too long", "interface name should be less than 16 characters")
    if name in (".", ".."):
        raise CniError(INVALID_ENV, "interface name is . or ..")
    if any(c in "/:" or c.isspace() for c in name):
        raise CniError(INVALID_ENV, "interface name contains / or : or whitespace characters")


def _check_container_id(cid: str) -> None:
    if not cid:
        raise CniError(UNKNOWN_CONTAINER, "missing containerID")
    if not _NAME_RE.match(cid):
        raise CniError(INVALID_ENV, "invalid characters in containerID", cid)


def read_env(env: Mapping[str, str]) -> dict[str, str]:
    """The ``CNI_*`` variables, checked as skel checks them (missing → code 4)."""
    cmd = env.get("CNI_COMMAND", "")
    missing, out = [], {}
    for name, needed_by in _REQUIRED:
        value = env.get(name, "")
        out[name] = value
        if not value:
            if cmd in needed_by or name == "CNI_COMMAND":
                missing.append(name)
        elif cmd in needed_by and name == "CNI_CONTAINERID":
            _check_container_id(value)
        elif cmd in needed_by and name == "CNI_IFNAME":
            _check_interface_name(value)
    if missing:
        raise CniError(INVALID_ENV, f"required env variables [{','.join(missing)}] missing")
    out["CNI_ARGS"] = env.get("CNI_ARGS", "")
    return out


def read_config(raw: bytes) -> dict[str, Any]:
    """The network configuration on stdin: JSON with a valid ``name``."""
    try:
        conf = json.loads(raw)
    except ValueError as exc:
        raise CniError(DECODING_FAILURE, f"error unmarshall network config: {exc}") from None
    if not isinstance(conf, dict):
        raise CniError(DECODING_FAILURE, "error unmarshall network config: not a JSON object")
    name = conf.get("name")
    if not isinstance(name, str) or not name:
        raise CniError(INVALID_CONFIG, "missing network name")
    if not _NAME_RE.match(name):
        raise CniError(INVALID_CONFIG, "invalid characters found in network name", name)
    return conf


def check_version(cmd: str, conf: Mapping[str, Any]) -> str:
    """The configuration's ``cniVersion`` if this plugin serves ``cmd`` at it."""
    version = conf.get("cniVersion") or "0.1.0"
    if not isinstance(version, str):
        raise CniError(DECODING_FAILURE, "cniVersion is not a string")
    version_key(version)
    least = {"CHECK": "0.4.0", "GC": "1.1.0", "STATUS": "1.1.0"}.get(cmd)
    if least and version_key(version) < version_key(least):
        raise CniError(INCOMPATIBLE_VERSION, f"config version does not allow {cmd}")
    if version not in SUPPORTED:
        raise CniError(INCOMPATIBLE_VERSION, "incompatible CNI versions",
                       f"config is {json.dumps(version)}, plugin supports {json.dumps(list(SUPPORTED))}")
    return version


# The keys the kuryr document names in CNI_ARGS (besides the CNI spec's own).
KURYR_ARGS = ("K8S_POD_NAMESPACE", "K8S_POD_NAME", "K8S_POD_INFRA_CONTAINER_ID", "K8S_POD_UID", "PORT_UUID",
              "IPV4", "GW", "PORT_TYPE")
# Pairs end at ``;`` (the CNI spec) or at a ``,`` that starts a new ``KEY=`` (the kuryr
# document's ``PORT_UUID=…,IPV4=…,GW=…``); a comma inside a value (``IP=a,b``) stays.
_PAIR_END = re.compile(r";|,(?=[A-Za-z_][A-Za-z0-9_]*=)")
# The document's example also glues a pair onto the value before it (its line break
# lost the separator): ``K8S_POD_INFRA_CONTAINER_ID=8ceb…c250PORT_UUID=…``.
_GLUED = re.compile("(?=(?:%s)=)" % "|".join(sorted(KURYR_ARGS, key=len, reverse=True)))
# What PORT_TYPE may name: what netbay-cni plugs (a veth pair on a Linux bridge of its fabric).
PORT_TYPES = ("veth", "bridge")


def parse_args(raw: str) -> dict[str, str]:
    """``CNI_ARGS``: ``K=V;K=V`` as the CNI spec writes it, or comma-joined as the kuryr
    document writes it (``K8S_POD_*``, ``PORT_UUID``, ``IPV4``, ``GW``, ``PORT_TYPE``)."""
    out: dict[str, str] = {}
    for item in _PAIR_END.split(raw or ""):
        key, eq, value = item.strip().partition("=")
        if not eq or not key:
            if item.strip():
                raise CniError(INVALID_ENV, f"ARGS: invalid pair {item.strip()!r}")
            continue
        glued = [m.start() for m in _GLUED.finditer(value) if m.start() > 0]
        if glued:
            out[key] = value[:glued[0]]
            out.update(parse_args(value[glued[0]:]))
            continue
        out[key] = value
    return out


@dataclass(frozen=True)
class Request:
    """One call as the daemon gets it from ``netbay-cni``: the environment and the
    network configuration, parsed."""

    command: str
    container_id: str
    netns: str
    ifname: str
    args: dict[str, str]
    config: dict[str, Any]

    @classmethod
    def parse(cls, raw: Mapping[str, Any]) -> Request:
        conf = raw.get("config")
        if not isinstance(conf, dict):
            raise CniError(INVALID_CONFIG, "no network configuration")
        return cls(str(raw.get("command") or ""), str(raw.get("containerID") or ""), str(raw.get("netns") or ""),
                   str(raw.get("ifname") or ""), parse_args(str(raw.get("args") or "")), conf)

    @property
    def version(self) -> str:
        return str(self.config.get("cniVersion") or "0.1.0")

    @property
    def network_ref(self) -> str:
        ref = self.config.get("network")
        if not isinstance(ref, str) or not ref:
            raise CniError(INVALID_CONFIG, 'netbay-cni needs "network": the netbay network\'s name or id'
                                           ' (or "cluster": a kuryr cluster\'s id, for its pods\' ports)')
        return ref

    @property
    def has_network(self) -> bool:
        return "network" in self.config

    @property
    def cluster(self) -> str | None:
        """``"cluster"``: the kuryr cluster whose mapping controller made the pods' ports."""
        ref = self.config.get("cluster")
        if ref is None:
            return None
        if not isinstance(ref, str) or not ref:
            raise CniError(INVALID_CONFIG, '"cluster" must be the kuryr cluster\'s id')
        return ref

    @property
    def port_type(self) -> str | None:
        """``PORT_TYPE`` (kuryr's VIF type), if given and one netbay-cni plugs; else code 4."""
        kind = self.args.get("PORT_TYPE")
        if kind is None or kind.lower() in PORT_TYPES:
            return kind
        raise CniError(INVALID_ENV, f"PORT_TYPE={kind}: netbay-cni plugs a veth pair on its fabric's Linux "
                                    f"bridge (PORT_TYPE {' or '.join(PORT_TYPES)}); it cannot plug a {kind} port")

    @property
    def pod(self) -> tuple[str, str] | None:
        """(namespace, name) from ``K8S_POD_NAMESPACE`` / ``K8S_POD_NAME``, when both are given."""
        ns, name = self.args.get("K8S_POD_NAMESPACE"), self.args.get("K8S_POD_NAME")
        return (ns, name) if ns and name else None


__all__ = ["COMMANDS", "CURRENT", "KURYR_ARGS", "PORT_TYPES", "SUPPORTED", "CniError", "Request", "check_version", "parse_args", "read_config",
           "read_env", "version_info"]
