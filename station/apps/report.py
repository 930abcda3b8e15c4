"""Read-only views of a station for people: status (text and a stable JSON shape), agents, dialogues."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from station.core.agents import agent_summaries
from station.core.model_api import LENGTH
from station.core.terminal_text import clean, markdown

if TYPE_CHECKING:  # the world (every room) is imported by the commands that need it, not by `agents` or `dialogue`
    from station.apps.world import Station
    from station.core.store import Store

STATUS_SCHEMA = 1
CAPSULE_KINDS = ("private", "public", "archive", "mail")
SUBMISSION_STATES = ("queued", "running", "finished", "failed", "timed_out", "scorer_failed", "system_failed")
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"


PAUSE_FILE = "paused.txt"  # why the last run stopped for the operator (removed when a run starts)


class Terminal(Console):
    """The commands' rich output. Rich exits on its own when the reader of a pipe goes away
    (`| head`); this leaves it to `station.apps.cli.main`, which handles it the same for every command."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def shown(value: Any, spec: str | None = None) -> str:
    """A score or metric for people: in the task's format if it has one, else 6 significant digits."""
    if value is None:
        return "-"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return format(value, spec or (".6g" if isinstance(value, float) else "d"))
        except ValueError:  # a task's format that does not fit this value
            pass
    return str(value)


def natural_order(value: Any) -> tuple:
    """A sort key: numbers, also when written as text (task ids: 2 before 10), then other text, None last."""
    if value is None:
        return (2, 0.0, "")
    try:
        return (0, float(value), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(value))


SPEND_FIELDS = ("calls", "input_tokens", "cached_input_tokens", "output_tokens", "reasoning_tokens", "retries")
SPEND_COLUMNS = (*SPEND_FIELDS, "cost_usd")
OTHER_CALLERS_NAMED = 5  # callers besides the active agents named by `station status` (the biggest spenders)
STATUS_AGENTS = 50  # active agents listed by `station status` (text); the rest: `station agents`
AGENTS_SHOWN = 100  # rows of `station agents` unless --limit says otherwise
DIALOGUE_TURNS = 20  # turns `station dialogue` prints unless --limit says otherwise


def _caller(row: Any) -> dict[str, Any]:
    return {
        "calls": row["calls"],
        "usd": round(row["cost_usd"] or 0.0, 6),
        "input_tokens": row["input_tokens"],
        "cached_input_tokens": row["cached_input_tokens"],
        "output_tokens": row["output_tokens"],
        "reasoning_tokens": row["reasoning_tokens"],
        "retries": row["retries"],
        "mean_latency_s": round(row["latency_s"] / row["timed_calls"], 3) if row["timed_calls"] else None,
    }


def spend(station: Station) -> dict[str, Any]:
    """Money and tokens of every model call this directory made: in total, by caller for the active
    agents and the station's roles (reviewer, grader, ...), and summed for the agents who left (a long
    station has tens of thousands), with the few of them who spent most. Read from the running totals
    the database keeps per caller (store.py's v5), not from the calls."""
    store = station.store
    sums = ", ".join(f"COALESCE(SUM({c}), 0) AS {c}" for c in SPEND_COLUMNS)
    everyone = store.one(
        f"SELECT COUNT(*) AS callers, COALESCE(SUM(cost_usd > 0), 0) AS paid, {sums} FROM spend_totals"
    )
    listed = store.all(  # the active agents' totals, then the callers that are no agent (the roles)
        "SELECT s.* FROM agents a JOIN spend_totals s ON s.who=a.name WHERE a.state='active' UNION ALL "
        "SELECT s.* FROM spend_totals s WHERE NOT EXISTS (SELECT 1 FROM agents a WHERE a.name=s.who) ORDER BY who"
    )
    biggest = store.all(  # those who left: every caller that is neither
        "SELECT s.who, s.cost_usd FROM spend_totals s JOIN agents a ON a.name=s.who "
        f"WHERE s.cost_usd > 0 AND a.state != 'active' ORDER BY s.cost_usd DESC, s.who LIMIT {OTHER_CALLERS_NAMED}"
    )
    assert everyone is not None  # an aggregate: always one row
    out: dict[str, Any] = {key: everyone[key] for key in SPEND_FIELDS}
    out["usd"] = round(everyone["cost_usd"], 6)
    out["cached_share"] = round(out["cached_input_tokens"] / out["input_tokens"], 4) if out["input_tokens"] else None
    out["by_caller"] = {r["who"]: _caller(r) for r in listed}
    out["agents_who_left"] = {
        "callers": everyone["callers"] - len(listed),
        "callers_who_spent": everyone["paid"] - sum(1 for r in listed if r["cost_usd"] > 0),
        "calls": everyone["calls"] - sum(r["calls"] for r in listed),
        "usd": round(everyone["cost_usd"] - sum(r["cost_usd"] for r in listed), 6),
        "biggest": {r["who"]: round(r["cost_usd"], 6) for r in biggest},
    }
    out["budget"] = station.config.budget.model_dump()
    return out


