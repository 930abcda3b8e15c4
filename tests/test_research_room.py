"""The Research Counter, driven through real stations (spec research §1).

Replay agents type the actions; the tests read back the action-log lines of a turn, the System
Messages, the room view in the next prompt, and the evaluations table. The evaluation hook is
switched off here: results are "delivered" by updating rows directly, as the hook would.
The tasks are a toy task registered below, so these tests depend on no real evaluator.
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import (
    act,
    events,
    guest,
    make_old,
    make_station,
    prompt_at,
    recursive,
    replay_model,
    reply,
    session_of,
    stored,
    turn_lines,
    yaml_block,
)

from evaluators.base import Task, register
from rooms.research import storage as rs
from rooms.research.delivery import Evaluations
from rooms.research.ids import parse_id_list
from rooms.research.room import ResearchCounter
from rooms.research.store import insert_evaluation
from rooms.research.tasks import ResearchTasks, tasks_of
from station.apps.world import Station
from station.core.context import NeedInput
from station.core.engine import Engine
from station.core.room import validate_params
from station.executors.shares import Ledger


@register("research_room_toy")
class ToyTask(Task):
    description = "Return a few numbers."
    display_precision = 3
    metric_formats = {"radius": ".2f", "count": "d"}

    def __init__(self, n: int = 1) -> None:
        self.n = n
        self.title = f"Toy Sum {n}"

    def spec(self) -> str:
        return f"Define main() returning {self.n} numbers. It costs $5 (dollars stay as written)."

    def validate_code(self, code: str) -> str | None:
        return "calling forbidden() is not allowed" if "forbidden(" in code else None


TASKS = [{"evaluator": "research_room_toy", "params": {"n": 1}}, {"evaluator": "research_room_toy", "params": {"n": 2}}]
CODE = "def main():\n    return [1, 2]\n"
NAMES = {"Spiro": "Spiro I", "Praxis": "Praxis I", "Veritas": "Veritas I", "Ver": "Ver I"}


@pytest.fixture(autouse=True)
def no_evaluator(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing runs submissions here: rows stay queued until a test delivers them."""
    monkeypatch.setattr(Evaluations, "handle", lambda self, ctx, agent, event: None)


def station(tmp_path: Path, scripts: dict[str, list[str]], *, guests: list[list[str]] = (),
            supervisor: list[str] | None = None, research: dict[str, Any] | None = None, **overrides: Any) -> Station:
    """Recursive agents keyed by name ("Spiro I" -> lineage Spiro), an optional supervisor (Sage I), guests."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    specs = [recursive(replay_model(tmp_path / f"r{i}.jsonl", replies, pad=20), lineage=name.split()[0])
             for i, (name, replies) in enumerate(scripts.items())]
    if supervisor is not None:
        specs.append(recursive(replay_model(tmp_path / "sup.jsonl", supervisor, pad=20), lineage="Sage",
                               role="supervisor"))
    specs += [guest(replay_model(tmp_path / f"g{i}.jsonl", replies, pad=20)) for i, replies in enumerate(guests)]
    overrides.setdefault("lifecycle", {"maturity_ticks": 0})
    overrides.setdefault("stagnation", {"enabled": False})
    return make_station(tmp_path / "s", specs, research={"tasks": TASKS, "wait_ticks": None, **(research or {})},
                        **overrides)


def room(st: Station) -> ResearchCounter:
    found = st.ctx.room("research")
    assert isinstance(found, ResearchCounter)
    return found


def inbox(st: Station, name: str, kind: str | None = None) -> list[str]:
    sql, params = "SELECT text FROM messages WHERE agent=?", [name]
    if kind is not None:
        sql, params = sql + " AND kind=?", params + [kind]
    return [r["text"] for r in st.store.all(sql + " ORDER BY id", tuple(params))]


def call(st: Station, name: str, action: str, args: str | None = None, params: dict | None = None) -> list[str]:
    """Run one action through the room's handler, as the turn would after its access checks."""
    ctx, r = st.ctx, room(st)
    spec = r.actions[action]
    with st.store.transaction():
        agent = ctx.agents.get(name)
        assert r.refusal(ctx, agent) is None and r.action_refusal(ctx, agent, spec) is None
        p, problem, _ = validate_params(spec, params)
        assert problem is None, problem
        outcome = spec.handler(r, ctx, agent, args, p)
        ctx.agents.save(agent)
    ctx.agents.invalidate()
    return outcome.lines


def view(st: Station, name: str) -> str:
    """The room's view for an agent, rendered as a turn's prompt would (recorded inputs fetched as the engine does)."""
    ctx = st.ctx
    while True:
        try:
            with st.store.transaction():
                agent = ctx.agents.get(name)
                text = room(st).render(ctx, agent)
                ctx.agents.save(agent)
        except NeedInput as need:
            ctx.agents.invalidate()
            st.store.record_input(need.key, need.kind, ctx.tick, need.agent, need.produce())
            continue
        ctx.agents.invalidate()
        return text


def seed(st: Station, author: str | None, *, task: str = "1", tick: int = 1, title: str = "Seeded",
         tags: tuple[str, ...] = ("seed",), abstract: str = "Seed abstract.", code: str = CODE) -> int:
    """An evaluation inserted as the room would (author None: a System baseline)."""
    agent = st.ctx.agents.get(author) if author else None
    with st.store.transaction():
        number = insert_evaluation(st.store, task=task, author=agent.name if agent else "System",
                                   session=agent.session if agent else None, lineage=agent.lineage if agent else None,
                                   tick=tick, title=title, tags=list(tags), abstract=abstract, code=code,
                                   holds_tick=agent is not None)
    return number


def deliver(st: Station, number: int, *, status: str = "finished", score: float | None = None,
            sort_key: list[float] | None = None, metrics: dict[str, Any] | None = None, details: str = "",
            error: str | None = None, stdout: str = "", stderr: str = "", version: int = 1,
            versions: dict[int, str] | None = None, tick: int = 1) -> None:
    """What the evaluation hook writes when it delivers a result (test-only shortcut)."""
    with st.store.transaction():
        st.store.execute(
            "UPDATE evaluations SET status=?, score=?, sort_key=?, metrics=?, details=?, error=?, reported_version=?, "
            "stdout=?, stderr=?, finished_tick=? WHERE id=?",
            (status, score, json.dumps(sort_key) if sort_key else None, json.dumps(metrics or {}), details, error,
             version, stdout, stderr, tick, number))
        for v, code in (versions or {}).items():
            st.store.execute("INSERT INTO evaluation_versions(evaluation, version, source, code, status, input_key) "
                             "VALUES(?,?,?,?,?,?)",
                             (number, v, "author" if v == 1 else "debugger", code, "ok", f"k{v}"))


def submission(title: str = "Greedy", tags: str = "greedy", abstract: str = "A short abstract.", code: str = CODE,
               task: str = "", extra: str = "") -> str:
    body = f"title: {json.dumps(title)}\ntags: {tags}\nabstract: {json.dumps(abstract)}\ncontent: {json.dumps(code)}"
    return reply(act(f"submit {task}".strip()), yaml_block(body + (f"\n{extra}" if extra else "")))


