"""What research storage held when an evaluation was scored, so that `station external` runs a
submission against the storage it was scored with (external_evaluation.py).

The station (trusted side) hashes, after each evaluation's run, every file that `station external`
would mount for it again (shared, system and the author's lineage, read-only): sha256 of each
regular file's content, the target of each symbolic link. The map travels in the evaluation's
recorded result (its payload's "storage" key). Hashing is paid once per file version: a file
whose (device, inode, size, mtime, ctime) did not change is not read again.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from pathlib import Path

from . import storage as rs

CHUNK = 1 << 20
CACHE_MAX = 200_000  # file versions remembered; past it the cache starts again
_cache: dict[tuple[int, int, int, int, int], str] = {}
_lock = threading.Lock()


def storage_hashes(files: Path, lineage: str | None) -> dict[str, str]:
    """{path as a run sees it (storage/shared/helper.py): "sha256:<hex>" or "link:<target>"} for
    the storage areas `station external` mounts for an evaluation of `lineage`."""
    found: dict[str, str] = {}
    seen: set[str] = set()
    for source, target, _ in rs.code_areas(rs.storage_root(files), lineage, cross_lineage=False):
        real = os.path.realpath(source)
        if real not in seen:  # the lineage is mounted twice (storage/<name>, storage/lineage): hashed once
            seen.add(real)
            found.update(_area(Path(source), target))
    return found


def changed_files(kept: dict[str, str], now: dict[str, str]) -> list[str]:
    """The paths whose content differs, appeared or went away, in order."""
    return sorted(path for path in kept.keys() | now.keys() if kept.get(path) != now.get(path))


def _area(folder: Path, target: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for root, dirs, names in os.walk(folder):  # links to folders are listed, never followed
        for name in [*dirs, *names]:
            path = os.path.join(root, name)
            entry = _entry(path)
            if entry is not None:
                found[f"{target}/{os.path.relpath(path, folder)}"] = entry
    return found


def _entry(path: str) -> str | None:
    """A link's target, a regular file's content hash, None for a folder (what it holds is listed)."""
    try:
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            return f"link:{os.readlink(path)}"
        if not stat.S_ISREG(info.st_mode):
            return None
        return _content(path)
    except OSError as err:
        return f"unreadable:{err.strerror}"


def _content(path: str) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        with _lock:
            known = _cache.get(key)
        if known is not None:
            return known
        digest = hashlib.sha256()
        while chunk := os.read(fd, CHUNK):
            digest.update(chunk)
    finally:
        os.close(fd)
    value = f"sha256:{digest.hexdigest()}"
    with _lock:
        if len(_cache) >= CACHE_MAX:
            _cache.clear()
        _cache[key] = value
    return value
