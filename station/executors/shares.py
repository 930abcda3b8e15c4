"""Shares of writable storage: what each run added, who holds what, and undoing a run's excess.

A writable storage dir is shared by runs of many agents, and sequential runs lease the same uid,
so a file's owner does not say which agent wrote it. So the station, not the run, keeps the
accounts, with three things a run cannot touch:

- the run's start walk: every entry the dir held when the run started, with its size and mtime,
  keyed by (device, inode). An entry not in it is new; one owned by the run's uid (unique among
  live runs) is the run's own, one of another uid is another live run's;
- the ledger, where the station keeps one (`<dir>/../.shares/<dir name>.json`, a folder of the
  station's own that no run mounts): file -> who it is charged to (a lineage, an agent), written
  at the end of each run that names its owner (RunSpec.storage_share), under a lock. A file's
  bytes count against its last writer; a file nobody is charged for (written by the station, or
  by a run still going) counts only in the total;
- the run's end: what it created or grew there, measured after the tidy walk.

A run whose own writes push the dir over its limit (the total, its entry count, or its owner's
share) is the one that fails, and what it wrote there is undone: the entries it created are
removed and the files that were there and grew while it ran are cut back to their start sizes.
Other runs' files are never removed.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

from station.executors import disk

LEDGER_DIR = ".shares"  # beside the storage dir; made by the station that keeps shares (rooms/research/storage.py)
WRITE_FLAGS = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
UNDONE = "; what this run wrote there is removed"
NEW, OTHER, CHANGED, OLD = "new", "other", "changed", "old"  # an entry, as seen from one run

Key = tuple[int, int]  # (st_dev, st_ino)


class LedgerError(ValueError):
    """The station's ledger is missing, misplaced or unreadable: the station's fault, not the run's."""


def _key(info: os.stat_result) -> Key:
    return info.st_dev, info.st_ino


def _mb(n: int) -> str:
    mb = n / (1 << 20)
    return f"{math.ceil(mb):,} MB" if mb >= 100 else f"{math.ceil(mb * 10) / 10:g} MB"


