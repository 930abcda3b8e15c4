"""The station's secret behind the simulated batch-integration data.

The simulator is public and its draw is reproducible, so anyone who knows the seeds it was given
could draw the same cells again and read off the held-out cell types. The seeds it is given are
therefore keyed: derived (HMAC-SHA256) from the task's `seed` parameter and a secret made once per
data root (the station's data cache, `~/.cache/station/scrna/` or `$STATION_SCRNA_DATA`) with
`secrets`. It lives in `secret/simulation.key` there: the folder is 0700, the file 0600, nothing
of it is mounted into a run, and the task hides the folder from every run. Nothing a run sees
(the input file, the details, the statement) is derived from it in a way that gives it back.
Deleting the file makes the next use draw new datasets, under a new cache folder.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

SECRET_DIR = "secret"
SECRET_FILE = "simulation.key"
KEY_BYTES = 32


def data_root() -> Path:
    """The station's data cache for this task: the datasets, their secret and compiled kernels."""
    return Path(os.environ.get("STATION_SCRNA_DATA") or Path.home() / ".cache" / "station" / "scrna")


def secret_dir(root: Path) -> Path:
    return Path(root) / SECRET_DIR


def station_secret(root: Path) -> bytes:
    """The data root's secret, made on first use; a damaged file is a clear error, never replaced
    silently (the datasets drawn with it would no longer match)."""
    folder = secret_dir(root)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)  # also when an older or hand-made folder was more open
    path = folder / SECRET_FILE
    if not path.exists():
        _create(path)
    try:
        key = bytes.fromhex(path.read_text(encoding="ascii").strip())
    except (ValueError, UnicodeDecodeError):
        key = b""
    if len(key) != KEY_BYTES:
        raise ValueError(
            f"{path} is not a key this station made ({2 * KEY_BYTES} hex digits); "
            "delete it to make a new one (the simulated datasets are then drawn anew)"
        )
    return key


def _create(path: Path) -> None:
    """Write a fresh key under a temporary name, then link it into place: a process that lost the
    race keeps the winner's key, and nobody ever reads a half-written file."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="ascii") as f:
            f.write(secrets.token_hex(KEY_BYTES) + "\n")
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass
    finally:
        temporary.unlink(missing_ok=True)


def keyed_seed(key: bytes, *parts: object) -> int:
    """A 63-bit simulator seed from the key and `parts`: the same every time for the same key, and
    not guessable without it (each guess costs a simulation, and there are 2**63)."""
    digest = hmac.new(key, "/".join(map(str, parts)).encode(), hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def fingerprint(key: bytes) -> str:
    """A short name for the key (for cache folder names): says which key, never the key."""
    return hmac.new(key, b"fingerprint", hashlib.sha256).hexdigest()[:12]
