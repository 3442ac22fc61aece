"""``netbay-cni``: the executable a CNI runtime forks for every call.

Thin on purpose — it imports ``posix`` and ``_socket`` and nothing else on the
usual path (``json``, ``re``, ``socket``, even ``os``, cost start-up that a Go plugin
does not pay; ``sys`` and ``posix`` are built in): it answers ``VERSION`` itself and
hands every other call, environment and stdin untouched, to the local netbay CNI
daemon (``netbay cni-daemon``) over its Unix socket, then prints what the daemon
answers and exits with its status. The daemon checks the call as the reference
plugins' ``skel`` does (:mod:`.spec`), and owns the API session and the netlink
sockets a fresh process would pay for each time.

Frames (one exchange per connection, the client half-closes):
request ``K=V\\0`` for each ``CNI_*`` variable, ``\\0``, then stdin's bytes;
answer: the exit status as one ASCII digit, then stdout's bytes.

The socket: ``$NETBAY_CNI_SOCKET``, else ``"socket"`` in the plugin's configuration,
else :data:`DEFAULT_SOCKET`. ``netbay cni-install`` puts in front of this a compiled
launcher (``launcher.c``: the same exchange without an interpreter's start) that execs
this module only off the usual path; without a C compiler, a script that starts Python
without ``site`` (``-I -S``), for the same reason (:mod:`.launcher`).
"""

import sys

import _socket
import posix

DEFAULT_SOCKET = "/run/netbay/cni.sock"
TIMEOUT = 60.0  # kubelet gives a sandbox 4 minutes; an ADD that waits this long has failed
MAX_STDIN = 1 << 20  # bytes of network configuration: the daemon's frame cap (netbay.bodylimit.MAX_BODY)
ABOUT = "netbay-cni: pods on netbay ports (hands each call to `netbay cni-daemon`)"
# spec.version_info(), spelled out (a test keeps them equal): VERSION is called twice
# per container by podman and must cost no import.
VERSION = '{"cniVersion": "1.1.0", "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]}'
SUPPORTED = "0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0"


def _error(code: int, msg: str, details: str = "") -> tuple[int, bytes]:
    import json  # only on a failure

    body = {"code": code, "msg": msg, **({"details": details} if details else {})}
    return 1, json.dumps(body).encode()


def _misuse(env: dict[str, str], stdin: bytes) -> tuple[int, bytes] | None:
    """With no daemon to ask: the caller's own mistake, if any, as the daemon says it
    (a bad configuration is that, not "try again later")."""
    from netbay.plugins.cni import spec

    try:
        args = spec.read_env(env)
        conf = spec.read_config(stdin)
        if args["CNI_COMMAND"] not in spec.COMMANDS:
            raise spec.CniError(spec.INVALID_ENV, f"unknown CNI_COMMAND: {args['CNI_COMMAND']}")
        spec.check_version(args["CNI_COMMAND"], conf)
    except spec.CniError as exc:
        return _error(exc.code, exc.msg, exc.details)
    return None


def socket_path(env: dict[str, str], stdin: bytes) -> str:
    if env.get("NETBAY_CNI_SOCKET"):
        return env["NETBAY_CNI_SOCKET"]
    at = stdin.find(b'"socket"')
    if at < 0:
        return DEFAULT_SOCKET
    # `"socket": "<path>"` read without json (its import costs more than the call);
    # anything less plain (escapes, not a string) goes through json.
    rest = stdin[at + 8:].lstrip()
    if rest[:1] == b":":
        value = rest[1:].lstrip()
        end = value.find(b'"', 1)
        if value[:1] == b'"' and end > 1 and b"\\" not in value[1:end]:
            return value[1:end].decode()
    from netbay.plugins.cni.spec import read_config

    path = read_config(stdin).get("socket")
    return path if isinstance(path, str) and path else DEFAULT_SOCKET


def exchange(path: str, request: bytes, timeout: float = TIMEOUT) -> bytes:
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
    try:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(request)
        s.shutdown(_socket.SHUT_WR)
        chunks = []
        for _ in range(1 << 16):  # bounded: an answer is a few kB
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        s.close()


def run(env: dict[str, str], read_stdin) -> tuple[int, bytes, str]:  # noqa: ANN001 - a callable
    """(exit status, stdout, stderr) of one call."""
    cmd = env.get("CNI_COMMAND", "")
    if not cmd:  # run by hand: say what this is, as skel does
        return 0, b"", f"{ABOUT}\nCNI protocol versions supported: {SUPPORTED}\n"
    if cmd == "VERSION":
        return 0, VERSION.encode(), ""
    try:
        stdin = read_stdin()
    except OSError as exc:
        return (*_error(5, f"error reading from stdin: {exc}"), "")
    if len(stdin) > MAX_STDIN:
        return (*_error(6, f"netbay-cni: the network configuration is larger than {MAX_STDIN} bytes"), "")
    try:
        path = socket_path(env, stdin)
    except Exception as exc:  # noqa: BLE001 - a CniError (bad configuration), said as the daemon would
        return (*_error(getattr(exc, "code", 6), getattr(exc, "msg", str(exc)), getattr(exc, "details", "")), "")
    request = b"".join(f"{k}={v}\0".encode() for k, v in env.items() if k.startswith("CNI_")) + b"\0" + stdin
    # Unreachable daemon: "try again later" (11); for STATUS "not available" (50).
    down = 50 if cmd == "STATUS" else 11
    try:
        answer = exchange(path, request)
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        return (*(_misuse(env, stdin) or _error(down, f"netbay CNI daemon is not running at {path}", str(exc))), "")
    except TimeoutError:
        return (*_error(11, f"netbay CNI daemon at {path} did not answer within {TIMEOUT:.0f} s"), "")
    except OSError as exc:
        return (*_error(5, f"netbay CNI daemon at {path}: {exc}"), "")
    if not answer or answer[:1] not in (b"0", b"1"):
        return (*_error(999, f"netbay CNI daemon at {path} gave no answer (did it exit?)"), "")
    return int(answer[:1]), answer[1:], ""


def environ() -> dict[str, str]:
    """``os.environ`` without importing ``os``."""
    return {k.decode(errors="surrogateescape"): v.decode(errors="surrogateescape")
            for k, v in posix.environ.items()}


def main() -> None:
    code, out, err = run(environ(), lambda: sys.stdin.buffer.read(MAX_STDIN + 1))
    if out:
        sys.stdout.buffer.write(out + b"\n")
        sys.stdout.flush()
    if err:
        sys.stderr.write(err)
        sys.stderr.flush()
    posix._exit(code)  # all written: no interpreter teardown to wait for


if __name__ == "__main__":
    main()
