"""Read-only views of a station for people: status (text and a stable JSON shape), agents, dialogues."""

from __future__ import annotations

import json
import re
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .models.base import LENGTH
from .terminal_text import clean, markdown
from .world import Station

STATUS_SCHEMA = 1
CAPSULE_KINDS = ("private", "public", "archive", "mail")
SUBMISSION_STATES = ("queued", "running", "finished", "failed", "timed_out", "scorer_failed", "system_failed")
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"


PAUSE_FILE = "paused.txt"  # why the last run stopped for the operator (removed when a run starts)


class Terminal(Console):
    """The commands' rich output. Rich exits on its own when the reader of a pipe goes away
    (`| head`); this leaves it to `station.cli.main`, which handles it the same for every command."""

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


def spend(station: Station) -> dict[str, Any]:
    """Money and tokens of every model call this directory made, in total and by caller."""
    rows = station.store.all(
        "SELECT who, COUNT(*) AS calls, SUM(cost_usd) AS usd, SUM(input_tokens) AS input, "
        "SUM(cached_input_tokens) AS cached, SUM(output_tokens) AS output, SUM(reasoning_tokens) AS reasoning, "
        "SUM(retries) AS retries, AVG(latency_s) AS latency FROM spend GROUP BY who ORDER BY who"
    )
    by_caller = {
        r["who"]: {
            "calls": r["calls"],
            "usd": round(r["usd"] or 0.0, 6),
            "input_tokens": r["input"] or 0,
            "cached_input_tokens": r["cached"] or 0,
            "output_tokens": r["output"] or 0,
            "reasoning_tokens": r["reasoning"] or 0,
            "retries": r["retries"] or 0,
            "mean_latency_s": round(r["latency"], 3) if r["latency"] is not None else None,
        }
        for r in rows
    }
    total = {
        key: sum(c[key] for c in by_caller.values())
        for key in ("calls", "input_tokens", "cached_input_tokens", "output_tokens", "reasoning_tokens", "retries")
    }
    total["usd"] = round(sum(c["usd"] for c in by_caller.values()), 6)
    total["cached_share"] = (
        round(total["cached_input_tokens"] / total["input_tokens"], 4) if total["input_tokens"] else None
    )
    return {**total, "by_caller": by_caller, "budget": station.config.budget.model_dump()}


