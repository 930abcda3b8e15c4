"""The Research Counter's file store: its layout, the path grammar agents use, and safe file access.

On disk (under the station's files/):

    research/storage/shared/              everyone: read and write (actions and code)
    research/storage/system/              task files: read-only for agents and code
    research/storage/lineages/<lineage>/  one per lineage (lower case): its own agents write,
                                          other lineages may read when the station allows it
    research/storage/.shares/             the station's ledger of who holds what in shared/
                                          (station/executors/shares.py); no run or agent sees it

Agents name files as `<area>/<path>`: a leading `/storage/`, `storage/` or `/` is dropped, the
first segment is the area (`shared`, `system`, `lineage` for the agent's own lineage, or a
lineage name in any case) and the rest is the path inside it. Submitted code sees the same
areas as `storage/shared`, `storage/system`, `storage/<lineage>` and `storage/lineage`
(see `code_areas`).

Containment does not trust the path text: '..' segments, absolute paths, control characters
and backslashes are refused; the resolved target must lie inside the resolved area root
(`Path.is_relative_to`, not a string prefix); and the actual file operations walk from the
storage root one directory at a time with O_NOFOLLOW, so a symbolic link planted by running
code (even one swapped in after the check) is never followed. Links are listed as nothing and
refused by read, write and delete.
"""

from __future__ import annotations

import errno
import functools
import os
import re
import secrets
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from station.core.run_types import RunResult, RunSpec
from station.executors.runfiles import regular_files
from station.executors.shares import LEDGER_DIR

SHARED, SYSTEM, LINEAGE = "shared", "system", "lineage"
LINEAGES_DIR = "lineages"
LIST_PAGE_SIZE = 500
MAX_WALK = 50_000  # files looked at by one listing or count; more are reported as "at least"
MAX_PATH_CHARS = 1024
MAX_SEGMENT_BYTES = 255
DIR_MODE, FILE_MODE = 0o775, 0o664  # the sandbox runs code as another uid: never 0600
_BAD_CHARS = re.compile(r"[\x00-\x1f\x7f\\]")
_LINEAGE_NAME = re.compile(r"[a-z]+")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class StorageError(ValueError):
    """A refused or failed storage operation, worded for the agent."""


def _filesystem_errors(operation):
    """Whatever the file system raises (running code changes it under us: link loops, names too
    long, a full disk) becomes a StorageError for the agent instead of an exception in the room."""

    @functools.wraps(operation)
    def guarded(root, loc, *args, **kwargs):
        try:
            return operation(root, loc, *args, **kwargs)
        except (OSError, RuntimeError) as err:  # Path.resolve raises RuntimeError on a link loop
            why = (
                os.strerror(err.errno)
                if isinstance(err, OSError) and err.errno
                else "it leads through a loop of links"
                if isinstance(err, RuntimeError)
                else "it failed"
            )
            raise StorageError(f"'{loc.display}' could not be used: {why[0].lower()}{why[1:]}") from None

    return guarded


def storage_root(files: Path) -> Path:
    """The storage root of a station, from its files/ folder (`ctx.store.files`)."""
    return Path(files) / "research" / "storage"


def ensure_layout(root: Path) -> None:
    for part in (SHARED, SYSTEM, LINEAGES_DIR):
        _make_dir(root / part)
    ledger = root / LEDGER_DIR
    if not ledger.is_dir():
        ledger.mkdir(mode=0o700, exist_ok=True)
        os.chmod(ledger, 0o700)  # the station's alone: the executor refuses a ledger others could write


def _make_dir(path: Path) -> None:
    if not path.is_dir():
        path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        os.chmod(path, DIR_MODE)


# -- the path grammar -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Location:
    """A parsed storage path: an area (None: the storage root itself) and the segments inside it."""

    area: str | None  # shared / system / lineage (then `lineage` names which one)
    lineage: str | None = None  # lower-case lineage directory name
    parts: tuple[str, ...] = ()

    @property
    def area_label(self) -> str:
        return self.lineage if self.area == LINEAGE and self.lineage else (self.area or "")

    @property
    def display(self) -> str:
        if self.area is None:
            return "storage/"
        inner = "/".join(self.parts)
        return f"{self.area_label}/{inner}" if inner else f"{self.area_label}/"

    def area_segments(self) -> tuple[str, ...]:
        if self.area == LINEAGE:
            return (LINEAGES_DIR, self.lineage or "")
        return (self.area,) if self.area else ()

    def area_dir(self, root: Path) -> Path:
        return root.joinpath(*self.area_segments())


