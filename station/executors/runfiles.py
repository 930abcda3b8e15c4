"""The station's hands on what a run can write: checkpoints, outputs, results, exchange folders,
storage and compilation caches.

The station runs as root on the host; what lies in such a folder was put there by code it does
not trust, and may still be changing: a link where a file was, a folder where a checkpoint was, a
tree thousands of folders deep, paths longer than the kernel takes, millions of entries. So here
the station never hands the kernel a path a run controls: it opens a folder of its own once and
every name below it relative to a directory descriptor (openat), never follows a link
(O_NOFOLLOW), checks that what it opened is the entry `lstat` saw, bounds what it reads, counts
and nests, and walks without recursion (disk.walk, disk.remove_tree). Whatever is wrong on the
run's side raises Refused, one line: the run's failure, charged to its code. What fails on the
station's own side (its disk full) stays an OSError: a system error.

The folders an evaluation needs (work_folder) are the station's own: made under the executor's
scratch base by the station, 0o711 (its sandboxes reach their mounts through it, nobody lists or
writes it), holding a lock while in use and a marker. A subfolder a run writes is made private
(run_folder, 0o700); the executor shares it with the sandbox's group when it mounts it (disk.scan's
tidy: group 60000, 0o2770), so none is ever world-writable. Each evaluation removes its folder when
it ends; `sweep` removes the unlocked ones a killed station left, at the next start.
"""

from __future__ import annotations

import fcntl
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from station.executors.disk import DIR_FLAGS, FILE_FLAGS, remove_tree

__all__ = [
    "Bounds",
    "Refused",
    "copy_tree",
    "present",
    "regular_files",
    "remove_tree",
    "run_folder",
    "sweep",
    "take",
    "work_folder",
]

CHUNK = 1 << 20
WORK_MARKER = ".station-evaluation"  # written once the folder's lock is held: what `sweep` looks for
WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(Exception):
    """What a run left cannot be used (a link, a swapped entry, too deep, too long, too large): its
    failure, one line."""


@dataclass(frozen=True)
class Bounds:
    """How much of a run's folder the station copies at most."""

    max_bytes: int
    max_files: int  # entries of every kind, folders included
    max_depth: int = 64  # folders below the top
    max_path: int = 1024  # bytes of a path relative to the top (PATH_MAX is 4096, with the mount's own)


@contextmanager
def _folder(path: Path) -> Iterator[int]:
    """A descriptor of one of the station's own folders (its last part never a link)."""
    fd = os.open(path, DIR_FLAGS)
    try:
        yield fd
    finally:
        os.close(fd)


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


# -- single files --------------------------------------------------------------------------------
def present(folder: Path, name: str) -> bool:
    """Whether `folder` (the station's) holds an entry `name`, of any kind, links not followed."""
    with _folder(folder) as fd:
        try:
            os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
    return True


def take(folder: Path, name: str, limit: int, what: str) -> bytes | None:
    """The bytes of the file `name` a run left in `folder`, then the file removed; None when there is
    none. Refused unless it is a regular file with one link, of at most `limit` bytes: a link could
    point the station at data it holds (the scored split), a huge file at its memory. An entry put in
    its place while it was read is left alone (the next take finds it)."""
    with _folder(folder) as at:
        try:
            fd = os.open(name, FILE_FLAGS, dir_fd=at)
        except FileNotFoundError:
            return None
        except OSError as err:
            raise Refused(f"{what} is not a regular file ({err.strerror})") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
                raise Refused(f"{what} is not a regular file of its own")
            data = _read(fd, info, limit, what)
        finally:
            os.close(fd)
        _unlink_if_same(at, name, info)
    return data


def _read(fd: int, info: os.stat_result, limit: int, what: str) -> bytes:
    if info.st_size > limit:
        raise Refused(f"{what} holds {info.st_size:,} bytes, more than the {limit:,} allowed")
    chunks, size = [], 0
    try:
        while chunk := os.read(fd, CHUNK):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise Refused(f"{what} holds more than the {limit:,} bytes allowed")
    except OSError as err:
        raise Refused(f"{what} could not be read ({err.strerror})") from None
    return b"".join(chunks)


def _unlink_if_same(at: int, name: str, info: os.stat_result) -> None:
    try:
        if _same(os.stat(name, dir_fd=at, follow_symlinks=False), info):
            os.unlink(name, dir_fd=at)
    except OSError:
        pass  # gone, or something else is there now: not what was read


