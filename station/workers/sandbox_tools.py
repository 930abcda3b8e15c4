"""The file and command tools of a worker: each call is one fresh sandbox run that sees only the surfaces.

A call's arguments are untrusted bytes from a model: they are checked here (types, sizes) before
anything runs, and a bad one is an error result the model reads, never an exception. A good call
runs tool_helper.py (standalone, inside the sandbox) through the station's own executor, with the
surfaces as the run's mounts: the sandbox, not this code, keeps the worker from writing a read-only
surface, from reading what no surface mounts and from following a link out (docs/workers.md).
"""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from station.core.model_api import Tool
from station.core.run_types import Mount, RunResult, RunSpec
from station.workers.texts import worker_text

HELPER = Path(__file__).with_name("tool_helper.py")
HELPER_FILE = "station_tool.py"  # its name in the run's working dir (hidden from listings)
FAILED = 3  # the helper's exit status when the tool could not do what was asked
MARGIN_S = 10.0  # the run's own time limit beyond the command's: starting the sandbox, reading back
MAX_PATH, MAX_PATTERN = 4096, 1000  # characters
MAX_CONTENT, MAX_COMMAND = 1_000_000, 10_000  # bytes (UTF-8)

# Each tool's arguments: name -> (JSON Schema type, required, bound: characters or bytes, 1 for >= 1).
ARGUMENTS: dict[str, dict[str, tuple[str, bool, int]]] = {
    "list_files": {"path": ("string", False, MAX_PATH)},
    "read_file": {"path": ("string", True, MAX_PATH), "offset": ("integer", False, 1), "limit": ("integer", False, 1)},
    "search": {"pattern": ("string", True, MAX_PATTERN), "path": ("string", False, MAX_PATH)},
    "write_file": {"path": ("string", True, MAX_PATH), "content": ("string", True, MAX_CONTENT)},
    "run": {"command": ("string", True, MAX_COMMAND), "timeout_s": ("number", False, 1)},
}


class SandboxUnavailable(RuntimeError):
    """The executor itself failed (a system error): the machine's fault, not the call's. Nothing is
    recorded; the caller pauses the station as it does for an evaluation's system error."""


@dataclass(frozen=True)
class Surface:
    """A host folder the worker sees at `target` (relative to its working dir), writable or not."""

    target: str  # "workspace", "storage/shared", "records"
    source: Path
    writable: bool = False


