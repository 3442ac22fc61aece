"""What Zun's container actions ask of Docker, one function each, on the app container.

Each takes docker's low-level API client and the app's Docker id (the runner finds
them), and answers in Zun's shapes: ``top``'s ``{Titles, Processes}``, ``stats``'
one-line summary (``CPU %``, ``MEM USAGE(MiB)``…), an archive's ``{data, stat}`` with
``data`` base64 from 1.25 (Latin-1 text before), ``logs`` as one string. The Docker
``host_config`` of a container's ``cpu``/``memory``/``restart_policy``/``mounts`` is
made here too, so creating and updating give Docker the same values.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Any

from netbay.errors import BadRequest

SHARES_PER_CPU = 1024    # Zun's: cpu_shares = int(1024 * cpu)


def host_config(cpu: float | None, memory: str | None, restart_policy: dict[str, Any] | None,
                binds: list[str]) -> dict[str, Any]:
    """``create_host_config`` keywords for the app, as Zun's Docker driver sets them."""
    out: dict[str, Any] = {}
    if memory is not None:
        out["mem_limit"] = f"{memory}M"
    if cpu is not None:
        out["cpu_shares"] = int(SHARES_PER_CPU * cpu)
    if restart_policy:
        out["restart_policy"] = {"Name": restart_policy["Name"],
                                 "MaximumRetryCount": int(restart_policy.get("MaximumRetryCount") or 0)}
    if binds:
        out["binds"] = binds
    return out


def update(api: Any, docker_id: str, cpu: float | None, memory: str | None) -> None:
    """Zun's update: new limits on the running app (swap unbounded, as Zun's default)."""
    args: dict[str, Any] = {}
    if memory is not None:
        args.update(mem_limit=f"{memory}M", memswap_limit=-1)
    if cpu is not None:
        args["cpu_shares"] = int(SHARES_PER_CPU * cpu)
    if args:
        api.update_container(docker_id, **args)


def kill(api: Any, docker_id: str, signal: str | None) -> None:
    if signal in (None, "None"):
        api.kill(docker_id)
    else:
        api.kill(docker_id, signal.upper() if not signal.isdigit() else int(signal))


def logs(api: Any, docker_id: str, *, stdout: bool, stderr: bool, timestamps: bool, tail: str | int,
         since: str | int | None) -> str:
    """Zun's logs: ``tail`` a number or ``all``; ``since`` epoch seconds or ``Y-m-d H:M:S,f``."""
    try:
        tail = int(tail)
    except (TypeError, ValueError):
        tail = "all"
    when: int | datetime | None = None
    if since not in (None, "None", ""):
        try:
            when = int(str(since))
        except ValueError:
            when = datetime.strptime(str(since), "%Y-%m-%d %H:%M:%S,%f")
    out = api.logs(docker_id, stdout=stdout, stderr=stderr, stream=False, timestamps=timestamps, tail=tail,
                   since=when)
    return out.decode(errors="replace") if isinstance(out, bytes) else str(out)


def top(api: Any, docker_id: str, ps_args: str | None) -> dict[str, Any]:
    return api.top(docker_id) if ps_args in (None, "None") else api.top(docker_id, ps_args)


def stats(api: Any, docker_id: str, name: str) -> dict[str, Any]:
    """One snapshot summed as Zun's ``stats`` does (memory less the inactive file cache)."""
    res = api.stats(docker_id, decode=False, stream=False)
    cpu = res.get("cpu_stats") or {}
    system = cpu.get("system_cpu_usage") or 0
    cpu_percent = float(cpu.get("cpu_usage", {}).get("total_usage", 0)) / system * 100 if system else 0.0
    memory = res.get("memory_stats") or {}
    extra = memory.get("stats") or {}
    cache = extra.get("total_inactive_file") or extra.get("inactive_file") or 0
    usage = (memory.get("usage", 0) - cache) / 1024 / 1024
    limit = memory.get("limit", 0) / 1024 / 1024
    blk = (res.get("blkio_stats") or {}).get("io_service_bytes_recursive") or []
    read = sum(i["value"] for i in blk if i["op"].lower() == "read")
    write = sum(i["value"] for i in blk if i["op"].lower() == "write")
    nets = (res.get("networks") or {}).values()
    rx, tx = sum(n["rx_bytes"] for n in nets), sum(n["tx_bytes"] for n in nets)
    return {"CONTAINER": name, "CPU %": cpu_percent, "MEM USAGE(MiB)": usage, "MEM LIMIT(MiB)": limit,
            "MEM %": usage / limit * 100 if limit else 0.0, "BLOCK I/O(B)": f"{read}/{write}",
            "NET I/O(B)": f"{rx}/{tx}"}


def get_archive(api: Any, docker_id: str, path: str, encode: bool) -> dict[str, Any]:
    """A tar of ``path`` (Zun's 400 if Docker has no such path)."""
    from docker.errors import NotFound

    try:
        stream, stat = api.get_archive(docker_id, path)
    except NotFound as exc:
        raise BadRequest(str(exc.explanation or exc)) from None
    data = b"".join(stream)
    return {"data": base64.b64encode(data).decode() if encode else data.decode("latin-1"), "stat": stat}


def put_archive(api: Any, docker_id: str, path: str, data: str, decode: bool) -> None:
    """Unpack Zun's ``data`` (a tar; base64 from 1.25) at ``path``."""
    from docker.errors import NotFound

    try:
        raw = base64.b64decode(data, validate=True) if decode else data.encode("latin-1")
    except (binascii.Error, ValueError):
        raise BadRequest("Invalid input for field 'data': it is not base64-encoded.") from None
    try:
        api.put_archive(docker_id, path, raw)
    except NotFound as exc:
        raise BadRequest(str(exc.explanation or exc)) from None


def execute(api: Any, docker_id: str, command: list[str]) -> dict[str, Any]:
    """Run ``command`` and wait for it (Zun's ``execute?run=true``)."""
    exec_id = api.exec_create(docker_id, command)["Id"]
    output = api.exec_start(exec_id)
    return {"output": output.decode(errors="replace"), "exit_code": api.exec_inspect(exec_id)["ExitCode"],
            "exec_id": None, "url": None}
