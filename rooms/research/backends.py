"""The research coder's back-ends (`research.coder.backend`, docs/coder.md "Back-ends").

A back-end makes and reads a coder session: `work` produces its missing inputs on the evaluation
worker's thread (model calls, tool runs, official attempts), `recorded` walks what is recorded,
producing nothing (the readiness check, the engine applying it, a replay). Both must agree: the
session is a pure function of its inputs. `tools` is the station's own tool loop (coder.py),
`command` an installed command-line coder (coder_command.py); a package listed under the entry
points `station.plugins` may register more here, as it may add tasks and rooms.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from station.core.registry import PLUGINS, Registry
from station.workers.sandbox_tools import SandboxTools
from station.workers.session import Fetch

from . import coder


class CoderBackend(Protocol):
    def recorded(self, row: Any, fetch: Fetch, *, texts: Any, task: Any, research: Any) -> coder.Outcome | None:
        """The session of evaluation `row` as recorded so far (None: an input is missing)."""
        ...

    def work(self, worker: Any, store: Any, row: Any, task: Any, fetch: Fetch) -> None:
        """Produce the session's missing inputs through `fetch` (the evaluation worker's)."""
        ...


CODER_BACKENDS: Registry[CoderBackend] = Registry("research coder back-end", plugins=PLUGINS)


@CODER_BACKENDS.register("tools")
class ToolsBackend:
    """The station's tool loop: a model with tools, each tool call one sandbox run (coder.py)."""

    @staticmethod
    def recorded(row: Any, fetch: Fetch, *, texts: Any, task: Any, research: Any) -> coder.Outcome | None:
        return coder.walk(
            row,
            fetch,
            texts=texts,
            task=task,
            cfg=research.coder,
            max_code_chars=research.max_code_chars,
            sandbox=SandboxTools(None, []),  # only its recorded results are read
            workspace=Path(),
            opening_text="",
            call=None,
            run_attempt=None,
        )

    @staticmethod
    def work(worker: Any, store: Any, row: Any, task: Any, fetch: Fetch) -> None:
        worker.tools_session(store, row, task, fetch)


CODER_BACKENDS.lazy("command", "rooms.research.coder_command:CommandBackend")
