"""The load-balancer providers, as Octavia has them: what each realizes.

Octavia delegates a load balancer to a *provider* named at create time and
refuses, per option, what that provider lacks (``ProviderUnsupportedOptionError``).
netbay has two, on this machine:

- ``nftables`` (the default): kernel DNAT in the load balancer's namespace, L4
  only (TCP, UDP, SCTP; ``ROUND_ROBIN``, ``SOURCE_IP``, ``SOURCE_IP_PORT`` and
  ``LEAST_CONNECTIONS``: LVS's ``lc``, live connections counted from conntrack,
  a TCP connection as active while established), realized in milliseconds.
  Octavia's L4 provider is OVN, so ``ovn`` names it too; ``netbay`` is its
  earlier name.
- ``haproxy``: Debian's haproxy in the same namespace, which is what Octavia's
  amphora runs, so ``amphora`` and ``octavia`` name it. HTTP, HTTPS passthrough,
  TCP and PROXY/PROXYV2 pools, least connections, session persistence, L7
  policies, ``allowed_cidrs``, ``X-Forwarded-*`` headers, PROMETHEUS listeners
  (haproxy's own exporter, as the amphora serves them); UDP and SCTP listeners
  are forwarded by nftables beside it (as the amphora uses LVS for them), with
  LVS's algorithms: ``ROUND_ROBIN``, ``SOURCE_IP`` and ``LEAST_CONNECTIONS`` (a new
  flow to the member with the fewest live flows, counted from conntrack).

Both take IPv4 and IPv6 VIPs, each with the members of its VIP's family.

A load balancer keeps the provider name it was created with (as Octavia
does); ``driver_of`` maps any accepted name to what realizes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from netbay.errors import BadRequest, NetbayError, NotFound
from netbay.lbaas.common import PROVIDER, not_offered

#: Octavia's protocols an amphora hands to LVS: here nftables forwards them under either provider.
KERNEL_PROTOCOLS = ("UDP", "SCTP")

NFTABLES = "nftables"
HAPROXY = "haproxy"
DEFAULT = NFTABLES

L4_ALGORITHMS = ("ROUND_ROBIN", "SOURCE_IP")
#: UDP and SCTP pools, under either provider: the amphora's LVS schedulers (``wrr``, ``sh``, ``lc``).
KERNEL_ALGORITHMS = (*L4_ALGORITHMS, "LEAST_CONNECTIONS")
# SOURCE_IP_PORT is OVN's (its only one) and so the nftables provider's; Octavia's
# amphora refuses it, and so does the haproxy provider (UDP pools included).
# LEAST_CONNECTIONS: every pool of the nftables provider (lb/leastconn.py).
NFT_ALGORITHMS = (*KERNEL_ALGORITHMS, "SOURCE_IP_PORT")
NO_KEY_MANAGER = ("TERMINATED_HTTPS needs its certificates from a key manager (Barbican), which netbay "
                  "does not have; use HTTPS (passthrough, terminated by the members) instead")


@dataclass(frozen=True)
class Provider:
    """One realizer's offer; every refusal names the provider the caller chose."""
    driver: str
    description: str
    listener_protocols: tuple[str, ...]
    pool_protocols: tuple[str, ...]
    algorithms: tuple[str, ...]
    persistence: tuple[str, ...] = ()
    l7: bool = False
    listener_options: frozenset[str] = field(default_factory=frozenset)


_NFT = Provider(
    driver=NFTABLES,
    description="L4 load balancing by nftables in the load balancer's namespace (the fast default)",
    listener_protocols=("TCP", "UDP", "SCTP", "HTTP"),
    pool_protocols=("TCP", "UDP", "SCTP", "HTTP"),
    algorithms=NFT_ALGORITHMS,
)
_HAPROXY = Provider(
    driver=HAPROXY,
    description="L4 and L7 load balancing by haproxy in the load balancer's namespace",
    listener_protocols=("TCP", "HTTP", "HTTPS", "UDP", "SCTP", "PROMETHEUS"),
    pool_protocols=("TCP", "HTTP", "HTTPS", "PROXY", "PROXYV2", "UDP", "SCTP"),
    algorithms=("ROUND_ROBIN", "LEAST_CONNECTIONS", "SOURCE_IP"),
    persistence=("SOURCE_IP", "HTTP_COOKIE", "APP_COOKIE"),
    l7=True,
    listener_options=frozenset({"allowed_cidrs", "insert_headers"}),
)
_CAPS_TOPOLOGY = (("loadbalancer_topology", "The load balancer topology. One of: SINGLE - One network "
                                            "namespace on this machine (netbay has no ACTIVE_STANDBY)."),)
_CAPS_ZONE = (("host", "The machine the load balancer's namespace lives on (netbay runs on one)."),)

