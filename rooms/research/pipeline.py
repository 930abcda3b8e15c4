"""One evaluation as a path through recorded inputs: run, and when the code crashed, debug and run again.

The path is a pure function of the inputs recorded so far, so the same walk serves three
callers: the background worker (which produces each missing input: a sandbox run or a
debugger call), the readiness check (which stops at the first missing input), and the
engine when it applies a finished evaluation (every input is there). Keys:

    eval-run/<id>/<version>     a run of version 1 (the author's code) or a debugger version
    eval-debug/<id>/<attempt>   the debugger's proposal after the previous version crashed

The debugger only ever proposes text; its code runs in the sandbox like any submission.
Debugging starts only when the author's code itself crashed (not on a timeout, not on an
evaluator's verdict such as an invalid packing, not on a system error), and stops at the
first version that does not crash, or after `debugger.max_attempts` proposals.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# fetch(key, kind, make) -> the recorded payload, or None when it is missing and may not be
# produced (the readiness check). `make()` produces it (only the worker's fetch calls it).
Fetch = Callable[[str, str, Callable[[], dict[str, Any]]], "dict[str, Any] | None"]
RunCode = Callable[[int, str], dict[str, Any]]  # (version, code) -> run payload
Debug = Callable[[int, "Trail"], dict[str, Any]]  # (attempt, the path so far) -> debug payload


def run_key(evaluation: int, version: int) -> str:
    return f"eval-run/{evaluation}/{version}"


def debug_key(evaluation: int, attempt: int) -> str:
    return f"eval-debug/{evaluation}/{attempt}"


@dataclass
class Version:
    number: int
    source: str  # "author" or "debugger"
    code: str
    key: str
    result: dict[str, Any]  # the run payload (see worker.run_payload)

    @property
    def crashed(self) -> bool:
        return self.result.get("status") == "error"


@dataclass
class Trail:
    """Every version of one evaluation that ran, in order, and the debugger's proposals between them."""

    versions: list[Version]
    proposals: list[dict[str, Any]] = field(default_factory=list)  # debug payloads, in order

    @property
    def debugged(self) -> bool:
        return bool(self.proposals)

    @property
    def reported(self) -> Version:
        """The version the author hears about: a debugger version that no longer crashes, else the original."""
        last = self.versions[-1]
        return last if last.number > 1 and not last.crashed else self.versions[0]


def may_debug(row: Any, first: dict[str, Any], enabled: bool) -> bool:
    return enabled and not row["no_debugger"] and first.get("status") == "error"


def walk(
    row: Any, fetch: Fetch, *, run_code: RunCode | None, debug: Debug | None, debugger_enabled: bool, max_attempts: int
) -> Trail | None:
    """The evaluation's outcome, or None as soon as an input is missing (and `fetch` may not make it)."""
    number = row["id"]

    def run(version: int, source: str, code: str) -> Version | None:
        key = run_key(number, version)
        payload = fetch(key, "eval_run", lambda: _need(run_code)(version, code))
        return None if payload is None else Version(version, source, code, key, payload)

    first = run(1, "author", row["code"])
    if first is None:
        return None
    outcome = Trail([first])
    if not may_debug(row, first.result, debugger_enabled):
        return outcome
    for attempt in range(1, max_attempts + 1):
        so_far = Trail(list(outcome.versions), list(outcome.proposals))

        def propose(attempt: int = attempt, so_far: Trail = so_far) -> dict[str, Any]:
            return _need(debug)(attempt, so_far)

        proposal = fetch(debug_key(number, attempt), "eval_debug", propose)
        if proposal is None:
            return None
        outcome.proposals.append(proposal)
        code = proposal.get("code")
        if not code:
            break  # the debugger gave up (or failed): the original is reported
        version = run(attempt + 1, "debugger", code)
        if version is None:
            return None
        outcome.versions.append(version)
        if not version.crashed:
            break
    return outcome


def _need(fn: Callable | None) -> Callable:
    if fn is None:
        raise RuntimeError("this walk may not produce inputs")
    return fn
