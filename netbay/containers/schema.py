"""The container API's request bodies checked as Zun checks them: JSON Schema (Draft 4).

Zun validates each body with ``jsonschema`` against its ``parameter_types``; the
types here follow Zun's (name ``^[a-zA-Z0-9][a-zA-Z0-9_.-]+$``, 2–255 characters;
``memory`` MiB as digits, 4–8192; ``cpu`` 0.1–16, numbers in strings compared as
numbers), with netbay's few extensions (a network's ``neutron_pool`` and
``neutron_subnet``; ``command`` a string or a list at any version) and limits where
netbay's columns are narrower. ``host`` is served from 1.39, ``entrypoint`` from 1.40.
A refusal is a 400 worded as Zun's: ``Invalid input for field 'name'. Value: 'a/b'.
<jsonschema's message>``.

A body that passes may still ask for what netbay does not do (a privileged
container, a disk limit, a health check…): :func:`unhonoured` names the first such
field, so it is refused rather than silently dropped. ``cpu``, ``memory``,
``restart_policy`` and ``mounts`` are honoured (:mod:`netbay.containers.resources`).
"""

from __future__ import annotations

from typing import Any

import jsonschema

from netbay.errors import BadRequest

MIN_MEMORY, MAX_MEMORY = 4, 8192        # MiB (Zun's minimum_memory / maximum_memory)
MIN_CPUS, MAX_CPUS = 0.1, 16.0          # Zun's minimum_cpus / maximum_cpus
MIN_DISK, MAX_DISK = 1, 160             # GiB (Zun's minimum_disk / maximum_disk)

NULL_STRING = {"type": ["string", "null"]}
BOOLEAN = {"type": ["boolean", "string"], "enum": [True, "True", "true", False, "False", "false"]}
TRUE = (True, "True", "true")

CONTAINER_NAME = {"type": ["string", "null"], "minLength": 2, "maxLength": 255,
                  "pattern": "^[a-zA-Z0-9][a-zA-Z0-9_.-]+$"}
