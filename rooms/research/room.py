"""Research Counter: read tasks, submit code for evaluation, browse the leaderboard, use storage.

The room only queues evaluations (status 'queued') and reads them; the evaluation hook runs
them and delivers each result (status, score, metrics, logs) together with the author's
message, so a score is shown exactly when it has been sent (spec research §1, §2).

Visibility is one rule (visibility.py), applied in SQL to every read path (table, page bounds,
previews, reviews, tag statistics) and to other lineages' storage: supervisors and mature agents
see everything; an immature agent sees its own lineage's evaluations (by the stored lineage
column, never by a name prefix) and the System baselines. What an agent may not see is
"not found", so its existence is not revealed.

Everything an agent reads here is computed from world state only (never from the evaluator's
runtime bookkeeping), so a replayed station shows the same prompts.
"""

from __future__ import annotations

import math
import re
from typing import Any

from evaluators.base import Task
from rooms.research.config import DebuggerConfig, ResearchConfig, StagnationConfig
from rooms.research.events import EvaluationSubmitted
from rooms.research.tasks import tasks_of
from station.core.agents import Agent
from station.core.config import StationConfig
from station.core.context import Context, Hook
from station.core.room import Outcome, Room, action, register_room

from . import storage as rs
from . import visibility
from .board import Leaderboard
from .coder_report import report_text
from .delivery import Evaluations
from .holiday import HolidayEvacuation, is_holiday
from .ids import parse_id, parse_id_list
from .params import SubmitParams
from .stagnation import Stagnation
from .storage_actions import StorageActions
from .store import MIGRATIONS, SYSTEM_AUTHOR, best_evaluation, insert_evaluation, running_ids
from .submission import Refused, check_form
from .text import cell, clip_log, clip_title, fence, json_or
from .views import certificate_sha256

PREVIEW_MAX_IDS = 100
SUMMARY_CHARS = 12_000  # task_summary budget (the archive reviewer's context)
STATUS_WORDS = {
    "queued": "being evaluated",
    "finished": "finished",
    "failed": "failed",
    "timed_out": "timed out",
    "scorer_failed": "not scored (the task's scorer failed; not counted against the author)",
    "system_failed": "not run (the station's machinery failed; not counted against the author)",
}