def status(station: Station, *, running: bool) -> dict[str, Any]:
    """The documented `station status --json` shape (docs/status.md). Later rooms add counts."""
    store, ctx = station.store, station.ctx
    money = spend(station)
    agents = []
    for a in station.agents.active():
        agents.append(
            {
                "name": a.name,
                "kind": a.kind,
                "room": a.location,
                "age": a.age(ctx.tick),
                "max_age": a.max_age,
                "mature": ctx.is_mature(a),
                "lineage": a.lineage,
                "generation": a.generation,
                "model": a.model["name"],
                "context_tokens": a.context_tokens,
                "tokens_spent": a.tokens_spent,
                "spend_usd": money["by_caller"].get(a.name, {}).get("usd", 0.0),
            }
        )
    counts: dict[str, Any] = {
        "turns": store.scalar("SELECT COUNT(*) FROM turns"),
        "agents_ever": store.scalar("SELECT COUNT(*) FROM agents"),
        "departures": store.scalar("SELECT COUNT(*) FROM agents WHERE state='ended'"),
        "ascensions": store.scalar("SELECT COUNT(*) FROM agents WHERE state='ascended'"),
        "lineages": len(station.agents.lineages()),
        "pending_messages": store.scalar("SELECT COUNT(*) FROM messages WHERE delivered_tick IS NULL"),
        "capsules": {kind: 0 for kind in CAPSULE_KINDS},
        "submissions": {state: 0 for state in SUBMISSION_STATES},
    }
    for room in ctx.rooms.values():
        for key, value in room.status_counts(ctx).items():
            counts[key] = {**counts.get(key, {}), **value} if isinstance(value, dict) else value
    open_evaluations, scorer_failures, system_failures = [], [], []
    scorer_health: dict[str, Any] = {}
    if "research" in ctx.rooms:  # honest states: nothing runs in a station no process runs
        from rooms.research import states

        open_evaluations = [e.to_json() for e in states.open_evaluations(store, live=running)]
        scorer_failures = states.recent_scorer_failures(store)
        scorer_health = states.scorer_health(store)
        system_failures = states.recent_system_failures(store)
        for state in ("queued", "running", "undelivered"):
            counts["submissions"][state] = sum(1 for e in open_evaluations if e["state"] == state)
    problems = health_problems(scorer_health, system_failures)
    done = {r[0] for r in store.all("SELECT session FROM turns WHERE tick=?", (ctx.tick,))}
    pause_file = station.dir / PAUSE_FILE
    paused = not running and pause_file.exists()
    return {
        "schema": STATUS_SCHEMA,
        "station": {"name": station.config.name, "dir": str(station.dir), "codex": station.config.codex.set},
        "tick": ctx.tick,
        "turns_done_this_tick": len(done),
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
    }


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
    """`station status` as the terminal shows it. Kept whole: one line per fact, in the order
    the user reads them, each a few words of formatting."""
    c = data["counts"]
    lines = [
        f"{data['station']['name']} at {data['station']['dir']}",
        f"tick {data['tick']} ({data['turns_done_this_tick']} turns done), {data['state']}, " + _health(data),
        f"{c['turns']} turns, {c['agents_ever']} agents ever, {c['departures']} departures, "
        f"{c['ascensions']} ascensions, {c['lineages']} lineages",
        "",
    ]
    caps, papers = c["capsules"], c.get("papers")
    social = [
        f"capsules: {caps['private']} private notes, {caps['public']} forum threads, "
        f"{caps['archive']} papers, {caps['mail']} mails"
    ]
    if papers:
        social.append(
            f"submitted papers: {papers['accepted']} accepted, {papers['rejected']} rejected, "
            f"{papers['pending']} pending, {papers['failed']} not reviewable"
        )
    if "common_room_messages" in c:
        social.append(f"common room: {c['common_room_messages']} messages")
    if "reflections" in c:
        social.append(f"reflections: {c['reflections']}")
    if "research_best" in c:
        sub = c["submissions"]
        social.append(
            f"evaluations: {sub['finished']} finished, {sub['running']} running, {sub['queued']} queued, "
            f"{sub.get('undelivered', 0)} to deliver, {sub['failed']} failed, {sub['timed_out']} timed out"
            + (f", {sub['scorer_failed']} not scored (the task's scorer failed)" if sub.get("scorer_failed") else "")
            + (f", {sub['system_failed']} not run (system errors)" if sub.get("system_failed") else "")
        )
        social += [
            f"  #{e['id']} {e['state']}"
            + (f" {e['elapsed_s']:.0f} s" if e["elapsed_s"] is not None else "")
            + (f" ({e['progress']})" if e["progress"] else "")
            + f": {e['title']!r} by {e['author']}"
            for e in data.get("evaluations", [])
            if e["state"] == "running"
        ]
        social += [
            f"  the scorer of task {f['task']} failed on #{f['id']}: {f['error']}"
            for f in data.get("scorer_failures", [])[:3]
        ]
        best = sorted(c["research_best"].items(), key=lambda item: natural_order(item[0]))
        social += [
            f"best on task {task}: {shown(b['score'])} (evaluation #{b['evaluation']} by {b['author']}, "
            f"tick {b['tick']})"
            for task, b in best
        ]
    lines[-1:-1] = social
    lines[2:2] = [f"problem: {p}" for p in data.get("problems", [])]
    if data.get("pause_reason"):
        lines[2:2] = [f"paused: {data['pause_reason']}"]
    money = data["spend"]
    if money["calls"]:
        cached = f", {money['cached_share']:.0%} of input from cache" if money["cached_share"] is not None else ""
        budget = ", ".join(f"{k} {v:,}" for k, v in money["budget"].items() if v is not None)
        lines.insert(
            -1,
            f"spend: ${money['usd']:.4f} over {money['calls']:,} model calls "
            f"({money['input_tokens']:,} input, {money['output_tokens']:,} output, "
            f"{money['reasoning_tokens']:,} reasoning tokens{cached})" + (f"; budget: {budget}" if budget else ""),
        )
        # callers other than the active agents: roles (reviewer, grader) and agents who left, often
        # many and mostly free (scripted or cached), so only those who spent are named
        others = [
            (who, c["usd"]) for who, c in money["by_caller"].items() if who not in {a["name"] for a in data["agents"]}
        ]
        paid = [f"{who} ${usd:.4f}" for who, usd in others if usd > 0]
        free = len(others) - len(paid)
        if paid:
            lines.insert(-1, "  other callers: " + ", ".join(paid) + (f"; {free} more with no spend" if free else ""))
        elif free:
            lines.insert(-1, f"  other callers: {free} (no spend)")
    for a in data["agents"]:
        lineage = f" gen {a['generation']}" if a["generation"] else ""
        tokens = f"{a['context_tokens']:,}" if a["context_tokens"] is not None else "-"
        lines.append(
            f"  {a['name']:<16} {a['kind']:<9} {a['room']:<17} age {a['age']:>4}{lineage:<7} "
            f"context {tokens:>9}  spent {a['tokens_spent']:,}" + (f"  ${a['spend_usd']:.4f}" if a["spend_usd"] else "")
        )
    return clean("\n".join(lines))  # pause reasons, titles and progress notes come from agents and code