def write(folder: Path, name: str, data: bytes) -> None:
    """A file that appears whole in `folder`, a folder of the station's own that runs at most read:
    written under another name (never through a link), then renamed."""
    partial = f"{name}.partial"
    with _folder(folder) as at:
        try:
            os.unlink(partial, dir_fd=at)
        except FileNotFoundError:
            pass
        fd = os.open(partial, WRITE_FLAGS, 0o644, dir_fd=at)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.rename(partial, name, src_dir_fd=at, dst_dir_fd=at)


# -- whole trees -----------------------------------------------------------------------------------
@dataclass
class _Level:
    source: int
    target: int
    entries: Any  # an os.scandir iterator over `source`
    path: str  # relative to the top, for bounds and messages

    def close(self) -> None:
        self.entries.close()
        os.close(self.source)
        os.close(self.target)


def _level(source: int, open_target: Any, path: str) -> _Level:
    """One level of a copy: the source folder's descriptor (taken over), the target's, its entries."""
    fds = [source]
    try:
        fds.append(open_target())
        return _Level(source, fds[1], os.scandir(source), path)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def copy_tree(source: Path, target: Path, bounds: Bounds, what: str) -> None:
    """Copy the folders and regular files below `source` (a run's) into `target` (the station's own,
    empty): links, FIFOs, sockets and devices are not outputs and are left out. Refused, naming
    `what` (e.g. "outputs/"), when the tree breaks `bounds` or changes under the copy."""
    stack: list[_Level] = []
    counted = [0, 0]  # entries, bytes
    try:
        stack.append(_level(os.open(source, DIR_FLAGS), lambda: os.open(target, DIR_FLAGS), ""))
        while stack:
            level = stack[-1]
            entry = next(level.entries, None)
            if entry is None:
                stack.pop().close()
                continue
            child = _copy_entry(level, entry.name, bounds, what, counted, len(stack))
            if child is not None:
                stack.append(child)
    finally:
        for level in stack:
            level.close()


def _copy_entry(level: _Level, name: str, bounds: Bounds, what: str, counted: list[int], depth: int) -> _Level | None:
    """Copy one entry; a folder's new level when the walk goes down into it."""
    path = f"{level.path}/{name}" if level.path else name
    if len(os.fsencode(path)) > bounds.max_path:
        raise Refused(f"{what} holds a path longer than {bounds.max_path:,} bytes ({path[:60]}...)")
    try:
        info = os.stat(name, dir_fd=level.source, follow_symlinks=False)
    except FileNotFoundError:
        return None
    counted[0] += 1
    if counted[0] > bounds.max_files:
        raise Refused(f"{what} holds more than {bounds.max_files:,} files and folders")
    if stat.S_ISDIR(info.st_mode):
        if depth > bounds.max_depth:
            raise Refused(f"{what} nests folders deeper than {bounds.max_depth} levels")
        os.mkdir(name, 0o755, dir_fd=level.target)
        inner = _open_same(level.source, name, info, DIR_FLAGS, what, path)
        return _level(inner, lambda: os.open(name, DIR_FLAGS, dir_fd=level.target), path)
    if stat.S_ISREG(info.st_mode):
        fd = _open_same(level.source, name, info, FILE_FLAGS, what, path)
        try:
            counted[1] = _copy_file(fd, level.target, name, counted[1], bounds.max_bytes, what)
        finally:
            os.close(fd)
    return None


def _open_same(at: int, name: str, info: os.stat_result, flags: int, what: str, path: str) -> int:
    """`name` opened, when it is still the entry `info` describes; else Refused."""
    try:
        fd = os.open(name, flags, dir_fd=at)
    except OSError as err:
        raise Refused(f"{what}{path} changed while the station copied it ({err.strerror})") from None
    if not _same(os.fstat(fd), info):
        os.close(fd)
        raise Refused(f"{what}{path} changed while the station copied it")
    return fd


def _copy_file(fd: int, at: int, name: str, total: int, limit: int, what: str) -> int:
    """Copy `fd` into a new file `name` of the folder `at`; the bytes copied so far, this file's
    included (at most `limit`)."""
    out = os.open(name, WRITE_FLAGS, 0o644, dir_fd=at)
    try:
        while True:
            try:
                chunk = os.read(fd, CHUNK)
            except OSError as err:
                raise Refused(f"{what}{name} could not be read ({err.strerror})") from None
            if not chunk:
                return total
            total += len(chunk)
            if total > limit:
                raise Refused(f"{what} holds more than the {limit:,} bytes allowed")
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view) :]
    finally:
        os.close(out)