ACTIVE_AGENT_FIELDS = ("birth_tick", "max_age", "generation", "context_tokens", "tokens_spent")


def endpoints(store: Any) -> list[dict[str, Any]]:
    """Per model whose calls ever moved to another endpoint (`backups:`), where they go now: its
    last switch, and how many there were. Empty for a station that never switched."""
    if not store.one("SELECT 1 FROM sqlite_master WHERE type='table' AND name='endpoint_switches'"):
        return []
    rows = store.all(
        "SELECT provider, model, endpoint, base_url, tick, reason, COUNT(*) OVER (PARTITION BY provider, model) AS "
        "switches, ROW_NUMBER() OVER (PARTITION BY provider, model ORDER BY id DESC) AS newest "
        "FROM endpoint_switches ORDER BY provider, model"
    )
    return [
        {k: r[k] for k in ("provider", "model", "endpoint", "base_url", "tick", "reason", "switches")}
        for r in rows
        if r["newest"] == 1
    ]


def endpoint_name(index: int) -> str:
    return "base" if index == 0 else f"backup {index}"


def active_agents(store: Any, *, limit: int = -1, offset: int = 0) -> list[dict[str, Any]]:
    """The active agents' headline fields in turn order, read inside SQLite (not as records)."""
    fields = ", ".join(f"json_extract(data, '$.{f}') AS {f}" for f in ACTIVE_AGENT_FIELDS)
    return [
        dict(r)
        for r in store.all(
            f"SELECT name, kind, location, lineage, model_name, {fields} FROM agents WHERE state='active' "
            "ORDER BY position LIMIT ? OFFSET ?",
            (limit, offset),
        )
    ]