class SandboxTools:
    """list_files, read_file, search, write_file and run, each call one fresh run of `executor`
    (the station's own: the same allow-list root, limits and no network) seeing only `surfaces`.
    `spec` lets a caller put its own mounts, environment and limits on every run."""

    def __init__(
        self,
        executor: Any,
        surfaces: list[Surface],
        *,
        command_timeout_s: float = 60,
        output_chars: int = 8000,
        spec: Callable[[RunSpec], RunSpec] | None = None,
        label: str = "worker",
    ) -> None:
        self.executor, self.surfaces, self.spec, self.label = executor, surfaces, spec, label
        self.command_timeout_s, self.output_chars = command_timeout_s, output_chars

    def tools(self) -> list[Tool]:
        seen = ", ".join(f"{s.target} ({'writable' if s.writable else 'read-only'})" for s in self.surfaces)
        writable = ", ".join(s.target for s in self.surfaces if s.writable) or "none"
        timeout = f"{self.command_timeout_s:g} s"
        return [
            Tool(
                name,
                worker_text(f"tool_{name}", surfaces=writable if name == "write_file" else seen, timeout=timeout),
                _schema(arguments),
            )
            for name, arguments in ARGUMENTS.items()
        ]

    def handle(
        self, turn: int, index: int, call: dict[str, Any], fetch: Callable[..., dict[str, Any] | None], prefix: str
    ) -> dict[str, Any] | None:
        """The recorded result of the call (made by a run when `fetch` may produce it), or None."""
        return fetch(f"{prefix}/tool/{turn}/{index}", "worker_tool", lambda: self.run(call))

    def run(self, call: dict[str, Any]) -> dict[str, Any]:
        """{"text": what the model reads, "error": bool}. Bad arguments never reach a sandbox."""
        name, arguments = call.get("name"), call.get("arguments")
        problem = _invalid(name, arguments)
        if problem is not None:
            return {"text": problem, "error": True}
        assert isinstance(name, str) and isinstance(arguments, dict)
        arguments = dict(arguments)
        if name == "run":
            arguments["timeout_s"] = min(
                float(arguments.get("timeout_s") or self.command_timeout_s), self.command_timeout_s
            )
        result = self.executor.run(self._spec(name, arguments))
        return self._result(result)

    def _spec(self, name: str, arguments: dict[str, Any]) -> RunSpec:
        spec = RunSpec(
            code="",
            mode="command",
            entry=f"python -I {HELPER_FILE}",
            filename=HELPER_FILE,
            mounts=[Mount(s.source, s.target, s.writable) for s in self.surfaces],
            timeout_s=self.command_timeout_s + MARGIN_S,
            max_output_bytes=max(4 * self.output_chars, 65_536),
            label=f"{self.label}-{name.replace('_', '-')}",
        )
        if self.spec is not None:
            spec = self.spec(spec)
        roots = [{"target": m.target, "writable": m.writable} for m in spec.mounts]
        call = json.dumps({"tool": name, "arguments": arguments, "roots": roots}, ensure_ascii=True)
        encoded = base64.b64encode(call.encode("ascii")).decode("ascii")  # no quote or backslash can appear
        return dataclasses.replace(spec, code=f'{HELPER.read_text(encoding="utf-8")}\n\nmain("{encoded}")\n')

    def _result(self, result: RunResult) -> dict[str, Any]:
        if result.status == "system_error":
            raise SandboxUnavailable(f"a worker's tool run could not be made: {result.error}")
        if result.status == "ok":
            return {"text": cut(result.stdout, self.output_chars), "error": False}
        if result.status == "error" and result.exit_code == FAILED:
            return {"text": cut(result.stdout, self.output_chars), "error": True}
        told = "\n".join(part for part in (result.error, result.stdout, result.stderr) if part)
        return {"text": cut(f"The tool's sandbox run failed: {told}", self.output_chars), "error": True}


def cut(text: str, limit: int) -> str:
    """`text` within `limit` characters: its head and tail, saying how much was left out between."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half:,} characters cut ...]\n{text[-half:]}"


def _schema(arguments: dict[str, tuple[str, bool, int]]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: {"type": kind} for name, (kind, _, _) in arguments.items()},
        "required": [name for name, (_, required, _) in arguments.items() if required],
    }


def _invalid(name: Any, arguments: Any) -> str | None:
    """Why the call cannot run (one line), or None."""
    if name not in ARGUMENTS:
        return f"unknown tool {name!r}; the tools are {', '.join(ARGUMENTS)}"
    if not isinstance(arguments, dict):
        return f"{name}: the arguments must be an object"
    expected = ARGUMENTS[name]
    unknown = sorted(set(arguments) - set(expected))
    if unknown:
        return f"{name}: unknown argument(s) {', '.join(map(str, unknown))}; it takes {', '.join(expected)}"
    for key, (kind, required, bound) in expected.items():
        value = arguments.get(key)
        if value is None:
            if required:
                return f"{name}: `{key}` is required"
            continue
        problem = _bad_value(key, kind, bound, value)
        if problem is not None:
            return f"{name}: {problem}"
    return None


def _bad_value(key: str, kind: str, bound: int, value: Any) -> str | None:
    if kind == "string":
        if not isinstance(value, str):
            return f"`{key}` must be a string"
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            return f"`{key}` is not valid text (a lone surrogate)"
        if size > bound:
            return f"`{key}` is {size:,} bytes; at most {bound:,}"
        if "\0" in value and key != "content":
            return f"`{key}` must not hold a NUL character"
        return None
    numeric = (int,) if kind == "integer" else (int, float)
    if isinstance(value, bool) or not isinstance(value, numeric) or not value >= bound:
        return f"`{key}` must be {'an integer' if kind == 'integer' else 'a number'} of at least {bound}"
    return None
