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

from station.executors.disk import DIR_FLAGS
from station.executors.runfiles import entries, open_same

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
    """What one area holds, walked as the station walks what runs wrote (runfiles.entries: no link
    followed, no recursion, 64 folders deep at most)."""
    found: dict[str, str] = {}
    try:
        top = os.open(folder, DIR_FLAGS)
    except FileNotFoundError:
        return found
    try:
        for at, name, rel, info in entries(top):
            if info is None:
                found[f"{target}/..."] = "incomplete: folders deeper than the walk goes"
            elif (entry := _entry(at, name, info)) is not None:
                found[f"{target}/{rel}"] = entry
    finally:
        os.close(top)
    return found


def _entry(at: int, name: str, info: os.stat_result) -> str | None:
    """A link's target, a regular file's content hash, None for a folder (what it holds is listed)."""
    try:
        if stat.S_ISLNK(info.st_mode):
            return f"link:{os.readlink(name, dir_fd=at)}"
        if not stat.S_ISREG(info.st_mode):
            return None
        fd = open_same(at, name, info)
        return _content(fd) if fd is not None else "unreadable: changed while hashed"
    except OSError as err:
        return f"unreadable:{err.strerror}"


def _content(fd: int) -> str:
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