def parse_path(text: str | None, own_lineage: str | None) -> Location:
    """Parse an agent's storage path; raises StorageError with the reason."""
    raw = (text or "").strip()
    if len(raw) > MAX_PATH_CHARS:
        raise StorageError(f"the path is {len(raw)} characters long; at most {MAX_PATH_CHARS} are allowed")
    if _BAD_CHARS.search(raw):
        raise StorageError("paths may not contain backslashes or control characters; separate folders with '/'")
    lowered = raw.lower()
    for prefix in ("/storage/", "storage/", "/"):
        if lowered.startswith(prefix):
            raw = raw[len(prefix) :]
            break
    if raw.lower() in ("storage", "/storage"):
        raw = ""
    if raw.startswith("/"):
        raise StorageError(
            "absolute paths are not allowed; start with an area: shared/, system/, lineage/ or a lineage name"
        )
    segments = [s for s in raw.split("/") if s not in ("", ".")]
    if any(s == ".." for s in segments):
        raise StorageError("'..' is not allowed in storage paths")
    for s in segments:
        if len(s.encode("utf-8")) > MAX_SEGMENT_BYTES:
            raise StorageError(f"the name '{s[:40]}...' is too long")
    if not segments:
        return Location(None)
    head, rest = segments[0].lower(), tuple(segments[1:])
    if head in (SHARED, SYSTEM):
        return Location(head, None, rest)
    if head == LINEAGE:
        if not own_lineage:
            raise StorageError("you have no lineage, so 'lineage/' names nothing")
        return Location(LINEAGE, own_lineage.lower(), rest)
    if not _LINEAGE_NAME.fullmatch(head):
        raise StorageError(
            f"unknown storage area '{segments[0][:40]}': start with shared/, system/, lineage/ or a lineage name"
        )
    return Location(LINEAGE, head, rest)


# -- containment ------------------------------------------------------------------------------------
@_filesystem_errors
def contained(root: Path, loc: Location) -> Path:
    """The target path, after checking that it resolves inside its area (symlinks resolved)."""
    base = root.resolve().joinpath(*loc.area_segments())
    if base.resolve() != base:  # an area folder is never a link
        raise StorageError(f"'{loc.display}' leads outside its area")
    target = base.joinpath(*loc.parts).resolve()
    if not target.is_relative_to(base):
        raise StorageError(f"'{loc.display}' leads outside its area")
    return target