def status(station: Station, *, running: bool) -> dict[str, Any]:
    """The documented `station status --json` shape (docs/status.md). Later rooms add counts.
    Every count is an index lookup or a running total: it costs the same at tick 10 as at 10,000."""
    store, ctx = station.store, station.ctx
    money = spend(station)
    maturity, tick = station.config.lifecycle.maturity_ticks, ctx.tick
    agents = []
    for a in active_agents(store):
        age = tick - a["birth_tick"]
        agents.append(
            {
                "name": a["name"],
                "kind": a["kind"],
                "room": a["location"],
                "age": age,
                "max_age": a["max_age"],
                "mature": maturity is None or age >= maturity,
                "lineage": a["lineage"],
                "generation": a["generation"],
                "model": a["model_name"],
                "context_tokens": a["context_tokens"],
                "tokens_spent": a["tokens_spent"] or 0,
                "spend_usd": money["by_caller"].get(a["name"], {}).get("usd", 0.0),
            }
        )
    counts: dict[str, Any] = {
        # turns are never deleted and their AUTOINCREMENT ids have no gaps (a rolled-back unit takes its
        # id back): the highest id is their number, without counting millions of rows
        "turns": store.scalar("SELECT COALESCE(MAX(id), 0) FROM turns"),
        "agents_ever": store.scalar("SELECT COUNT(*) FROM agents"),
        "departures": store.scalar("SELECT COUNT(*) FROM agents WHERE state='ended'"),
        "ascensions": store.scalar("SELECT COUNT(*) FROM agents WHERE state='ascended'"),
        "lineages": store.scalar("SELECT COUNT(DISTINCT lineage) FROM agents WHERE lineage IS NOT NULL"),
        "pending_messages": store.scalar("SELECT COUNT(*) FROM messages WHERE delivered_tick IS NULL"),
        "capsules": {kind: 0 for kind in CAPSULE_KINDS},
        "submissions": {state: 0 for state in SUBMISSION_STATES},
    }
    for room in ctx.rooms.values():
        for key, value in room.status_counts(ctx).items():
            counts[key] = {**counts.get(key, {}), **value} if isinstance(value, dict) else value
    open_evaluations, scorer_failures, system_failures = [], [], []
    scorer_health: dict[str, Any] = {}
    stuck: dict[str, str] = {}
    if "research" in ctx.rooms:  # honest states: nothing runs in a station no process runs
        from rooms.research import states
        from rooms.research.tasks import tasks_of

        stuck = failing_the_same_way(store, tasks_of(ctx))

        open_evaluations = [e.to_json() for e in states.open_evaluations(store, live=running)]
        scorer_failures = states.recent_scorer_failures(store)
        scorer_health = states.scorer_health(store)
        system_failures = states.recent_system_failures(store)
        for state in ("queued", "running", "undelivered"):
            counts["submissions"][state] = sum(1 for e in open_evaluations if e["state"] == state)
    problems = health_problems(scorer_health, system_failures) + [
        f"task {task}: the last {SAME_FAILURES} evaluations all failed the same way: {line}"
        for task, line in sorted(stuck.items(), key=lambda item: natural_order(item[0]))
    ]
    done = store.scalar("SELECT COUNT(*) FROM turns WHERE tick=?", (tick,))
    pause_file = station.dir / PAUSE_FILE
    paused = not running and pause_file.exists()
    return {
        "schema": STATUS_SCHEMA,
        "station": {"name": station.config.name, "dir": str(station.dir), "codex": station.config.codex.set},
        "tick": tick,
        "turns_done_this_tick": done,
        "state": "running" if running else "paused" if paused else "stopped",
        "pause_reason": pause_file.read_text(encoding="utf-8").strip() if paused else None,
        "station_status": store.get_meta("station_status", "Healthy"),
        "health": UNHEALTHY if problems else HEALTHY,
        "problems": problems,
        "agents": agents,
        "counts": counts,
        "evaluations": open_evaluations,
        "scorer_failures": scorer_failures,
        "scorer_health": scorer_health,
        "system_failures": system_failures,
        "spend": money,
        "endpoints": endpoints(store),
    }


SAME_FAILURES = 5  # a task's last evaluations all failed alike: likely the task's doing, not the programs'


def failing_the_same_way(store: Any, tasks: Any, last: int = SAME_FAILURES) -> dict[str, str]:
    """Per task whose `last` delivered evaluations all failed (charged: failed or timed out) with the
    same first line of error, that line. Newest first by id: a few rows each, whatever the history."""
    found: dict[str, str] = {}
    for task in tasks:
        rows = store.all(
            "SELECT status, error, details FROM evaluations WHERE task=? AND status != 'queued' ORDER BY id DESC LIMIT ?",
            (task, last),
        )
        lines = {_first_line(r["error"] or r["details"] or r["status"]) for r in rows}
        if len(rows) == last and all(r["status"] in ("failed", "timed_out") for r in rows) and len(lines) == 1:
            found[str(task)] = lines.pop()
    return found


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:300]


def health_problems(scorer_health: dict[str, Any], system_failures: list[dict[str, Any]]) -> list[str]:
    """What keeps the station from being Healthy for its operator (docs/status.md says the rule)."""
    problems = [
        f"the scorer of task {task} fails: {h['recent_failed']} of its last {h['recent']} evaluations "
        f"({h['failed']} in all; the last, #{h['last_evaluation']}: {h['last_error']})"
        for task, h in sorted(scorer_health.items(), key=lambda item: natural_order(item[0]))
        if h["failing"]
    ]
    problems += [f"evaluation #{f['id']} of task {f['task']} was not run: {f['error']}" for f in system_failures]
    return problems