IMAGE = {"type": "string", "minLength": 2, "maxLength": 255, "pattern": "[a-zA-Z0-9][a-zA-Z0-9_.-]"}
HOST = {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[a-zA-Z0-9-._]*$"}
CPU = {"type": ["number", "string", "null"], "pattern": r"^[0-9]*(\.([0-9]+))?$", "minLength": 1,
       "minimum": MIN_CPUS, "maximum": MAX_CPUS}
MEMORY = {"type": ["string", "integer", "null"], "pattern": "^[0-9]+$", "minimum": MIN_MEMORY,
          "maximum": MAX_MEMORY}
DISK = {"type": ["string", "integer", "null"], "pattern": "^[0-9]+$", "minimum": MIN_DISK, "maximum": MAX_DISK}
STRINGS = {"type": ["object", "null"], "additionalProperties": {"type": "string"}}   # Docker's are strings
NETS = {
    "type": ["array", "null"],
    "items": {
        "type": "object",
        "properties": {
            "network": {"type": "string", "minLength": 1, "maxLength": 255},
            "port": {"type": "string", "minLength": 1, "maxLength": 255},
            "v4-fixed-ip": {"type": "string", "format": "ipv4"},
            "v6-fixed-ip": {"type": "string", "format": "ipv6"},
        },
        "additionalProperties": False,
        "oneOf": [{"required": ["network"]}, {"required": ["port"]}],
    },
}
MOUNTS = {
    "type": ["array", "null"],
    "items": {
        "type": "object",
        "properties": {"type": {"type": "string"}, "source": {"type": "string"},
                       "destination": {"type": "string"}, "size": {"type": ["string", "integer"]}},
        "additionalProperties": False,
        "anyOf": [{"required": ["source", "destination"]}, {"required": ["size", "destination"]}],
    },
}
RESTART_POLICY = {
    "type": ["object", "null"],
    "properties": {"Name": {"type": "string", "enum": ["no", "always", "on-failure", "unless-stopped"]},
                   "MaximumRetryCount": {"type": ["integer", "string", "null"], "minimum": 0,
                                         "pattern": "^[0-9]+$"}},
    "additionalProperties": False,
    "required": ["Name"],
}

_CONTAINER = {
    "name": CONTAINER_NAME,
    "image": IMAGE,
    "command": {"type": ["string", "array", "null"], "items": {"type": "string"}},
    "cpu": CPU,
    "cpu_policy": {"type": "string", "enum": ["dedicated", "shared"]},
    "memory": MEMORY,
    "workdir": {"type": ["string", "null"], "maxLength": 255},
    "auto_remove": {"type": ["boolean", "null"]},
    "image_pull_policy": {"type": ["string", "null"],
                          "enum": ["never", "always", "ifnotpresent", "Never", "Always", "IfNotPresent", None]},
    "labels": STRINGS,
    "environment": {"type": ["object", "null"], "patternProperties": {".+": {"type": "string"}},
                    "additionalProperties": False},
    "restart_policy": RESTART_POLICY,
    "interactive": BOOLEAN,
    "tty": BOOLEAN,
    "image_driver": {"type": ["string", "null"], "enum": ["glance", "docker", None, "None"]},
    "security_groups": {"type": ["array", "null"], "items": {"type": "string", "minLength": 1, "maxLength": 255}},
    "hints": STRINGS,
    "mounts": MOUNTS,
    "nets": NETS,
    "runtime": NULL_STRING,
    "hostname": {"type": ["string", "null"], "minLength": 1, "maxLength": 63, "pattern": "^[a-zA-Z0-9-._]*$"},
    "disk": DISK,
    "availability_zone": {"type": ["string", "null"], "minLength": 1, "maxLength": 255},
    "auto_heal": BOOLEAN,
    "privileged": BOOLEAN,
    "healthcheck": {"type": ["object", "null"]},
    "exposed_ports": {"type": ["object", "null"]},
    "registry": {"type": "string", "minLength": 2, "maxLength": 255, "pattern": "^[a-zA-Z0-9][a-zA-Z0-9_.-]+$"},
}
CONTAINER_UPDATE = {
    "type": "object",
    "properties": {"cpu": CPU, "memory": MEMORY, "name": CONTAINER_NAME, "auto_heal": BOOLEAN},
    "additionalProperties": False,
}
_GATED = {"host": ((1, 39), HOST), "entrypoint": ((1, 40), {"type": ["array", "null"], "items": {"type": "string"}})}

NETWORK_CREATE = {
    "type": "object",
    "properties": {
        "name": {"type": ["string", "null"], "minLength": 2, "maxLength": 255, "pattern": "[a-zA-Z0-9][a-zA-Z0-9_.-]"},
        "neutron_net_id": {"type": "string", "minLength": 2, "maxLength": 255, "pattern": "[a-zA-Z0-9][a-zA-Z0-9_.-]"},
        "neutron_pool": NULL_STRING,
        "neutron_subnet": NULL_STRING,
    },
    "required": ["neutron_net_id"],
    "additionalProperties": False,
}


def container_create(version: tuple[int, int]) -> dict[str, Any]:
    """Zun's create schema at ``version`` (``host``, ``entrypoint`` only where served)."""
    properties = dict(_CONTAINER, **{k: s for k, (since, s) in _GATED.items() if version >= since})
    return {"type": "object", "properties": properties, "required": ["image"], "additionalProperties": False}


def _number(instance: Any) -> Any:
    """A number in a string as a number (Zun compares ``"512"`` with ``minimum``), else None."""
    if isinstance(instance, (int, float)) and not isinstance(instance, bool):
        return instance
    for kind in (int, float):
        try:
            return kind(instance)
        except (TypeError, ValueError):
            pass
    return None


def _bound(keyword: str) -> Any:
    base = jsonschema.Draft4Validator.VALIDATORS[keyword]

    def check(validator: Any, bound: Any, instance: Any, schema: Any) -> Any:
        number = _number(instance)
        return base(validator, bound, number, schema) if number is not None else None
    return check


_Validator = jsonschema.validators.extend(jsonschema.Draft4Validator,
                                          {"minimum": _bound("minimum"), "maximum": _bound("maximum")})
_CHECKER = jsonschema.FormatChecker()


def _field(path: Any) -> str | None:
    """The field an error is about, from the body's top: ``memory``, ``nets/0/v4-fixed-ip``,
    ``environment/HOME`` (Zun names only the last step, which alone can be a user's key)."""
    return "/".join(map(str, path)) or None


def invalid(field: str, value: Any, why: str) -> BadRequest:
    """Zun's 400 for a field: ``Invalid input for field '<field>'. Value: '<value>'. <why>``."""
    return BadRequest(f"Invalid input for field '{field}'. Value: '{value}'. {why}")


def validate(schema: dict[str, Any], body: Any) -> None:
    """400 in Zun's wording for the most relevant error of ``body`` against ``schema``."""
    error = jsonschema.exceptions.best_match(_Validator(schema, format_checker=_CHECKER).iter_errors(body))
    if error is None:
        return
    field = _field(error.path)
    if field is None:
        raise BadRequest(error.message)
    raise invalid(field, error.instance, error.message)


def _asked(field: str, value: Any) -> str | None:
    """Why netbay cannot honour ``field`` set to ``value`` (None: it can, or it is unset)."""
    if value is None:
        return None
    if field in ("privileged", "auto_remove", "interactive", "tty", "auto_heal"):
        return f"netbay does not run containers with '{field}'." if value in TRUE else None
    if field == "disk":
        return "netbay does not apply 'disk' limits to containers yet."
    if field in ("entrypoint", "healthcheck"):
        return f"netbay does not support '{field}' on containers yet." if value else None
    if field == "cpu_policy":
        return "netbay runs containers with the 'shared' CPU policy only." if value != "shared" else None
    if field == "image_pull_policy":
        return "netbay does not pull images: only 'never' is honoured." if value.lower() != "never" else None
    if field == "image_driver":
        return "netbay runs Docker images only." if value not in ("docker", "None") else None
    if field == "availability_zone":
        return "netbay has one availability zone, 'nova'." if value != "nova" else None
    if field in ("runtime", "registry"):
        return f"netbay does not support '{field}' on containers."
    return None


def unhonoured(body: dict[str, Any]) -> BadRequest | None:
    """The 400 for the first field of a valid body netbay would otherwise silently drop."""
    for field in sorted(body):
        why = _asked(field, body[field])
        if why is not None:
            return invalid(field, body[field], why)
    return None