def regular_files(
    at: int, max_files: int, max_depth: int = 64, keep: Callable[[str], bool] | None = None
) -> tuple[list[tuple[str, int]], bool]:
    """(path relative to the folder `at`, size) of the regular files below it whose name `keep`
    accepts, links not followed, and whether that is all of them: the walk stops at `max_files`
    files and does not enter folders deeper than `max_depth`. `at` stays open."""
    files: list[tuple[str, int]] = []
    for _, name, rel, info in entries(at, max_depth):
        if info is None:
            return files, False
        if stat.S_ISREG(info.st_mode) and (keep is None or keep(name)):
            files.append((rel, info.st_size))
            if len(files) >= max_files:
                return files, False
    return files, True


def entries(at: int, max_depth: int = 64) -> Iterator[tuple[int, str, str, os.stat_result | None]]:
    """(descriptor of its folder, name, path relative to the folder `at`, lstat) of every entry below
    it, links not followed, a descriptor per level and no recursion (os.fwalk recursed, and a run's
    3000-deep tree made it fail). A folder deeper than `max_depth` is not entered: then one last
    (-1, "", "", None) says the walk was not complete. `at` stays open."""
    first = os.dup(at)
    stack = [(first, "", os.scandir(first))]
    cut = False
    try:
        while stack:
            fd, path, found = stack[-1]
            entry = next(found, None)
            if entry is None:
                stack.pop()
                found.close()
                os.close(fd)
                continue
            name, rel = entry.name, f"{path}/{entry.name}" if path else entry.name
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue  # gone meanwhile
            yield fd, name, rel, info
            if stat.S_ISDIR(info.st_mode):
                if len(stack) > max_depth:
                    cut = True
                    continue
                down = _open_dir_at(fd, name, info)
                if down is not None:
                    stack.append((down, rel, os.scandir(down)))
    finally:
        for fd, _, found in stack:
            found.close()
            os.close(fd)
    if cut:
        yield -1, "", "", None


def open_same(at: int, name: str, info: os.stat_result) -> int | None:
    """The regular file `name` of the folder `at`, opened for reading when it is still the one
    `info` describes (None: gone or swapped); never follows a link, never blocks on a FIFO."""
    return _open_if_same(at, name, info, FILE_FLAGS)


def _open_dir_at(at: int, name: str, info: os.stat_result) -> int | None:
    """The folder `name` of `at`, when it is still the one `info` describes (None: gone or swapped)."""
    return _open_if_same(at, name, info, DIR_FLAGS)


def _open_if_same(at: int, name: str, info: os.stat_result, flags: int) -> int | None:
    try:
        fd = os.open(name, flags, dir_fd=at)
    except OSError:
        return None
    if _same(os.fstat(fd), info):
        return fd
    os.close(fd)
    return None


# -- the evaluation's own folders --------------------------------------------------------------------
def work_base(executor: Any) -> Path:
    """Where an evaluation's folders go: the executor's scratch base (a LocalExecutor's), else the
    system's temp folder. The evaluation worker sweeps the same place at its start."""
    base = getattr(executor, "scratch_base", None)
    return Path(base) if isinstance(base, (str, Path)) else Path(tempfile.gettempdir())


@contextmanager
def work_folder(base: Path, label: str) -> Iterator[Path]:
    """A new folder of the station's own in `base` for one evaluation, locked while in use and
    removed (any depth, links not followed) when the block ends."""
    path = Path(tempfile.mkdtemp(prefix=f"station-{_safe(label)}-", dir=base))
    lock = os.open(path, DIR_FLAGS)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        os.chmod(path, 0o711)  # the sandboxes reach their mounts through it (process mode: links)
        os.close(os.open(WORK_MARKER, WRITE_FLAGS, 0o600, dir_fd=lock))
        yield path
    finally:
        remove_tree(path)
        os.close(lock)


def run_folder(path: Path) -> Path:
    """A new subfolder of a work folder that a run writes: private to the station until the executor
    mounts it and shares it with the sandbox's group (never world-writable)."""
    path.mkdir(mode=0o700)
    return path


def sweep(base: Path) -> list[str]:
    """Remove the work folders a killed station left in `base`: ours (owner and marker), unlocked.
    Returns their names."""
    removed = []
    for path in Path(base).glob("station-*"):
        try:
            fd = os.open(path, DIR_FLAGS)
        except OSError:
            continue
        try:
            if os.fstat(fd).st_uid != os.geteuid() or not _marked(fd):
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held by a live evaluation: raises
            remove_tree(path)
            removed.append(path.name)
        except OSError:
            pass
        finally:
            os.close(fd)
    return removed


def _marked(fd: int) -> bool:
    try:
        info = os.stat(WORK_MARKER, dir_fd=fd, follow_symlinks=False)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid()


def _safe(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", label)[:60] or "run"
