"""Research Counter: read tasks, submit code for evaluation, browse the leaderboard, use storage.

The room only queues evaluations (status 'queued') and reads them; the evaluation hook runs
them and delivers each result (status, score, metrics, logs) together with the author's
message, so a score is shown exactly when it has been sent (spec research §1, §2).

Visibility is one rule, applied in SQL to every read path (table, page bounds, previews,
reviews, tag statistics) and to other lineages' storage: supervisors and mature agents see
everything; an immature agent sees its own lineage's evaluations (by the stored lineage
column, never by a name prefix) and the System baselines. What an agent may not see is
"not found", so its existence is not revealed.

Everything an agent reads here is computed from world state only (never from the evaluator's
runtime bookkeeping), so a replayed station shows the same prompts.
"""
from __future__ import annotations

import json
import math
import re
from typing import Any

from evaluators import has_real_code
from station.config import StationConfig
from station.context import Event, Hook
from station.room import Outcome, Room, action

from . import storage as rs
from .delivery import Evaluations
from .params import (
    BIDI,
    CONTROL,
    LINE_BREAK,
    REQUIRED,
    StorageParams,
    SubmitParams,
    as_text,
    blank,
    cut_words,
    normalise_tag,
    normalise_tags,
)
from .stagnation import Stagnation
from .store import MIGRATIONS, SYSTEM_AUTHOR, insert_evaluation, running_ids
from .text import cell, clip_log, clip_title, fence

MAX_TITLE_CHARS = 200
PREVIEW_MAX_IDS = 100
TAG_STATS_ROWS = 20
MAX_SORT_KEY = 8  # sort-key positions compared in SQL
MAX_PAGE_SIZE = 200
STORAGE_REQUESTS = 5  # storage lists, and reads, shown per view
SUMMARY_CHARS = 12_000  # task_summary budget (the archive reviewer's context)
SORT_MODES = ("id", "score", "author")
VALID = "(e.status = 'finished' AND e.score IS NOT NULL)"
SORT_KEY_JSON = "CASE WHEN json_valid(e.sort_key) THEN e.sort_key END"  # malformed text counts as no key
STATUS_WORDS = {"queued": "being evaluated", "finished": "finished", "failed": "failed", "timed_out": "timed out"}
ID_TEXT = re.compile(r"#?(\d{1,18})")


def is_holiday(tick: int) -> bool:
    return tick % 10 in (9, 0)


def _json(text: Any, default: Any) -> Any:
    if text is None:
        return default
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return default
    return value if isinstance(value, type(default)) else default


def parse_id(text: str | None) -> int | None:
    """One evaluation ID ('12' or '#12'); None when it is not one."""
    match = ID_TEXT.fullmatch((text or "").strip())
    return int(match.group(1)) if match and int(match.group(1)) > 0 else None


def parse_id_list(text: str, cap: int) -> tuple[list[int], bool]:
    """IDs and inclusive ranges a:b joined by commas -> (unique ids in order, capped). ValueError if bad."""
    seen: dict[int, None] = {}
    for token in text.split(","):
        token = token.strip()
        if not token:
            raise ValueError("an empty entry between commas")
        if ":" in token:
            first, _, last = token.partition(":")
            a, b = parse_id(first), parse_id(last)
            if a is None or b is None:
                raise ValueError(f"'{token[:40]}' is not a range of IDs like 3:7")
            if a > b:
                raise ValueError(f"the range {a}:{b} runs backwards")
            for number in range(a, b + 1):
                if number in seen:
                    continue
                if len(seen) >= cap:
                    return list(seen), True
                seen[number] = None
        else:
            number = parse_id(token)
            if number is None:
                raise ValueError(f"'{token[:40]}' is not an evaluation ID")
            if number in seen:
                continue
            if len(seen) >= cap:
                return list(seen), True
            seen[number] = None
    return list(seen), False


class HolidayEvacuation(Hook):
    """On a holiday tick, agents standing at the Research Counter are sent to the Lobby."""

    name = "research_holiday"
    events = ("tick_started",)

    def handle(self, ctx: Any, event: Event) -> None:
        if not ctx.config.research.holiday_mode or not is_holiday(ctx.tick):
            return
        for agent in ctx.agents.active():
            if agent.location == ResearchCounter.short:
                agent.location = "lobby"
                ctx.notify(agent, ctx.texts.render("research_holiday_moved", tick=ctx.tick), "research")
                ctx.agents.save(agent)