# -- the ledger -------------------------------------------------------------------------------------
class Ledger:
    """file (device:inode) -> [who it is charged to, its size when recorded], and each owner's total."""

    def __init__(self, folder: Path, name: str) -> None:
        self.path, self.lock = folder / f"{name}.json", folder / f"{name}.lock"

    @staticmethod
    def beside(root: Path, mounts: list[Path]) -> Ledger | None:
        """The ledger of storage dir `root`, or None when its station keeps none. A ledger a run
        could reach (inside or around one of its `mounts`) or not the station's alone is refused."""
        folder = root.parent / LEDGER_DIR
        try:
            info = os.lstat(folder)
        except FileNotFoundError:
            return None
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
            raise LedgerError(f"the shares ledger {folder} is not a folder of the station's own (mode 0700)")
        real = os.path.realpath(folder)
        for mount in mounts:
            source = os.path.realpath(mount)
            if _inside(real, source) or _inside(source, real):
                raise LedgerError(f"the shares ledger {folder} would be visible to the run through {mount}")
        return Ledger(folder, root.name)

    def read(self) -> dict[Key, tuple[str, int]]:
        found: dict[Key, tuple[str, int]] = {}
        try:
            with open(self.path, encoding="utf-8") as f:
                files = json.load(f)["files"]
            for key, (owner, size) in files.items():
                dev, _, ino = key.partition(":")
                found[int(dev), int(ino)] = (str(owner), int(size))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise LedgerError(f"the shares ledger {self.path} cannot be read: {err}") from None
        return found

    def write(self, files: dict[Key, tuple[str, int]]) -> None:
        held: dict[str, int] = {}
        for owner, size in files.values():
            held[owner] = held.get(owner, 0) + size
        data = {"held": held, "files": {f"{d}:{i}": [o, s] for (d, i), (o, s) in files.items()}}
        temp = self.path.with_name(f".{secrets.token_hex(6)}.writing")
        with open(temp, "x", encoding="utf-8") as f:
            f.write(json.dumps(data))  # json.dump to a file encodes in Python, dumps in C: 10 times faster
        os.replace(temp, self.path)  # readers see the old ledger or the new one, never half of one

    @contextmanager
    def locked(self) -> Iterator[None]:
        """One run's end at a time (threads, processes, and Ray workers on a shared file system)."""
        fd = os.open(self.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def held(root: Path) -> dict[str, int]:
    """Bytes charged to each owner in storage dir `root`, as its last run's end recorded them."""
    try:
        with open(root.parent / LEDGER_DIR / f"{root.name}.json", encoding="utf-8") as f:
            found = json.load(f).get("held", {})
        return {str(k): int(v) for k, v in found.items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


# -- one run's account of one storage dir -----------------------------------------------------------
@dataclass
class Limits:
    max_bytes: int  # the whole dir
    max_files: int
    max_mb: int  # for the message
    share: tuple[str, int] | None = None  # (owner, bytes)


@dataclass
class Tally:
    """One walk of the dir, seen from one run."""

    total: int = 0  # bytes of regular files
    entries: int = 0
    own: int = 0  # bytes the run added: its new files in full, the growth of files that were there
    own_entries: int = 0  # entries it created
    pending: int = 0  # bytes of other runs' new files nobody is charged for yet (runs still going)
    pending_entries: int = 0
    held: int = 0  # bytes charged to the run's owner, this run's writes included
    mine: dict[Key, int] = field(default_factory=dict)  # the run's new and changed regular files: size
    sizes: dict[Key, int] = field(default_factory=dict)  # every regular file's size (at the end only)
    partial: bool = False


class Account:
    """One run's account of one writable storage dir: made (and the dir tidied) before the run
    starts, asked while it runs, settled when it has ended."""

    def __init__(self, root: Path, target: str, ledger: Ledger | None, uid: int | None, gid: int | None) -> None:
        self.root, self.target, self.ledger, self.uid, self.gid = root, target, ledger, uid, gid
        self.entries: dict[Key, tuple[int, int, bool]] = {}  # what it held at the start: size, mtime_ns, regular
        self.names: set[tuple[Key, str]] = set()  # (folder, name) of every regular file then
        start = disk.scan(root, tidy=True, gid=gid, seen=self._remember)
        # a file's bytes once, however many names it has (hard links cost nothing more on disk)
        self.bytes = sum(size for size, _, regular in self.entries.values() if regular)
        self.files = start.files
        self.recorded = ledger.read() if ledger is not None else {}
        self.since = 0.0  # when the run started (set by the executor)

    def _remember(self, dir_fd: int, name: str, info: os.stat_result | None) -> None:
        if info is None:
            self.entries.clear()
            self.names.clear()
            return
        self.entries[_key(info)] = (info.st_size, info.st_mtime_ns, stat.S_ISREG(info.st_mode))
        if stat.S_ISREG(info.st_mode):
            self.names.add((_key(os.fstat(dir_fd)), name))

    def whose(self, info: os.stat_result) -> str:
        """NEW: the run made it; OTHER: another run did, since the start walk; CHANGED: a regular
        file that was there and changed while the run went on; OLD: anything else."""
        was = self.entries.get(_key(info))
        changed = info.st_ctime >= self.since  # every write, rename or chmod moves it on
        if was is None:
            # made since the start walk (or moved in later: a pre-existing file of the same uid,
            # unchanged since, is never taken for the run's own)
            return NEW if changed and (self.uid is None or info.st_uid == self.uid) else OTHER
        if changed and was[2] and stat.S_ISREG(info.st_mode) and (info.st_size, info.st_mtime_ns) != was[:2]:
            return CHANGED
        return OLD

    def new_name(self, dir_fd: int, name: str, info: os.stat_result) -> bool:
        """A name the run gave a file that was there (a hard link): linking moves the file's ctime on."""
        return (
            stat.S_ISREG(info.st_mode)
            and info.st_nlink > 1
            and info.st_ctime >= self.since
            and _key(info) in self.entries
            and (_key(os.fstat(dir_fd)), name) not in self.names
        )

    def _count(self, tally: Tally, dir_fd: int, name: str, info: os.stat_result, owner: str | None) -> None:
        key, regular, kind = _key(info), stat.S_ISREG(info.st_mode), self.whose(info)
        tally.entries += 1
        tally.own_entries += kind == NEW or self.new_name(dir_fd, name, info)
        if key in tally.sizes:  # another name of a file counted already: an entry, no more bytes
            return
        size = info.st_size if regular else 0
        tally.total += size
        if regular:
            tally.sizes[key] = size
        if kind in (NEW, CHANGED):
            tally.own += size if kind == NEW else max(0, size - self.entries[key][0])
            tally.held += size
            if regular:
                tally.mine[key] = size
        elif kind == OTHER and key not in self.recorded:
            tally.pending += size
            tally.pending_entries += 1
        elif owner is not None and self.recorded.get(key, ("",))[0] == owner:
            tally.held += size

    def _walk(self, limits: Limits, tidy: bool, enough: Callable[[Tally], bool] | None = None) -> Tally:
        tally, owner = Tally(), limits.share[0] if limits.share else None

        def seen(dir_fd: int, name: str, info: os.stat_result | None) -> None:
            nonlocal tally
            if info is None:  # the walk starts (again): nothing counted yet
                tally = Tally()
            else:
                self._count(tally, dir_fd, name, info, owner)

        usage = disk.scan(
            self.root, tidy=tidy, gid=self.gid, seen=seen, enough=(lambda _: enough(tally)) if enough else None
        )
        tally.partial = usage.partial
        return tally

    def _over(self, t: Tally, limits: Limits, final: bool) -> str | None:
        """Which limit the run's own writes break: "share", "bytes", "files" or None. While it runs,
        only what they prove alone (they only grow, so a walk can stop early); at the end the dir as
        it is, less other runs' new files nobody is charged for yet (those runs answer for them)."""
        if limits.share is not None and t.own > 0 and t.held > limits.share[1]:
            return "share"
        top, most = max(limits.max_bytes, self.bytes), max(limits.max_files, self.files)
        now = t.total - t.pending if final else self.bytes + t.own
        count = t.entries - t.pending_entries if final else self.files + t.own_entries
        if t.own > 0 and now > top:
            return "bytes"
        if t.own_entries > 0 and count > most:
            return "files"
        return None

    # -- while the run goes on, stopping the walk as soon as a limit is broken
    def check(self, limits: Limits) -> str | None:
        tally = self._walk(limits, tidy=False, enough=lambda t: self._over(t, limits, final=False) is not None)
        return self._why(self._over(tally, limits, final=False), tally, limits)

    # -- at the end: the whole dir, tidied; over a limit the run's writes are undone
    def settle(self, limits: Limits) -> str | None:
        with self.ledger.locked() if self.ledger is not None else nullcontext():
            if self.ledger is not None:
                try:
                    self.recorded = self.ledger.read()  # what runs that ended meanwhile recorded
                except LedgerError:
                    disk.scan(self.root, tidy=True, gid=self.gid)  # no set-id file stays, whatever else fails
                    raise
            tally = self._walk(limits, tidy=True)
            why = self._why(self._over(tally, limits, final=True), tally, limits)
            if why is not None:
                self.undo()
                if self.ledger is not None:
                    tally = self._walk(limits, tidy=False)
                    tally.mine.clear()  # what is left of the run's writes stays charged as before
            if self.ledger is not None and limits.share is not None:
                self._record(tally, limits.share[0])
        return why

    def _why(self, over: str | None, t: Tally, limits: Limits) -> str | None:
        more = "at least " if t.partial else ""
        if over == "share" and limits.share is not None:
            owner, share = limits.share
            return (
                f"Storage quota exceeded: your share of {self.target} is {_mb(share)} and {owner}'s files there "
                f"come to {more}{_mb(t.held)} with this run's writes{UNDONE}"
            )
        if over == "bytes":
            size = _mb(max(t.total - t.pending, self.bytes + t.own))
            return (
                f"Storage quota exceeded: {self.target} holds {more}{size}, the limit is {limits.max_mb:,} MB{UNDONE}"
            )
        if over == "files":
            count = max(t.entries - t.pending_entries, self.files + t.own_entries)
            return (
                f"Storage quota exceeded: {self.target} holds {more}{count:,} files, "
                f"the limit is {limits.max_files:,} files{UNDONE}"
            )
        return None

    def _record(self, t: Tally, owner: str) -> None:
        """The ledger after this run: its files charged to its owner, every other recorded file at its
        size now; files gone are dropped (unless the walk was cut short)."""
        files = {key: (owner, size) for key, size in t.mine.items()}
        for key, (who, size) in self.recorded.items():
            if key not in files and (key in t.sizes or t.partial):
                files[key] = (who, t.sizes.get(key, size))
        assert self.ledger is not None
        self.ledger.write(files)

    def undo(self) -> None:
        """Remove the entries the run made and cut the files it grew back to their start sizes;
        never anything another run made (a directory of the run's holding one stays)."""
        for _ in range(disk.WALK_TRIES):
            try:
                for dir_fd, name, info in disk.walk(self.root, on_leave=self._rmdir):
                    kind = self.whose(info)
                    if (kind == NEW and not stat.S_ISDIR(info.st_mode)) or self.new_name(dir_fd, name, info):
                        _unlink(dir_fd, name, info)
                    elif kind == CHANGED and info.st_size > self.entries[_key(info)][0]:
                        _truncate(dir_fd, name, info, self.entries[_key(info)][0])
                return
            except disk.Moved:
                continue

    def _rmdir(self, dir_fd: int, name: str) -> None:
        try:
            if self.whose(os.stat(name, dir_fd=dir_fd, follow_symlinks=False)) == NEW:
                os.rmdir(name, dir_fd=dir_fd)
        except OSError:
            pass  # not empty: another run's entry is inside


def _unlink(dir_fd: int, name: str, info: os.stat_result) -> None:
    try:
        if _key(os.stat(name, dir_fd=dir_fd, follow_symlinks=False)) == _key(info):  # still the one looked at
            os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass


def _truncate(dir_fd: int, name: str, info: os.stat_result, size: int) -> None:
    try:
        fd = os.open(name, WRITE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return
    try:
        if _key(os.fstat(fd)) == _key(info):
            os.ftruncate(fd, size)
    except OSError:
        pass
    finally:
        os.close(fd)
