"""A port's extra DHCP options (Neutron's ``extra_dhcp_opt``): stored and shown as
Neutron stores them. netbay serves no DHCP (addresses are configured on the
interface by the driver that plugs it), so nothing reads them; they are kept for
the clients that set them (an ironic-style ``bootfile-name``, a ``domain-search``).

Each option is keyed by (``opt_name``, ``ip_version``): on update an option with a
value replaces the one of its key (or is added), one with a null value removes it;
on create, options with a null value are dropped, as Neutron does.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator

from netbay.errors import invalid_input

IP_VERSIONS = (4, 6)


def _options(value: Any) -> Any:
    """neutron-lib's ``validate_list_of_dict_or_nodata`` with the extension's key specs."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise invalid_input("extra_dhcp_opts", f"'{value}' is not a list")
    result = []
    for item in value:
        if not isinstance(item, dict):
            raise invalid_input("extra_dhcp_opts", f"'{item}' is not a dictionary")
        unknown = sorted(set(item) - {"opt_name", "opt_value", "ip_version"})
        if unknown:
            raise invalid_input("extra_dhcp_opts", f"Unexpected keys supplied: {', '.join(unknown)}")
        name = item.get("opt_name")
        if not isinstance(name, str) or not name.strip():
            raise invalid_input("extra_dhcp_opts", f"'{name}' Blank strings are not permitted")
        if "opt_value" not in item:
            raise invalid_input("extra_dhcp_opts", "Validation of dictionary's keys failed. Expected keys: "
                                "{'opt_name', 'opt_value'}")
        opt_value = item["opt_value"]
        if opt_value is not None and (not isinstance(opt_value, str) or not opt_value.strip()):
            raise invalid_input("extra_dhcp_opts", f"'{opt_value}' Blank strings are not permitted")
        try:
            version = int(item.get("ip_version", 4))
        except (TypeError, ValueError):
            raise invalid_input("extra_dhcp_opts", f"'{item.get('ip_version')}' is not an integer") from None
        if version not in IP_VERSIONS:
            raise invalid_input("extra_dhcp_opts", f"{version} is not in {list(IP_VERSIONS)}")
        result.append({"opt_name": name, "opt_value": opt_value, "ip_version": version})
    return result


ExtraDhcpOpts = Annotated[list[dict[str, Any]], BeforeValidator(_options)]


def for_create(options: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return [o for o in options or [] if o["opt_value"] is not None]


def merged(current: list[dict[str, Any]] | None, updates: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    result = {(o["opt_name"], o["ip_version"]): o for o in current or []}
    for option in updates or []:
        key = (option["opt_name"], option["ip_version"])
        if option["opt_value"] is None:
            result.pop(key, None)
        else:
            result[key] = option
    return list(result.values())


def rendered(stored: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return [{"opt_name": o["opt_name"], "opt_value": o["opt_value"], "ip_version": o["ip_version"]}
            for o in stored or []]


__all__ = ["ExtraDhcpOpts", "for_create", "merged", "rendered"]