@register_room
class ResearchCounter(Leaderboard, StorageActions, Room):
    short, name = "research", "Research Counter"
    lobby_order = 70
    guests_allowed = False
    migrations = MIGRATIONS
    migration_component = "research"
    productive_actions = ("submit",)

    def hooks(self, config: StationConfig) -> list[Hook]:
        watch = [Stagnation()] if config.section(StagnationConfig).enabled else []
        return [*watch, Evaluations(), HolidayEvacuation()]

    # -- rules ------------------------------------------------------------------------------
    def sees_all(self, ctx: Context, agent: Agent) -> bool:
        return visibility.sees_all(agent, ctx.tick, ctx.config.lifecycle.maturity_ticks)

    def scope(self, ctx: Context, agent: Agent) -> tuple[str, tuple]:
        """The visibility rule as SQL over `evaluations e`: everything, or own lineage plus System."""
        if self.sees_all(ctx, agent):
            return "1", ()
        return "(e.lineage = ? OR (e.lineage IS NULL AND e.author = ?))", (agent.lineage, SYSTEM_AUTHOR)

    def visible_row(self, ctx: Context, agent: Agent, number: int) -> Any:
        where, params = self.scope(ctx, agent)
        return ctx.store.one(f"SELECT * FROM evaluations e WHERE e.id = ? AND {where}", (number, *params))

    def same_side(self, agent: Agent, row: Any) -> bool:
        """The agent's own work, its lineage's, or a System baseline."""
        return (
            row["session"] == agent.session
            or (agent.lineage is not None and row["lineage"] == agent.lineage)
            or (row["lineage"] is None and row["author"] == SYSTEM_AUTHOR)
        )

    def task_ids(self, ctx: Context) -> list[str]:
        return sorted(tasks_of(ctx), key=lambda t: (len(t), t))

    def precision(self, ctx: Context, task_id: str) -> int:
        task = tasks_of(ctx).get(task_id)
        return int(getattr(task, "display_precision", 4)) if task is not None else 4

    def storage_root(self, ctx: Context) -> Any:
        return rs.storage_root(ctx.store.files)

    # -- the view -------------------------------------------------------------------------------
    def render(self, ctx: Context, agent: Agent) -> str:
        parts = [
            p
            for p in (
                self._status_lines(ctx, agent),
                self._tasks_table(ctx),
                self._running(ctx, agent),
                self._board(ctx, agent),
                self._tag_stats(ctx, agent),
                self._storage_view(ctx, agent),
            )
            if p
        ]
        return "\n\n".join(parts)

    def _status_lines(self, ctx: Context, agent: Agent) -> str:
        cfg = ctx.config.section(ResearchConfig)
        lines = []
        if agent.role == "supervisor":
            lines.append(
                "Supervisor mode: you see every lineage's evaluations and storage and may review them; "
                "you cannot submit."
            )
        else:
            if cfg.holiday_mode and is_holiday(ctx.tick):
                lines.append("Holiday: no submissions are taken this tick (ticks ending in 9 or 0).")
            if cfg.cooldown_ticks > 0:
                left = self._cooldown_left(ctx, agent)
                lines.append(f"Submission cooldown active: {left} tick(s) left." if left else "Submissions available.")
            if cfg.mode == "coder":
                lines.append(ctx.texts.render("research_coder_mode_note"))
            if not ctx.is_mature(agent):
                lines.append(
                    f"Until you are mature (age {ctx.config.lifecycle.maturity_ticks}) you see only your "
                    "lineage's evaluations and the System baselines."
                )
        return "\n".join(lines)

    def _tasks_table(self, ctx: Context) -> str:
        ids = self.task_ids(ctx)
        if not ids:
            return "**Research Tasks**\n\nNo research task is set."
        lines = ["**Research Tasks**", "", "| ID | Task |", "|---|---|"]
        lines += [f"| {tid} | {cell(tasks_of(ctx)[tid].title)} |" for tid in ids]
        lines.append("\n`read <ID>` sends you a task's full description.")
        return "\n".join(lines)

    def _running(self, ctx: Context, agent: Agent) -> str:
        if agent.role == "supervisor":
            return ""
        rows = ctx.store.all(
            "SELECT id, task, title, author, tick FROM evaluations WHERE session = ? AND "
            "status = 'queued' ORDER BY tick, id",
            (agent.session,),
        )
        if not rows:
            return "**Running Experiments**\n\nNone of your experiments is running. Submit one with `submit`."
        lines = [
            "**Running Experiments**",
            "",
            "| ID | Task | Title | Author | Submitted Tick |",
            "|---|---|---|---|---|",
        ]
        lines += [
            f"| {r['id']} | {r['task']} | {cell(clip_title(r['title']))} | {cell(r['author'])} | {r['tick']} |"
            for r in rows
        ]
        return "\n".join(lines)

    # -- actions: tasks and submissions --------------------------------------------------------------
    @action("read")
    def read(self, ctx: Context, agent: Agent, args: str | None, p: None) -> Outcome:
        ids = self.task_ids(ctx)
        text = (args or "").strip()
        if not text:
            return Outcome(
                [
                    f"Usage: /execute_action{{read <task ID>}}, e.g. read {ids[-1] if ids else 1}. "
                    f"Tasks: {', '.join(ids) or 'none'}."
                ]
            )
        task_id = self._task_id(text)
        task = tasks_of(ctx).get(task_id) if task_id else None
        if task is None:
            return Outcome([f"There is no research task '{text[:40]}'. Tasks: {', '.join(ids) or 'none'}."])
        addenda = ctx.store.all(
            "SELECT label, text, tick FROM research_addenda WHERE task = ? AND removed_tick IS NULL ORDER BY id",
            (task_id,),
        )
        extra = "".join(
            ctx.texts.render("research_task_addendum", label=a["label"], tick=a["tick"], text=a["text"].strip())
            + "\n\n"
            for a in addenda
        )
        ctx.notify(
            agent,
            ctx.texts.render(
                "research_task_spec", id=task_id, title=task.title, spec=task.spec().strip(), addenda=extra.strip()
            ),
            "research_task",
        )
        return Outcome(
            [f"The description of task #{task_id} ({task.title}) will be in your System Messages next turn."]
        )

    def _task_id(self, text: str) -> str | None:
        match = re.fullmatch(r"#?(\d{1,9})", text.strip())
        return str(int(match.group(1))) if match else None

    def _cooldown_left(self, ctx: Context, agent: Agent) -> int:
        cooldown = ctx.config.section(ResearchConfig).cooldown_ticks
        if cooldown <= 0:
            return 0
        last = ctx.store.scalar("SELECT MAX(tick) FROM evaluations WHERE session = ?", (agent.session,))
        if last is None or ctx.tick - last >= cooldown:
            return 0
        return cooldown - (ctx.tick - last)

    @action("submit", params=SubmitParams, yaml_required=False)
    def submit(self, ctx: Context, agent: Agent, args: str | None, p: SubmitParams | None) -> Outcome:
        """Queue a submission for evaluation. Its checks follow the spec's numbered order (research
        §1.4); the first one that fails is the agent's answer."""
        try:
            self._check_may_submit(ctx, agent)  # 1-3
            draft = check_form(p, ctx.config.section(ResearchConfig))  # 4-8
            task_id, task = self._task_for(ctx, args, draft.code, coder=draft.instruction is not None)  # 9
            self._check_open_evaluations(ctx, agent)  # 10
        except Refused as why:
            return Outcome([f"Submission refused: {why}."])
        # 11-14: queue it
        number = insert_evaluation(
            ctx.store,
            task=task_id,
            author=agent.name,
            session=agent.session,
            lineage=agent.lineage,
            tick=ctx.tick,
            title=draft.title,
            tags=draft.tags,
            abstract=draft.abstract,
            code=draft.code,
            no_debugger=draft.no_debugger,
            cpu_only=draft.cpu_only,
            holds_tick=True,
            instruction=draft.instruction,
            sees_all=self.sees_all(ctx, agent) if draft.instruction is not None else None,
        )
        self.state(agent).setdefault("submitted", []).append(number)
        ctx.emit(EvaluationSubmitted(number), agent.name)
        wait = ctx.config.section(ResearchConfig).wait_ticks
        when = (
            ctx.texts.render("research_result_by_tick", tick=ctx.tick + wait)
            if wait
            else ctx.texts.render("research_result_later")
        )
        ctx.notify(
            agent,
            ctx.texts.render(
                "research_submitted", id=number, title=draft.title, task=task_id, task_title=task.title, when=when
            ),
            "research",
        )
        lines = [
            f"Submitted '{draft.title}' to task #{task_id} ({task.title}) as evaluation #{number}; "
            "its result will come as a system message."
        ]
        lines += [f"Warning: {w}." for w in draft.warnings]
        return Outcome(lines)

    def _check_may_submit(self, ctx: Context, agent: Agent) -> None:
        """The station's and the agent's state: a holiday, a supervisor, the cooldown."""
        if ctx.config.section(ResearchConfig).holiday_mode and is_holiday(ctx.tick):
            raise Refused("it is a holiday tick (ticks ending in 9 or 0 take no submissions); submit next tick")
        if agent.role == "supervisor":
            raise Refused("supervisors review experiments but do not submit them")
        left = self._cooldown_left(ctx, agent)
        if left:
            raise Refused(f"the submission cooldown is active; you can submit again in {left} tick(s)")

    def _task_for(self, ctx: Context, args: str | None, code: str, *, coder: bool = False) -> tuple[str, Task]:
        """The task named after `submit` (default: the last one), if the code fits it (an instruction's
        code is the coder's: each of its attempts is checked when it is run)."""
        ids = self.task_ids(ctx)
        task_id = self._task_id(args) if args and args.strip() else (ids[-1] if ids else None)
        task = tasks_of(ctx).get(task_id) if task_id else None
        if task is None or task_id is None:
            shown = (args or "").strip()[:40]
            raise Refused(f"there is no research task '{shown}' (tasks: {', '.join(ids) or 'none'})")
        problem = None if coder else task.validate_code(code)
        if problem:
            raise Refused(f"the code does not fit task #{task_id}: {problem}")
        return task_id, task

    def _check_open_evaluations(self, ctx: Context, agent: Agent) -> None:
        cfg = ctx.config.section(ResearchConfig)
        limit = 1 if cfg.mode == "coder" else cfg.max_open_per_agent
        open_ids = [
            r[0]
            for r in ctx.store.all(
                "SELECT id FROM evaluations WHERE session = ? AND status = 'queued' ORDER BY id", (agent.session,)
            )
        ]
        if cfg.mode == "coder" and open_ids:
            raise Refused(
                f"your experiment #{open_ids[0]} is still open; the research coder takes one experiment per "
                "agent at a time. Wait for its result, then submit again"
            )
        if len(open_ids) >= limit:
            raise Refused(
                f"you already have {len(open_ids)} unfinished evaluation(s) "
                f"({', '.join(f'#{i}' for i in open_ids)}); at most {limit} may be open "
                "at once. Wait for a result, then submit again"
            )

    # -- actions: reading results ---------------------------------------------------------------------
    @action("review")
    def review(self, ctx: Context, agent: Agent, args: str | None, p: None) -> Outcome:
        row = self._reviewable(ctx, agent, args, "review")
        if isinstance(row, Outcome):
            return row
        ctx.notify(agent, self.record_text(ctx, row), "research_review")
        return Outcome([f"The full record of evaluation #{row['id']} will be in your System Messages next turn."])

    @action("read_code")
    def read_code(self, ctx: Context, agent: Agent, args: str | None, p: None) -> Outcome:
        row = self._reviewable(ctx, agent, args, "read_code")
        if isinstance(row, Outcome):
            return row
        code, version = self.final_code(ctx, row)
        if not code.strip():
            return Outcome([f"Evaluation #{row['id']} has no code: its coder made no official attempt."])
        label = "written by the research coder" if row["instruction"] is not None else "as run"
        text = f"**Evaluation #{row['id']}: {row['title']}**: final code (version {version}, {label})\n\n"
        ctx.notify(agent, text + fence(code, "python"), "research_review")
        return Outcome([f"The final code of evaluation #{row['id']} will be in your System Messages next turn."])

    def _reviewable(self, ctx: Context, agent: Agent, args: str | None, verb: str) -> Any:
        """The delivered evaluation `args` names, if the agent may read it; else the Outcome saying why not."""
        text = (args or "").strip()
        if not text:
            return Outcome([f"Usage: /execute_action{{{verb} <evaluation ID>}}, e.g. {verb} 12."])
        if not re.fullmatch(r"#?\d+", text):
            return Outcome([f"'{text[:40]}' is not an evaluation ID; use a number, e.g. {verb} 12."])
        number = parse_id(text)
        row = self.visible_row(ctx, agent, number) if number is not None else None
        if row is None:
            return Outcome([f"Evaluation {text.lstrip('#')[:30]} not found."])
        if (
            not ctx.config.section(ResearchConfig).cross_lineage_review
            and agent.role != "supervisor"
            and not self.same_side(agent, row)
        ):
            return Outcome(
                [
                    f"Reviewing other lineages' evaluations is turned off in this station; their papers "
                    f"in the Archive Room describe their work (evaluation #{number} is by {row['author']})."
                ]
            )
        if row["status"] == "queued":
            ctx.notify(agent, ctx.texts.render("research_review_pending", id=number, title=row["title"]), "research")
            return Outcome([f"Evaluation #{number} is still being evaluated; {verb} it again once its result is out."])
        return row

    def final_code(self, ctx: Context, row: Any) -> tuple[str, int | None]:
        """The code of the version the author heard about, and its version number (None: the submission's)."""
        version = row["reported_version"]
        if version is not None:
            code = ctx.store.scalar(
                "SELECT code FROM evaluation_versions WHERE evaluation = ? AND version = ?", (row["id"], version)
            )
            if code is not None:
                return code, version
        return row["code"], None

    def record_text(self, ctx: Context, row: Any) -> str:
        cfg = ctx.config.section(ResearchConfig)
        number = row["id"]
        task = tasks_of(ctx).get(row["task"])
        tags = ", ".join(json_or(row["tags"], [])) or "—"
        lines = [
            f"**Evaluation #{number}: {row['title']}**",
            "",
            f"- ID: {number}",
            f"- Task: #{row['task']}" + (f" ({task.title})" if task is not None else ""),
            f"- Author: {row['author']}, submitted at tick {row['tick']}",
            f"- Tags: {tags}",
            f"- Status: {STATUS_WORDS.get(row['status'], row['status'])}"
            + (f" (result delivered at tick {row['finished_tick']})" if row["finished_tick"] is not None else ""),
            "",
            f"Abstract: {row['abstract']}",
        ]
        coder = row["instruction"] is not None
        if coder:
            lines += ["", "Instruction:", fence(row["instruction"])]
        if not cfg.no_score:
            lines += ["", f"Score: {self.score_cell(ctx, row)}" + (" (computed by the station)" if coder else "")]
            for name, value in sorted(self.metrics_of(row).items()):
                lines.append(f"{name}: {self.metric_text(ctx, row['task'], name, value)}")
            if row["details"]:
                lines += ["", f"Details: {row['details'].strip()}"]
        if row["error"] and row["status"] not in ("finished", "system_failed"):  # a machine's error: the operator's
            lines += ["", f"Error summary: {row['error'].strip()}"]
        version = row["reported_version"]
        digest = certificate_sha256(ctx.store.db, number, version) if version is not None else None
        if digest:
            lines += [
                "",
                f"Certificate: SHA-256 {digest} (the construction the task's scorer verified is kept with this "
                "record; `station verify` checks it again)",
            ]
        if coder:
            lines += ["", report_text(ctx.texts, row["coder_report"], row["coder_end"], row["reported_version"] or 0)]
            lines += ["", f"`read_code {number}` shows the final code."]
        else:
            code, version = self.final_code(ctx, row)
            label = f"Code (version {version}, written by the debugger)" if version and version > 1 else "Code"
            lines += ["", f"{label}:", fence(code, "python")]
        limit = cfg.log_max_chars
        for name, key in (("Output (stdout)", "stdout"), ("Errors (stderr)", "stderr")):
            log = row[key] or ""
            if log.strip():
                note = f" — the middle was cut to {limit:,} characters" if len(log) > limit else ""
                lines += ["", f"{name}{note}:", fence(clip_log(log, limit))]
        if not (row["stdout"] or "").strip() and not (row["stderr"] or "").strip():
            lines += ["", "No output was logged."]
        return "\n".join(lines)

    @action("preview")
    def preview(self, ctx: Context, agent: Agent, args: str | None, p: None) -> Outcome:
        text = (args or "").strip()
        if not text:
            return Outcome(["Usage: /execute_action{preview all} or preview 3,5,10:14 (IDs and ranges a:b)."])
        where, params = self.scope(ctx, agent)
        notes = []
        if text.lower() == "all":
            rows = ctx.store.all(
                f"SELECT * FROM evaluations e WHERE {where} ORDER BY e.id DESC LIMIT ?", (*params, PREVIEW_MAX_IDS)
            )
            if not rows:
                return Outcome(["There is nothing to preview yet: no evaluations have been submitted."])
            blocks = [self.preview_block(ctx, r) for r in rows]
            heading = f"**Research Counter: preview of the newest {len(rows)} evaluation(s)**"
        else:
            try:
                ids, capped = parse_id_list(text, PREVIEW_MAX_IDS)
            except ValueError as err:
                return Outcome([f"Preview refused: {err}. Use `preview all` or IDs and ranges like 3,5,10:14."])
            if capped:
                notes.append(f"Only the first {PREVIEW_MAX_IDS} IDs were previewed.")
            marks = ",".join("?" * len(ids))
            found = {
                r["id"]: r
                for r in ctx.store.all(
                    f"SELECT * FROM evaluations e WHERE e.id IN ({marks}) AND {where}", (*ids, *params)
                )
            }
            blocks = [self.preview_block(ctx, found[i]) if i in found else f"Evaluation {i}: not found." for i in ids]
            heading = f"**Research Counter: preview {text[:200]}**"
        ctx.notify(agent, heading + "\n\n" + "\n\n---\n\n".join(blocks + notes), "research_preview")
        return Outcome([f"Previewed {len(blocks)} evaluation(s): see your System Messages next turn."] + notes)

    def preview_block(self, ctx: Context, row: Any) -> str:
        tags = ", ".join(json_or(row["tags"], [])) or "—"
        lines = [
            f"**Evaluation #{row['id']}: {row['title']}**",
            f"Task #{row['task']}; by {row['author']} at tick {row['tick']}; tags: {tags}",
            f"Abstract: {row['abstract']}",
        ]
        if ctx.config.section(ResearchConfig).no_score:
            lines.append(f"Status: {STATUS_WORDS.get(row['status'], row['status'])}")
        else:
            score = f"Score: {self.score_cell(ctx, row)}"
            if row["status"] == "finished":
                score += "".join(
                    f" | {name}: {self.metric_text(ctx, row['task'], name, value)}"
                    for name, value in sorted(self.metrics_of(row).items())
                )
            lines.append(score)
        return "\n".join(lines)

    # -- help ---------------------------------------------------------------------------------------
    def help(self, ctx: Context, agent: Agent) -> str:
        return re.sub(r"\n{3,}", "\n\n", super().help(ctx, agent))  # optional sections may be empty

    def unoffered(self, ctx: Context) -> frozenset[str]:
        # review shows a submission's code already; read_code is for the coder's final code
        return frozenset() if ctx.config.section(ResearchConfig).mode == "coder" else frozenset({"read_code"})

    def help_values(self, ctx: Context) -> dict[str, Any]:
        cfg = ctx.config.section(ResearchConfig)
        texts = ctx.texts
        maturity = ctx.config.lifecycle.maturity_ticks
        coder = cfg.mode == "coder"
        values = {
            "max_open": cfg.max_open_per_agent,
            "max_tags": cfg.max_tags,
            "max_tag_chars": cfg.max_tag_chars,
            "max_abstract_words": cfg.max_abstract_words,
            "max_code_chars": f"{cfg.max_code_chars:,}",
            "page_size": cfg.page_size,
            "rank_modes": "id|author" if cfg.no_score else "id|score|author",
            "score_notes": texts.render("research_help_no_score" if cfg.no_score else "research_help_scores"),
            "cooldown_note": (
                texts.render("research_help_cooldown", cooldown_ticks=cfg.cooldown_ticks) if cfg.cooldown_ticks else ""
            ),
            "cpu_only_note": texts.render("research_help_cpu_only") if cfg.allow_cpu_only else "",
            "debugger_section": texts.render("research_help_debugger")
            if ctx.config.section(DebuggerConfig).enabled and not coder
            else "",
            "lineage_storage_note": texts.render(
                "research_help_storage_open" if cfg.cross_lineage_storage else "research_help_storage_closed"
            ),
            "review_note": "" if cfg.cross_lineage_review else texts.render("research_help_review_closed"),
            "isolation_note": (texts.render("research_help_isolation", isolation_ticks=maturity) if maturity else ""),
            "holiday_note": texts.render("research_help_holiday") if cfg.holiday_mode else "",
            "storage_read_max_chars": f"{cfg.storage_read_max_chars:,}",
            "max_instruction_chars": f"{cfg.coder.max_instruction_chars:,}",
            "coder_attempts": cfg.coder.max_attempts,
        }
        form = "research_help_submit_instruction" if coder else "research_help_submit_code"
        values["submit_section"] = texts.render(form, **values)
        values["review_item"] = texts.render(
            "research_help_review_instruction" if coder else "research_help_review_code"
        )
        return values

    # -- what other parts of the station read ---------------------------------------------------------
    def task_summary(self, ctx: Context) -> str:
        """The tasks' titles and specs, bounded, for the archive reviewer's context."""
        ids = self.task_ids(ctx)
        if not ids:
            return ""
        share = max(1_000, SUMMARY_CHARS // len(ids))
        parts = []
        for tid in ids:
            task = tasks_of(ctx)[tid]
            spec = task.spec().strip()
            if len(spec) > share:
                spec = spec[:share].rstrip() + "\n[... the rest of the description is left out ...]"
            head = f"Research Task #{tid}: {task.title}"
            if task.description:
                head += f"\n{task.description}"
            parts.append(f"{head}\n\n{spec}")
        return "\n\n".join(parts)

    @staticmethod
    def result_key(row: Any) -> list[float] | None:
        """The comparable key of a delivered success: its sort key, else [score]."""
        key = json_or(row["sort_key"], [])
        if key and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in key):
            return [float(v) for v in key]
        score = row["score"]
        return [float(score)] if isinstance(score, (int, float)) and math.isfinite(score) else None

    def lineage_credits(self, ctx: Context) -> dict[str, float]:
        """One credit per breakthrough: a delivered success that beats every earlier one of its task."""
        best: dict[str, list[float]] = {}
        credits: dict[str, float] = {}
        for row in ctx.store.all(
            "SELECT id, task, author, lineage, score, sort_key FROM evaluations "
            "WHERE status = 'finished' AND score IS NOT NULL ORDER BY id"
        ):
            key = self.result_key(row)
            if key is None:
                continue
            if row["task"] in best and not key > best[row["task"]]:
                continue
            best[row["task"]] = key
            lineage = row["lineage"]
            if lineage and row["author"] != SYSTEM_AUTHOR:
                credits[lineage] = credits.get(lineage, 0.0) + 1.0
        return credits

    def status_counts(self, ctx: Context) -> dict[str, Any]:
        rows = {r[0]: r[1] for r in ctx.store.all("SELECT status, COUNT(*) FROM evaluations GROUP BY status")}
        queued_ids = {r[0] for r in ctx.store.all("SELECT id FROM evaluations WHERE status = 'queued'")}
        running = len(queued_ids & running_ids(ctx.store))
        best = {}
        for task in tasks_of(ctx):
            row = self.best(ctx, task)
            if row is not None:
                best[task] = {
                    "score": row["score"],
                    "evaluation": row["id"],
                    "author": row["author"],
                    "tick": row["finished_tick"],
                }
        return {
            "submissions": {
                "queued": len(queued_ids) - running,
                "running": running,
                "finished": rows.get("finished", 0),
                "failed": rows.get("failed", 0),
                "timed_out": rows.get("timed_out", 0),
                "scorer_failed": rows.get("scorer_failed", 0),
                "system_failed": rows.get("system_failed", 0),
            },
            "research_best": best,
        }

    def best(self, ctx: Context, task: str) -> Any:
        """The delivered best evaluation of a task (sort key, else score; the earlier wins a tie), or None."""
        return best_evaluation(ctx.store.all, "e.task = ?", (str(task),))