def room_output(prompt: str) -> str:
    """The Research Counter's output in a prompt (history or current state)."""
    start = prompt.rindex("**Research Tasks**")
    end = prompt.find("**Navigation & Help:**", start)
    for stop in ("\n### Location:", "\n## Current State"):
        cut = prompt.find(stop, start)
        if cut != -1 and (end == -1 or cut < end):
            end = cut
    return prompt[start:end if end != -1 else len(prompt)]


def board_ids(text: str) -> list[int]:
    """The evaluation IDs in the leaderboard table of a view, in order."""
    block = text[text.index("**Submitted Evaluations**"):]
    ids = []
    for line in block.splitlines()[4:]:
        if not line.startswith("| "):
            break
        ids.append(int(line.split("|")[1]))
    return ids


def storage_dir(st: Station) -> Path:
    return rs.storage_root(st.store.files)


# == 1. Submitting ======================================================================================
def test_a_submission_is_queued_announced_and_listed_as_running(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": [reply(act("goto research"), submission(
        "Greedy | start", "Greedy_Search, Local Search,  ,greedy-search", "Two words.", task="1"))]})
    Engine(st).run(ticks=2)
    lines = turn_lines(st, "Spiro I", 1)
    assert lines[1] == ("Submitted 'Greedy | start' to task #1 (Toy Sum 1) as evaluation #1; its result will come as "
                        "a system message.")
    assert lines[2] == "Warning: '_' in tags was written as '-' (tags use hyphens)."
    row = st.store.one("SELECT * FROM evaluations")
    assert (row["task"], row["author"], row["lineage"], row["session"], row["tick"], row["status"], row["code"]) == \
        ("1", "Spiro I", "Spiro", session_of(st, "Spiro I"), 1, "queued", CODE)
    assert json.loads(row["tags"]) == ["greedy-search", "local search"]
    assert row["holds_tick"] == 1 and row["no_debugger"] == 0 and row["cpu_only"] == 0
    assert {r[0] for r in st.store.all("SELECT tag FROM evaluation_tags")} == {"greedy-search", "local search"}
    assert events(st, "evaluation_submitted") == [(1, "Spiro I", {"evaluation": 1})]
    notice = inbox(st, "Spiro I", "research")[0]
    assert "Evaluation #1 ('Greedy | start', task #1: Toy Sum 1) is in the queue." in notice
    assert stored(st, "Spiro I")["rooms"]["research"]["submitted"] == [1]
    out = room_output(prompt_at(st, 2, session_of(st, "Spiro I")))
    assert "| 1 | 1 | Greedy \\| start | Spiro I | 1 |" in out.split("**Submitted Evaluations**")[0]
    assert "| 1 | 1 | Greedy \\| start | Spiro I | 1 | running |" in out


def test_submit_defaults_to_the_highest_task_and_takes_the_options(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": []}, research={"allow_cpu_only": True})
    lines = call(st, "Spiro I", "submit", None, {"title": "T", "tags": ["a"], "abstract": "x", "content": CODE,
                                                 "cpu_only": True, "no_debugger": True})
    assert lines == ["Submitted 'T' to task #2 (Toy Sum 2) as evaluation #1; its result will come as a system message."]
    row = st.store.one("SELECT task, cpu_only, no_debugger FROM evaluations")
    assert tuple(row) == ("2", 1, 1)


SUBMIT_CHECKS = [  # (YAML body or None, args, the refusal)
    (None, None, "a submission needs a ```yaml block with all four keys title, tags, abstract and content; "
                 "missing or empty: title, tags, abstract, content"),
    ({"title": "T", "tags": " ", "abstract": "", "content": CODE}, None, "missing or empty: tags, abstract"),
    ({"title": "T", "tags": [], "abstract": "a", "content": "  "}, None, "missing or empty: tags, content"),
    ({"title": ["x"], "tags": "a", "abstract": "a", "content": CODE}, None, "the title must be text"),
    ({"title": "two\nlines", "tags": "a", "abstract": "a", "content": CODE}, None,
     "the title must be one line without control characters"),
    ({"title": "T" * 201, "tags": "a", "abstract": "a", "content": CODE}, None, "at most 200 are allowed"),
    ({"title": "T", "tags": {"a": 1}, "abstract": "a", "content": CODE}, None,
     "tags must be a comma-separated string or a YAML list of words"),
    ({"title": "T", "tags": ["ok", ["nested"]], "abstract": "a", "content": CODE}, None, "each tag must be"),
    ({"title": "T", "tags": "a, " + "x" * 31, "abstract": "a", "content": CODE}, None,
     "is 31 characters long; at most 30 are allowed"),
    ({"title": "T", "tags": "bad\x07tag", "abstract": "a", "content": CODE}, None, "tags may not contain line breaks"),
    ({"title": "T", "tags": ", ,", "abstract": "a", "content": CODE}, None, "give at least one tag"),
    ({"title": "T", "tags": "a", "abstract": "bell\x07", "content": CODE}, None, "the abstract contains control"),
    ({"title": "T", "tags": "a", "abstract": "a", "content": CODE, "cpu_only": True}, None,
     "cpu_only is not available in this station; leave the key out"),
    ({"title": "T", "tags": "a", "abstract": "a", "content": CODE, "cpu_only": "yes"}, None,
     "cpu_only must be true or false"),
    ({"title": "T", "tags": "a", "abstract": "a", "content": CODE, "no_debugger": 1}, None,
     "no_debugger must be true or false"),
    ({"title": "T", "tags": "a", "abstract": "a", "content": 42}, None, "content must be your Python code as text"),
    ({"title": "T", "tags": "a", "abstract": "a", "content": b"\x00\x01"}, None, "content must be your Python code"),
    ({"title": "T", "tags": "a", "abstract": "a", "content": "# only a comment\n'''and a docstring'''\n"}, None,
     "the content holds only comments or docstrings. Submit real, complete code"),
    ({"title": "T", "tags": "a", "abstract": "a", "content": "x = 1\n" * 40}, None,
     "the code is 240 characters long; at most 200 are allowed"),
    ({"title": "T", "tags": "a", "abstract": "a", "content": CODE}, "7", "there is no research task '7' (tasks: 1, 2)"),
    ({"title": "T", "tags": "a", "abstract": "a", "content": CODE}, "first", "there is no research task 'first'"),
    ({"title": "T", "tags": "a", "abstract": "a", "content": CODE}, "99999999999999999999999",
     "there is no research task '99999999999999999999999'"),
    ({"title": "T", "tags": "a", "abstract": "a", "content": CODE + "forbidden()\n"}, "1",
     "the code does not fit task #1: calling forbidden() is not allowed"),
]


@pytest.mark.parametrize("params,args,refusal", SUBMIT_CHECKS)
def test_submit_refusals(tmp_path: Path, params: dict | None, args: str | None, refusal: str) -> None:
    st = station(tmp_path, {"Spiro I": []}, research={"max_code_chars": 200})
    lines = call(st, "Spiro I", "submit", args, params)
    assert len(lines) == 1 and lines[0].startswith("Submission refused: ") and refusal in lines[0], lines
    assert st.store.scalar("SELECT COUNT(*) FROM evaluations") == 0


def test_submit_checks_come_in_the_specified_order(tmp_path: Path) -> None:
    """Holiday, supervisor, cooldown, missing keys, tags, abstract, options, code, task, open slots."""
    st = station(tmp_path, {"Spiro I": []}, supervisor=[],
                 research={"holiday_mode": True, "cooldown_ticks": 5, "max_open_per_agent": 1})
    everything_wrong = {"title": "T", "tags": {"x": 1}, "abstract": "a", "content": "# nothing"}
    with st.store.transaction():
        st.store.set_meta("tick", 9)
    assert "holiday tick" in call(st, "Sage I", "submit", "7", everything_wrong)[0]
    with st.store.transaction():
        st.store.set_meta("tick", 11)
    assert "supervisors review experiments" in call(st, "Sage I", "submit", "7", everything_wrong)[0]
    seed(st, "Spiro I", tick=10)
    assert "you can submit again in 4 tick(s)" in call(st, "Spiro I", "submit", "7", None)[0]
    with st.store.transaction():
        st.store.set_meta("tick", 15)
    assert "missing or empty: title, tags, abstract, content" in call(st, "Spiro I", "submit", "7", None)[0]
    assert "tags must be" in call(st, "Spiro I", "submit", "7", everything_wrong)[0]
    assert "cpu_only is not" in call(st, "Spiro I", "submit", "7", {**everything_wrong, "tags": "a",
                                                                        "cpu_only": True})[0]
    assert "only comments" in call(st, "Spiro I", "submit", "7", {**everything_wrong, "tags": "a"})[0]
    good = {**everything_wrong, "tags": "a", "content": CODE}
    assert "no research task '7'" in call(st, "Spiro I", "submit", "7", good)[0]
    assert "you already have 1 unfinished evaluation(s) (#1); at most 1 may be open" in \
        call(st, "Spiro I", "submit", "1", good)[0]


def test_at_most_two_open_evaluations_and_the_refusal_lists_them(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": [reply(act("goto research"), submission("A"), submission("B"),
                                              submission("C"))]})
    Engine(st).run(ticks=1)
    assert turn_lines(st, "Spiro I", 1)[3] == (
        "Submission refused: you already have 2 unfinished evaluation(s) (#1, #2); at most 2 may be open at once. "
        "Wait for a result, then submit again.")
    deliver(st, 1, score=0.5)
    assert call(st, "Spiro I", "submit", None, {"title": "C", "tags": "a", "abstract": "a", "content": CODE})[0] \
        .startswith("Submitted 'C' to task #2 (Toy Sum 2) as evaluation #3")