def status_text(data: dict[str, Any]) -> str:
    """`station status` as the terminal shows it: one line per fact, in the order the user reads them."""
    c = data["counts"]
    lines = [
        f"{data['station']['name']} at {data['station']['dir']}",
        f"tick {data['tick']} ({data['turns_done_this_tick']} turns done), {data['state']}, " + _health(data),
        *([f"paused: {data['pause_reason']}"] if data.get("pause_reason") else []),
        *(f"problem: {p}" for p in data.get("problems", [])),
        f"{c['turns']} turns, {c['agents_ever']} agents ever, {c['departures']} departures, "
        f"{c['ascensions']} ascensions, {c['lineages']} lineages",
        *_social_lines(c),
        *(_research_lines(c, data) if "research_best" in c else []),
        *(_spend_lines(data) if data["spend"]["calls"] else []),
        *(
            f"endpoint of {e['provider']} {e['model']}: {endpoint_name(e['endpoint'])} "
            f"({e['base_url'] or 'the provider default'}) since tick {e['tick']}, {e['switches']} switch(es); "
            f"the last: {e['reason']}"
            for e in data.get("endpoints", [])
        ),
        "",
        *_agent_lines(data),
    ]
    return clean("\n".join(lines))  # pause reasons, titles and progress notes come from agents and code


def _social_lines(c: dict[str, Any]) -> list[str]:
    caps, papers = c["capsules"], c.get("papers")
    lines = [
        f"capsules: {caps['private']} private notes, {caps['public']} forum threads, "
        f"{caps['archive']} papers, {caps['mail']} mails"
    ]
    if papers:
        lines.append(
            f"submitted papers: {papers['accepted']} accepted, {papers['rejected']} rejected, "
            f"{papers['pending']} pending, {papers['failed']} not reviewable"
        )
    if "surveys" in c:
        surveys = c["surveys"]
        lines.append(
            f"archive surveys: {surveys['delivered']} mailed, {surveys['open']} open, {surveys['failed']} failed"
        )
    if "common_room_messages" in c:
        lines.append(f"common room: {c['common_room_messages']} messages")
    if "reflections" in c:
        lines.append(f"reflections: {c['reflections']}")
    return lines


def _research_lines(c: dict[str, Any], data: dict[str, Any]) -> list[str]:
    sub = c["submissions"]
    lines = [
        f"evaluations: {sub['finished']} finished, {sub['running']} running, {sub['queued']} queued, "
        f"{sub.get('undelivered', 0)} to deliver, {sub['failed']} failed, {sub['timed_out']} timed out"
        + (f", {sub['scorer_failed']} not scored (the task's scorer failed)" if sub.get("scorer_failed") else "")
        + (f", {sub['system_failed']} not run (system errors)" if sub.get("system_failed") else "")
    ]
    lines += [
        f"  #{e['id']} {e['state']}"
        + (f" {e['elapsed_s']:.0f} s" if e["elapsed_s"] is not None else "")
        + (f" ({e['progress']})" if e["progress"] else "")
        + f": {e['title']!r} by {e['author']}"
        for e in data.get("evaluations", [])
        if e["state"] == "running"
    ]
    lines += [
        f"  the scorer of task {f['task']} failed on #{f['id']}: {f['error']}"
        for f in data.get("scorer_failures", [])[:3]
    ]
    best = sorted(c["research_best"].items(), key=lambda item: natural_order(item[0]))
    lines += [
        f"best on task {task}: {shown(b['score'])} (evaluation #{b['evaluation']} by {b['author']}, tick {b['tick']})"
        for task, b in best
    ]
    return lines


def _spend_lines(data: dict[str, Any]) -> list[str]:
    money = data["spend"]
    cached = f", {money['cached_share']:.0%} of input from cache" if money["cached_share"] is not None else ""
    budget = ", ".join(f"{k} {v:,}" for k, v in money["budget"].items() if v is not None)
    lines = [
        f"spend: ${money['usd']:.4f} over {money['calls']:,} model calls "
        f"({money['input_tokens']:,} input, {money['output_tokens']:,} output, "
        f"{money['reasoning_tokens']:,} reasoning tokens{cached})" + (f"; budget: {budget}" if budget else "")
    ]
    # callers other than the active agents: roles (reviewer, grader) and agents who left, often
    # many and mostly free (scripted or cached), so only the few who spent most are named
    active = {a["name"] for a in data["agents"]}
    roles = {who: c["usd"] for who, c in money["by_caller"].items() if who not in active}
    left = money.get("agents_who_left") or {"callers": 0, "callers_who_spent": 0, "usd": 0.0, "biggest": {}}
    spenders = sorted([*((w, u) for w, u in roles.items() if u > 0), *left["biggest"].items()], key=lambda o: -o[1])
    named = spenders[:OTHER_CALLERS_NAMED]
    paid = sum(1 for u in roles.values() if u > 0) + left["callers_who_spent"]
    paid_usd = sum(u for u in roles.values() if u > 0) + left["usd"]
    more = []
    if paid > len(named):
        more.append(f"{paid - len(named)} more who spent ${paid_usd - sum(u for _, u in named):.4f}")
    free = len(roles) + left["callers"] - paid
    if free and named:
        more.append(f"{free} more with no spend")
    if named:
        biggest = ", ".join(f"{who} ${usd:.4f}" for who, usd in named)
        lines.append("  other callers: " + biggest + (f"; {'; '.join(more)}" if more else ""))
    elif free:
        lines.append(f"  other callers: {free} (no spend)")
    return lines


