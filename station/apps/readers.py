"""Terminal readers for what agents wrote: the Archive's papers, one paper or submission, one capsule
thread, the research evaluations.

`station papers DIR`, `station paper DIR N` (or `s:N` for a submission), `station thread DIR N` and
`station evaluations DIR` (their arguments and command functions are in readers_cli.py).
The query functions return plain dicts and lists read from the store; the render functions print
them with rich. Everything agents (or the reviewing model) wrote is untrusted: it is cleaned of
terminal control sequences and only ever printed as `Text` or `Markdown`, so rich markup inside
it (`[bold red]`) is shown as written, never interpreted.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from rooms import capsule_views
from rooms.archive import REVIEWER
from rooms.archive import views as archive_views
from rooms.capsule_store import lineage_key
from rooms.research import states as research_states
from rooms.research.store import ranking_order
from rooms.research.tasks import ResearchTasks, score_words
from rooms.research.text import json_or
from station.apps.reader_choices import PAPER_STATES, ROOMS
from station.apps.report import pages_line
from station.apps.report import shown as number_text
from station.core.store import Store
from station.core.terminal_text import MAX_TEXT_CHARS, cell, markdown, plain

CONTEXT_PROMPT_CHARS = 1_200  # the reviewer's briefing is shown shortened in a submission's dialogue


# -- small helpers ----------------------------------------------------------------------------
THING = {"public_memory": "forum thread", "mail": "mail", "private_memory": "private note", "archive": "paper"}
SCORE_LINE = re.compile(r"score\s*:\s*\**\s*(10|[1-9])\s*/\s*10", re.IGNORECASE)


def _has_table(store: Store, name: str) -> bool:
    return store.one("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (name,)) is not None


def _require_capsules(store: Store) -> None:
    if not _has_table(store, "capsules"):
        raise ValueError("this station has no capsule rooms (no papers, forum, mail or private notes)")


def _span(numbers: list[int]) -> str:
    """'1-9', '4', or '1-3, 5, 7-9' for a list of numbers."""
    numbers = sorted(set(numbers))
    parts: list[str] = []
    start = prev = None
    for n in numbers + [None]:
        if start is not None and (n is None or n != prev + 1):  # type: ignore[operator]  # prev is set while start is
            parts.append(str(start) if start == prev else f"{start}-{prev}")
            start = None
        if n is not None and start is None:
            start = n
        prev = n
    if len(parts) > 6:
        return f"{numbers[0]}-{numbers[-1]}"
    return ", ".join(parts)


def _author(name: str, lineage: str | None, generation: int | None) -> dict[str, Any]:
    return {"name": name, "lineage": lineage, "generation": generation}


def _message(row: Any) -> dict[str, Any]:
    return {
        "k": row["k"],
        "author": _author(row["author"], row["author_lineage"], row["author_generation"]),
        "session": row["author_session"],
        "tick": row["tick"],
        "title": row["title"],
        "content": row["content"],
        "words": row["word_count"],
        "deleted": bool(row["deleted"]),
    }


def _is_review(row: Any) -> bool:
    return row["author"] == REVIEWER.name and row["author_session"] is None


def _score_in(text: str | None) -> int | None:
    found = SCORE_LINE.search(text or "")
    return int(found.group(1)) if found else None


def parse_paper_id(value: str | None, submission: int | None) -> tuple[str, int]:
    """('paper', N) or ('submission', N) from the `paper` command's arguments."""
    if value is not None and submission is not None:
        raise ValueError("give either a paper number or --submission, not both")
    if submission is not None:
        return "submission", submission
    if value is None:
        raise ValueError("give a paper number (station paper DIR 3), or a submission as s:N or --submission N")
    text = value.strip().lower()
    kind = "paper"
    if text.startswith("s:"):
        kind, text = "submission", text[2:].strip()
    if not text.isdigit() or len(text) > 18:
        raise ValueError(f"{value!r} is not a paper number; use e.g. 3 for paper 3 or s:7 for submission 7")
    return kind, int(text)


