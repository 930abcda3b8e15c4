"""One survey as a worker session: the folders the surveyor reads, its tools, and the walk.

The session is station.workers' walk under the prefix `survey/<N>`: every model reply and tool
result is a recorded input, so the same walk serves the background worker (which produces what
is missing), the readiness check and the engine applying a finished survey (which only read).
Its tools are the sandbox's file tools over three folders the worker writes before the first
call, `archive/` and `evaluations/` (read-only: what the request fixed, survey_store.py) and
`workspace/` (writable), plus `finish`, which takes the report only within the word bounds and
only when every `Archive #N` and `Eval #N` it cites is one of the records shown.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

from rooms.archive.config import SurveyConfig
from rooms.research import views as research_views
from rooms.research.config import ResearchConfig
from station.core.model_api import Tool
from station.core.store import Store
from station.workers.sandbox_tools import SandboxTools, Surface
from station.workers.session import Fetch, ModelCall, Session, walk_session

from ..capsule_store import Capsules
from .survey_store import CONTROL, shown_evaluations, shown_papers

CITATION = re.compile(r"\b(Archive|Eval(?:uation)?)\s*#\s*(\d+)", re.IGNORECASE)
FINISH = "finish"
READY = ".ready"  # written last: the folders are complete


def prefix(number: int) -> str:
    return f"survey/{number}"


def folder(files: Path, number: int) -> Path:
    """Where survey `number`'s folders live on the host (under the station's files/)."""
    return files / "surveys" / str(number)


def surfaces(files: Path, number: int) -> list[Surface]:
    base = folder(files, number)
    return [
        Surface("archive", base / "archive"),
        Surface("evaluations", base / "evaluations"),
        Surface("workspace", base / "workspace", writable=True),
    ]


# -- the toolbox --------------------------------------------------------------------------------
class SurveyToolbox:
    """The sandbox's file and command tools, and `finish`, which checks the report."""

    def __init__(self, row: Any, sandbox: SandboxTools, cfg: SurveyConfig, texts: Any) -> None:
        self.row, self.sandbox, self.cfg, self.texts = row, sandbox, cfg, texts
        self.prefix = prefix(row["id"])

    def tools(self) -> list[Tool]:
        finish = Tool(
            FINISH,
            self.texts.render("survey_tool_finish", min_words=self.cfg.min_words, max_words=self.cfg.max_words),
            {"type": "object", "properties": {"report": {"type": "string"}}, "required": ["report"]},
        )
        return [*self.sandbox.tools(), finish]

    def handle(self, turn: int, index: int, call: dict[str, Any], fetch: Fetch) -> dict[str, Any] | None:
        if call["name"] == FINISH:
            return fetch(f"{self.prefix}/tool/{turn}/{index}", "worker_tool", lambda: self.finish(call["arguments"]))
        return self.sandbox.handle(turn, index, call, fetch, self.prefix)

    def finish(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """The report accepted (the session's end) or sent back with the reason."""
        report = arguments.get("report")
        if not isinstance(report, str) or not report.strip():
            return {"text": self.texts.render("survey_finish_missing"), "error": True}
        words = len(report.split())
        if not self.cfg.min_words <= words <= self.cfg.max_words:
            text = self.texts.render(
                "survey_finish_words", words=words, min_words=self.cfg.min_words, max_words=self.cfg.max_words
            )
            return {"text": text, "error": True}
        unknown = unknown_citations(report, shown_papers(self.row), shown_evaluations(self.row))
        if unknown:
            return {"text": self.texts.render("survey_finish_citations", citations=", ".join(unknown)), "error": True}
        return {
            "text": self.texts.render("survey_finish_accepted", words=words),
            "error": False,
            "final": True,
            "report": CONTROL.sub("", report).strip(),  # what the agent reads: no control characters
        }


def unknown_citations(report: str, papers: list[int], evaluations: list[int]) -> list[str]:
    """The citations of the report that name no record it was shown, each once, in order."""
    known = {"archive": set(papers), "eval": set(evaluations)}
    found = []
    for kind, number in CITATION.findall(report):
        family = "archive" if kind.lower() == "archive" else "eval"
        if int(number) not in known[family]:
            found.append(f"{'Archive' if family == 'archive' else 'Eval'} #{int(number)}")
    return list(dict.fromkeys(found))


def walk(
    row: Any, fetch: Fetch, *, sandbox: SandboxTools, cfg: SurveyConfig, texts: Any, call: ModelCall | None
) -> Session | None:
    """The survey's session as recorded so far (None: an input is missing and may not be made here)."""
    return walk_session(
        prefix(row["id"]),
        fetch,
        system=texts.render("survey_system"),
        opening=row["opening"],
        toolbox=SurveyToolbox(row, sandbox, cfg, texts),
        call=call,
        max_turns=cfg.max_turns,
    )


# -- the folders ----------------------------------------------------------------------------------
def write_folders(store: Store, config: Any, texts: Any, row: Any) -> None:
    """Write the survey's folders from what its request fixed, unless they are complete already."""
    base = folder(store.files, row["id"])
    if (base / READY).exists():
        return
    shutil.rmtree(base, ignore_errors=True)  # a half-written set from a station that stopped meanwhile
    for name in ("archive", "evaluations", "workspace"):
        (base / name).mkdir(parents=True, exist_ok=True)
    papers = Capsules(store, "archive")
    for number in shown_papers(row):
        capsule = papers.get(number)
        body = papers.message(capsule, 1) if capsule is not None else None
        if capsule is None or body is None:
            continue
        text = texts.render(
            "survey_paper_file",
            number=number,
            title=capsule.title,
            author=capsule.author,
            tick=capsule.created_tick,
            tags=", ".join(capsule.tags) or "(none)",
            abstract=capsule.abstract or "",
            content=body.content,
        )
        _write(base / "archive" / f"archive_{number}.md", text)
    brief = set(json.loads(row["brief_evaluations"]))
    no_score = config.section(ResearchConfig).no_score
    for number in shown_evaluations(row):
        record = research_views.evaluation(store.db, number)
        if record is not None:
            _write(base / "evaluations" / f"eval_{number}.md", _record_text(texts, record, number in brief, no_score))
    (base / READY).write_text("", encoding="utf-8")


def _record_text(texts: Any, record: dict[str, Any], brief: bool, no_score: bool) -> str:
    if no_score:
        score = texts.render("survey_score_hidden")
    else:
        score = "—" if record["score"] is None else repr(record["score"])
    return texts.render(
        "survey_evaluation_file",
        number=record["id"],
        title=record["title"],
        author=record["author"],
        tick=record["tick"],
        task=record["task"],
        tags=", ".join(record["tags"]) or "(none)",
        status=record["status"],
        score=score,
        abstract=texts.render("survey_abstract_withheld") if brief else record["abstract"],
        coder=_coder_text(texts, record) if not brief else "",
    )


def _coder_text(texts: Any, record: dict[str, Any]) -> str:
    """An experiment of the research coder (research.mode: coder): its instruction and the coder's report."""
    if not record.get("instruction"):
        return ""
    report = record.get("coder_report") or texts.render("survey_no_coder_report")
    return texts.render("survey_evaluation_coder", instruction=record["instruction"], report=report)


def _write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    os.chmod(path, 0o644)  # the sandbox's user reads it


def remove_folders(files: Path, number: int) -> None:
    shutil.rmtree(folder(files, number), ignore_errors=True)
