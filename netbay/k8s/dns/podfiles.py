"""What a pod's processes read: ``/etc/resolv.conf`` and ``/etc/environment``.

Both are written to ``/etc/netns/<pod namespace>/``, which ``ip netns exec`` (and
``netbay k8s exec``) bind-mounts over ``/etc`` for the process it starts — the
sandbox pods' equivalent of the files a kubelet gives a container. Written once,
when the pod is first seen without them: as in Kubernetes, a pod's Service
variables are those of the Services of its namespace that had a cluster IP when it
was made (later Services reach it by DNS only). ``/etc/environment`` is pam_env's
``KEY=value`` file; a shell reads it with ``set -a; . /etc/environment``.
The directory goes with the pod's namespace (:meth:`PodSandboxes.unplug`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from netbay.k8s.dns.names import OPTIONS, search
from netbay.k8s.objects import ServiceWant

ETC_NETNS = Path("/etc/netns")


def etc_dir(ns: str) -> Path:
    return ETC_NETNS / ns


def resolv_conf(namespace: str, nameservers: Sequence[str], domain: str) -> str:
    """Kubernetes' ClusterFirst resolv.conf (ndots:5: short names try the search list);
    one ``nameserver`` line per address of the cluster resolver (IPv4 first: a
    dual-stack cluster's resolver answers on both families, as kubelet lists a
    dual-stack ``--cluster-dns``)."""
    return ("".join(f"nameserver {address}\n" for address in nameservers) +
            f"search {' '.join(search(namespace, domain))}\n"
            f"options {' '.join(OPTIONS)}\n")


def _env_name(name: str) -> str:
    return re.sub(r"[^A-Z0-9_]", "_", name.upper().replace("-", "_"))


def service_env(namespace: str, services: Mapping[tuple[str, str], ServiceWant],
                vips: Mapping[tuple[str, str], str]) -> dict[str, str]:
    """The variables kubelet sets for the Services of ``namespace`` that have a
    cluster IP (headless ones have none): ``{SVC}_SERVICE_HOST``, ``_SERVICE_PORT``,
    ``_SERVICE_PORT_<NAME>`` and the Docker-links ``{SVC}_PORT…`` forms."""
    env: dict[str, str] = {}
    for key, svc in sorted(services.items()):
        if svc.namespace != namespace or key not in vips or not svc.ports:
            continue
        ip, svc_var, first = vips[key], _env_name(svc.name), svc.ports[0]
        host = f"[{ip}]" if ":" in ip else ip   # kubelet's net.JoinHostPort: an IPv6 cluster IP bracketed
        env[f"{svc_var}_SERVICE_HOST"] = ip
        env[f"{svc_var}_SERVICE_PORT"] = str(first.port)
        env[f"{svc_var}_PORT"] = f"{first.protocol.lower()}://{host}:{first.port}"
        for p in svc.ports:
            if p.name:
                env[f"{svc_var}_SERVICE_PORT_{_env_name(p.name)}"] = str(p.port)
            head, proto = f"{svc_var}_PORT_{p.port}_{p.protocol}", p.protocol.lower()
            env[head] = f"{proto}://{host}:{p.port}"
            env[f"{head}_PROTO"], env[f"{head}_PORT"], env[f"{head}_ADDR"] = proto, str(p.port), ip
    return env


def write_once(ns: str, namespace: str, nameservers: Sequence[str], domain: str,
               services: Mapping[tuple[str, str], ServiceWant], vips: Mapping[tuple[str, str], str]) -> bool:
    """Give the pod in ``ns`` its two files unless it has them; True if written."""
    d = etc_dir(ns)
    env_file = d / "environment"
    if env_file.exists():
        return False
    d.mkdir(parents=True, exist_ok=True)
    (d / "resolv.conf").write_text(resolv_conf(namespace, nameservers, domain))
    env = service_env(namespace, services, vips)
    tmp = d / "environment.tmp"
    tmp.write_text("".join(f"{k}={v}\n" for k, v in sorted(env.items())))
    tmp.replace(env_file)   # last: its presence means "done"
    return True


def docker_options(namespace: str, nameservers: Sequence[str], domain: str,
                   services: Mapping[tuple[str, str], ServiceWant], vips: Mapping[tuple[str, str], str]) -> dict:
    """The same for a pod run as a Docker container: docker-py's ``containers.run``
    keyword arguments (``--dns``, ``--dns-search``, ``--dns-option``, ``--env``)."""
    return {"dns": list(nameservers), "dns_search": search(namespace, domain),
            "dns_opt": list(OPTIONS), "environment": service_env(namespace, services, vips)}