# -- queries ------------------------------------------------------------------------------------
def list_papers(
    store: Store, *, include_unpublished: bool = False, status: str | None = None, limit: int = -1, offset: int = 0
) -> dict[str, Any]:
    """The Archive's published papers and, with `include_unpublished` or a status, the other submissions.

    Returns {"papers": [...], "submissions": [...], "paper_total": N, "submission_total": M}: papers by
    number (deleted ones only with `include_unpublished`), submissions that were not published by id;
    `limit` and `offset` choose one page of each list (the totals count them all).
    """
    _require_capsules(store)
    if status is not None and status not in PAPER_STATES:
        raise ValueError(f"unknown status {status!r}; choose one of {', '.join(PAPER_STATES)}")
    if limit == 0 or limit < -1 or offset < 0:
        raise ValueError("--limit must be at least 1 and --offset at least 0")
    papers: list[dict[str, Any]] = []
    submissions: list[dict[str, Any]] = []
    paper_total = submission_total = 0
    if status in (None, "accepted"):
        paper_total = archive_views.paper_count(store.db, include_deleted=include_unpublished)
        rows = archive_views.paper_page(store.db, include_deleted=include_unpublished, limit=limit, offset=offset)
        accepted = _accepted_submissions(store, [r["number"] for r in rows])
        for r in rows:
            sub = accepted.get(r["number"])
            score = sub["score"] if sub and sub["score"] is not None else _score_in(r["review"])
            papers.append(
                {
                    "number": r["number"],
                    "title": r["title"],
                    "author": _author(r["author"], r["author_lineage"], r["author_generation"]),
                    "tick": r["created_tick"],
                    "score": score,
                    "replies": r["replies"],
                    "words": r["word_count"],
                    "tags": json.loads(r["tags"]),
                    "deleted": bool(r["deleted"]),
                    "submission": sub["id"] if sub else None,
                }
            )
    wants_submissions = status in ("rejected", "pending", "failed") or (include_unpublished and status is None)
    if wants_submissions and _has_table(store, "paper_submissions"):
        submission_total = archive_views.unpublished_count(store.db, status)
        for r in archive_views.unpublished_page(store.db, status, limit, offset):
            submissions.append(_submission_summary(r))
    return {
        "papers": papers,
        "submissions": submissions,
        "paper_total": paper_total,
        "submission_total": submission_total,
    }


def _accepted_submissions(store: Store, numbers: list[int]) -> dict[int, dict[str, Any]]:
    """The accepted submission behind each of these paper numbers (the latest, if several)."""
    if not numbers or not _has_table(store, "paper_submissions"):
        return {}
    return archive_views.accepted_submissions(store.db, numbers)


def _submission_summary(r: Any) -> dict[str, Any]:
    return {
        "id": r["id"],
        "title": r["title"],
        "author": _author(r["agent"], r["lineage"], r["generation"]),
        "tick": r["tick"],
        "status": r["status"],
        "score": r["score"],
        "attempts": r["attempts"],
        "decided_tick": r["decided_tick"],
        "paper": r["capsule_number"],
    }


def get_paper(store: Store, number: int) -> dict[str, Any]:
    """One Archive paper (deleted or not): its fields, body, review and replies."""
    _require_capsules(store)
    row = capsule_views.find_capsule(store.db, "archive", number)
    if row is None:
        numbers = capsule_views.capsule_numbers(store.db, "archive")
        known = f"papers: {_span(numbers)}" if numbers else "it has no papers yet"
        raise ValueError(f"no paper {number} in the Archive ({known})")
    messages = capsule_views.messages(store.db, row["id"])
    body = next((m for m in messages if m["k"] == 1), None)
    review = next((m for m in messages if _is_review(m)), None)
    replies = [_message(m) for m in messages if m["k"] != 1 and not _is_review(m)]
    sub = _accepted_submissions(store, [number]).get(number)
    verdict = None
    if sub is not None:
        raw = archive_views.verdict(store.db, sub["id"])
        verdict = json.loads(raw) if raw else None
    score = sub["score"] if sub and sub["score"] is not None else _score_in(review["content"] if review else None)
    return {
        "number": number,
        "title": row["title"],
        "abstract": row["abstract"],
        "tags": json.loads(row["tags"]),
        "author": _author(row["author"], row["author_lineage"], row["author_generation"]),
        "tick": row["created_tick"],
        "deleted": bool(row["deleted"]),
        "words": row["word_count"],
        "body": _message(body) if body else None,
        "review": (
            {
                "tick": review["tick"],
                "content": review["content"],
                "score": score,
                "comment": (verdict or {}).get("comment"),
                "suggestion": (verdict or {}).get("suggestion"),
                "deleted": bool(review["deleted"]),
            }
            if review
            else None
        ),
        "score": score,
        "submission": sub["id"] if sub else None,
        "replies": replies,
    }