def _walk_to(root: Path, segments: tuple[str, ...], *, create: bool) -> int:
    """An open fd of root/segments..., one directory at a time, never following a link."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for name in segments:
            try:
                nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(name, DIR_MODE, dir_fd=fd)
                nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
                os.fchmod(nfd, DIR_MODE)
            except OSError as err:
                if err.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise StorageError(f"'{name}' is not a folder (links are not followed)") from None
                raise StorageError(f"'{name}' cannot be opened") from None
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _parent_fd(root: Path, loc: Location, *, create: bool = False) -> tuple[int, str]:
    if loc.area is None or not loc.parts:
        raise StorageError("name a file inside an area, e.g. shared/notes.txt")
    contained(root, loc)
    ensure_layout(root)
    segments = loc.area_segments() + loc.parts[:-1]
    try:
        return _walk_to(root, segments, create=create), loc.parts[-1]
    except FileNotFoundError:
        raise StorageError(f"'{loc.display}' not found") from None


# -- operations -------------------------------------------------------------------------------------
@dataclass
class ReadResult:
    text: str
    size: int  # bytes on disk
    truncated: bool


@_filesystem_errors
def read_text(root: Path, loc: Location, max_chars: int) -> ReadResult:
    fd, name = _parent_fd(root, loc)
    try:
        try:
            ffd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), dir_fd=fd)
        except FileNotFoundError:
            raise StorageError(f"'{loc.display}' not found") from None
        except OSError:
            raise StorageError(f"'{loc.display}' cannot be read (links are not followed)") from None
    finally:
        os.close(fd)
    try:
        info = os.fstat(ffd)
        if stat.S_ISDIR(info.st_mode):
            raise StorageError(f"'{loc.display}' is a folder; use `storage list {loc.display}`")
        if not stat.S_ISREG(info.st_mode):
            raise StorageError(f"'{loc.display}' is not a regular file")
        budget = max_chars * 4 + 4
        chunks, got = [], 0
        while got < budget:
            chunk = os.read(ffd, min(1 << 20, budget - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
        data = b"".join(chunks)
        more = bool(os.read(ffd, 1)) if got >= budget else False
    finally:
        os.close(ffd)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        if more and err.start >= len(data) - 3 and err.reason == "unexpected end of data":
            text = data[: err.start].decode("utf-8", errors="strict")
        else:
            raise StorageError(f"'{loc.display}' is not a UTF-8 text file; only text can be shown") from None
    if "\x00" in text:
        raise StorageError(f"'{loc.display}' is a binary file; only text can be shown")
    truncated = more or len(text) > max_chars
    return ReadResult(text[:max_chars], info.st_size, truncated)


@_filesystem_errors
def write_text(root: Path, loc: Location, content: str) -> bool:
    """Write (atomically) a UTF-8 text file; True if it was created, False if overwritten."""
    data = content.encode("utf-8")
    fd, name = _parent_fd(root, loc, create=True)
    try:
        try:
            existing = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            existing = None
        if existing is not None and stat.S_ISDIR(existing.st_mode):
            raise StorageError(f"'{loc.display}' is a folder")
        temp = f".{secrets.token_hex(6)}.writing"
        tfd = os.open(
            temp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
            FILE_MODE,
            dir_fd=fd,
        )
        try:
            os.fchmod(tfd, FILE_MODE)
            view = memoryview(data)
            while view:
                view = view[os.write(tfd, view) :]
        finally:
            os.close(tfd)
        try:
            os.rename(temp, name, src_dir_fd=fd, dst_dir_fd=fd)  # replaces a link itself, never its target
        except OSError:
            os.unlink(temp, dir_fd=fd)
            raise StorageError(f"'{loc.display}' could not be written") from None
        return existing is None
    finally:
        os.close(fd)


@_filesystem_errors
def delete_file(root: Path, loc: Location) -> None:
    fd, name = _parent_fd(root, loc)
    try:
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            raise StorageError(f"'{loc.display}' not found") from None
        if stat.S_ISDIR(info.st_mode):
            raise StorageError(f"'{loc.display}' is a folder; only files can be deleted")
        os.unlink(name, dir_fd=fd)
    finally:
        os.close(fd)


@dataclass
class Listing:
    files: list[tuple[str, int]]  # (path relative to the listed folder, size in bytes), sorted
    complete: bool  # False when the walk stopped at MAX_WALK files or left out folders nested too deep


@_filesystem_errors
def list_files(root: Path, loc: Location) -> Listing | None:
    """Every regular file under the folder (recursively, links skipped, *.pyc skipped); None if missing."""
    if loc.area is None:
        raise StorageError("name an area to list: shared, system, lineage or a lineage name")
    target = contained(root, loc)
    ensure_layout(root)
    try:
        fd = _walk_to(root, loc.area_segments() + loc.parts, create=False)
    except FileNotFoundError:
        return None
    except StorageError:
        if target.is_file():
            raise StorageError(f"'{loc.display}' is a file; use `storage read {loc.display}`") from None
        raise
    try:
        files, complete = _collect(fd)
    finally:
        os.close(fd)
    files.sort()
    return Listing(files, complete)


def _collect(fd: int) -> tuple[list[tuple[str, int]], bool]:
    # without recursion and at most 64 folders deep (runfiles): a run's 3000-deep tree made os.fwalk
    # raise RecursionError, and every agent's listing of the area failed
    return regular_files(fd, MAX_WALK, keep=lambda name: not name.endswith(".pyc"))


@_filesystem_errors
def area_usage(root: Path, loc: Location) -> tuple[int, int, bool]:
    """(file count, total bytes, complete) of an area; zeros when it does not exist yet."""
    listing = list_files(root, Location(loc.area, loc.lineage))
    if listing is None:
        return 0, 0, True
    return len(listing.files), sum(size for _, size in listing.files), listing.complete


def lineage_dirs(root: Path) -> list[str]:
    """The lineage folders that exist (real directories with a valid name), sorted."""
    folder = root / LINEAGES_DIR
    if not folder.is_dir():
        return []
    return sorted(
        p.name for p in folder.iterdir() if _LINEAGE_NAME.fullmatch(p.name) and p.is_dir() and not p.is_symlink()
    )


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


# -- what submitted code sees -----------------------------------------------------------------------
def code_areas(root: Path, lineage: str | None, cross_lineage: bool) -> list[tuple[Path, str, bool]]:
    """The storage mounts of a run: (host dir, target relative to the run's working dir, writable).

    shared is writable, system read-only; the author's lineage is writable at both
    storage/<lineage lower case> and storage/lineage; other lineages are read-only, and only
    when `cross_lineage` (the caller decides: the station's flag, the author's maturity).
    Missing folders are created.
    """
    root = Path(root)
    ensure_layout(root)
    areas: list[tuple[Path, str, bool]] = [
        (root / SHARED, f"storage/{SHARED}", True),
        (root / SYSTEM, f"storage/{SYSTEM}", False),
    ]
    own = lineage.lower() if lineage else None
    if own is not None:
        if not _LINEAGE_NAME.fullmatch(own) or own in (SHARED, SYSTEM, LINEAGE):
            raise ValueError(f"not a lineage name: {lineage!r}")
        mine = root / LINEAGES_DIR / own
        _make_dir(mine)
        areas += [(mine, f"storage/{own}", True), (mine, f"storage/{LINEAGE}", True)]
    if cross_lineage:
        for name in lineage_dirs(root):
            if name != own and name not in (SHARED, SYSTEM, LINEAGE):
                areas.append((root / LINEAGES_DIR / name, f"storage/{name}", False))
    return areas


# -- who a run's writes are charged to ---------------------------------------------------------------
class Charged:
    """An executor whose runs charge their writes to shared/ to `owner` (a lineage, or an agent
    without one): each owner may hold `share` (a fraction) of a run's storage limit there, and a
    run that pushes its owner past that fails and its writes are undone (station/executors/shares.py).
    Everything else is the wrapped executor's."""

    def __init__(self, executor: Any, owner: str, share: float) -> None:
        self.executor, self.owner, self.share = executor, owner, share

    def charge(self, spec: RunSpec) -> RunSpec:
        return replace(spec, storage_share=(self.owner, max(1, int(spec.max_storage_mb * self.share))))

    def run(self, spec: RunSpec) -> RunResult:
        return self.executor.run(self.charge(spec))

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.executor, name)
        if name == "trial_place":  # Ray's two-stage trials run through a place of their own: charged alike
            return self._placed(found)
        return found

    def _placed(self, place: Callable[..., Any]) -> Callable[..., Any]:
        @contextmanager
        def placed(*args: Any, **kwargs: Any) -> Iterator[_ChargedPlace]:
            with place(*args, **kwargs) as trial:
                yield _ChargedPlace(trial, self)

        return placed


class _ChargedPlace:
    """A trial's place whose runs are charged like the executor's (its folders and the rest as they are)."""

    def __init__(self, trial: Any, charged: Charged) -> None:
        self.trial, self.charged = trial, charged

    def run(self, spec: RunSpec) -> RunResult:
        return self.trial.run(self.charged.charge(spec))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.trial, name)


def share_owner(lineage: str | None, author: str) -> str:
    """Who an author's writes to shared/ are charged to: the lineage, whose successors inherit its
    files (and can delete them), or the author when it has none (System baselines)."""
    return lineage.lower() if lineage else author
