"""What a run leaves on disk: counting it against the quotas and tidying persistent storage.

The directories walked here can change under us: the sandboxed code (or another run sharing
the same storage) may add, move or swap entries while we look. So the walk holds one
directory descriptor at a time, looks at every name relative to it without following links,
changes an entry only through a descriptor checked to be what `lstat` saw, and climbs back up
with `..` only after checking it reaches the directory it came down from. No recursion and one
descriptor, whatever the depth.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # never blocks on a FIFO
SET_ID = stat.S_ISUID | stat.S_ISGID
KEPT_KINDS = (stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK)  # FIFOs, sockets and devices are removed
WALK_TRIES = 3  # a directory moved under the walk starts it again, this many times at most


class Moved(Exception):
    """A directory was moved or removed while the walk was inside it."""


@dataclass
class Usage:
    bytes: int = 0  # sizes of the regular files (apparent size: a sparse file counts in full)
    files: int = 0  # entries of every kind below the root, directories and links included
    partial: bool = False  # the walk stopped early: the numbers are lower bounds

    def over(self, max_bytes: int, max_files: int) -> bool:
        return self.bytes > max_bytes or self.files > max_files


def _ident(info: os.stat_result) -> tuple[int, int]:
    return info.st_dev, info.st_ino


def walk(root: Path, on_leave: Callable[[int, str], None] | None = None) -> Iterator[tuple[int, str, os.stat_result]]:
    """(dir fd, name, lstat) of every entry below `root`, depth first; `on_leave(dir fd, name)`
    once the walk is back out of a directory. Raises Moved when a directory it is inside was
    moved or removed; the caller walks again."""
    fd = os.open(root, DIR_FLAGS)
    stack = [(_ident(os.fstat(fd)), iter(os.listdir(fd)), "")]
    try:
        while stack:
            name = next(stack[-1][1], None)
            if name is None:
                left = stack.pop()[2]
                if stack:
                    try:
                        up = os.open("..", DIR_FLAGS, dir_fd=fd)
                    except OSError:
                        raise Moved from None
                    os.close(fd)
                    fd = up
                    if _ident(os.fstat(fd)) != stack[-1][0]:
                        raise Moved
                    if on_leave is not None:
                        on_leave(fd, left)
                continue
            try:
                info = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue  # gone meanwhile
            yield fd, name, info
            if not stat.S_ISDIR(info.st_mode):
                continue
            try:
                down = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError:
                continue  # gone, or swapped for a link
            try:
                if _ident(os.fstat(down)) != _ident(info):
                    raise OSError("swapped")
                names = os.listdir(down)
            except OSError:
                os.close(down)
                continue
            os.close(fd)
            fd = down
            stack.append((_ident(info), iter(names), name))
    finally:
        os.close(fd)


def _needs_fix(info: os.stat_result, gid: int | None) -> bool:
    if stat.S_ISREG(info.st_mode) and info.st_mode & SET_ID:
        return True
    want = 0o2070 if stat.S_ISDIR(info.st_mode) else 0o060
    return gid is not None and (info.st_gid != gid or info.st_mode & want != want)


def _fix(fd: int, gid: int | None) -> None:
    """Clear set-user-ID and set-group-ID on a regular file; with `gid`, share the entry with
    that group (group-owned, group read-write, and setgid on directories so new files inherit it)."""
    info = os.fstat(fd)
    is_dir = stat.S_ISDIR(info.st_mode)
    if not (is_dir or stat.S_ISREG(info.st_mode)):
        return
    mode = stat.S_IMODE(info.st_mode)
    want = mode if is_dir else mode & ~SET_ID
    if gid is not None:
        want |= 0o2070 if is_dir else 0o060
        if info.st_gid != gid:
            os.fchown(fd, -1, gid)  # may clear set-id bits itself: the chmod below comes after
    if want != mode or (gid is not None and info.st_gid != gid):
        os.fchmod(fd, want)


def _tidy(dir_fd: int, name: str, info: os.stat_result, gid: int | None) -> bool:
    """Make one entry safe for the host; False when it was removed."""
    if stat.S_IFMT(info.st_mode) not in KEPT_KINDS:
        try:
            os.unlink(name, dir_fd=dir_fd)
        except OSError:
            pass
        return False
    if stat.S_ISLNK(info.st_mode):
        return True  # nothing to fix on a link, and never followed
    if not _needs_fix(info, gid):
        return True  # the common case: nothing to change, no open needed
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return True  # gone, or swapped for a link
    try:
        if _ident(os.fstat(fd)) == _ident(info):  # still the entry we looked at
            _fix(fd, gid)
    except OSError:
        pass  # not ours to change (a mode without a per-run uid)
    finally:
        os.close(fd)
    return True


def scan(
    root: Path,
    *,
    tidy: bool = False,
    gid: int | None = None,
    enough: Callable[[Usage], bool] | None = None,
    seen: Callable[[int, str, os.stat_result | None], None] | None = None,
) -> Usage:
    """Count what `root` holds, stopping early once `enough(usage)` is true.

    With `tidy`: clear set-id bits on every regular file, remove FIFOs, sockets and device
    files, and with `gid` also share every entry with that group (what later runs' uids need).
    `seen(dir fd, name, lstat)` is called for every entry counted (shares.py tells whose it is),
    and `seen(-1, "", None)` before each walk: a directory moved under it starts the walk again."""
    usage = Usage()
    for _ in range(WALK_TRIES):
        usage = Usage()
        if seen is not None:
            seen(-1, "", None)
        try:
            if tidy:
                fd = os.open(root, DIR_FLAGS)
                try:
                    _fix(fd, gid)
                except OSError:
                    pass
                finally:
                    os.close(fd)
            for dir_fd, name, info in walk(root):
                if tidy and not _tidy(dir_fd, name, info, gid):
                    continue
                usage.files += 1
                if seen is not None:
                    seen(dir_fd, name, info)
                if stat.S_ISREG(info.st_mode):
                    usage.bytes += info.st_size
                if enough is not None and enough(usage):
                    usage.partial = True
                    return usage
            return usage
        except Moved:
            continue
    usage.partial = True
    return usage


def remove_tree(root: Path) -> None:
    """Delete `root` and all below it, never following a link and at any depth (shutil.rmtree
    recurses: a run nesting a few thousand directories made it raise RecursionError)."""

    def rmdir(dir_fd: int, name: str) -> None:
        try:
            os.rmdir(name, dir_fd=dir_fd)
        except OSError:
            pass  # not empty: something was added meanwhile; the next walk gets it

    for _ in range(WALK_TRIES):
        try:
            for dir_fd, name, info in walk(root, on_leave=rmdir):
                if not stat.S_ISDIR(info.st_mode):
                    try:
                        os.unlink(name, dir_fd=dir_fd)
                    except OSError:
                        pass
            os.rmdir(root)
            return
        except FileNotFoundError:
            return
        except (Moved, OSError):
            continue
