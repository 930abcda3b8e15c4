"""The Research Counter's leaderboard: each agent's view settings (sort, page, tag filter), the
table and tag statistics, and the actions that change the view. Visibility comes from the
room's one rule (`scope`), applied in SQL to every read."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any, ClassVar

from rooms.research.config import ResearchConfig
from rooms.research.tasks import tasks_of
from station.core.agents import Agent
from station.core.context import Context
from station.core.room import Outcome, action

from .params import CONTROL, LINE_BREAK, normalise_tag
from .store import VALID, ranking_order
from .text import cell, clip_title, json_or

TAG_STATS_ROWS = 20
MAX_PAGE_SIZE = 200
SORT_MODES = ("id", "score", "author")


class Leaderboard:
    """Mixed into ResearchCounter; uses its `scope`, `sees_all` and `precision`."""

    if TYPE_CHECKING:  # provided by the room
        short: ClassVar[str]

        def scope(self, ctx: Context, agent: Agent) -> tuple[str, tuple]: ...
        def sees_all(self, ctx: Context, agent: Agent) -> bool: ...
        def precision(self, ctx: Context, task_id: str) -> int: ...

    # -- per-agent view state ---------------------------------------------------------------
    def state(self, agent: Agent) -> dict[str, Any]:
        return agent.room_state(self.short)

    def sort_mode(self, ctx: Context, agent: Agent) -> str:
        mode = self.state(agent).get("sort", "id")
        if mode not in SORT_MODES or (mode == "score" and ctx.config.section(ResearchConfig).no_score):
            return "id"
        return mode

    def page_size(self, ctx: Context, agent: Agent) -> int:
        size = self.state(agent).get("page_size")
        return (
            size
            if isinstance(size, int) and 1 <= size <= MAX_PAGE_SIZE
            else ctx.config.section(ResearchConfig).page_size
        )

    def tag_filter(self, agent: Agent) -> str | None:
        tag = self.state(agent).get("filter")
        return tag if isinstance(tag, str) and tag else None

    def board_where(self, ctx: Context, agent: Agent) -> tuple[str, tuple]:
        where, params = self.scope(ctx, agent)
        tag = self.tag_filter(agent)
        if tag:
            where += " AND e.id IN (SELECT evaluation FROM evaluation_tags WHERE tag = ?)"
            params += (tag,)
        return where, params

    def board_count(self, ctx: Context, agent: Agent) -> int:
        where, params = self.board_where(ctx, agent)
        return ctx.store.scalar(f"SELECT COUNT(*) FROM evaluations e WHERE {where}", params) or 0

    def score_order(self, ctx: Context, where: str, params: tuple) -> str:
        return ranking_order(ctx.store.all, where, params)

    def order(self, ctx: Context, agent: Agent, mode: str, where: str, params: tuple) -> tuple[str, tuple]:
        if mode == "author":
            return "COALESCE(e.session = ?, 0) DESC, e.tick DESC, e.id DESC", (agent.session,)
        if mode == "score":
            return self.score_order(ctx, where, params), ()
        return "e.id DESC", ()

    # -- cells --------------------------------------------------------------------------------
    def score_cell(self, ctx: Context, row: Any) -> str:
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

    def metric_text(self, ctx: Context, task_id: str, name: str, value: Any) -> str:
        if value is None:
            return "—"
        task = tasks_of(ctx).get(task_id)
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
        return json_or(row["metrics"], {})

    def _board(self, ctx: Context, agent: Agent) -> str:
        no_score = ctx.config.section(ResearchConfig).no_score
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
            empty = f"No visible evaluation is tagged '{tag}'." if tag else "No evaluations have been submitted yet."
            return "\n\n".join(p for p in (heading, empty, filter_line) if p)
        order, order_params = self.order(ctx, agent, mode, where, params)
        rows = ctx.store.all(
            f"SELECT e.id, e.task, e.title, e.author, e.tick, e.status, e.score, e.metrics FROM evaluations e "
            f"WHERE {where} ORDER BY {order} LIMIT ? OFFSET ?",
            (*params, *order_params, size, (page - 1) * size),
        )
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
            lines += [
                "",
                f"Page {page} of {pages} (sorted by: {mode}). Move with `page N`; sort with "
                f"`rank {ranks}`; rows per page: `page_size N`; narrow with `filter <tag>`.",
            ]
        elif mode != "id":
            lines += ["", f"Sorted by: {mode}."]
        if filter_line:
            lines += ["", filter_line]
        return "\n".join(lines)

    def _tag_stats(self, ctx: Context, agent: Agent) -> str:
        cfg = ctx.config.section(ResearchConfig)
        if not cfg.show_tag_stats or not self.sees_all(ctx, agent):
            return ""
        where, params = self.scope(ctx, agent)
        query = (
            f"SELECT t.tag AS tag, COUNT(*) AS n, MAX(e.tick) AS last, "
            f"MAX(CASE WHEN {VALID} THEN e.score END) AS best FROM evaluation_tags t "
            f"JOIN evaluations e ON e.id = t.evaluation WHERE {where} {{extra}} GROUP BY t.tag"
        )
        rows = list(
            ctx.store.all(query.format(extra="") + " ORDER BY n DESC, t.tag LIMIT ?", (*params, TAG_STATS_ROWS))
        )
        if not rows:
            return ""
        tag = self.tag_filter(agent)
        if tag:
            rows = [r for r in rows if r["tag"] != tag]
            mine = ctx.store.all(query.format(extra="AND t.tag = ?"), (*params, tag))
            rows = (list(mine) + rows)[:TAG_STATS_ROWS]
        precision = max((self.precision(ctx, t) for t in tasks_of(ctx)), default=4)
        cols = ["Tag", "Submissions", "Last Tick"] + ([] if cfg.no_score else ["Highest Score"])
        lines = ["**Tag Statistics**", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for r in rows:
            cells = [cell(r["tag"]), str(r["n"]), str(r["last"])]
            if not cfg.no_score:
                cells.append("—" if r["best"] is None else f"{r['best']:.{precision}f}")
            lines.append("| " + " | ".join(cells) + " |")
        if len(tasks_of(ctx)) > 1 and not cfg.no_score:
            lines += ["", "Highest scores mix tasks; compare them only within one task."]
        return "\n".join(lines)

    # -- actions: the leaderboard view -----------------------------------------------------------------
    @action("rank")
    def rank(self, ctx: Context, agent: Agent, args: str | None, p: None) -> Outcome:
        mode = (args or "").strip()
        modes = [m for m in SORT_MODES if not (m == "score" and ctx.config.section(ResearchConfig).no_score)]
        if mode == "score" and ctx.config.section(ResearchConfig).no_score:
            return Outcome(
                [
                    "Scores are hidden in this station, so the leaderboard cannot be ranked by score; "
                    "use rank id or rank author."
                ]
            )
        if mode not in modes:
            return Outcome([f"Usage: /execute_action{{rank {'|'.join(modes)}}} (lower case)."])
        self.state(agent).update(sort=mode, page=1)
        return Outcome([f"The leaderboard is now sorted by {mode}, from page 1."])

    @action("filter")
    def filter(self, ctx: Context, agent: Agent, args: str | None, p: None) -> Outcome:
        text = (args or "").strip()
        tag = normalise_tag(text)
        if not tag:
            return Outcome(["Usage: /execute_action{filter <tag>}, e.g. filter baseline."])
        if CONTROL.search(tag) or LINE_BREAK.search(tag) or "," in tag:
            return Outcome(["Filter refused: give one tag, without commas or control characters."])
        if len(tag) > ctx.config.section(ResearchConfig).max_tag_chars:
            return Outcome(
                [f"Filter refused: tags have at most {ctx.config.section(ResearchConfig).max_tag_chars} characters."]
            )
        self.state(agent).update(filter=tag, page=1)
        count = self.board_count(ctx, agent)
        return Outcome(
            [
                f"The leaderboard now lists only evaluations tagged '{tag}' ({count} visible); "
                "`unfilter` shows all again."
            ]
        )

    @action("unfilter")
    def unfilter(self, ctx: Context, agent: Agent, args: str | None, p: None) -> Outcome:
        state = self.state(agent)
        if not self.tag_filter(agent):
            return Outcome(["No filter was set; the leaderboard already lists everything you can see."])
        state.pop("filter", None)
        state["page"] = 1
        return Outcome(["Filter removed: the leaderboard lists every evaluation you can see, from page 1."])

    @action("page")
    def page(self, ctx: Context, agent: Agent, args: str | None, p: None) -> Outcome:
        text = (args or "").strip()
        if not re.fullmatch(r"\d{1,9}", text) or int(text) < 1:
            return Outcome(["Usage: /execute_action{page N} with N a page number from 1."])
        pages = max(1, -(-self.board_count(ctx, agent) // self.page_size(ctx, agent)))
        if int(text) > pages:
            return Outcome([f"Page {int(text)} does not exist: the leaderboard has {pages} page(s)."])
        self.state(agent)["page"] = int(text)
        return Outcome([f"Showing page {int(text)} of {pages}."])

    @action("page_size")
    def page_size_action(self, ctx: Context, agent: Agent, args: str | None, p: None) -> Outcome:
        text = (args or "").strip()
        if not re.fullmatch(r"\d{1,9}", text) or not 1 <= int(text) <= MAX_PAGE_SIZE:
            return Outcome([f"Usage: /execute_action{{page_size N}} with N from 1 to {MAX_PAGE_SIZE}."])
        self.state(agent).update(page_size=int(text), page=1)
        return Outcome([f"The leaderboard now shows {int(text)} rows per page, from page 1."])