def get_submission(store: Store, sid: int) -> dict[str, Any]:
    """One paper submission (published or not) with the reviewer's exchanges about it."""
    if not _has_table(store, "paper_submissions"):
        raise ValueError("this station has no Archive submissions")
    row = archive_views.submission(store.db, sid)
    if row is None:
        ids = archive_views.submission_ids(store.db)
        known = f"submissions: {_span(ids)}" if ids else "there are none yet"
        raise ValueError(f"no submission s:{sid} ({known})")
    data = _submission_summary(row)
    data.update(
        abstract=row["abstract"],
        content=row["content"],
        tags=json.loads(row["tags"]),
        verdict=json.loads(row["verdict"]) if row["verdict"] else None,
        reviews=[],
    )
    if _has_table(store, "paper_reviews"):
        for r in archive_views.reviews(store.db, sid):
            data["reviews"].append(
                {
                    "kind": r["kind"],
                    "attempt": r["attempt"],
                    "tick": r["tick"],
                    "model": r["model"],
                    "prompt": r["prompt"],
                    "response": r["response"],
                    "thinking": r["thinking"],
                    "error": r["error"],
                    "status": r["status"],
                    "decision": r["decision"],
                    "extracted": json.loads(r["extracted"]) if r["extracted"] else None,
                }
            )
    return data


def get_thread(
    store: Store, room: str, number: int, *, lineage: str | None = None, limit: int = -1, offset: int = 0
) -> dict[str, Any]:
    """One capsule thread of a room ('public', 'mail', 'private', 'archive' or the room's short name):
    its messages from `offset` on (at most `limit`), how many there are and who wrote."""
    _require_capsules(store)
    short = ROOMS.get(room, room)
    if short not in THING:
        raise ValueError(f"unknown room {room!r}; choose one of {', '.join(ROOMS)}")
    thing = THING[short]
    if lineage is not None and short != "private_memory":
        raise ValueError("--lineage is only for private notes (--room private)")
    if short == "private_memory":
        scope = _private_scope(store, number, lineage)
    else:
        scope = ""
    row = capsule_views.find_capsule(store.db, short, number, scope)
    if row is None:
        numbers = capsule_views.capsule_numbers(store.db, short, scope)
        plural = "notes" if short == "private_memory" else "mails" if short == "mail" else f"{thing.split()[-1]}s"
        known = f"{plural}: {_span(numbers)}" if numbers else f"there are no {plural} yet"
        where = f" of the {scope} lineage" if short == "private_memory" else ""
        raise ValueError(f"no {thing} {number}{where} ({known})")
    if limit == 0 or limit < -1 or offset < 0:
        raise ValueError("--limit must be at least 1 and --offset at least 0")
    messages = [_message(m) for m in capsule_views.messages(store.db, row["id"], limit=limit, offset=offset)]
    total, live = capsule_views.message_counts(store.db, row["id"])
    participants: list[str] = [row["author"]]
    for name in capsule_views.writers(store.db, row["id"]):
        if name not in participants:
            participants.append(name)
    return {
        "room": short,
        "thing": thing,
        "scope": scope,
        "number": number,
        "title": row["title"],
        "abstract": row["abstract"],
        "tags": json.loads(row["tags"]),
        "author": _author(row["author"], row["author_lineage"], row["author_generation"]),
        "recipients": json.loads(row["recipients"]),
        "participants": participants,
        "created_tick": row["created_tick"],
        "updated_tick": row["updated_tick"],
        "deleted": bool(row["deleted"]),
        "messages": messages,
        "total": total,
        "live": live,
        "offset": offset,
        "limit": limit,
    }