def _agent_lines(data: dict[str, Any]) -> list[str]:
    lines = []
    for a in data["agents"][:STATUS_AGENTS]:
        lineage = f" gen {a['generation']}" if a["generation"] else ""
        tokens = f"{a['context_tokens']:,}" if a["context_tokens"] is not None else "-"
        lines.append(
            f"  {a['name']:<16} {a['kind']:<9} {a['room']:<17} age {a['age']:>4}{lineage:<7} "
            f"context {tokens:>9}  spent {a['tokens_spent']:,}" + (f"  ${a['spend_usd']:.4f}" if a["spend_usd"] else "")
        )
    hidden = len(data["agents"]) - STATUS_AGENTS
    if hidden > 0:
        lines.append(
            f"  ... and {hidden} more active agents: `station agents {data['station']['dir']} --offset {STATUS_AGENTS}`"
        )
    return lines


def _health(data: dict[str, Any]) -> str:
    """The station's status as agents see it, unless something needs the operator (then Unhealthy)."""
    if data.get("health", HEALTHY) == HEALTHY:
        return data["station_status"]
    return f"{UNHEALTHY} ({len(data['problems'])} problem(s) below; the agents see: {data['station_status']})"


TABLE_FIELDS = ("birth_tick", "exit_tick", "exit_reason", "generation", "context_tokens", "ascended_to", "location")


def agents_table(store: Store, *, include_ended: bool, limit: int = AGENTS_SHOWN, offset: int = 0) -> str:
    """`station agents`: one page of agents in turn order (active ones, or everyone with
    `include_ended`), read inside SQLite, and a last line saying how to see the rest."""
    if limit < 1 or offset < 0:
        raise ValueError("--limit must be at least 1 and --offset at least 0")
    tick = store.get_meta("tick", 1)
    where = "1" if include_ended else "state='active'"
    total = store.scalar(f"SELECT COUNT(*) FROM agents WHERE {where}")
    rows = agent_summaries(store.db, where, limit=limit, offset=offset, fields=TABLE_FIELDS)
    table = Table("name", "kind", "state", "room", "born", "left", "age", "lineage", "model", "context", "note")
    for a in rows:
        end = a["exit_tick"] if a["exit_tick"] is not None else tick
        age = "-" if a["state"] == "ascended" else str(end - a["birth_tick"])  # the life goes on under the new name
        table.add_row(
            a["name"],
            a["kind"],
            a["state"] + (f" ({a['exit_reason']})" if a["exit_reason"] else ""),
            a["location"],
            str(a["birth_tick"]),
            str(a["exit_tick"] or ""),
            age,
            f"{a['lineage']} {a['generation']}" if a["lineage"] else "",
            a["model_name"],
            f"{a['context_tokens']:,}" if a["context_tokens"] is not None else "-",
            a["ascended_to"] and f"-> {a['ascended_to']}" or a["successor"] and f"heir: {a['successor']}" or "",
        )
    console = Console()  # on a terminal: its own width
    if not console.is_terminal:
        console.width = 100_000  # piped: one line per agent (the table takes only the width it needs)
    with console.capture() as cap:
        console.print(table)
    return cap.get() + pages_line(total, offset, len(rows), limit, "agents" if include_ended else "active agents")


