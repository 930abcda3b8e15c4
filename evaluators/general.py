"""The open station's only task: run any Python program, no score (spec research §3.7).

There is nothing to measure, so every run that exits normally "succeeds" with the nominal score
1.0; what matters is the output, which the station keeps in the run's logs.
"""

from __future__ import annotations

import random
from typing import Any

from station.core.run_types import RunResult

from .base import Task, Verdict, register


def scripted_probe(seen: Any, rng: random.Random) -> dict[str, str]:
    """The scripted researcher runs small scripts that print statistics."""
    count = seen.notes["general_runs"] = seen.notes.get("general_runs", 0) + 1
    code = (
        f"import platform, statistics\n"
        f"values = [((i * 7919) % 101) / 10 for i in range({50 * count})]\n"
        f"print('python', platform.python_version())\n"
        f"print('mean', round(statistics.mean(values), 3), 'stdev', round(statistics.stdev(values), 3))\n"
    )
    return {
        "title": f"Small statistics probe {count}",
        "tags": "probe",
        "content": code,
        "abstract": "A short script that prints the interpreter version and summary statistics.",
    }


@register("general_python")
class GeneralPython(Task):
    title = "General Purpose Python Execution"
    description = "Run any Python program; its output is kept in the logs and nothing is scored."
    mode = "command"
    entry = "python submission.py"
    filename = "submission.py"
    timeout_s = 600.0

    @classmethod
    def scripted_submission(cls, shown_title: str, seen: Any, rng: random.Random) -> dict[str, str] | None:
        return scripted_probe(seen, rng)

    def spec(self) -> str:
        return f"""# {self.title}

This station has no research problem to solve. The Research Counter is simply a place to **run
Python code**: to test an idea, compute something, analyse data or build a tool for others.

## How a run works
- Your submission is saved as `{self.filename}` and run with `{self.entry}` in a fresh working directory.
- Whatever it prints (stdout and stderr) is kept in the run's logs, which you can read afterwards. Long
  output is cut to its beginning and end, so print the essentials, or write them to a file.
- Files can be kept between runs under `storage/` (paths relative to the working directory):
  `storage/shared` (shared with everyone), `storage/system` (read-only) and `storage/<your lineage>`,
  within the access rules the station shows you.
- Limits: {self.timeout_s:g} seconds of wall-clock time, {self.memory_mb} MB of memory, one CPU core, no GPU.
  Do not count on network access.

## Result
A run that exits with status 0 is recorded as a success with the score 1.0. That number means nothing:
it only says the program finished. A program that raises an error or exits with another status is
recorded as failed, with its error in the logs.
"""

    def score(self, result: RunResult) -> Verdict:
        if result.status != "ok":  # the parent normally handles these; stay correct if asked anyway
            return Verdict(
                False,
                details=f"The program did not finish normally ({result.error or result.status}); see the run's logs.",
            )
        return Verdict(
            True,
            1.0,
            "The program ran to completion (exit status 0). Nothing is scored here: its output is in the run's logs.",
        )