def test_tags_are_truncated_and_the_abstract_cut_with_warnings(tmp_path: Path) -> None:
    abstract = " ".join(f"w{i}" for i in range(130))
    st = station(tmp_path, {"Spiro I": [reply(act("goto research"), submission(
        "Many", "[One, two_x, THREE, four, five, six, seven, eight]", f"  {abstract}\n"))]})
    Engine(st).run(ticks=1)
    assert turn_lines(st, "Spiro I", 1)[2:] == [
        "Warning: '_' in tags was written as '-' (tags use hyphens).",
        "Warning: 8 tags were given; only the first 6 were kept (dropped: seven, eight).",
        "Warning: the abstract had 130 words; only the first 100 were kept."]
    row = st.store.one("SELECT tags, abstract FROM evaluations")
    assert json.loads(row["tags"]) == ["one", "two-x", "three", "four", "five", "six"]
    assert row["abstract"] == " ".join(f"w{i}" for i in range(100))


def test_cooldown_status_line(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": []}, research={"cooldown_ticks": 3})
    assert view(st, "Spiro I").startswith("Submissions available.")
    seed(st, "Spiro I", tick=1)
    assert view(st, "Spiro I").startswith("Submission cooldown active: 3 tick(s) left.")


# == 2. Reading tasks, reviewing and previewing ============================================================
def test_read_sends_the_spec_with_its_active_addenda(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": [reply(act("goto research"), act("read 2"), act("read #1"), act("read 3"),
                                              act("read"), act("read one"))]})
    with st.store.transaction():
        st.store.execute("INSERT INTO research_addenda(task, tick, label, text) VALUES('2', 1, 'Protocol II', 'Go.')")
        st.store.execute("INSERT INTO research_addenda(task, tick, label, text, removed_tick) "
                         "VALUES('2', 1, 'Old', 'Gone.', 1)")
    Engine(st).run(ticks=1)
    assert turn_lines(st, "Spiro I", 1)[1:] == [
        "The description of task #2 (Toy Sum 2) will be in your System Messages next turn.",
        "The description of task #1 (Toy Sum 1) will be in your System Messages next turn.",
        "There is no research task '3'. Tasks: 1, 2.",
        "Usage: /execute_action{read <task ID>}, e.g. read 2. Tasks: 1, 2.",
        "There is no research task 'one'. Tasks: 1, 2."]
    spec2, spec1 = inbox(st, "Spiro I", "research_task")
    assert spec2.startswith("**Research Task #2: Toy Sum 2**\n\nDefine main() returning 2 numbers. It costs $5 ")
    assert "**Protocol II** (added at tick 1)\n\nGo." in spec2 and "Gone." not in spec2
    assert "Protocol" not in spec1