def pages_line(total: int, offset: int, shown: int, limit: int, what: str) -> str:
    """The line under one page of a listing: which part of how many, and the --offset of the next and
    previous pages (empty when everything is shown)."""
    if offset == 0 and shown >= total:
        return ""
    if not shown:
        return f"no {what} from --offset {offset}: there are {total:,}\n"
    parts = [f"{what} {offset + 1:,}-{offset + shown:,} of {total:,}"]
    if offset + shown < total:
        parts.append(f"next: --offset {offset + shown}")
    if offset > 0:
        parts.append(f"previous: --offset {max(0, offset - limit)}")
    return "; ".join(parts) + "\n"


ACTION_LINE = re.compile(r"^\s*`?/execute_action\{[^{}]*\}`?\s*$")


def print_dialogue(
    store: Store,
    name: str,
    *,
    tick: int | None,
    full: bool,
    limit: int = DIALOGUE_TURNS,
    offset: int | None = None,
    console: Console | None = None,
) -> None:
    """An agent's turns: the one at `tick`, or `limit` turns from `offset` (default: the latest)."""
    console = console or Console()
    if limit < 1 or (offset is not None and offset < 0):
        raise ValueError("--limit must be at least 1 and --offset at least 0")
    found = store.one("SELECT session FROM agents WHERE name=?", (name,))
    if found is None:
        raise ValueError(f"no agent named {name!r}; see `station agents DIR --all`")
    session = found["session"]
    total = store.scalar("SELECT COUNT(*) FROM turns WHERE session=?", (session,))
    if tick is not None:
        rows = store.all("SELECT * FROM turns WHERE session=? AND tick=?", (session, tick))
        if not rows:
            span = store.one("SELECT MIN(tick), MAX(tick) FROM turns WHERE session=?", (session,))
            has = f"its turns are at ticks {span[0]}-{span[1]}" if span[0] is not None else "it has no turns yet"  # type: ignore[index]  # an aggregate: always one row
            raise ValueError(f"{name} has no turn at tick {tick}; {has}")
    else:
        offset = max(0, total - limit) if offset is None else offset
        rows = store.all("SELECT * FROM turns WHERE session=? ORDER BY tick LIMIT ? OFFSET ?", (session, limit, offset))
    if not total:
        console.print(f"[yellow]{name} has no turns yet.[/]")
    for row in rows:
        console.rule(
            f"[bold]tick {row['tick']}[/] · {row['agent']} · ends in {row['room']} · "
            f"context {row['context_tokens'] or 0:,} tokens"
        )
        prompt = row["prompt"] if full else _prompt_digest(row["prompt"])
        console.print(Panel(markdown(prompt), title="station → agent", border_style="blue"))
        console.print(Panel(_highlight(row["reply"]), title="agent" + _finish_note(row), border_style="green"))
        for i, step in enumerate(json.loads(row["internal"]), 1):
            console.print(
                Panel(
                    markdown(step["prompt"] if full else step["prompt"][:600]),
                    title=f"exchange {i}: station",
                    border_style="cyan",
                )
            )
            console.print(Panel(_highlight(step["reply"]), title=f"exchange {i}: agent", border_style="green"))
    if tick is None and offset is not None:
        console.print(Text(pages_line(total, offset, len(rows), limit, f"turns of {name}").rstrip(), style="dim"))


def _finish_note(row: Any) -> str:
    """How the model's reply ended, when that is news: cut off by max_output_tokens, filtered, ..."""
    reason = row["finish_reason"] if "finish_reason" in row.keys() else None
    if reason is None or reason == "stop":
        return ""
    if reason == LENGTH:
        tokens = (row["output_tokens"] or 0) + (row["reasoning_tokens"] or 0)
        return f" · reply cut off at max_output_tokens{f' ({tokens:,} tokens)' if tokens else ''}"
    return f" · reply ended: {escape(clean(reason))}"


def _prompt_digest(prompt: str) -> str:
    """The parts of a prompt that change turn to turn: messages and last turn's results."""
    keep = [
        s
        for s in prompt.split("\n\n---\n\n")
        if s.startswith(("## System Messages", "## Actions Detected", "## Room Output History"))
    ]
    digest = "\n\n".join(keep)
    return digest if len(digest) < 4000 else digest[:4000] + "\n\n… (use --full for the whole prompt)"


def _highlight(reply: str) -> Text:
    text = Text()
    for line in clean(reply).splitlines() or [""]:
        style = "bold magenta" if ACTION_LINE.match(line) else ("dim" if line.startswith("notes: ") else "")
        text.append(line + "\n", style=style)
    return text