# name -> (provider, description as listed at /v2/lbaas/providers)
PROVIDERS: dict[str, tuple[Provider, str]] = {
    NFTABLES: (_NFT, _NFT.description),
    HAPROXY: (_HAPROXY, _HAPROXY.description),
    "amphora": (_HAPROXY, "Octavia's amphora provider name: haproxy in a namespace instead of a VM"),
    "octavia": (_HAPROXY, "Deprecated alias of the amphora provider (haproxy)"),
    "ovn": (_NFT, "Octavia's OVN provider name: L4 by nftables (no OVN here)"),
    PROVIDER: (_NFT, "Earlier name of the nftables provider"),
}


def resolve(name: str | None) -> str:
    """The name a load balancer keeps (the default when none is given); 400 if unknown."""
    if name is None:
        return DEFAULT
    if name not in PROVIDERS:
        raise BadRequest(f"Provider '{name}' is not enabled.")
    return name


def get(name: str | None) -> Provider:
    return PROVIDERS.get(name or DEFAULT, PROVIDERS[DEFAULT])[0]


def driver_of(name: str | None) -> str:
    """What realizes a load balancer of provider ``name`` (``nftables`` | ``haproxy``)."""
    return get(name).driver


def unsupported(provider: str, what: str) -> NetbayError:
    """Octavia's refusal of an option the chosen provider lacks, naming that provider."""
    return not_offered(what, provider)


# --- the checks the resources make --------------------------------------------------------


def check_listener(provider: str, protocol: str, given: dict[str, Any]) -> None:
    p = get(provider)
    if protocol == "TERMINATED_HTTPS":
        raise unsupported(provider, f"protocol TERMINATED_HTTPS is not offered: {NO_KEY_MANAGER}")
    if protocol not in p.listener_protocols:
        raise unsupported(provider, f"protocol {protocol} is not offered by provider {provider}; use "
                                    f"{', '.join(p.listener_protocols)}"
                                    + ("" if p.l7 else " (or provider haproxy)"))
    for option in ("allowed_cidrs", "insert_headers"):
        if not given.get(option):
            continue
        if option not in p.listener_options:
            raise unsupported(provider, f"{option} is not offered by provider {provider} (use provider haproxy)")
        if protocol in KERNEL_PROTOCOLS:   # forwarded by nftables, even under haproxy
            raise unsupported(provider, f"{option} is not offered for {protocol} listeners")


def check_pool(provider: str, protocol: str, algorithm: str | None, persistence: dict[str, Any] | None,
               *, new: bool = True) -> None:
    """A pool's protocol (``new``: at create), algorithm and persistence against the
    provider. UDP and SCTP pools are nftables' under either provider: L4 algorithms (with
    least connections, as every nftables pool), no persistence."""
    p = get(provider)
    if new and protocol not in p.pool_protocols:
        raise unsupported(provider, f"protocol {protocol} is not offered by provider {provider}; use "
                                    f"{', '.join(p.pool_protocols)}" + ("" if p.l7 else " (or provider haproxy)"))
    kernel = p.driver == NFTABLES or protocol in KERNEL_PROTOCOLS
    algorithms = p.algorithms
    if protocol in KERNEL_PROTOCOLS and p.driver == HAPROXY:   # the amphora's LVS: no SOURCE_IP_PORT
        algorithms = KERNEL_ALGORITHMS
    hint = " (or provider haproxy)" if p.driver == NFTABLES else (f" for {protocol} pools" if kernel else "")
    if algorithm is not None and algorithm not in algorithms:
        raise unsupported(provider, f"lb_algorithm {algorithm} is not offered by provider {provider}; use "
                                    f"{' or '.join(algorithms)}{hint}")
    if persistence and (kernel or persistence.get("type") not in p.persistence):
        raise unsupported(provider, f"session_persistence {persistence.get('type')} is not offered by provider "
                                    f"{provider}{' (use provider haproxy)' if p.driver == NFTABLES else hint}")


def check_l7(provider: str) -> None:
    if not get(provider).l7:
        raise unsupported(provider, f"L7 policies are not offered by provider {provider} (use provider haproxy)")


# --- /v2/lbaas/providers ---------------------------------------------------------------------


def listing() -> list[dict[str, str]]:
    return [{"name": name, "description": desc} for name, (_, desc) in PROVIDERS.items()]


def _known(name: str) -> Provider:
    if name not in PROVIDERS:
        raise NotFound(f"Provider '{name}' was not found.")
    return PROVIDERS[name][0]


def flavor_capabilities(name: str) -> list[dict[str, str]]:
    _known(name)
    return [{"name": n, "description": d} for n, d in _CAPS_TOPOLOGY]


def zone_capabilities(name: str) -> list[dict[str, str]]:
    _known(name)
    return [{"name": n, "description": d} for n, d in _CAPS_ZONE]


__all__ = ["DEFAULT", "HAPROXY", "KERNEL_ALGORITHMS", "NFTABLES", "PROVIDERS", "Provider", "check_l7", "check_listener",
           "check_pool", "driver_of", "flavor_capabilities", "listing", "resolve", "unsupported",
           "zone_capabilities"]
