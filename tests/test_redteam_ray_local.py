"""Red team: the Ray instance a station starts for itself (no `ray_address`) keeps other users out
(issue 51 item 5; docs/security.md).

An attacker here is another account on the same machine, or a machine on the network. It must not
reach a Ray port from a non-loopback address, and it must not read the token that lets a client
submit tasks as the station's user, nor list or plant files in Ray's session folder. The home
folder is made world-readable for the test (the default on many distributions): a 0700 home
must not be what keeps the token private.

One local Ray start serves every test here (module scope), with one honest run through it.
Needs root (to act as another uid with setpriv) and unshare, like tests/test_sandbox.py.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from station.core.config import ExecutorConfig
from station.executors import LocalExecutor, RunSpec, create_executor

OTHER_UID = 65534  # "nobody": an account that is not the station's
AS_OTHER = ["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups"]

pytestmark = pytest.mark.slow  # starts Ray: left out of the quick loop (-m "not slow"), like the other Ray tests

if os.geteuid() != 0 or shutil.which("setpriv") is None:
    pytest.skip("acting as another local account needs root and setpriv", allow_module_level=True)
if LocalExecutor().mode != "namespaces":
    pytest.skip("the sandbox needs root and unshare here", allow_module_level=True)


@pytest.fixture(scope="module")
def station_ray():
    """A station-started local Ray, one honest run done through it; HOME is world-readable."""
    home = Path(tempfile.mkdtemp(prefix="station-home-"))
    home.chmod(0o755)
    saved = {key: os.environ.get(key) for key in ("HOME", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE")}
    os.environ["HOME"] = str(home)
    for key in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE"):
        os.environ.pop(key, None)
    ex = create_executor(ExecutorConfig(kind="ray", ray_num_cpus=1))
    try:
        result = ex.run(RunSpec(code="def main():\n    return 6 * 7\n", timeout_s=60))
        assert result.status == "ok" and result.value == 42, result  # an honest run beside the attacks
        yield ex, home
    finally:
        ex.close()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(home, ignore_errors=True)


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            threads = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for thread in threads:
            try:
                children = Path(f"/proc/{parent}/task/{thread}/children").read_text().split()
            except OSError:
                continue
            found += [int(c) for c in children]
            todo += [int(c) for c in children]
    return found


def _socket_inodes(pid: int) -> set[int]:
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(int(target[len("socket:[") : -1]))
    return inodes


def _listening_tcp() -> dict[int, tuple[str, int]]:
    """inode -> (address, port) of every listening TCP socket on this host (/proc/net/tcp, tcp6)."""
    listening = {}
    for family, table in ((socket.AF_INET, "tcp"), (socket.AF_INET6, "tcp6")):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A":  # TCP_LISTEN
                continue
            address, port = fields[1].split(":")
            raw = bytes.fromhex(address)  # little-endian 32-bit words
            raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
            listening[int(fields[9])] = (socket.inet_ntop(family, raw), int(port, 16))
    return listening


def _is_loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:  # ::ffff:127.0.0.1
        ip = ip.ipv4_mapped
    return ip.is_loopback


def _ray_listeners() -> list[tuple[int, str, str, int]]:
    """(pid, command, address, port) of each listening socket of this process's descendants (Ray's)."""
    listening, found = _listening_tcp(), []
    for pid in _descendants(os.getpid()):
        try:
            command = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        found += [(pid, command, *listening[i]) for i in _socket_inodes(pid) if i in listening]
    return found


def _gcs_environ() -> dict[str, str]:
    for pid in _descendants(os.getpid()):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "gcs_server":
                raw = Path(f"/proc/{pid}/environ").read_bytes()
                return dict(item.decode().partition("=")[::2] for item in raw.split(b"\0") if item)
        except OSError:
            continue
    raise AssertionError("no gcs_server among the station's child processes")


def _as_other(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run([*AS_OTHER, *command], capture_output=True, text=True, timeout=30)


def test_no_ray_port_is_bound_beyond_loopback(station_ray):
    import ray

    listeners = _ray_listeners()
    gcs_port = int(ray.get_runtime_context().gcs_address.rpartition(":")[2])
    assert gcs_port in {port for *_, port in listeners}, listeners  # the GCS is among the sockets seen
    open_wide = [entry for entry in listeners if not _is_loopback(entry[2])]
    assert not open_wide, f"Ray processes listening beyond loopback (pid, command, address, port): {open_wide}"


def test_another_account_cannot_read_the_token_or_the_session(station_ray):
    import ray

    _, home = station_ray
    environ = _gcs_environ()
    assert "RAY_AUTH_TOKEN" not in environ, "the token itself is in Ray's environment"
    token_file = Path(environ.get("RAY_AUTH_TOKEN_PATH") or home / ".ray" / "auth_token")
    assert token_file.is_file(), f"the token Ray uses is not at {token_file}"
    assert len(token_file.read_text().strip()) >= 32
    read = _as_other("cat", str(token_file))
    assert read.returncode != 0 and not read.stdout, f"another account read the Ray token at {token_file}"
    assert stat.S_IMODE(token_file.stat().st_mode) & 0o077 == 0, oct(token_file.stat().st_mode)

    session = Path(ray._private.worker._global_node.get_session_dir_path())
    assert session.is_dir()
    for what in (["ls", str(session)], ["ls", str(session / "logs")], ["ls", str(session.parent)]):
        listed = _as_other(*what)
        assert listed.returncode != 0 and not listed.stdout, f"another account ran {what}: {listed.stdout[:200]}"
    # No folder another account can reach on the way to the session lets it swap or plant entries
    # (0777 without the sticky bit); below a folder it cannot enter, modes no longer matter.
    for folder in (*reversed(session.parents), session):
        mode = folder.stat().st_mode
        assert not (mode & stat.S_IWOTH and not mode & stat.S_ISVTX), f"{folder} is world-writable: {oct(mode)}"
        if not mode & stat.S_IXOTH:
            break
