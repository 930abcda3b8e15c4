"""What comes back from a sandbox: bounded stream capture and the safe loading of results.

Everything in a run's results dir may have been written, or forged, by the submitted code. It
is read as data only: files are opened without following links and must be regular files
within size caps, the manifest is JSON, arrays are `.npy` read with `allow_pickle=False` after
their header was checked (numeric or bool dtype, size matching the file). Nothing is ever
unpickled or imported from the sandbox.
"""

from __future__ import annotations

import json
import math
import os
import stat
from dataclasses import dataclass
from typing import Any, BinaryIO

MANIFEST = "result.json"  # the harness's name for it
STATUS_FILE = "status.json"  # sandbox_init's name for it
MAX_MANIFEST_BYTES = 16 << 20
MAX_STATUS_BYTES = 64 << 10
MAX_ARRAYS = 1000
MAX_TOTAL_ARRAY_BYTES = 2 << 30
ARRAY_KINDS = "biufc"


class ResultRefused(Exception):
    """The results dir holds something that is not a well-formed, bounded result."""


class StreamCapture:
    """Keeps the first and the last `limit / 2` bytes of a stream, and counts the rest."""

    def __init__(self, limit: int) -> None:
        self.head_limit = limit // 2
        self.tail_limit = limit - self.head_limit
        self.head, self.tail = bytearray(), bytearray()
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        self.tail += data
        if len(self.tail) > 2 * self.tail_limit:  # trim in batches: amortised O(1) per byte
            del self.tail[: len(self.tail) - self.tail_limit]

    def text(self) -> str:
        kept = self.tail[max(0, len(self.tail) - self.tail_limit) :]
        cut = self.total - len(self.head) - len(kept)
        head, tail = self.head.decode("utf-8", "replace"), bytes(kept).decode("utf-8", "replace")
        return f"{head}\n[... {cut:,} bytes cut ...]\n{tail}" if cut else head + tail


@dataclass
class HarnessRecord:
    status: str  # "ok" or "error"
    value: Any = None
    error: str | None = None
    traceback: str | None = None


def open_regular(dir_fd: int, name: str, limit: int) -> tuple[BinaryIO, int]:
    """A regular file (links, FIFOs and devices refused) of at most `limit` bytes, and its size."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    f = os.fdopen(fd, "rb")
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
        f.close()
        what = "not a regular file" if not stat.S_ISREG(info.st_mode) else f"{info.st_size:,} bytes (limit {limit:,})"
        raise ResultRefused(f"{name} is {what}")
    return f, info.st_size


def read_bounded(dir_fd: int, name: str, limit: int) -> bytes:
    f, _size = open_regular(dir_fd, name, limit)
    with f:
        return f.read(limit)


def read_status(run_dir: str) -> dict[str, Any] | None:
    """sandbox_init's record of how the code's process ended, or None if it wrote none."""
    fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        record = json.loads(read_bounded(fd, STATUS_FILE, MAX_STATUS_BYTES))
    except (FileNotFoundError, ResultRefused, ValueError):
        return None
    finally:
        os.close(fd)
    return record if isinstance(record, dict) else None


class _ArrayReader:
    """Loads the arrays a manifest refers to. Every reference counts against the limits, as if it
    were a file of its own: one file referred to a thousand times is a thousand arrays to whatever
    reads the value (a scorer's np.asarray stacks them), so it is refused as a thousand would be."""

    def __init__(self, dir_fd: int, max_array_bytes: int, max_total_bytes: int) -> None:
        self.dir_fd, self.max_array_bytes, self.max_total_bytes = dir_fd, max_array_bytes, max_total_bytes
        self.loaded: dict[int, tuple[Any, int]] = {}  # index -> (array, its file's size)
        self.references = 0
        self.total = 0

    def get(self, index: Any) -> Any:
        if type(index) is not int or not 0 <= index < MAX_ARRAYS:
            raise ResultRefused(f"bad array reference {index!r}")
        self.references += 1
        if self.references > MAX_ARRAYS:
            raise ResultRefused(f"the manifest refers to arrays more than {MAX_ARRAYS:,} times")
        if index not in self.loaded:
            self.loaded[index] = self._load(f"{index}.npy")
        array, size = self.loaded[index]
        self.total += size
        if self.total > self.max_total_bytes:
            raise ResultRefused(
                f"the arrays are too large together: {self.total:,} bytes counted over {self.references:,} "
                f"references (limit {self.max_total_bytes:,})"
            )
        return array

    def _load(self, name: str) -> tuple[Any, int]:
        from numpy.lib import format as npy

        f, size = open_regular(self.dir_fd, name, self.max_array_bytes)
        with f:
            if self.total + size > self.max_total_bytes:  # before reading it
                raise ResultRefused("the arrays are too large together")
            try:
                version = npy.read_magic(f)
                header = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}.get(version)
                if header is None:
                    raise ResultRefused(f"{name}: unsupported .npy version {version}")
                shape, _fortran, dtype = header(f)
                if dtype.hasobject or dtype.kind not in ARRAY_KINDS:
                    raise ResultRefused(f"{name}: dtype {dtype} is not numeric")
                if math.prod(shape) * dtype.itemsize != size - f.tell():
                    raise ResultRefused(f"{name}: the data does not match the header")
                f.seek(0)
                return npy.read_array(f, allow_pickle=False), size
            except (ValueError, TypeError, OSError, EOFError) as err:
                raise ResultRefused(f"{name}: {err}") from None


def _decode(node: Any, arrays: _ArrayReader) -> Any:
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if isinstance(node, list):
        return [_decode(v, arrays) for v in node]
    if isinstance(node, dict) and len(node) == 1:
        if isinstance(node.get("dict"), dict):
            return {k: _decode(v, arrays) for k, v in node["dict"].items()}
        if isinstance(node.get("tuple"), list):
            return tuple(_decode(v, arrays) for v in node["tuple"])
        if "npy" in node:
            return arrays.get(node["npy"])
    raise ResultRefused("malformed value in the manifest")


def load_result(
    out_dir: str, max_array_bytes: int, max_total_bytes: int = MAX_TOTAL_ARRAY_BYTES
) -> HarnessRecord | None:
    """The harness's record (None when it wrote none); raises ResultRefused for anything malformed.
    The executor checks the size of the whole results dir before it calls this."""
    fd = os.open(out_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        try:
            raw = read_bounded(fd, MANIFEST, MAX_MANIFEST_BYTES)
        except FileNotFoundError:
            return None
        try:
            record = json.loads(raw)
        except (ValueError, RecursionError) as err:
            raise ResultRefused(f"the manifest is not JSON: {err}") from None
        if not isinstance(record, dict) or record.get("status") not in ("ok", "error"):
            raise ResultRefused("the manifest has no valid status")
        if record["status"] == "error":
            error, tb = record.get("error"), record.get("traceback")
            if not isinstance(error, str) or not isinstance(tb, (str, type(None))):
                raise ResultRefused("malformed error record")
            return HarnessRecord("error", error=error, traceback=tb)
        try:
            value = _decode(record.get("value"), _ArrayReader(fd, max_array_bytes, max_total_bytes))
        except RecursionError:
            raise ResultRefused("the value is nested too deeply") from None
        return HarnessRecord("ok", value=value)
    finally:
        os.close(fd)