class ResearchCounter(Room):
    short, name = "research", "Research Counter"
    guests_allowed = False
    migrations = MIGRATIONS
    migration_component = "research"
    productive_actions = ("submit",)

    def hooks(self, config: StationConfig) -> list[Hook]:
        watch = [Stagnation()] if config.stagnation.enabled else []
        return [*watch, Evaluations(), HolidayEvacuation()]

    # -- rules ------------------------------------------------------------------------------
    def sees_all(self, ctx: Any, agent: Any) -> bool:
        return agent.role == "supervisor" or ctx.is_mature(agent)

    def scope(self, ctx: Any, agent: Any) -> tuple[str, tuple]:
        """The visibility rule as SQL over `evaluations e`: everything, or own lineage plus System."""
        if self.sees_all(ctx, agent):
            return "1", ()
        return "(e.lineage = ? OR (e.lineage IS NULL AND e.author = ?))", (agent.lineage, SYSTEM_AUTHOR)

    def visible_row(self, ctx: Any, agent: Any, number: int) -> Any:
        where, params = self.scope(ctx, agent)
        return ctx.store.one(f"SELECT * FROM evaluations e WHERE e.id = ? AND {where}", (number, *params))

    def same_side(self, agent: Any, row: Any) -> bool:
        """The agent's own work, its lineage's, or a System baseline."""
        return (row["session"] == agent.session or (agent.lineage is not None and row["lineage"] == agent.lineage)
                or (row["lineage"] is None and row["author"] == SYSTEM_AUTHOR))

    def task_ids(self, ctx: Any) -> list[str]:
        return sorted(ctx.tasks, key=lambda t: (len(t), t))

    def precision(self, ctx: Any, task_id: str) -> int:
        task = ctx.tasks.get(task_id)
        return int(getattr(task, "display_precision", 4)) if task is not None else 4

    def storage_root(self, ctx: Any) -> Any:
        return rs.storage_root(ctx.store.files)

    # -- per-agent view state ---------------------------------------------------------------
    def state(self, agent: Any) -> dict[str, Any]:
        return agent.room_state(self.short)

    def sort_mode(self, ctx: Any, agent: Any) -> str:
        mode = self.state(agent).get("sort", "id")
        if mode not in SORT_MODES or (mode == "score" and ctx.config.research.no_score):
            return "id"
        return mode

    def page_size(self, ctx: Any, agent: Any) -> int:
        size = self.state(agent).get("page_size")
        return size if isinstance(size, int) and 1 <= size <= MAX_PAGE_SIZE else ctx.config.research.page_size

    def tag_filter(self, agent: Any) -> str | None:
        tag = self.state(agent).get("filter")
        return tag if isinstance(tag, str) and tag else None

    def board_where(self, ctx: Any, agent: Any) -> tuple[str, tuple]:
        where, params = self.scope(ctx, agent)
        tag = self.tag_filter(agent)
        if tag:
            where += " AND e.id IN (SELECT evaluation FROM evaluation_tags WHERE tag = ?)"
            params += (tag,)
        return where, params

    def board_count(self, ctx: Any, agent: Any) -> int:
        where, params = self.board_where(ctx, agent)
        return ctx.store.scalar(f"SELECT COUNT(*) FROM evaluations e WHERE {where}", params) or 0

    def score_order(self, ctx: Any, where: str, params: tuple) -> str:
        """Valid results first, higher first, earlier first among ties. Sort keys are compared only
        when every valid row belongs to one task; scores of different tasks are compared as numbers."""
        valid_rows = f"FROM evaluations e WHERE {where} AND {VALID}"
        tasks = ctx.store.all(f"SELECT DISTINCT e.task {valid_rows} LIMIT 2", params)
        keys = ["e.score DESC"]
        if len(tasks) == 1:
            length = ctx.store.scalar(f"SELECT MAX(json_array_length({SORT_KEY_JSON})) {valid_rows}", params) or 0
            if length:
                item = f"json_extract({SORT_KEY_JSON}, '$[{{i}}]')"
                keys = [f"COALESCE({item.format(i=0)}, e.score) DESC"]
                keys += [f"{item.format(i=i)} DESC" for i in range(1, min(length, MAX_SORT_KEY))]
        return f"{VALID} DESC, {', '.join(keys)}, e.tick ASC, e.id ASC"

    def order(self, ctx: Any, agent: Any, mode: str, where: str, params: tuple) -> tuple[str, tuple]:
        if mode == "author":
            return "COALESCE(e.session = ?, 0) DESC, e.tick DESC, e.id DESC", (agent.session,)
        if mode == "score":
            return self.score_order(ctx, where, params), ()
        return "e.id DESC", ()

    # -- cells --------------------------------------------------------------------------------
    def score_cell(self, ctx: Any, row: Any) -> str:
        status = row["status"]
        if status == "queued":
            return "running"
        if status != "finished":
            return "n.a."
        score = row["score"]
        if score is None:
            return "—"
        if isinstance(score, float) and not math.isfinite(score):
            return "n.a."
        if isinstance(score, int):
            return str(score)
        return f"{score:.{self.precision(ctx, row['task'])}f}"

    def metric_text(self, ctx: Any, task_id: str, name: str, value: Any) -> str:
        if value is None:
            return "—"
        task = ctx.tasks.get(task_id)
        spec = (getattr(task, "metric_formats", None) or {}).get(name) if task is not None else None
        if spec:
            try:
                return format(value, spec)
            except (TypeError, ValueError):
                pass
        return str(value)

    def metrics_of(self, row: Any) -> dict[str, Any]:
        if row["status"] == "queued":
            return {}
        return _json(row["metrics"], {})

    # -- the view -------------------------------------------------------------------------------
    def render(self, ctx: Any, agent: Any) -> str:
        parts = [p for p in (self._status_lines(ctx, agent), self._tasks_table(ctx), self._running(ctx, agent),
                             self._board(ctx, agent), self._tag_stats(ctx, agent), self._storage_view(ctx, agent))
                 if p]
        return "\n\n".join(parts)

    def _status_lines(self, ctx: Any, agent: Any) -> str:
        cfg = ctx.config.research
        lines = []
        if agent.role == "supervisor":
            lines.append("Supervisor mode: you see every lineage's evaluations and storage and may review them; "
                         "you cannot submit.")
        else:
            if cfg.holiday_mode and is_holiday(ctx.tick):
                lines.append("Holiday: no submissions are taken this tick (ticks ending in 9 or 0).")
            if cfg.cooldown_ticks > 0:
                left = self._cooldown_left(ctx, agent)
                lines.append(f"Submission cooldown active: {left} tick(s) left." if left
                             else "Submissions available.")
            if not ctx.is_mature(agent):
                lines.append(f"Until you are mature (age {ctx.config.lifecycle.maturity_ticks}) you see only your "
                             "lineage's evaluations and the System baselines.")
        return "\n".join(lines)

    def _tasks_table(self, ctx: Any) -> str:
        ids = self.task_ids(ctx)
        if not ids:
            return "**Research Tasks**\n\nNo research task is set."
        lines = ["**Research Tasks**", "", "| ID | Task |", "|---|---|"]
        lines += [f"| {tid} | {cell(ctx.tasks[tid].title)} |" for tid in ids]
        lines.append("\n`read <ID>` sends you a task's full description.")
        return "\n".join(lines)

    def _running(self, ctx: Any, agent: Any) -> str:
        if agent.role == "supervisor":
            return ""
        rows = ctx.store.all("SELECT id, task, title, author, tick FROM evaluations WHERE session = ? AND "
                             "status = 'queued' ORDER BY tick, id", (agent.session,))
        if not rows:
            return "**Running Experiments**\n\nNone of your experiments is running. Submit one with `submit`."
        lines = ["**Running Experiments**", "", "| ID | Task | Title | Author | Submitted Tick |",
                 "|---|---|---|---|---|"]
        lines += [f"| {r['id']} | {r['task']} | {cell(clip_title(r['title']))} | {cell(r['author'])} | {r['tick']} |"
                  for r in rows]
        return "\n".join(lines)

    def _board(self, ctx: Any, agent: Any) -> str:
        no_score = ctx.config.research.no_score
        state = self.state(agent)
        where, params = self.board_where(ctx, agent)
        total = ctx.store.scalar(f"SELECT COUNT(*) FROM evaluations e WHERE {where}", params) or 0
        size = self.page_size(ctx, agent)
        pages = max(1, -(-total // size))
        page = state.get("page", 1)
        page = min(max(1, page if isinstance(page, int) else 1), pages)
        state["page"] = page
        mode = self.sort_mode(ctx, agent)
        tag = self.tag_filter(agent)
        heading = "**Submitted Evaluations**"
        filter_line = f"Filter: only evaluations tagged '{tag}' are listed; `unfilter` shows all again." if tag else ""
        if total == 0:
            empty = (f"No visible evaluation is tagged '{tag}'." if tag else "No evaluations have been submitted yet.")
            return "\n\n".join(p for p in (heading, empty, filter_line) if p)
        order, order_params = self.order(ctx, agent, mode, where, params)
        rows = ctx.store.all(
            f"SELECT e.id, e.task, e.title, e.author, e.tick, e.status, e.score, e.metrics FROM evaluations e "
            f"WHERE {where} ORDER BY {order} LIMIT ? OFFSET ?", (*params, *order_params, size, (page - 1) * size))
        metrics = {} if no_score else {r["id"]: self.metrics_of(r) for r in rows}
        names = sorted({name for m in metrics.values() for name in m})
        cols = ["ID", "Task", "Title", "Author", "Tick"] + ([] if no_score else ["Score"]) + names
        lines = [heading, "", "| " + " | ".join(cell(c) for c in cols) + " |", "|" + "---|" * len(cols)]
        for r in rows:
            cells = [str(r["id"]), r["task"], cell(clip_title(r["title"])), cell(r["author"]), str(r["tick"])]
            if not no_score:
                cells.append(self.score_cell(ctx, r))
                m = metrics[r["id"]]
                cells += [cell(self.metric_text(ctx, r["task"], n, m[n])) if n in m else "" for n in names]
            lines.append("| " + " | ".join(cells) + " |")
        if pages > 1:
            ranks = "id|author" if no_score else "id|score|author"
            lines += ["", f"Page {page} of {pages} (sorted by: {mode}). Move with `page N`; sort with "
                      f"`rank {ranks}`; rows per page: `page_size N`; narrow with `filter <tag>`."]
        elif mode != "id":
            lines += ["", f"Sorted by: {mode}."]
        if filter_line:
            lines += ["", filter_line]
        return "\n".join(lines)

    def _tag_stats(self, ctx: Any, agent: Any) -> str:
        cfg = ctx.config.research
        if not cfg.show_tag_stats or not self.sees_all(ctx, agent):
            return ""
        where, params = self.scope(ctx, agent)
        query = (f"SELECT t.tag AS tag, COUNT(*) AS n, MAX(e.tick) AS last, "
                 f"MAX(CASE WHEN {VALID} THEN e.score END) AS best FROM evaluation_tags t "
                 f"JOIN evaluations e ON e.id = t.evaluation WHERE {where} {{extra}} GROUP BY t.tag")
        rows = list(ctx.store.all(query.format(extra="") + " ORDER BY n DESC, t.tag LIMIT ?",
                                  (*params, TAG_STATS_ROWS)))
        if not rows:
            return ""
        tag = self.tag_filter(agent)
        if tag:
            rows = [r for r in rows if r["tag"] != tag]
            mine = ctx.store.all(query.format(extra="AND t.tag = ?"), (*params, tag))
            rows = (list(mine) + rows)[:TAG_STATS_ROWS]
        precision = max((self.precision(ctx, t) for t in ctx.tasks), default=4)
        cols = ["Tag", "Submissions", "Last Tick"] + ([] if cfg.no_score else ["Highest Score"])
        lines = ["**Tag Statistics**", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for r in rows:
            cells = [cell(r["tag"]), str(r["n"]), str(r["last"])]
            if not cfg.no_score:
                cells.append("—" if r["best"] is None else f"{r['best']:.{precision}f}")
            lines.append("| " + " | ".join(cells) + " |")
        if len(ctx.tasks) > 1 and not cfg.no_score:
            lines += ["", "Highest scores mix tasks; compare them only within one task."]
        return "\n".join(lines)

    # -- actions: tasks and submissions --------------------------------------------------------------
    @action("read")
    def read(self, ctx: Any, agent: Any, args: str | None, p: None) -> Outcome:
        ids = self.task_ids(ctx)
        text = (args or "").strip()
        if not text:
            return Outcome([f"Usage: /execute_action{{read <task ID>}}, e.g. read {ids[-1] if ids else 1}. "
                            f"Tasks: {', '.join(ids) or 'none'}."])
        task_id = self._task_id(text)
        task = ctx.tasks.get(task_id) if task_id else None
        if task is None:
            return Outcome([f"There is no research task '{text[:40]}'. Tasks: {', '.join(ids) or 'none'}."])
        addenda = ctx.store.all("SELECT label, text, tick FROM research_addenda WHERE task = ? "
                                "AND removed_tick IS NULL ORDER BY id", (task_id,))
        extra = "".join(ctx.texts.render("research_task_addendum", label=a["label"], tick=a["tick"],
                                         text=a["text"].strip()) + "\n\n" for a in addenda)
        ctx.notify(agent, ctx.texts.render("research_task_spec", id=task_id, title=task.title,
                                           spec=task.spec().strip(), addenda=extra.strip()), "research_task")
        return Outcome([f"The description of task #{task_id} ({task.title}) will be in your System Messages "
                        "next turn."])

    def _task_id(self, text: str) -> str | None:
        match = re.fullmatch(r"#?(\d{1,9})", text.strip())
        return str(int(match.group(1))) if match else None

    def _cooldown_left(self, ctx: Any, agent: Any) -> int:
        cooldown = ctx.config.research.cooldown_ticks
        if cooldown <= 0:
            return 0
        last = ctx.store.scalar("SELECT MAX(tick) FROM evaluations WHERE session = ?", (agent.session,))
        if last is None or ctx.tick - last >= cooldown:
            return 0
        return cooldown - (ctx.tick - last)

    @action("submit", params=SubmitParams, yaml_required=False)
    def submit(self, ctx: Any, agent: Any, args: str | None, p: SubmitParams | None) -> Outcome:
        cfg = ctx.config.research

        def refused(why: str) -> Outcome:
            return Outcome([f"Submission refused: {why}."])

        # 1-3: the station's and the agent's state
        if cfg.holiday_mode and is_holiday(ctx.tick):
            return refused("it is a holiday tick (ticks ending in 9 or 0 take no submissions); submit next tick")
        if agent.role == "supervisor":
            return refused("supervisors review experiments but do not submit them")
        left = self._cooldown_left(ctx, agent)
        if left:
            return refused(f"the submission cooldown is active; you can submit again in {left} tick(s)")
        # 4: the four required keys
        given = p.model_dump() if p is not None else {}
        empty = [key for key in REQUIRED if blank(given.get(key))]
        if empty:
            return refused("a submission needs a ```yaml block with all four keys title, tags, abstract and content; "
                           f"missing or empty: {', '.join(empty)}")
        assert p is not None
        title = as_text(p.title)
        if title is None:
            return refused("the title must be text")
        title = title.strip()
        if LINE_BREAK.search(title) or CONTROL.search(title) or BIDI.search(title):
            return refused("the title must be one line without control characters")
        if len(title) > MAX_TITLE_CHARS:
            return refused(f"the title is {len(title)} characters long; at most {MAX_TITLE_CHARS} are allowed")
        warnings: list[str] = []
        # 5: tags
        tags, tag_warnings, problem = normalise_tags(p.tags, cfg.max_tags, cfg.max_tag_chars)
        if problem:
            return refused(problem)
        warnings += tag_warnings
        # 6: abstract
        abstract = as_text(p.abstract)
        if abstract is None:
            return refused("the abstract must be text")
        if CONTROL.search(abstract) or BIDI.search(abstract):
            return refused("the abstract contains control characters")
        abstract, words = cut_words(abstract.strip(), cfg.max_abstract_words)
        if words > cfg.max_abstract_words:
            warnings.append(f"the abstract had {words} words; only the first {cfg.max_abstract_words} were kept")
        # 7: options
        cpu_only = p.cpu_only
        if cpu_only is not None:
            if not isinstance(cpu_only, bool):
                return refused("cpu_only must be true or false")
            if cpu_only and not cfg.allow_cpu_only:
                return refused("cpu_only is not available in this station; leave the key out")
        if p.no_debugger is not None and not isinstance(p.no_debugger, bool):
            return refused("no_debugger must be true or false")
        # 8: the code
        code = p.content
        if not isinstance(code, str):
            return refused("content must be your Python code as text (use a `|` block)")
        if "\x00" in code:
            return refused("the code contains NUL characters")
        if len(code) > cfg.max_code_chars:
            return refused(f"the code is {len(code):,} characters long; at most {cfg.max_code_chars:,} are allowed")
        if not has_real_code(code):
            return refused("the content holds only comments or docstrings. Submit real, complete code that runs "
                           "as it stands; keep reusable pieces in your lineage's storage and import them from there")
        # 9: the task
        ids = self.task_ids(ctx)
        task_id = self._task_id(args) if args and args.strip() else (ids[-1] if ids else None)
        task = ctx.tasks.get(task_id) if task_id else None
        if task is None:
            shown = (args or "").strip()[:40]
            return refused(f"there is no research task '{shown}' (tasks: {', '.join(ids) or 'none'})")
        problem = task.validate_code(code)
        if problem:
            return refused(f"the code does not fit task #{task_id}: {problem}")
        # 10: open evaluations
        open_ids = [r[0] for r in ctx.store.all("SELECT id FROM evaluations WHERE session = ? AND status = 'queued' "
                                                "ORDER BY id", (agent.session,))]
        if len(open_ids) >= cfg.max_open_per_agent:
            return refused(f"you already have {len(open_ids)} unfinished evaluation(s) "
                           f"({', '.join(f'#{i}' for i in open_ids)}); at most {cfg.max_open_per_agent} may be open "
                           "at once. Wait for a result, then submit again")
        # 11-14: queue it
        number = insert_evaluation(
            ctx.store, task=task_id, author=agent.name, session=agent.session, lineage=agent.lineage, tick=ctx.tick,
            title=title, tags=tags, abstract=abstract, code=code, no_debugger=bool(p.no_debugger),
            cpu_only=bool(cpu_only) and cfg.allow_cpu_only, holds_tick=True)
        self.state(agent).setdefault("submitted", []).append(number)
        ctx.emit("evaluation_submitted", agent.name, evaluation=number)
        wait = cfg.wait_ticks
        when = (ctx.texts.render("research_result_by_tick", tick=ctx.tick + wait) if wait
                else ctx.texts.render("research_result_later"))
        ctx.notify(agent, ctx.texts.render("research_submitted", id=number, title=title, task=task_id,
                                           task_title=task.title, when=when), "research")
        lines = [f"Submitted '{title}' to task #{task_id} ({task.title}) as evaluation #{number}; "
                 "its result will come as a system message."]
        lines += [f"Warning: {w}." for w in warnings]
        return Outcome(lines)

    # -- actions: reading results ---------------------------------------------------------------------
    @action("review")
    def review(self, ctx: Any, agent: Any, args: str | None, p: None) -> Outcome:
        text = (args or "").strip()
        if not text:
            return Outcome(["Usage: /execute_action{review <evaluation ID>}, e.g. review 12."])
        if not re.fullmatch(r"#?\d+", text):
            return Outcome([f"'{text[:40]}' is not an evaluation ID; use a number, e.g. review 12."])
        number = parse_id(text)
        row = self.visible_row(ctx, agent, number) if number is not None else None
        if row is None:
            return Outcome([f"Evaluation {text.lstrip('#')[:30]} not found."])
        if (not ctx.config.research.cross_lineage_review and agent.role != "supervisor"
                and not self.same_side(agent, row)):
            return Outcome([f"Reviewing other lineages' evaluations is turned off in this station; their papers "
                            f"in the Archive Room describe their work (evaluation #{number} is by {row['author']})."])
        if row["status"] == "queued":
            ctx.notify(agent, ctx.texts.render("research_review_pending", id=number, title=row["title"]), "research")
            return Outcome([f"Evaluation #{number} is still being evaluated; review it again once its result is out."])
        ctx.notify(agent, self.record_text(ctx, row), "research_review")
        return Outcome([f"The full record of evaluation #{number} will be in your System Messages next turn."])

    def record_text(self, ctx: Any, row: Any) -> str:
        cfg = ctx.config.research
        number = row["id"]
        task = ctx.tasks.get(row["task"])
        tags = ", ".join(_json(row["tags"], [])) or "—"
        lines = [f"**Evaluation #{number}: {row['title']}**", "",
                 f"- ID: {number}",
                 f"- Task: #{row['task']}" + (f" ({task.title})" if task is not None else ""),
                 f"- Author: {row['author']}, submitted at tick {row['tick']}",
                 f"- Tags: {tags}",
                 f"- Status: {STATUS_WORDS.get(row['status'], row['status'])}"
                 + (f" (result delivered at tick {row['finished_tick']})" if row["finished_tick"] is not None else ""),
                 "", f"Abstract: {row['abstract']}"]
        if not cfg.no_score:
            lines += ["", f"Score: {self.score_cell(ctx, row)}"]
            for name, value in sorted(self.metrics_of(row).items()):
                lines.append(f"{name}: {self.metric_text(ctx, row['task'], name, value)}")
            if row["details"]:
                lines += ["", f"Details: {row['details'].strip()}"]
        if row["error"] and row["status"] != "finished":
            lines += ["", f"Error summary: {row['error'].strip()}"]
        version = row["reported_version"]
        code = None
        if version is not None:
            code = ctx.store.scalar("SELECT code FROM evaluation_versions WHERE evaluation = ? AND version = ?",
                                    (number, version))
        if code is None:
            code, version = row["code"], None
        label = (f"Code (version {version}, written by the debugger)" if version and version > 1 else "Code")
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
    def preview(self, ctx: Any, agent: Any, args: str | None, p: None) -> Outcome:
        text = (args or "").strip()
        if not text:
            return Outcome(["Usage: /execute_action{preview all} or preview 3,5,10:14 (IDs and ranges a:b)."])
        where, params = self.scope(ctx, agent)
        notes = []
        if text.lower() == "all":
            rows = ctx.store.all(f"SELECT * FROM evaluations e WHERE {where} ORDER BY e.id DESC LIMIT ?",
                                 (*params, PREVIEW_MAX_IDS))
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
            found = {r["id"]: r for r in ctx.store.all(
                f"SELECT * FROM evaluations e WHERE e.id IN ({marks}) AND {where}", (*ids, *params))}
            blocks = [self.preview_block(ctx, found[i]) if i in found else f"Evaluation {i}: not found."
                      for i in ids]
            heading = f"**Research Counter: preview {text[:200]}**"
        ctx.notify(agent, heading + "\n\n" + "\n\n---\n\n".join(blocks + notes), "research_preview")
        return Outcome([f"Previewed {len(blocks)} evaluation(s): see your System Messages next turn."] + notes)

    def preview_block(self, ctx: Any, row: Any) -> str:
        tags = ", ".join(_json(row["tags"], [])) or "—"
        lines = [f"**Evaluation #{row['id']}: {row['title']}**",
                 f"Task #{row['task']}; by {row['author']} at tick {row['tick']}; tags: {tags}",
                 f"Abstract: {row['abstract']}"]
        if ctx.config.research.no_score:
            lines.append(f"Status: {STATUS_WORDS.get(row['status'], row['status'])}")
        else:
            score = f"Score: {self.score_cell(ctx, row)}"
            if row["status"] == "finished":
                score += "".join(f" | {name}: {self.metric_text(ctx, row['task'], name, value)}"
                                 for name, value in sorted(self.metrics_of(row).items()))
            lines.append(score)
        return "\n".join(lines)

    # -- actions: the leaderboard view -----------------------------------------------------------------
    @action("rank")
    def rank(self, ctx: Any, agent: Any, args: str | None, p: None) -> Outcome:
        mode = (args or "").strip()
        modes = [m for m in SORT_MODES if not (m == "score" and ctx.config.research.no_score)]
        if mode == "score" and ctx.config.research.no_score:
            return Outcome(["Scores are hidden in this station, so the leaderboard cannot be ranked by score; "
                            "use rank id or rank author."])
        if mode not in modes:
            return Outcome([f"Usage: /execute_action{{rank {'|'.join(modes)}}} (lower case)."])
        self.state(agent).update(sort=mode, page=1)
        return Outcome([f"The leaderboard is now sorted by {mode}, from page 1."])

    @action("filter")
    def filter(self, ctx: Any, agent: Any, args: str | None, p: None) -> Outcome:
        text = (args or "").strip()
        tag = normalise_tag(text)
        if not tag:
            return Outcome(["Usage: /execute_action{filter <tag>}, e.g. filter baseline."])
        if CONTROL.search(tag) or LINE_BREAK.search(tag) or "," in tag:
            return Outcome(["Filter refused: give one tag, without commas or control characters."])
        if len(tag) > ctx.config.research.max_tag_chars:
            return Outcome([f"Filter refused: tags have at most {ctx.config.research.max_tag_chars} characters."])
        self.state(agent).update(filter=tag, page=1)
        count = self.board_count(ctx, agent)
        return Outcome([f"The leaderboard now lists only evaluations tagged '{tag}' ({count} visible); "
                        "`unfilter` shows all again."])

    @action("unfilter")
    def unfilter(self, ctx: Any, agent: Any, args: str | None, p: None) -> Outcome:
        state = self.state(agent)
        if not self.tag_filter(agent):
            return Outcome(["No filter was set; the leaderboard already lists everything you can see."])
        state.pop("filter", None)
        state["page"] = 1
        return Outcome(["Filter removed: the leaderboard lists every evaluation you can see, from page 1."])

    @action("page")
    def page(self, ctx: Any, agent: Any, args: str | None, p: None) -> Outcome:
        text = (args or "").strip()
        if not re.fullmatch(r"\d{1,9}", text) or int(text) < 1:
            return Outcome(["Usage: /execute_action{page N} with N a page number from 1."])
        pages = max(1, -(-self.board_count(ctx, agent) // self.page_size(ctx, agent)))
        if int(text) > pages:
            return Outcome([f"Page {int(text)} does not exist: the leaderboard has {pages} page(s)."])
        self.state(agent)["page"] = int(text)
        return Outcome([f"Showing page {int(text)} of {pages}."])

    @action("page_size")
    def page_size_action(self, ctx: Any, agent: Any, args: str | None, p: None) -> Outcome:
        text = (args or "").strip()
        if not re.fullmatch(r"\d{1,9}", text) or not 1 <= int(text) <= MAX_PAGE_SIZE:
            return Outcome([f"Usage: /execute_action{{page_size N}} with N from 1 to {MAX_PAGE_SIZE}."])
        self.state(agent).update(page_size=int(text), page=1)
        return Outcome([f"The leaderboard now shows {int(text)} rows per page, from page 1."])

    # -- storage ----------------------------------------------------------------------------------------
    def _own(self, agent: Any) -> str | None:
        return agent.lineage.lower() if agent.lineage else None

    def may_read(self, ctx: Any, agent: Any, loc: rs.Location) -> str | None:
        if loc.area != rs.LINEAGE or loc.lineage == self._own(agent):
            return None
        return self.may_read_others(ctx, agent)

    def may_read_others(self, ctx: Any, agent: Any) -> str | None:
        """Why the agent may not read other lineages' storage, or None (the same rule as the leaderboard's)."""
        if agent.role == "supervisor":
            return None
        if not ctx.config.research.cross_lineage_storage:
            return "other lineages' storage is closed in this station"
        if not ctx.is_mature(agent):
            return (f"other lineages' storage opens to you when you are mature "
                    f"(age {ctx.config.lifecycle.maturity_ticks})")
        return None

    def may_write(self, ctx: Any, agent: Any, loc: rs.Location, verb: str) -> str | None:
        if loc.area is None or not loc.parts:
            return f"name the file to {verb}, e.g. shared/notes.md or lineage/helpers.py"
        if loc.area == rs.SYSTEM:
            return "system storage is read-only"
        if loc.area == rs.LINEAGE and loc.lineage != self._own(agent):
            return f"you may {verb} only in shared/ and in your own lineage's folder"
        return None

    @action("storage", params=StorageParams, yaml_required=False)
    def storage(self, ctx: Any, agent: Any, args: str | None, p: StorageParams | None) -> Outcome:
        text = (args or "").strip()
        op, _, rest = text.partition(" ")
        op, rest = op.lower(), rest.strip()
        usage = ("Usage: storage info | storage list <path> [page] | storage read <path> | storage write <path> "
                 "(with a YAML `content`) | storage delete <path>. Paths start with an area: shared/, system/, "
                 "lineage/ (yours) or a lineage name.")
        if op not in ("info", "list", "read", "write", "delete"):
            return Outcome([usage])
        view = self.state(agent).setdefault("storage_view", {})
        if op == "info":
            view["info"] = True
            return Outcome(["Storage information will be shown in the room view next turn."])
        page = 1
        if op == "list":
            words = rest.split()
            if len(words) >= 2 and words[-1].isdigit():
                if len(words[-1]) > 6 or int(words[-1]) < 1:
                    return Outcome(["Storage list refused: the page is a number from 1."])
                page, rest = int(words[-1]), rest[:rest.rstrip().rfind(words[-1])].strip()
        elif not rest:
            return Outcome([f"Storage {op} needs a path, e.g. storage {op} shared/notes.md."])
        try:
            loc = rs.parse_path(rest, agent.lineage)
        except rs.StorageError as err:
            return Outcome([f"Storage {op} refused: {err}."])
        if op in ("list", "read"):
            problem = self.may_read(ctx, agent, loc)
            if problem is None and op == "read" and (loc.area is None or not loc.parts):
                problem = "name a file to read, e.g. shared/notes.md"
            if problem is None:
                try:
                    rs.contained(self.storage_root(ctx), loc)
                except rs.StorageError as err:
                    problem = str(err)
            if problem:
                return Outcome([f"Storage {op} refused: {problem}."])
            key = "lists" if op == "list" else "reads"
            pending = view.setdefault(key, [])
            if len(pending) >= STORAGE_REQUESTS:
                return Outcome([f"Storage {op} skipped: at most {STORAGE_REQUESTS} per turn are shown; "
                                "ask again next turn."])
            pending.append([rest, page] if op == "list" else rest)
            what = (f"The listing of {loc.display}" + (f" (page {page})" if page > 1 else "") if op == "list"
                    else f"The content of {loc.display}")
            return Outcome([f"{what} will be shown in the room view next turn."])
        problem = self.may_write(ctx, agent, loc, op)
        if problem:
            return Outcome([f"Storage {op} refused: {problem}."])
        root = self.storage_root(ctx)
        if op == "delete":
            try:
                rs.delete_file(root, loc)
            except rs.StorageError as err:
                return Outcome([f"Storage delete refused: {err}."])
            return Outcome([f"Deleted {loc.display}."])
        content = p.content if p is not None else None
        if content is None:
            return Outcome([f"Storage write needs a ```yaml block with `content:` (the text of {loc.display})."])
        if isinstance(content, (bytes, bytearray)):
            return Outcome(["Storage write refused: binary content cannot be stored; write text."])
        if not isinstance(content, str) or not content:
            return Outcome(["Storage write refused: content must be non-empty text (use a `|` block)."])
        if "\x00" in content:
            return Outcome(["Storage write refused: the content contains NUL characters."])
        cap = ctx.config.research.storage_write_max_chars
        if len(content) > cap:
            return Outcome([f"Storage write refused: the content is {len(content):,} characters long; "
                            f"at most {cap:,} are allowed."])
        try:
            created = rs.write_text(root, loc, content)
        except rs.StorageError as err:
            return Outcome([f"Storage write refused: {err}."])
        size = rs.human_size(len(content.encode("utf-8")))
        return Outcome([f"{'Created' if created else 'Overwrote'} {loc.display} ({size})."])

    def _storage_view(self, ctx: Any, agent: Any) -> str:
        """The storage sections asked for last turn, shown once. What they show comes from the disk, which
        running code also changes, so it is a recorded input: a replayed station shows the same text."""
        state = self.state(agent)
        view = state.pop("storage_view", None)
        if not isinstance(view, dict):
            return ""
        count = int(state.get("storage_views", 0)) + 1
        state["storage_views"] = count
        payload = ctx.obtain(f"research-storage/{agent.session}/{count}", "research_storage", agent.name,
                             lambda: {"text": self._storage_sections(ctx, agent, view)})
        return str(payload.get("text", ""))

    def _storage_sections(self, ctx: Any, agent: Any, view: dict[str, Any]) -> str:
        parts = []
        if view.get("info"):
            parts.append(self._storage_info(ctx, agent))
        if view.get("lists"):
            parts.append("**File Listings**\n\n" + "\n\n".join(
                self._storage_listing(ctx, agent, str(path), int(page)) for path, page in view["lists"]))
        if view.get("reads"):
            parts.append("**Read Contents**\n\n" + "\n\n".join(
                self._storage_read(ctx, agent, str(path)) for path in view["reads"]))
        return "\n\n".join(parts)

    def _storage_info(self, ctx: Any, agent: Any) -> str:
        root = self.storage_root(ctx)
        own = self._own(agent)
        areas = [("shared", rs.Location(rs.SHARED), "`storage/shared`", "list, read, write, delete"),
                 ("system", rs.Location(rs.SYSTEM), "`storage/system`", "list, read")]
        if own:
            areas.append((f"{own} (your lineage)", rs.Location(rs.LINEAGE, own), f"`storage/{own}` or "
                          "`storage/lineage`", "list, read, write, delete"))
        lines = ["**Storage Information**", "", "| Area | Path for your code | Files | Size | Actions |",
                 "|---|---|---|---|---|"]
        for label, loc, path, rights in areas:
            count, size, complete = rs.area_usage(root, loc)
            lines.append(f"| {label} | {path} | {count}{'' if complete else '+'} | {rs.human_size(size)} | {rights} |")
        cfg = ctx.config.research
        if agent.role == "supervisor":
            rules = "research_storage_rules_supervisor"
        elif not cfg.cross_lineage_storage:
            rules = "research_storage_rules_closed"
        elif not ctx.is_mature(agent):
            rules = "research_storage_rules_immature"
        else:
            rules = "research_storage_rules_open"
        lines += ["", ctx.texts.render(rules), "", ctx.texts.render("research_storage_code_example")]
        return "\n".join(lines)

    def _storage_listing(self, ctx: Any, agent: Any, path: str, page: int) -> str:
        root = self.storage_root(ctx)
        try:
            loc = rs.parse_path(path, agent.lineage)
            problem = self.may_read(ctx, agent, loc)
            if problem:
                raise rs.StorageError(problem)
            if loc.area is None:
                return self._area_overview(ctx, agent)
            listing = rs.list_files(root, loc)
        except rs.StorageError as err:
            return f"`{path[:200]}`: {err}."
        if listing is None or not listing.files:
            return f"`{loc.display}`: No files found."
        total = len(listing.files)
        pages = -(-total // rs.LIST_PAGE_SIZE)
        if page > pages:
            return f"`{loc.display}` has {pages} page(s) of files; page {page} does not exist."
        size = rs.human_size(sum(s for _, s in listing.files))
        more = "" if listing.complete else f" (the listing stops after {rs.MAX_WALK:,} files)"
        lines = [f"`{loc.display}` (page {page} of {pages}): {total:,} file(s), {size} in all{more}"]
        start = (page - 1) * rs.LIST_PAGE_SIZE
        lines += [f"- {name} ({rs.human_size(s)})" for name, s in listing.files[start:start + rs.LIST_PAGE_SIZE]]
        if page < pages:
            lines.append(f"Next page: `storage list {loc.display} {page + 1}`")
        return "\n".join(lines)

    def _area_overview(self, ctx: Any, agent: Any) -> str:
        own = self._own(agent)
        lines = ["`storage/` holds these areas:", "- `shared/`: everyone reads and writes",
                 "- `system/`: task files, read-only"]
        if own:
            lines.append(f"- `{own}/` (also `lineage/`): your lineage's folder")
        if self.may_read_others(ctx, agent) is None:
            others = [n for n in rs.lineage_dirs(self.storage_root(ctx)) if n != own]
            if others:
                lines.append("- other lineages (read-only): " + ", ".join(f"`{n}/`" for n in others))
        return "\n".join(lines)

    def _storage_read(self, ctx: Any, agent: Any, path: str) -> str:
        limit = ctx.config.research.storage_read_max_chars
        try:
            loc = rs.parse_path(path, agent.lineage)
            problem = self.may_read(ctx, agent, loc)
            if problem:
                raise rs.StorageError(problem)
            result = rs.read_text(self.storage_root(ctx), loc, limit)
        except rs.StorageError as err:
            return f"`{path[:200]}`: {err}."
        note = f"\n(Only the first {limit:,} characters are shown.)" if result.truncated else ""
        return f"`{loc.display}` ({rs.human_size(result.size)}):\n{fence(result.text)}{note}"

    # -- help ---------------------------------------------------------------------------------------
    def help(self, ctx: Any, agent: Any) -> str:
        return re.sub(r"\n{3,}", "\n\n", super().help(ctx, agent))  # optional sections may be empty

    def help_values(self, ctx: Any) -> dict[str, Any]:
        cfg = ctx.config.research
        texts = ctx.texts
        maturity = ctx.config.lifecycle.maturity_ticks
        return {
            "max_open": cfg.max_open_per_agent,
            "max_tags": cfg.max_tags,
            "max_tag_chars": cfg.max_tag_chars,
            "max_abstract_words": cfg.max_abstract_words,
            "max_code_chars": f"{cfg.max_code_chars:,}",
            "page_size": cfg.page_size,
            "rank_modes": "id|author" if cfg.no_score else "id|score|author",
            "score_notes": texts.render("research_help_no_score" if cfg.no_score else "research_help_scores"),
            "cooldown_note": (texts.render("research_help_cooldown", cooldown_ticks=cfg.cooldown_ticks)
                              if cfg.cooldown_ticks else ""),
            "cpu_only_note": texts.render("research_help_cpu_only") if cfg.allow_cpu_only else "",
            "debugger_section": texts.render("research_help_debugger") if ctx.config.debugger.enabled else "",
            "lineage_storage_note": texts.render("research_help_storage_open" if cfg.cross_lineage_storage
                                                 else "research_help_storage_closed"),
            "review_note": "" if cfg.cross_lineage_review else texts.render("research_help_review_closed"),
            "isolation_note": (texts.render("research_help_isolation", isolation_ticks=maturity)
                               if maturity else ""),
            "holiday_note": texts.render("research_help_holiday") if cfg.holiday_mode else "",
            "storage_read_max_chars": f"{cfg.storage_read_max_chars:,}",
        }

    # -- what other parts of the station read ---------------------------------------------------------
    def task_summary(self, ctx: Any) -> str:
        """The tasks' titles and specs, bounded, for the archive reviewer's context."""
        ids = self.task_ids(ctx)
        if not ids:
            return ""
        share = max(1_000, SUMMARY_CHARS // len(ids))
        parts = []
        for tid in ids:
            task = ctx.tasks[tid]
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
        key = _json(row["sort_key"], [])
        if key and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in key):
            return [float(v) for v in key]
        score = row["score"]
        return [float(score)] if isinstance(score, (int, float)) and math.isfinite(score) else None

    def lineage_credits(self, ctx: Any) -> dict[str, float]:
        """One credit per breakthrough: a delivered success that beats every earlier one of its task."""
        best: dict[str, list[float]] = {}
        credits: dict[str, float] = {}
        for row in ctx.store.all("SELECT id, task, author, lineage, score, sort_key FROM evaluations "
                                 "WHERE status = 'finished' AND score IS NOT NULL ORDER BY id"):
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

    def status_counts(self, ctx: Any) -> dict[str, Any]:
        rows = dict(ctx.store.all("SELECT status, COUNT(*) FROM evaluations GROUP BY status"))
        queued_ids = {r[0] for r in ctx.store.all("SELECT id FROM evaluations WHERE status = 'queued'")}
        running = len(queued_ids & running_ids(ctx.store))
        best = {}
        for task in ctx.tasks:
            row = self.best(ctx, task)
            if row is not None:
                best[task] = {"score": row["score"], "evaluation": row["id"], "author": row["author"],
                              "tick": row["finished_tick"]}
        return {"submissions": {"queued": len(queued_ids) - running, "running": running,
                                "finished": rows.get("finished", 0), "failed": rows.get("failed", 0),
                                "timed_out": rows.get("timed_out", 0)},
                "research_best": best}

    def best(self, ctx: Any, task: str) -> Any:
        """The delivered best evaluation of a task (sort key, else score; the earlier wins a tie), or None."""
        where, params = "e.task = ?", (str(task),)
        order = self.score_order(ctx, where, params)
        return ctx.store.one(f"SELECT * FROM evaluations e WHERE {where} AND {VALID} ORDER BY {order} LIMIT 1", params)