def _health(data: dict[str, Any]) -> str:
    """The station's status as agents see it, unless something needs the operator (then Unhealthy)."""
    if data.get("health", HEALTHY) == HEALTHY:
        return data["station_status"]
    return f"{UNHEALTHY} ({len(data['problems'])} problem(s) below; the agents see: {data['station_status']})"


def agents_table(station: Station, *, include_ended: bool) -> str:
    table = Table("name", "kind", "state", "room", "born", "left", "age", "lineage", "model", "context", "note")
    tick = station.ctx.tick
    for a in station.agents.all():
        if not include_ended and not a.active:
            continue
        end = a.exit_tick if a.exit_tick is not None else tick
        age = "-" if a.state == "ascended" else str(end - a.birth_tick)  # the life goes on under the new name
        table.add_row(
            a.name,
            a.kind,
            a.state + (f" ({a.exit_reason})" if a.exit_reason else ""),
            a.location,
            str(a.birth_tick),
            str(a.exit_tick or ""),
            age,
            f"{a.lineage} {a.generation}" if a.lineage else "",
            a.model["name"],
            f"{a.context_tokens:,}" if a.context_tokens is not None else "-",
            a.ascended_to and f"-> {a.ascended_to}" or a.succeeded_by and f"heir: {a.succeeded_by}" or "",
        )
    console = Console()  # on a terminal: its own width
    if not console.is_terminal:
        console.width = 100_000  # piped: one line per agent (the table takes only the width it needs)
    with console.capture() as cap:
        console.print(table)
    return cap.get()


ACTION_LINE = re.compile(r"^\s*`?/execute_action\{[^{}]*\}`?\s*$")


def print_dialogue(
    station: Station, name: str, *, tick: int | None, full: bool, console: Console | None = None
) -> None:
    console = console or Console()
    agent = station.agents.get(name)
    if agent is None:
        raise ValueError(f"no agent named {name!r}; see `station agents DIR --all`")
    sql = "SELECT * FROM turns WHERE session=?" + (" AND tick=?" if tick is not None else "") + " ORDER BY tick"
    rows = station.store.all(sql, (agent.session, tick) if tick is not None else (agent.session,))
    if not rows and tick is not None:
        span = station.store.one("SELECT MIN(tick), MAX(tick) FROM turns WHERE session=?", (agent.session,))
        has = f"its turns are at ticks {span[0]}-{span[1]}" if span[0] is not None else "it has no turns yet"  # type: ignore[index]  # an aggregate: always one row
        raise ValueError(f"{name} has no turn at tick {tick}; {has}")
    if not rows:
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
