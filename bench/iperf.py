"""iperf3 servers and clients in network namespaces, for the benches that measure TCP
throughput (throughput.py, pod_network.py, pod_masq.py, cluster_pods.py, ovn_lab.py,
ovn_vs_embedded.py): every process stopped by PID, a run's JSON parsed in one place."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from typing import Any

PORT = 5201


class IperfError(RuntimeError):
    pass


def parse_iperf(text: str) -> dict[str, Any]:
    """The figures of one ``iperf3 -c … -J`` run (client side JSON)."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise IperfError(f"iperf3 did not print JSON: {text[:200]!r}") from exc
    if not isinstance(data, dict):
        raise IperfError("iperf3 JSON is not an object")
    if data.get("error"):
        raise IperfError(f"iperf3: {data['error']}")
    end = data.get("end") or {}
    received, sent = end.get("sum_received") or {}, end.get("sum_sent") or {}
    if "bits_per_second" not in received:
        raise IperfError("iperf3 JSON has no end.sum_received.bits_per_second")
    cpu = end.get("cpu_utilization_percent") or {}
    return {
        "gbps": received["bits_per_second"] / 1e9,
        "sent_gbps": (sent.get("bits_per_second") or 0) / 1e9,
        "bytes": received.get("bytes"),
        "seconds": received.get("seconds"),
        "retransmits": sent.get("retransmits"),
        "cpu_client": cpu.get("host_total"),
        "cpu_server": cpu.get("remote_total"),
        "reverse": bool((data.get("start") or {}).get("test_start", {}).get("reverse")),
    }


def _listening(pid: int, port: int) -> bool:
    """Whether process ``pid``'s namespace has a TCP listener on ``port`` (via /proc)."""
    want = f":{port:04X}"
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{table}") as f:
                next(f, None)
                for line in f:
                    cols = line.split()
                    if len(cols) > 3 and cols[1].endswith(want) and cols[3] == "0A":
                        return True
        except (FileNotFoundError, ProcessLookupError):
            return False
    return False


class Iperf:
    """iperf3 servers (one per namespace) and clients; every process stopped by PID."""

    def __init__(self) -> None:
        self.exe = shutil.which("iperf3")
        if self.exe is None:
            raise SystemExit("iperf3 is not installed (apt-get install iperf3; scripts/setup.sh does)")
        self.servers: dict[str, subprocess.Popen] = {}
        self.clients: set[subprocess.Popen] = set()

    def serve(self, ns: str, ip: str, timeout: float = 10.0) -> None:
        proc = subprocess.Popen(["ip", "netns", "exec", ns, self.exe, "-s", "-B", ip, "-p", str(PORT)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.servers[ns] = proc  # `ip netns exec` execs: proc.pid is iperf3's
        deadline = time.monotonic() + timeout
        for _ in range(int(timeout / 0.01) + 1):
            if proc.poll() is not None:
                raise IperfError(f"iperf3 -s in {ns} exited: {proc.stderr.read().decode()[:300]}")
            if _listening(proc.pid, PORT):
                return
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
        raise IperfError(f"iperf3 -s in {ns} not listening after {timeout}s")

    def run(self, ns: str, ip: str, seconds: float, omit: int = 0, reverse: bool = False,
            streams: int = 1) -> dict[str, Any]:
        cmd = ["ip", "netns", "exec", ns, self.exe, "-c", ip, "-p", str(PORT), "-J",
               "-t", f"{seconds:g}", "-O", str(omit), "-P", str(streams), "--connect-timeout", "3000"]
        if reverse:
            cmd.append("-R")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.clients.add(proc)
        try:
            out, err = proc.communicate(timeout=seconds + omit + 30)
        except subprocess.TimeoutExpired:
            raise IperfError(f"iperf3 -c in {ns} did not finish in {seconds + omit + 30:g}s") from None
        finally:
            self._stop(proc)
            self.clients.discard(proc)
        if proc.returncode != 0 and not out.strip():
            raise IperfError(f"iperf3 -c in {ns}: rc={proc.returncode} {err.strip()[:300]}")
        return parse_iperf(out)

    @staticmethod
    def _stop(proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
            except ProcessLookupError:
                pass

    def close(self) -> None:
        for proc in [*self.clients, *self.servers.values()]:
            self._stop(proc)
        self.clients.clear()
        self.servers.clear()
