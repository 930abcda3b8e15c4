"""The station's secret behind every simulated dataset (batch integration, forecasting, RNA, Sokoban).

The simulators are public and their draws reproducible, so anyone who knew the seeds a dataset was
drawn with could draw it again, held-out split included, inside a training run. The seeds a task
gives its simulator are therefore keyed: derived (HMAC-SHA256) from the task's public `seed`
parameter and a secret made once per data root (each task's data cache, `~/.cache/station/<task>/`
or its `$STATION_<TASK>_DATA`) with `secrets`. It lives in `<data root>/secret/simulation.key`:
the folder is 0700, the file 0600, nothing of it is mounted into a run, and each task hides the
folder from every run (its `private_paths`). Dataset folders are named by a keyed digest too, so
their names (which a run may read from its mount table) say nothing of the seed, size or generator.

The same key and the same `seed` give the same data, bit for bit. To let someone reproduce a
number, give them the key file (`python -m evaluators.secret --use FILE DATA_ROOT` installs a
copy as the station would have made it). Deleting the file makes the next use draw new datasets,
under new folder names.

    python -m evaluators.secret DATA_ROOT              # where the key is, and its fingerprint
    python -m evaluators.secret --use FILE DATA_ROOT   # adopt a shared key (refuses to replace another)
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import secrets
from pathlib import Path

SECRET_DIR = "secret"
SECRET_FILE = "simulation.key"
KEY_BYTES = 32


def secret_dir(root: Path) -> Path:
    return Path(root) / SECRET_DIR


def key_path(root: Path) -> Path:
    """The key file of a data root (what a user shares so that someone can reproduce a dataset)."""
    return secret_dir(root) / SECRET_FILE


def station_secret(root: Path) -> bytes:
    """The data root's secret, made on first use; a damaged file is a clear error, never replaced
    silently (the datasets drawn with it would no longer match)."""
    path = _private_folder(root) / SECRET_FILE
    if not path.exists():
        _install(path, secrets.token_hex(KEY_BYTES))
    return read_key(path)


def read_key(path: Path) -> bytes:
    """The key in a key file; ValueError (naming the file) unless it holds one."""
    try:
        key = bytes.fromhex(Path(path).read_text(encoding="ascii").strip())
    except (OSError, ValueError, UnicodeDecodeError):
        key = b""
    if len(key) != KEY_BYTES:
        raise ValueError(
            f"{path} is not a key this station made ({2 * KEY_BYTES} hex digits); "
            "delete it to make a new one (the simulated datasets are then drawn anew)"
        )
    return key


def use_key(root: Path, source: Path) -> Path:
    """Adopt a key someone shared (a copy of their `simulation.key`) as this data root's, so that the
    same `seed` draws the same datasets here. Refuses to replace a different key: the datasets
    drawn with that one would silently stop matching their folders' names."""
    key = read_key(source)
    path = _private_folder(root) / SECRET_FILE
    if path.exists():
        if read_key(path) != key:
            raise ValueError(f"{path} already holds another key; move it away first to draw with the shared one")
        return path
    _install(path, key.hex())
    if read_key(path) != key:  # another process made one meanwhile
        raise ValueError(f"{path} was made by another process meanwhile; move it away and try again")
    return path


def _private_folder(root: Path) -> Path:
    folder = secret_dir(root)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)  # also when an older or hand-made folder was more open
    return folder


def _install(path: Path, text: str) -> None:
    """Write a key under a temporary name, then link it into place: a process that lost the race
    keeps the winner's key, and nobody ever reads a half-written file."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="ascii") as f:
            f.write(text + "\n")
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


def folder_name(key: bytes, *parts: object) -> str:
    """A dataset folder's name: a keyed digest of what made it (generator, size, seed, ...), so the
    name, which a run may read from its mount table, tells nothing of any of them."""
    return "data-" + hmac.new(key, ("folder/" + "/".join(map(str, parts))).encode(), hashlib.sha256).hexdigest()[:16]


def main() -> None:
    parser = argparse.ArgumentParser(description="Show or adopt the key of a simulated-data root.")
    parser.add_argument("root", type=Path, help="the task's data root, e.g. ~/.cache/station/forecasting")
    parser.add_argument("--use", type=Path, metavar="FILE", help="adopt this key file (a copy of another station's)")
    args = parser.parse_args()
    root = args.root.expanduser()
    if not args.use and not key_path(root).exists():
        raise SystemExit(f"{key_path(root)} does not exist yet: the task makes it when it first draws a dataset")
    try:
        path = use_key(root, args.use) if args.use else key_path(root)
        key = read_key(path)
    except ValueError as error:
        raise SystemExit(f"error: {error}") from None
    print(f"{path} (fingerprint {fingerprint(key)}): copy this file, mode 0600, to share the datasets it draws")


if __name__ == "__main__":
    main()