def test_review_of_a_delivered_evaluation_shows_the_reported_version_and_clipped_logs(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": []}, research={"log_max_chars": 200})
    number = seed(st, "Spiro I", title="Hex grid", tags=("hex", "grid"))
    deliver(st, number, score=2.5, sort_key=[2.5, 1.0], metrics={"radius": 0.123456, "count": 26, "gap": None},
            details="All circles fit.", stdout="H" * 150 + "T" * 150, stderr="", version=2,
            versions={1: "print('v1')", 2: "def main():\n    return '```'\n"}, tick=3)
    assert call(st, "Spiro I", "review", "1") == ["The full record of evaluation #1 will be in your System Messages "
                                                  "next turn."]
    text = inbox(st, "Spiro I", "research_review")[0]
    assert text.startswith("**Evaluation #1: Hex grid**")
    for part in ("- ID: 1", "- Task: #1 (Toy Sum 1)", "- Author: Spiro I, submitted at tick 1", "- Tags: hex, grid",
                 "- Status: finished (result delivered at tick 3)", "Abstract: Seed abstract.", "Score: 2.500",
                 "count: 26", "gap: —", "radius: 0.12", "Details: All circles fit.",
                 "Code (version 2, written by the debugger):\n````python\ndef main():\n    return '```'\n````",
                 "Output (stdout) — the middle was cut to 200 characters:"):
        assert part in text, part
    assert "H" * 100 + "\n[... 100 characters cut here ...]\n" + "T" * 100 in text
    assert "print('v1')" not in text and "Errors (stderr)" not in text and "Error summary" not in text


def test_review_of_failed_queued_unknown_and_garbage_ids(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": []})
    failed = seed(st, "Spiro I", code="raise SystemExit(3)\n")
    deliver(st, failed, status="failed", error="ZeroDivisionError: division by zero", stderr="Traceback ...")
    queued = seed(st, "Spiro I")
    assert call(st, "Spiro I", "review", str(failed))[0].startswith("The full record")
    text = inbox(st, "Spiro I", "research_review")[0]
    assert "Score: n.a." in text and "Error summary: ZeroDivisionError: division by zero" in text
    assert "```python\nraise SystemExit(3)\n```" in text and "Errors (stderr):\n```\nTraceback ...\n```" in text
    assert call(st, "Spiro I", "review", f"#{queued}") == [
        "Evaluation #2 is still being evaluated; review it again once its result is out."]
    assert "has no result yet: it is still being evaluated" in inbox(st, "Spiro I", "research")[-1]
    assert call(st, "Spiro I", "review", "3") == ["Evaluation 3 not found."]
    assert call(st, "Spiro I", "review", "9" * 40) == [f"Evaluation {'9' * 30} not found."]
    assert call(st, "Spiro I", "review", "abc") == ["'abc' is not an evaluation ID; use a number, e.g. review 12."]
    assert call(st, "Spiro I", "review", "-1") == ["'-1' is not an evaluation ID; use a number, e.g. review 12."]
    assert call(st, "Spiro I", "review") == ["Usage: /execute_action{review <evaluation ID>}, e.g. review 12."]


def test_cross_lineage_review_can_be_turned_off(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": [], "Praxis I": []}, supervisor=[], research={"cross_lineage_review": False})
    theirs, system = seed(st, "Praxis I"), seed(st, None)
    deliver(st, theirs, score=1.0)
    deliver(st, system, score=0.5)
    assert call(st, "Spiro I", "review", str(theirs))[0].startswith("Reviewing other lineages' evaluations is turned "
                                                                    "off in this station")
    assert call(st, "Spiro I", "review", str(system))[0].startswith("The full record")
    assert call(st, "Sage I", "review", str(theirs))[0].startswith("The full record")
    assert call(st, "Praxis I", "review", str(theirs))[0].startswith("The full record")


def test_preview_lists_ranges_and_all_in_one_message(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": []})
    for i in range(1, 6):
        seed(st, "Spiro I", title=f"Try {i}", tags=("a", f"t{i}"), tick=i)
    deliver(st, 2, score=1.25, metrics={"radius": 0.5, "count": None})
    deliver(st, 3, status="timed_out")
    assert call(st, "Spiro I", "preview", "4, 2:3,2,9") == ["Previewed 4 evaluation(s): see your System Messages "
                                                           "next turn."]
    text = inbox(st, "Spiro I", "research_preview")[0]
    blocks = text.split("\n\n---\n\n")
    assert blocks[0] == ("**Research Counter: preview 4, 2:3,2,9**\n\n**Evaluation #4: Try 4**\nTask #1; by Spiro I at "
                         "tick 4; tags: a, t4\nAbstract: Seed abstract.\nScore: running")
    assert blocks[1].endswith("Score: 1.250 | count: — | radius: 0.50")
    assert blocks[2].endswith("Score: n.a.") and blocks[3] == "Evaluation 9: not found."
    call(st, "Spiro I", "preview", "all")
    text = inbox(st, "Spiro I", "research_preview")[1]
    assert text.startswith("**Research Counter: preview of the newest 5 evaluation(s)**\n\n**Evaluation #5")
    assert text.count("\n---\n") == 4


@pytest.mark.parametrize("args,line", [
    ("", "Usage: /execute_action{preview all} or preview 3,5,10:14 (IDs and ranges a:b)."),
    ("3:1", "Preview refused: the range 3:1 runs backwards."),
    ("1,,2", "Preview refused: an empty entry between commas."),
    ("x", "Preview refused: 'x' is not an evaluation ID."),
    ("1:y", "Preview refused: '1:y' is not a range of IDs like 3:7."),
    ("0", "Preview refused: '0' is not an evaluation ID."),
])
def test_preview_syntax_errors(tmp_path: Path, args: str, line: str) -> None:
    st = station(tmp_path, {"Spiro I": []})
    assert call(st, "Spiro I", "preview", args)[0].startswith(line)
    assert inbox(st, "Spiro I", "research_preview") == []


def test_preview_caps_the_ids_without_expanding_huge_ranges() -> None:
    ids, capped = parse_id_list("5,1:1000000000000000", 100)
    assert capped and len(ids) == 100 and ids[:3] == [5, 1, 2] and ids[-1] == 100
    assert parse_id_list("3,3,2:4", 100) == ([3, 2, 4], False)
    started = time.perf_counter()
    assert parse_id_list(",".join(["1:100"] * 2000), 100)[1] is False
    assert time.perf_counter() - started < 1


# == 3. Who sees what =====================================================================================
def visibility_station(tmp_path: Path, **research: Any) -> Station:
    """Spiro I is young (immature); Praxis I is old; Sage I supervises. Each lineage and System has work."""
    st = station(tmp_path, {"Spiro I": [], "Praxis I": []}, supervisor=[], guests=[[]],
                 lifecycle={"maturity_ticks": 50}, research={"show_tag_stats": True, **research})
    with st.store.transaction():
        for name in ("Praxis I", "Sage I"):
            agent = st.ctx.agents.get(name)
            agent.birth_tick = -100
            st.ctx.agents.save(agent)
    st.ctx.agents.invalidate()
    seed(st, None, title="System baseline", tags=("base",))  # 1
    seed(st, "Spiro I", title="Spiro work", tags=("mine",))  # 2
    seed(st, "Praxis I", title="Praxis work", tags=("theirs",))  # 3
    for number in (1, 2, 3):
        deliver(st, number, score=float(number))
    root = storage_dir(st)
    for lineage in ("spiro", "praxis"):
        (root / "lineages" / lineage).mkdir(parents=True, exist_ok=True)
        (root / "lineages" / lineage / "notes.md").write_text(f"{lineage} notes", encoding="utf-8")
    return st


def test_an_immature_agent_sees_its_lineage_and_system_only_on_every_path(tmp_path: Path) -> None:
    st = visibility_station(tmp_path)
    out = view(st, "Spiro I")
    assert board_ids(out) == [2, 1]
    assert "Until you are mature (age 50) you see only your lineage's evaluations" in out
    assert "Tag Statistics" not in out
    call(st, "Spiro I", "preview", "all")
    call(st, "Spiro I", "preview", "1:3")
    all_text, listed = inbox(st, "Spiro I", "research_preview")
    assert "Praxis work" not in all_text and "Spiro work" in all_text and "System baseline" in all_text
    assert "Praxis work" not in listed and "Evaluation 3: not found." in listed
    assert call(st, "Spiro I", "review", "3") == ["Evaluation 3 not found."]
    assert call(st, "Spiro I", "review", "1")[0].startswith("The full record")
    assert call(st, "Spiro I", "page", "2") == ["Page 2 does not exist: the leaderboard has 1 page(s)."]
    assert call(st, "Spiro I", "storage", "read Praxis/notes.md") == [
        "Storage read refused: other lineages' storage opens to you when you are mature (age 50)."]
    assert call(st, "Spiro I", "storage", "list praxis")[0].startswith("Storage list refused: other lineages'")
    call(st, "Spiro I", "storage", "list")
    assert "praxis" not in view(st, "Spiro I").split("**File Listings**")[1]
    call(st, "Spiro I", "storage", "read lineage/notes.md")
    assert "spiro notes" in view(st, "Spiro I")


def test_mature_and_supervisor_agents_see_everything(tmp_path: Path) -> None:
    st = visibility_station(tmp_path)
    for name in ("Praxis I", "Sage I"):
        out = view(st, name)
        assert board_ids(out) == [3, 2, 1], name
        assert "| mine | 1 | 1 | 2.000 |" in out
        assert call(st, name, "review", "2")[0].startswith("The full record")
        call(st, name, "storage", "read spiro/notes.md")
        assert "spiro notes" in view(st, name)
    assert view(st, "Sage I").startswith("Supervisor mode: you see every lineage's evaluations")
    assert "Running Experiments" not in view(st, "Sage I")


def test_a_supervisor_reads_closed_lineage_storage_but_never_writes_there(tmp_path: Path) -> None:
    st = visibility_station(tmp_path, cross_lineage_storage=False)
    assert call(st, "Praxis I", "storage", "read spiro/notes.md") == [
        "Storage read refused: other lineages' storage is closed in this station."]
    assert call(st, "Sage I", "storage", "read spiro/notes.md") == [
        "The content of spiro/notes.md will be shown in the room view next turn."]
    assert call(st, "Sage I", "storage", "write spiro/x.md", {"content": "hi"}) == [
        "Storage write refused: you may write only in shared/ and in your own lineage's folder."]
    assert call(st, "Sage I", "storage", "delete spiro/notes.md") == [
        "Storage delete refused: you may delete only in shared/ and in your own lineage's folder."]
    assert call(st, "Sage I", "storage", "write lineage/x.md", {"content": "hi"}) == ["Created sage/x.md (2 B)."]


def test_guests_are_refused_the_view_and_every_action(tmp_path: Path) -> None:
    st = station(tmp_path, {}, guests=[[reply(act("goto research"), act("read 1"), submission("G"),
                                              act("storage info"))]])
    Engine(st).run(ticks=2)
    assert turn_lines(st, "Guest_1", 1) == [
        "You moved to the Research Counter.",
        "The Research Counter is open to recursive agents only. Pass the test in the Test Chamber first.",
        "The Research Counter is open to recursive agents only. Pass the test in the Test Chamber first.",
        "The Research Counter is open to recursive agents only. Pass the test in the Test Chamber first."]
    prompt = prompt_at(st, 2, session_of(st, "Guest_1"))
    assert "**Research Tasks**" not in prompt and "is open to recursive agents only" in prompt
    assert st.store.scalar("SELECT COUNT(*) FROM evaluations") == 0


# == 4. The leaderboard ====================================================================================
def test_the_table_formats_scores_metrics_and_titles(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": []})
    a = seed(st, "Spiro I", title="x" * 120)
    b = seed(st, "Spiro I", title="Second")
    c = seed(st, None, title="Base", task="2")
    deliver(st, a, score=0.123456, metrics={"radius": 1.23456, "count": 7, "gap": None})
    deliver(st, b, status="failed", error="boom")
    deliver(st, c, score=3.0, metrics={"zeta": "odd"})
    d = seed(st, "Spiro I", title="Pending")
    out = view(st, "Spiro I")
    assert "Tag Statistics" not in out  # off by default
    table = out[out.index("**Submitted Evaluations**"):]
    assert "| ID | Task | Title | Author | Tick | Score | count | gap | radius | zeta |" in table
    assert f"| {a} | 1 | {'x' * 97}... | Spiro I | 1 | 0.123 | 7 | — | 1.23 |  |" in table
    assert f"| {b} | 1 | Second | Spiro I | 1 | n.a. |  |  |  |  |" in table
    assert f"| {c} | 2 | Base | System | 1 | 3.000 |  |  |  | odd |" in table
    assert f"| {d} | 1 | Pending | Spiro I | 1 | running |  |  |  |  |" in table
    assert "None" not in table


def test_paging_ranking_filtering_and_page_size(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": [], "Praxis I": []}, research={"page_size": 2})
    for i in range(1, 6):  # 1..5, alternating authors, task 1
        seed(st, "Spiro I" if i % 2 else "Praxis I", tick=i, tags=("odd",) if i % 2 else ("even-num",))
    deliver(st, 1, score=0.5, sort_key=[0.5, 2.0])
    deliver(st, 2, score=0.5, sort_key=[0.5, 3.0])
    deliver(st, 3, score=0.9)
    deliver(st, 4, status="failed")
    out = view(st, "Praxis I")
    assert board_ids(out) == [5, 4]
    assert ("Page 1 of 3 (sorted by: id). Move with `page N`; sort with `rank id|score|author`; rows per page: "
            "`page_size N`; narrow with `filter <tag>`.") in out
    assert call(st, "Praxis I", "page", "3") == ["Showing page 3 of 3."]
    assert board_ids(view(st, "Praxis I")) == [1]
    assert call(st, "Praxis I", "page", "4") == ["Page 4 does not exist: the leaderboard has 3 page(s)."]
    for bad in ("0", "x", "", "99999999999"):
        assert call(st, "Praxis I", "page", bad) == ["Usage: /execute_action{page N} with N a page number from 1."]
    assert call(st, "Praxis I", "rank", "score") == ["The leaderboard is now sorted by score, from page 1."]
    assert call(st, "Praxis I", "page_size", "10") == ["The leaderboard now shows 10 rows per page, from page 1."]
    assert board_ids(view(st, "Praxis I")) == [3, 2, 1, 4, 5]  # sort keys break the 0.5 tie; invalid last
    call(st, "Praxis I", "rank", "author")
    assert board_ids(view(st, "Praxis I")) == [4, 2, 5, 3, 1]
    assert call(st, "Praxis I", "rank", "Score") == ["Usage: /execute_action{rank id|score|author} (lower case)."]
    assert call(st, "Praxis I", "filter", "  Even_Num ") == [
        "The leaderboard now lists only evaluations tagged 'even-num' (2 visible); `unfilter` shows all again."]
    out = view(st, "Praxis I")
    assert board_ids(out) == [4, 2] and "Filter: only evaluations tagged 'even-num' are listed" in out
    assert call(st, "Praxis I", "filter", "none") == [
        "The leaderboard now lists only evaluations tagged 'none' (0 visible); `unfilter` shows all again."]
    assert "No visible evaluation is tagged 'none'." in view(st, "Praxis I")
    assert call(st, "Praxis I", "unfilter") == [
        "Filter removed: the leaderboard lists every evaluation you can see, from page 1."]
    assert call(st, "Praxis I", "unfilter") == [
        "No filter was set; the leaderboard already lists everything you can see."]
    assert call(st, "Praxis I", "filter", "") == ["Usage: /execute_action{filter <tag>}, e.g. filter baseline."]
    assert call(st, "Praxis I", "filter", "a,b")[0].startswith("Filter refused")
    for bad in ("0", "201", "ten"):
        assert call(st, "Praxis I", "page_size", bad) == [
            "Usage: /execute_action{page_size N} with N from 1 to 200."]


def test_a_stored_page_beyond_the_end_is_clamped_and_saved(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": []}, research={"page_size": 1})
    for _ in range(3):
        seed(st, "Spiro I")
    call(st, "Spiro I", "page", "3")
    with st.store.transaction():
        st.store.execute("DELETE FROM evaluation_tags WHERE evaluation > 1")
        st.store.execute("DELETE FROM evaluations WHERE id > 1")
    assert board_ids(view(st, "Spiro I")) == [1]
    assert stored(st, "Spiro I")["rooms"]["research"]["page"] == 1


def test_scores_of_different_tasks_compare_as_numbers_and_sort_keys_only_within_a_task(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": []})
    a, b, c = seed(st, "Spiro I", task="1", tick=1), seed(st, "Spiro I", task="1", tick=2), \
        seed(st, "Spiro I", task="2", tick=3)
    deliver(st, a, score=1.0, sort_key=[1.0, 9.0])
    deliver(st, b, score=2.0, sort_key=[0.0])
    deliver(st, c, score=1.5, sort_key=[5.0])
    call(st, "Spiro I", "rank", "score")
    assert board_ids(view(st, "Spiro I")) == [b, c, a]  # mixed tasks: by score
    r = room(st)
    assert r.best(st.ctx, "1")["id"] == a  # within task 1 the sort key decides
    assert r.best(st.ctx, "2")["id"] == c and r.best(st.ctx, "3") is None


def test_no_score_hides_scores_everywhere(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": []}, research={"no_score": True, "show_tag_stats": True})
    number = seed(st, "Spiro I", title="Hidden")
    deliver(st, number, score=0.987654, metrics={"radius": 0.5}, details="score 0.987654")
    out = view(st, "Spiro I")
    assert "| ID | Task | Title | Author | Tick |\n" in out and "0.98" not in out and "Highest Score" not in out
    assert "| seed | 1 | 1 |" in out
    assert call(st, "Spiro I", "rank", "score")[0].startswith("Scores are hidden in this station")
    with st.store.transaction():
        agent = st.ctx.agents.get("Spiro I")
        agent.room_state("research")["sort"] = "score"
        st.ctx.agents.save(agent)
    assert "sorted by" not in view(st, "Spiro I")
    call(st, "Spiro I", "preview", str(number))
    call(st, "Spiro I", "review", str(number))
    for text in inbox(st, "Spiro I", "research_preview") + inbox(st, "Spiro I", "research_review"):
        assert "0.98" not in text and "radius" not in text and "Score" not in text
    assert "Status: finished" in inbox(st, "Spiro I", "research_preview")[0]
    help_text = room(st).help(st.ctx, st.ctx.agents.get("Spiro I"))
    assert "rank id|author" in help_text and "results arrive as messages" in help_text


def test_tag_statistics_cover_visible_work_before_the_filter(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": []}, research={"show_tag_stats": True})
    for i in range(3):
        seed(st, "Spiro I", tags=("common",), tick=i + 1)
    seed(st, "Spiro I", tags=("rare",), tick=7)
    deliver(st, 1, score=0.25)
    out = view(st, "Spiro I")
    assert "| common | 3 | 3 | 0.250 |\n| rare | 1 | 7 | — |" in out
    call(st, "Spiro I", "filter", "rare")
    out = view(st, "Spiro I")
    assert "| rare | 1 | 7 | — |\n| common | 3 | 3 | 0.250 |" in out


def test_a_big_leaderboard_renders_one_page_quickly(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": [], "Praxis I": []}, lifecycle={"maturity_ticks": 50},
                 research={"show_tag_stats": True})
    make_old(st, "Praxis I")
    spiro, praxis = st.ctx.agents.get("Spiro I"), st.ctx.agents.get("Praxis I")
    with st.store.transaction():
        for i in range(10_000):
            who = spiro if i % 2 else praxis
            number = insert_evaluation(st.store, task=str(1 + i % 2), author=who.name, session=who.session,
                                       lineage=who.lineage, tick=i, title=f"T{i}", tags=[f"tag{i % 50}"],
                                       abstract="a", code=CODE)
            if i % 3:
                st.store.execute("UPDATE evaluations SET status='finished', score=?, sort_key=?, metrics=? WHERE id=?",
                                 (i / 7 % 5, json.dumps([i % 5, i]), json.dumps({"radius": i / 3}), number))
    call(st, "Spiro I", "rank", "score")
    started = time.perf_counter()
    for name in ("Spiro I", "Praxis I"):
        out = view(st, name)
        assert len(board_ids(out)) == 10
    assert "**Tag Statistics**" in out
    call(st, "Spiro I", "page", "400")
    assert len(board_ids(view(st, "Spiro I"))) == 10
    assert time.perf_counter() - started < 1.5


# == 5. Storage =============================================================================================
def test_storage_write_read_list_delete(tmp_path: Path) -> None:
    write = reply(act("storage write /storage/shared/lib/util.py"), yaml_block("content: |\n  X = 1\n"))
    again = reply(act("storage write lineage/notes.md"), yaml_block("content: first"))
    st = station(tmp_path, {"Spiro I": [reply(act("goto research"), write, again, again, act("storage info"),
                                              act("storage list shared"), act("storage read Shared/lib/util.py"),
                                              act("storage read spiro/notes.md")),
                                        reply(act("storage delete shared/lib/util.py"),
                                              act("storage delete shared/lib"),
                                              act("storage delete shared/lib/util.py"))]})
    rs.ensure_layout(storage_dir(st))  # the ledger as runs' ends leave it (tests/test_redteam_storage_share.py)
    Ledger(storage_dir(st) / ".shares", "shared").write({(1, 2): ("spiro", 3 << 20), (1, 3): ("praxis", 1 << 20)})
    Engine(st).run(ticks=3)
    assert turn_lines(st, "Spiro I", 1)[1:] == [
        "Created shared/lib/util.py (6 B).", "Created spiro/notes.md (5 B).", "Overwrote spiro/notes.md (5 B).",
        "Storage information will be shown in the room view next turn.",
        "The listing of shared/ will be shown in the room view next turn.",
        "The content of shared/lib/util.py will be shown in the room view next turn.",
        "The content of spiro/notes.md will be shown in the room view next turn."]
    out = room_output(prompt_at(st, 2, session_of(st, "Spiro I")))
    assert "**Storage Information**" in out and "| shared | `storage/shared` | 1 | 6 B | list, read, write, delete |" \
        in out
    assert "| spiro (your lineage) | `storage/spiro` or `storage/lineage` | 1 | 5 B |" in out
    assert ("Shared storage held by your lineage's runs: 3.0 MB, of a share of 25% of a task's storage limit "
            "(256.0 MB for most tasks).") in out
    assert 'sys.path.append("storage/lineage")' in out
    assert "**File Listings**\n\n`shared/` (page 1 of 1): 1 file(s), 6 B in all\n- lib/util.py (6 B)" in out
    assert "**Read Contents**\n\n`shared/lib/util.py` (6 B):\n```\nX = 1\n```" in out
    assert "`spiro/notes.md` (5 B):\n```\nfirst\n```" in out
    assert turn_lines(st, "Spiro I", 2) == [
        "Deleted shared/lib/util.py.", "Storage delete refused: 'shared/lib' is a folder; only files can be deleted.",
        "Storage delete refused: 'shared/lib/util.py' not found."]
    later = room_output(prompt_at(st, 3, session_of(st, "Spiro I")))
    assert "Storage Information" not in later and "Read Contents" not in later  # shown once, then cleared
    path = storage_dir(st) / "lineages" / "spiro" / "notes.md"
    assert path.read_text() == "first" and path.stat().st_mode & 0o777 == 0o664
    assert (storage_dir(st) / "shared" / "lib").stat().st_mode & 0o777 == 0o775


@pytest.mark.parametrize("command,refusal", [
    ("read ../station.db", "'..' is not allowed in storage paths"),
    ("read shared/../../station.db", "'..' is not allowed in storage paths"),
    ("read shared/../../../../../etc/passwd", "'..' is not allowed"),
    ("list shared/..", "'..' is not allowed"),
    ("read //etc/passwd", "absolute paths are not allowed"),
    ("read /storage//etc/passwd", "absolute paths are not allowed"),
    ("read shared\\..\\x", "backslashes or control characters"),
    ("read shared/a\x01b", "backslashes or control characters"),
    ("read etc/passwd", "other lineages' storage"),  # 'etc' could only name a lineage
    ("read shared", "name a file to read"),
    ("read x-y/z", "unknown storage area 'x-y'"),
    ("write system/x.py", "system storage is read-only"),
    ("write praxis/x.py", "you may write only in shared/ and in your own lineage's folder"),
    ("write Ver/x.py", "you may write only in shared/"),
    ("delete system/readme.md", "system storage is read-only"),
    ("write shared", "name the file to write"),
    ("write shared/" + "a" * 300, "is too long"),
    ("frobnicate x", "Usage: storage info"),
    ("", "Usage: storage info"),
])
def test_storage_refusals(tmp_path: Path, command: str, refusal: str) -> None:
    st = station(tmp_path, {"Spiro I": []}, research={"cross_lineage_storage": False})
    lines = call(st, "Spiro I", "storage", command, {"content": "x"} if command.startswith("write") else None)
    assert len(lines) == 1 and refusal in lines[0], lines


def test_symlinks_and_prefix_tricks_never_leave_an_area(tmp_path: Path) -> None:
    st = station(tmp_path, {"Ver I": [], "Veritas I": []})
    root = storage_dir(st)
    rs.ensure_layout(root)
    (root / "lineages" / "veritas").mkdir()
    (root / "lineages" / "veritas" / "secret.py").write_text("KEY = 1")
    os.symlink(st.dir / "station.db", root / "shared" / "db")
    os.symlink(st.dir, root / "shared" / "up")
    os.symlink(root / "lineages" / "veritas", root / "shared" / "veritas_link")
    os.symlink(root / "lineages" / "veritas", root / "lineages" / "ver")
    for command in ("read shared/db", "read shared/up/station.db", "list shared/up",
                    "read shared/veritas_link/secret.py", "list shared/veritas_link", "read Ver/secret.py", "list Ver"):
        lines = call(st, "Ver I", "storage", command)
        assert "refused" in lines[0] and "leads outside its area" in lines[0], (command, lines)
    for command in ("write shared/up/x.py", "write shared/db", "delete shared/db", "write lineage/secret.py"):
        lines = call(st, "Ver I", "storage", command, {"content": "pwned"} if "write" in command else None)
        assert "refused" in lines[0], (command, lines)
    assert (root / "lineages" / "veritas" / "secret.py").read_text() == "KEY = 1"
    assert (st.dir / "station.db").stat().st_size > 0 and not (st.dir / "x.py").exists()
    os.unlink(root / "lineages" / "ver")
    call(st, "Ver I", "storage", "list shared")
    listing = view(st, "Ver I").split("**File Listings**")[1]
    assert "No files found" in listing and "station.db" not in listing  # links are not listed
    assert call(st, "Ver I", "storage", "list veritas") == [
        "The listing of veritas/ will be shown in the room view next turn."]
    out = view(st, "Ver I")
    assert "- secret.py" in out
    call(st, "Ver I", "storage", "list Ver")
    assert "`ver/`: No files found." in view(st, "Ver I")


def test_a_link_swapped_in_after_the_check_is_still_not_followed(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    st = station(tmp_path, {"Spiro I": []})
    root = storage_dir(st)
    rs.ensure_layout(root)
    (root / "shared" / "dir").mkdir()
    loc = rs.parse_path("shared/dir/x.txt", "Spiro")
    rs.contained(root, loc)  # the check passes; then running code swaps the folder for a link
    (root / "shared" / "dir").rmdir()
    os.symlink(tmp_path, root / "shared" / "dir")
    monkeypatch.setattr(rs, "contained", lambda root, loc: root)  # as if the swap came right after the check
    with pytest.raises(rs.StorageError, match="links are not followed"):
        rs.write_text(root, loc, "x")
    assert not (tmp_path / "x.txt").exists()


def test_storage_reads_only_text_and_clips_long_files(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": []}, research={"storage_read_max_chars": 100})
    shared = storage_dir(st) / "shared"
    rs.ensure_layout(storage_dir(st))
    (shared / "blob.bin").write_bytes(b"\x89PNG\x00\x01\xff")
    (shared / "nul.txt").write_bytes(b"abc\x00def")
    (shared / "long.txt").write_text("é" * 500, encoding="utf-8")
    os.mkfifo(shared / "pipe")
    for path in ("blob.bin", "nul.txt", "long.txt", "pipe", "missing.txt"):
        call(st, "Spiro I", "storage", f"read shared/{path}")
    assert call(st, "Spiro I", "storage", "read shared/six.txt") == [
        "Storage read skipped: at most 5 per turn are shown; ask again next turn."]
    out = view(st, "Spiro I")
    assert "`shared/blob.bin`: 'shared/blob.bin' is not a UTF-8 text file; only text can be shown." in out
    assert "'shared/nul.txt' is a binary file" in out
    assert ("`shared/long.txt` (1000 B):\n```\n" + "é" * 100 + "\n```\n(Only the first 100 characters are shown.)"
            in out)
    assert "'shared/pipe' is not a regular file" in out and "'shared/missing.txt' not found" in out
    assert "six.txt" not in out


def test_storage_write_checks_its_content(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": [reply(act("goto research"),
                                              act("storage write shared/a.bin"), yaml_block("content: !!binary AAEC"),
                                              act("storage write shared/a.txt"), yaml_block("content: 12"),
                                              act("storage write shared/a.txt"), yaml_block("content: ''"),
                                              act("storage write shared/a.txt"),
                                              act("storage write shared/big.txt"),
                                              yaml_block("content: " + "x" * 150))]},
                 research={"storage_write_max_chars": 100})
    Engine(st).run(ticks=1)
    assert turn_lines(st, "Spiro I", 1)[1:] == [
        "Storage write refused: binary content cannot be stored; write text.",
        "Storage write refused: content must be non-empty text (use a `|` block).",
        "Storage write refused: content must be non-empty text (use a `|` block).",
        "Storage write needs a ```yaml block with `content:` (the text of shared/a.txt).",
        "Storage write refused: the content is 150 characters long; at most 100 are allowed."]
    shared = storage_dir(st) / "shared"
    assert not shared.exists() or not any(shared.iterdir())


def test_storage_lists_page_by_500_and_skip_compiled_files(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": []})
    rs.ensure_layout(storage_dir(st))
    lib = storage_dir(st) / "lineages" / "spiro" / "lib"
    lib.mkdir(parents=True)
    for i in range(620):
        (lib / f"f{i:03d}.py").write_text("x")
    (lib / "cached.pyc").write_bytes(b"\x00")
    assert call(st, "Spiro I", "storage", "list lineage 2") == [
        "The listing of spiro/ (page 2) will be shown in the room view next turn."]
    call(st, "Spiro I", "storage", "list spiro/lib")
    call(st, "Spiro I", "storage", "list spiro 3")
    call(st, "Spiro I", "storage", "list lineage/lib/f000.py")
    out = view(st, "Spiro I")
    assert "`spiro/` (page 2 of 2): 620 file(s), 620 B in all\n- lib/f500.py (1 B)" in out
    assert "`spiro/lib` (page 1 of 2): 620 file(s)" in out and "Next page: `storage list spiro/lib 2`" in out
    assert "`spiro/` has 2 page(s) of files; page 3 does not exist." in out
    assert "'spiro/lib/f000.py' is a file; use `storage read spiro/lib/f000.py`" in out
    assert "cached.pyc" not in out


def test_code_areas_mount_shared_system_and_the_lineage_twice(tmp_path: Path) -> None:
    root = tmp_path / "storage"
    (root / "lineages" / "praxis").mkdir(parents=True)
    (root / "lineages" / "Bad.Name").mkdir()
    os.symlink(tmp_path, root / "lineages" / "linked")
    areas = rs.code_areas(root, "Spiro", cross_lineage=True)
    assert areas == [(root / "shared", "storage/shared", True), (root / "system", "storage/system", False),
                     (root / "lineages" / "spiro", "storage/spiro", True),
                     (root / "lineages" / "spiro", "storage/lineage", True),
                     (root / "lineages" / "praxis", "storage/praxis", False)]
    assert all(path.is_dir() for path, _, _ in areas)
    assert rs.code_areas(root, "Spiro", cross_lineage=False)[-1][1] == "storage/lineage"
    assert [t for _, t, _ in rs.code_areas(root, None, cross_lineage=False)] == ["storage/shared", "storage/system"]
    with pytest.raises(ValueError):
        rs.code_areas(root, "../x", cross_lineage=False)


# == 6. Holidays, help and what other parts of the station read =============================================
def test_holiday_ticks_send_agents_to_the_lobby_and_refuse_submissions(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": [act("goto research")]}, research={"holiday_mode": True})
    with st.store.transaction():
        st.store.set_meta("tick", 8)
        st.store.execute("DELETE FROM messages")
    Engine(st).run(ticks=1)
    agent = stored(st, "Spiro I")
    assert st.ctx.tick == 9 and agent["location"] == "lobby"
    assert inbox(st, "Spiro I", "research")[0].startswith("Tick 9 is a holiday")
    assert "Holiday: no submissions are taken this tick" in view(st, "Spiro I")
    assert call(st, "Spiro I", "submit", "1", {"title": "T", "tags": "a", "abstract": "a", "content": CODE})[0] \
        .startswith("Submission refused: it is a holiday tick")


def test_help_follows_the_configuration(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": [act("goto research")]})
    Engine(st).run(ticks=2)
    prompt = prompt_at(st, 2, session_of(st, "Spiro I"))
    assert "**Help Message - Research Counter**" in prompt and "rank id|score|author" in prompt
    assert "no_debugger: true" in prompt and "cpu_only" not in prompt and "$" not in prompt.split("Help Message")[1]
    assert "\n\n\n" not in room(st).help(st.ctx, st.ctx.agents.get("Spiro I"))
    st2 = station(tmp_path / "b", {"Spiro I": []}, debugger={"enabled": False},
                  research={"allow_cpu_only": True, "cross_lineage_storage": False, "cooldown_ticks": 4,
                            "cross_lineage_review": False, "holiday_mode": True})
    text = room(st2).help(st2.ctx, st2.ctx.agents.get("Spiro I"))
    assert "cpu_only: true" in text and "no_debugger" not in text and "closed in this station" in text
    assert "you wait 4 ticks" in text and "Ticks ending in 9 or 0 are holidays" in text


def test_task_summary_credits_counts_and_best(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": [], "Praxis I": []})
    r, ctx = room(st), st.ctx
    summary = r.task_summary(ctx)
    assert summary.startswith("Research Task #1: Toy Sum 1\nReturn a few numbers.") and "Toy Sum 2" in summary
    base = seed(st, None, task="1")
    s1, p1, s2, p2, s3 = (seed(st, n, task=t) for n, t in
                          (("Spiro I", "1"), ("Praxis I", "1"), ("Spiro I", "1"), ("Praxis I", "2"), ("Spiro I", "1")))
    deliver(st, base, score=1.0)
    deliver(st, s1, score=0.5)  # not a new best
    deliver(st, p1, score=1.0, sort_key=[1.0, 1.0])  # beats [1.0] by its longer key
    deliver(st, s2, score=2.0)  # new best
    deliver(st, p2, score=0.1)  # first of task 2: a new best there
    assert r.lineage_credits(ctx) == {"Praxis": 2.0, "Spiro": 1.0}
    assert r.best(ctx, "1")["id"] == s2
    with st.store.transaction():
        st.store.execute("INSERT INTO evaluation_runs(evaluation, version, state, started_at, executor) "
                         "VALUES(?, 1, 'running', 0, 'local')", (s3,))
    seed(st, "Praxis I")
    deliver(st, p2 + 2, status="timed_out")
    counts = r.status_counts(ctx)
    assert counts["submissions"] == {"queued": 0, "running": 1, "finished": 5, "failed": 0, "timed_out": 1,
                                     "scorer_failed": 0, "system_failed": 0}
    assert {task: best["evaluation"] for task, best in counts["research_best"].items()} == {"1": s2, "2": p2}


def test_the_room_is_absent_without_tasks(tmp_path: Path) -> None:
    st = make_station(tmp_path / "s", [recursive(replay_model(tmp_path / "r.jsonl", []))])
    assert st.ctx.room("research") is None
    assert tasks_of(st.ctx) == {} and st.ctx.part(ResearchTasks) is not None  # attached, and empty


def test_the_tasks_are_the_research_features_own_object_which_the_engine_holds_unknowing(tmp_path: Path) -> None:
    st = station(tmp_path, {"Spiro I": []})
    tasks = tasks_of(st.ctx)
    assert list(tasks) == ["1", "2"] and [t.kind for t in tasks.values()] == [t["evaluator"] for t in TASKS]
    assert st.ctx.part(ResearchTasks) is tasks and isinstance(tasks["1"], Task)
    assert st.ctx.part(dict) is None  # found by its own type only: another feature's dict is not mistaken for it
    assert not hasattr(st.ctx, "tasks")


def test_a_replay_shows_the_storage_as_it_was_seen_live(tmp_path: Path) -> None:
    """Running code changes storage outside the world's records; what a view showed is a recorded input."""
    write = reply(act("storage write shared/n.md"), yaml_block("content: live"))
    st = station(tmp_path, {"Spiro I": [reply(act("goto research"), write),
                                        reply(act("storage read shared/n.md"), act("storage info"))]})
    Engine(st).run(ticks=1)
    (storage_dir(st) / "shared" / "n.md").write_text("changed by running code")
    Engine(st).run(ticks=2)
    live = prompt_at(st, 3, session_of(st, "Spiro I"))
    assert "changed by running code" in live
    fork = Station.create(tmp_path / "fork", st.config)
    Engine(fork, replay_source=st.store).run(until_tick=3)  # diverges if a prompt differs
    assert prompt_at(fork, 3, session_of(fork, "Spiro I")) == live
    assert (storage_dir(fork) / "shared" / "n.md").read_text() == "live"