def _private_scope(store: Store, number: int, lineage: str | None) -> str:
    scopes = capsule_views.private_scopes(store.db)
    if lineage is not None:
        wanted = lineage_key(lineage.strip())
        if wanted in scopes:
            return wanted
        folded = [s for s in scopes if s.lower() == wanted.lower()]
        if len(folded) == 1:
            return folded[0]
        known = f"lineages with notes: {', '.join(scopes)}" if scopes else "no lineage has notes yet"
        raise ValueError(f"no private notes of a lineage {lineage!r} ({known})")
    holders = capsule_views.private_scopes_of(store.db, number)
    if len(holders) == 1:
        return holders[0]
    if not holders:
        known = f"lineages with notes: {', '.join(scopes)}" if scopes else "no lineage has notes yet"
        raise ValueError(f"no private note {number} in any lineage ({known})")
    raise ValueError(
        f"private note {number} exists in {len(holders)} lineages ({', '.join(holders)}); "
        "choose one with --lineage NAME"
    )


# -- rendering ----------------------------------------------------------------------------------
def _who(author: dict[str, Any]) -> str:
    if author["name"] == REVIEWER.name or not author["lineage"]:
        return author["name"]
    return f"{author['name']} ({author['lineage']} lineage, generation {author['generation']})"


def _score(score: int | None) -> str:
    return "-" if score is None else f"{score}/10"


