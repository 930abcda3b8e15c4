"""The tools' side inside the sandbox: performs one tool call and prints what the model reads back.

Standalone on purpose (the standard library only, no station import): the station never imports
this module; it ships the file's text as the code of a fresh sandbox run, followed by one line
`main("<base64 of the call as JSON>")`, so the arguments reach the run inside its own file in its
scratch dir, never on a command line. Exit status 0: the tool did its work; FAILED: it did not (the
text says why). Paths are relative to the working dir; only the mounted folders (`roots`) are
listed, read, searched or written, and writes only where a root is writable. These checks keep the
tools tidy; the boundary itself is the sandbox (read-only mounts, an allow-list root, no network).
"""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

FAILED = 3
LIST_MAX = 500  # entries a listing shows
SEARCH_FILES, SEARCH_BYTES, SEARCH_HITS, SEARCH_LINE = 2000, 2_000_000, 200, 200  # bounds of one search
READ_LINES = 2000  # lines read_file returns when no limit is given
HIDDEN = os.path.basename(__file__)  # this script, in the working dir: not one of the worker's files


class ToolError(Exception):
    """What the model reads when the tool could not do what was asked."""


def main(encoded: str) -> None:
    call = json.loads(base64.b64decode(encoded))
    tool: Callable[[dict[str, Any], list[dict[str, Any]]], tuple[str, bool]] = TOOLS[call["tool"]]
    try:
        text, failed = tool(call["arguments"], call["roots"])
    except ToolError as err:
        text, failed = str(err), True
    except OSError as err:  # the sandbox said no (read-only file system, no such file, ...)
        text, failed = f"{err.strerror or type(err).__name__}: {err.filename or ''}".rstrip(": "), True
    sys.stdout.write(text)
    sys.stdout.flush()
    sys.exit(FAILED if failed else 0)


def resolve(path: str, roots: list[dict[str, Any]], *, writing: bool = False) -> str:
    """`path` with every link followed, if it lies in a root (a writable one when `writing`)."""
    here = os.getcwd()
    real = os.path.realpath(os.path.join(here, path))
    if not writing and real == here:
        return real  # the working dir itself: its listing shows the roots
    for root in roots:
        top = os.path.realpath(os.path.join(here, root["target"]))
        if (real == top or real.startswith(top + os.sep)) and (root["writable"] or not writing):
            return real
    visible = ", ".join(r["target"] for r in roots if r["writable"] or not writing) or "none"
    what = "writable folders" if writing else "folders you can see"
    raise ToolError(f"{path} is outside the {what} ({visible})")


def list_files(args: dict[str, Any], roots: list[dict[str, Any]]) -> tuple[str, bool]:
    top = resolve(args.get("path") or ".", roots)
    if not os.path.isdir(top):
        raise ToolError(f"{args.get('path')} is not a folder")
    lines: list[str] = []
    for folder, dirs, files in os.walk(top):
        dirs.sort()
        rel = os.path.relpath(folder, top)
        for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(folder, d))]:
            full = os.path.join(folder, name)
            if folder == os.getcwd() and name == HIDDEN:
                continue
            shown = name if rel == "." else os.path.join(rel, name)
            if os.path.islink(full):
                lines.append(f"{shown} -> {os.readlink(full)}")
            else:
                lines.append(f"{shown}  ({os.lstat(full).st_size} bytes)")
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(folder, d))]
        lines.extend(f"{d if rel == '.' else os.path.join(rel, d)}/" for d in dirs)
        if len(lines) > LIST_MAX:
            break
    lines.sort()
    if len(lines) > LIST_MAX:
        lines = lines[:LIST_MAX] + ["[more entries not shown: list a subfolder to see them]"]
    return "\n".join(lines) or "(empty folder)", False


def read_file(args: dict[str, Any], roots: list[dict[str, Any]]) -> tuple[str, bool]:
    path = resolve(args["path"], roots)
    first = int(args.get("offset") or 1)
    limit = int(args.get("limit") or READ_LINES)
    kept: list[str] = []
    total = 0
    with open(path, encoding="utf-8", errors="replace") as file:
        for total, line in enumerate(file, start=1):
            if first <= total < first + limit:
                kept.append(line)
    text = "".join(kept)
    if first > 1 or total >= first + limit:
        last = first + len(kept) - 1
        text += f"\n[lines {first}-{last} of {total}; read on with offset]"
    return text or "(empty file)", False


def search(args: dict[str, Any], roots: list[dict[str, Any]]) -> tuple[str, bool]:
    try:
        pattern = re.compile(args["pattern"])
    except re.error as err:
        raise ToolError(f"bad pattern: {err}") from None
    top = resolve(args.get("path") or ".", roots)
    paths = [top] if os.path.isfile(top) else _files_below(top)
    hits: list[str] = []
    for path in paths[:SEARCH_FILES]:
        if os.path.basename(path) == HIDDEN or os.path.islink(path) or os.path.getsize(path) > SEARCH_BYTES:
            continue
        try:
            with open(path, "rb") as file:
                data = file.read()
        except OSError:
            continue  # unreadable here: not the search's business
        if b"\0" in data[:4096]:
            continue  # not text
        shown = os.path.relpath(path)
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
            if pattern.search(line):
                hits.append(f"{shown}:{number}: {line[:SEARCH_LINE]}")
                if len(hits) >= SEARCH_HITS:
                    return "\n".join(hits) + f"\n[stopped at {SEARCH_HITS} matches]", False
    note = f"\n[searched the first {SEARCH_FILES} files only]" if len(paths) > SEARCH_FILES else ""
    return ("\n".join(hits) or "no matches") + note, False


def _files_below(top: str) -> list[str]:
    found: list[str] = []
    for folder, dirs, files in os.walk(top):  # links to folders are not entered
        dirs.sort()
        found.extend(os.path.join(folder, name) for name in sorted(files))
        if len(found) > SEARCH_FILES:
            break
    return found


def write_file(args: dict[str, Any], roots: list[dict[str, Any]]) -> tuple[str, bool]:
    path = resolve(args["path"], roots, writing=True)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = args["content"].encode("utf-8")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as file:
        file.write(data)
    return f"wrote {len(data)} bytes to {args['path']}", False


def run(args: dict[str, Any], roots: list[dict[str, Any]]) -> tuple[str, bool]:
    timeout = float(args["timeout_s"])
    proc = subprocess.Popen(
        ["/bin/sh", "-c", args["command"]],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        try:
            out, _ = proc.communicate(timeout=2)
        except subprocess.TimeoutExpired:  # a child of its own session holds the pipe: the run's end kills it
            out = b""
        text = out.decode("utf-8", "replace")
        return text + f"\n[timed out after {timeout:g} s: the command was stopped]", True
    text = out.decode("utf-8", "replace")
    return text + f"\n[exit status {proc.returncode}]", proc.returncode != 0


TOOLS: dict[str, Callable[[dict[str, Any], list[dict[str, Any]]], tuple[str, bool]]] = {
    "list_files": list_files,
    "read_file": read_file,
    "search": search,
    "write_file": write_file,
    "run": run,
}