def render_papers(data: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    papers, subs = data["papers"], data["submissions"]
    if papers:
        table = Table(title="Archive papers", title_justify="left")
        for name, kw in (
            ("#", {"justify": "right"}),
            ("title", {"ratio": 1}),
            ("author", {}),
            ("tick", {"justify": "right"}),
            ("score", {"justify": "right"}),
            ("replies", {"justify": "right"}),
        ):
            table.add_column(name, **kw)
        for p in papers:
            style = "dim" if p["deleted"] else ""
            title = cell(p["title"], style)
            if p["deleted"]:
                title.append(" (deleted)", style="dim italic")
            table.add_row(
                Text(str(p["number"])),
                title,
                cell(p["author"]["name"]),
                Text(str(p["tick"])),
                Text(_score(p["score"])),
                Text(str(p["replies"])),
                style=style,
            )
        console.print(table)
    if subs:
        table = Table(title="Submissions not published", title_justify="left")
        for name, kw in (
            ("id", {"justify": "right"}),
            ("title", {"ratio": 1}),
            ("author", {}),
            ("tick", {"justify": "right"}),
            ("status", {}),
            ("score", {"justify": "right"}),
            ("attempts", {"justify": "right"}),
        ):
            table.add_column(name, **kw)
        colour = {"rejected": "red", "pending": "yellow", "failed": "magenta", "accepted": "green"}
        for s in subs:
            table.add_row(
                Text(f"s:{s['id']}"),
                cell(s["title"]),
                cell(s["author"]["name"]),
                Text(str(s["tick"])),
                Text(s["status"], style=colour.get(s["status"], "")),
                Text(_score(s["score"])),
                Text(str(s["attempts"])),
            )
        console.print(table)
    for total, shown, what in (
        (data.get("paper_total", 0), papers, "papers"),
        (data.get("submission_total", 0), subs, "submissions not published"),
    ):
        line = pages_line(total, data.get("offset", 0), len(shown), data.get("limit", len(shown)), what)
        if line and total:
            console.print(Text(line.rstrip(), style="dim"))
    if not papers and not subs:
        if data.get("paper_total") or data.get("submission_total"):
            return  # a page past the end: the line above says so
        console.print(
            Text("No papers match." if data.get("filtered") else "No papers have been published yet.", style="yellow")
        )
        return
    console.print(Text("Read one with `station paper DIR N` (a submission: `station paper DIR s:N`).", style="dim"))


def render_paper(paper: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    console.rule(Text(f"Archive paper {paper['number']}", style="bold"))
    console.print(plain(paper["title"], "bold", limit=2000))
    facts = f"by {_who(paper['author'])} · submitted at tick {paper['tick']}"
    if paper["review"]:
        facts += f" · published at tick {paper['review']['tick']}"
    if paper["submission"] is not None:
        facts += f" · submission s:{paper['submission']}"
    console.print(plain(facts))
    if paper["tags"]:
        console.print(Text("tags: ", style="dim") + plain(", ".join(map(str, paper["tags"])), limit=2000))
    if paper["deleted"]:
        console.print(
            Text("This paper was deleted by its lineage; it is kept in the station's records.", style="dim italic")
        )
    if paper["abstract"]:
        console.print(Panel(plain(paper["abstract"]), title=Text("Abstract"), border_style="blue"))
    body = paper["body"]
    console.print()
    if body is None or body["deleted"] and not paper["deleted"]:
        console.print(Text("(deleted)", style="dim"))
    else:
        console.print(markdown(body["content"]))
    console.print()
    review = paper["review"]
    if review is None:
        console.print(Text("Published without review.", style="dim"))
    else:
        title = Text(f"Review · score {_score(review['score'])} · tick {review['tick']}")
        console.print(Panel(markdown(review["content"]), title=title, border_style="green"))
    if paper["replies"]:
        console.rule(Text(f"{len(paper['replies'])} repl{'y' if len(paper['replies']) == 1 else 'ies'}"))
        for m in paper["replies"]:
            _print_message(console, paper["number"], m)
    else:
        console.print(Text("No replies.", style="dim"))


def render_submission(sub: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    console.rule(Text(f"Archive submission s:{sub['id']}", style="bold"))
    console.print(plain(sub["title"], "bold", limit=2000))
    facts = f"by {_who(sub['author'])} · submitted at tick {sub['tick']} · {sub['status']}"
    if sub["decided_tick"] is not None:
        facts += f" at tick {sub['decided_tick']}"
    if sub["score"] is not None:
        facts += f" · score {_score(sub['score'])}"
    if sub["paper"] is not None:
        facts += f" · published as paper {sub['paper']}"
    console.print(plain(facts))
    if sub["tags"]:
        console.print(Text("tags: ", style="dim") + plain(", ".join(map(str, sub["tags"])), limit=2000))
    if sub["abstract"]:
        console.print(Panel(plain(sub["abstract"]), title=Text("Abstract"), border_style="blue"))
    console.print()
    console.print(markdown(sub["content"]))
    console.print()
    verdict = sub["verdict"] or {}
    if verdict.get("comment") or verdict.get("suggestion"):
        parts = []
        if verdict.get("comment"):
            parts += [Text("Comment", style="bold"), plain(verdict["comment"])]
        if verdict.get("suggestion"):
            parts += [Text("Suggestion", style="bold"), plain(verdict["suggestion"])]
        console.print(
            Panel(
                Group(*parts),
                title=Text(f"Verdict · {sub['status']} · score {_score(sub['score'])}"),
                border_style="green" if sub["status"] == "accepted" else "red",
            )
        )
    if not sub["reviews"]:
        note = "The reviewer has not answered yet." if sub["status"] == "pending" else "No reviewer exchanges stored."
        console.print(Text(note, style="dim"))
        return
    console.rule(Text("Reviewer dialogue"))
    for r in sub["reviews"]:
        what = "context turn" if r["kind"] == "context" else f"attempt {r['attempt']}"
        head = f"{what} · tick {r['tick']} · {r['model']} · {r['status']} → {r['decision']}"
        # a context turn briefs the reviewer on the task and the archive: not about this paper, so shortened
        prompt = markdown(r["prompt"], limit=CONTEXT_PROMPT_CHARS if r["kind"] == "context" else MAX_TEXT_CHARS)
        console.print(Panel(prompt, title=plain(f"station → reviewer · {head}"), border_style="blue"))
        if r["thinking"]:
            console.print(Panel(plain(r["thinking"], "dim"), title=Text("reviewer thinking"), border_style="dim"))
        if r["response"]:
            console.print(Panel(markdown(r["response"]), title=Text("reviewer"), border_style="green"))
        if r["error"]:
            console.print(Panel(plain(r["error"], "red"), title=Text("error"), border_style="red"))


def render_thread(thread: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    label = thread["thing"][0].upper() + thread["thing"][1:]
    where = f" · {thread['scope']} lineage" if thread["room"] == "private_memory" else ""
    console.rule(Text(f"{label} {thread['number']}{where}", style="bold"))
    console.print(plain(thread["title"], "bold", limit=2000))
    facts = f"started by {_who(thread['author'])} at tick {thread['created_tick']}"
    total = thread.get("total", len(thread["messages"]))
    live = thread.get("live", sum(1 for m in thread["messages"] if not m["deleted"]))
    facts += f" · {total} message(s)" + (f", {live} not deleted" if live != total else "")
    console.print(plain(facts))
    if thread["room"] == "mail":
        console.print(plain(f"from {thread['author']['name']} to {', '.join(thread['recipients']) or '(nobody)'}"))
    console.print(plain(f"participants: {', '.join(thread['participants'])}"))
    if thread["tags"]:
        console.print(Text("tags: ", style="dim") + plain(", ".join(map(str, thread["tags"])), limit=2000))
    if thread["deleted"]:
        console.print(Text("This thread was deleted; it is kept in the station's records.", style="dim italic"))
    if thread["abstract"]:
        console.print(Panel(plain(thread["abstract"]), title=Text("Abstract"), border_style="blue"))
    for m in thread["messages"]:
        _print_message(console, thread["number"], m)
    offset = thread.get("offset", 0)
    line = pages_line(total, offset, len(thread["messages"]), thread.get("limit", total), "messages")
    if line:
        console.print(Text(line.rstrip(), style="dim"))


def _print_message(console: Console, number: int, m: dict[str, Any]) -> None:
    head = f"{number}-{m['k']} · {m['author']['name']} · tick {m['tick']}"
    if m["title"] and m["k"] > 1:
        head += f" · {m['title']}"
    if m["deleted"]:
        console.print(plain(head, "dim", limit=500) + Text("  (deleted)", style="dim"))
        return
    style = "green" if m["author"]["name"] == REVIEWER.name else "cyan"
    console.print(Panel(markdown(m["content"]), title=plain(head, limit=500), title_align="left", border_style=style))


# -- research evaluations -----------------------------------------------------------------------
EVALUATION_SORTS = ("tick", "score")
DONE_STATUS = {"finished": "scored"}  # the stored status of a delivered evaluation, as listed (else as stored)
OPEN_STATUS = {"queued": "pending", "running": "running", "undelivered": "undelivered"}
STATUS_WORDS = {"timed_out": "timed out", "scorer_failed": "scorer failed", "system_failed": "not run (system)"}
STATUS_COLOUR = {
    "scored": "green",
    "failed": "red",
    "timed_out": "red",
    "scorer_failed": "magenta",
    "system_failed": "magenta",
}
EVALUATION_COLUMNS = "e.id, e.task, e.author, e.lineage, e.tick, e.finished_tick, e.title, e.status, e.score, "
EVALUATION_COLUMNS += "e.metrics, e.error, e.reported_version"


def list_evaluations(
    store: Store,
    tasks: ResearchTasks,
    *,
    task: str | None = None,
    sort: str = "tick",
    limit: int = 100,
    offset: int = 0,
    running: bool = False,
) -> dict[str, Any]:
    """One page of a station's evaluations (of one task with `task`): by submission (tick, then id), or
    by score as the leaderboard ranks them (scored first, best first; task by task). Each score as
    the leaderboard shows it (the task's precision); its secondary metrics as reported, never ranked.
    `running`: a process runs the station now (else nothing runs, whatever a dead run left behind)."""
    if not tasks or not _has_table(store, "evaluations"):
        raise ValueError("this station has no research tasks, so no evaluations")
    if task is not None and task not in tasks:
        raise ValueError(f"no task {task!r} in this station; its tasks: {', '.join(tasks)}")
    if sort not in EVALUATION_SORTS:
        raise ValueError(f"unknown sort {sort!r}; choose one of {', '.join(EVALUATION_SORTS)}")
    if limit < 1 or offset < 0:
        raise ValueError("--limit must be at least 1 and --offset at least 0")
    where, params = ("e.task = ?", (task,)) if task is not None else ("1", ())
    total = store.scalar(f"SELECT COUNT(*) FROM evaluations e WHERE {where}", params)
    order = "e.tick ASC, e.id ASC"
    if sort == "score":
        order = ranking_order(store.all, where, params)
        if task is None:  # scores of different tasks do not compare: each task's ranking in turn
            order = f"CAST(e.task AS INTEGER), e.task, {order}"
    # a station from before coder mode has no `instruction`: none of its evaluations is a coder's
    coder = store.scalar("SELECT COUNT(*) FROM pragma_table_info('evaluations') WHERE name='instruction'")
    by_coder = "e.instruction IS NOT NULL" if coder else "0"
    rows = store.all(
        f"SELECT {EVALUATION_COLUMNS}, {by_coder} AS by_coder FROM evaluations e WHERE {where} "
        f"ORDER BY {order} LIMIT ? OFFSET ?",
        (*params, limit, offset),
    )
    opened: dict[int, str] = {}
    if any(r["status"] == "queued" for r in rows):
        opened = {e.id: e.state for e in research_states.open_evaluations(store, live=running)}
    shown_tasks = [task] if task is not None else list(tasks)
    return {
        "tasks": {tid: _task_summary(tasks[tid]) for tid in shown_tasks},
        "evaluations": [_evaluation(r, tasks.get(r["task"]), opened.get(r["id"], "queued")) for r in rows],
        "total": total,
        "task": task,
        "sort": sort,
        "limit": limit,
        "offset": offset,
    }


def _task_summary(task: Any) -> dict[str, Any]:
    return {"title": task.title, "score": score_words(task), "precision": task.display_precision}


def _evaluation(row: Any, task: Any, open_state: str) -> dict[str, Any]:
    status = OPEN_STATUS[open_state] if row["status"] == "queued" else DONE_STATUS.get(row["status"], row["status"])
    score = row["score"] if isinstance(row["score"], (int, float)) and math.isfinite(row["score"]) else None
    precision = task.display_precision if task is not None else 4
    formats = getattr(task, "metric_formats", None) or {}
    metrics = json_or(row["metrics"], {}) if row["status"] != "queued" else {}
    return {
        "id": row["id"],
        "task": row["task"],
        "tick": row["tick"],
        "delivered_tick": row["finished_tick"],
        "author": {"name": row["author"], "lineage": row["lineage"]},
        "title": row["title"],
        "status": status,
        "score": score,
        "score_shown": "-" if row["status"] == "queued" else "n.a." if score is None else f"{score:.{precision}f}",
        "reported_metrics": metrics,
        "reported_shown": ", ".join(
            f"{name} {number_text(value, formats.get(name))}" for name, value in metrics.items()
        ),
        "error": row["error"],
        "version": row["reported_version"],
        # who wrote a later version: the research coder (an official attempt) or the debugger
        "version_by": "coder" if row["by_coder"] else "debugger",
    }


def render_evaluations(data: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    evaluations, tasks = data["evaluations"], data["tasks"]
    for tid, task in tasks.items():
        meaning = f"scores are {task['score']}, higher is better" if task["score"] else "higher scores are better"
        console.print(plain(f"task {tid}: {task['title']} · {meaning}", limit=300))
    if evaluations:
        several = len(tasks) > 1
        title = "Evaluations" + ("" if several else f" of task {next(iter(tasks))}")
        title += (", each task's best first" if several else ", best first") if data["sort"] == "score" else ""
        table = Table(title=title, title_justify="left")
        columns = ["#", "tick", *(["task"] if several else []), "author", "title", "status", "score", "reported"]
        for name in columns:
            right = name in ("#", "tick", "task", "score")
            table.add_column(
                name, justify="right" if right else "left", no_wrap=right, ratio=2 if name == "title" else None
            )
        for e in evaluations:
            status = Text(STATUS_WORDS.get(e["status"], e["status"]), style=STATUS_COLOUR.get(e["status"], "yellow"))
            if e["version"] and e["version"] > 1:
                made = "coder's attempt" if e["version_by"] == "coder" else "debugger's version"
                status.append(f" ({made} {e['version']})", style="dim")
            if e["status"] not in ("scored", "pending", "running", "undelivered") and e["error"]:
                status.append_text(cell(f" {e['error'][:80]}", "dim"))
            table.add_row(
                Text(str(e["id"])),
                Text(str(e["tick"])),
                *([Text(e["task"])] if several else []),
                cell(e["author"]["name"]),
                cell(e["title"]),
                status,
                Text(e["score_shown"]),
                cell(e["reported_shown"], "dim"),
            )
        console.print(table)
    line = pages_line(data["total"], data["offset"], len(evaluations), data["limit"], "evaluations")
    if line:
        console.print(Text(line.rstrip(), style="dim"))
    if not evaluations and not data["total"]:
        console.print(Text("No evaluations yet." if data["task"] is None else "No evaluations of this task yet."))
    elif evaluations:
        console.print(
            Text("reported: the run's secondary metrics as its evaluator reported them (the score alone ranks)", "dim")
        )
