"""The viewer's page of a command back-end's coder session (/research/<id>/coder, docs/coder.md
"Back-ends"): its starts, the model calls the station's relay recorded, its official attempts with
the station's scores, its end and the report beside the station's score.

One small station is made for the module, with no tick run, and the inputs of two sessions are
recorded through its store in the shapes the command back-end writes them (rooms/research/
coder_command.py, station/workers/relay.py): evaluation 1's CLI started twice, made twelve model
calls (the twelfth refused by the provider), two attempts (a crash, then a score) and wrote its
report; evaluation 2's CLI has started and made no call yet. The model's and the CLI's texts carry
a script, which must reach the page escaped.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from helpers import web_client
from test_coder_mode import config

from rooms.research.coder_report import SECTIONS  # the sections the station requires
from rooms.research.store import insert_evaluation
from station.apps.web.app import create_app
from station.apps.world import Station
from station.core.config import parse_config
from station.core.store import Store
from station.workers.views import recorded_command

SCRIPT = "<script>alert('x')</script>"
REPORT = "".join(f"## {name}\n\nThe coder's words on {name.lower()}.\n\n" for name in SECTIONS) + SCRIPT
CALLS = 12


def call(number: int) -> dict[str, Any]:
    """Call `number` as the relay records it: Chat Completions wire text, cut by the relay."""
    request = {"model": "fake-coder", "messages": [{"role": "user", "content": f"Question {number}"}]}
    if number == CALLS:
        status, reply = 429, {"error": {"message": "rate limited"}}
    else:
        status = 200
        content = f"Answer {number}: write the program." + (f" {SCRIPT}" if number == 10 else "")
        reply = {
            "choices": [{"message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10},
        }
    return {
        "path": "/v1/chat/completions",
        "status": status,
        "request": json.dumps(request),
        "response": json.dumps(reply),
        "usage": {"input_tokens": 100, "output_tokens": 10} if status == 200 else None,
        "cost_usd": 0.0011 if status == 200 else 0.0,
        "model": "fake-coder",
    }


def recorded(st: Station) -> None:
    """Evaluation 1's whole command session and its delivered row; evaluation 2's first start only."""
    with st.store.transaction():
        for title in ("Square root", "Cube root"):
            insert_evaluation(
                st.store,
                task="1",
                author="Spiro I",
                session=1,
                lineage="Spiro",
                tick=2,
                title=title,
                tags=[],
                abstract="A root.",
                code="",
                instruction=f"Take the {title.lower()}.",
                sees_all=False,
            )
    put = st.store.record_input
    put("coder/1/spawn/1", "worker_spawn", 3, None, {"spawn": 1})
    for n in range(1, 5):
        put(f"coder/1/call/{n}", "worker_call", 3, None, call(n))
    put(
        "coder/1/attempt/1",
        "worker_tool",
        3,
        None,
        {
            "text": "the attempt runs workspace/solution.py",
            "error": False,
            "code": "improt math\n",
            "path": "workspace/solution.py",
        },
    )
    put(
        "eval-run/1/1",
        "eval_run",
        3,
        None,
        {"status": "error", "success": False, "score": None, "error": "SyntaxError: invalid syntax\nline 1"},
    )
    put("coder/1/spawn/2", "worker_spawn", 4, None, {"spawn": 2})  # the station was restarted
    for n in range(5, CALLS + 1):
        put(f"coder/1/call/{n}", "worker_call", 4, None, call(n))
    put(
        "coder/1/attempt/2",
        "worker_tool",
        4,
        None,
        {
            "text": "the attempt runs workspace/solution.py",
            "error": False,
            "code": "import math\n",
            "path": "workspace/solution.py",
        },
    )
    put("eval-run/1/2", "eval_run", 4, None, {"status": "ok", "success": True, "score": 2.5, "details": "ok"})
    put(
        "coder/1/end",
        "worker_end",
        4,
        None,
        {
            "end": "finished",
            "report": REPORT,
            "report_problem": None,
            "missing_sections": [],
            "exit_code": 0,
            "status": "ok",
            "output_tail": f"attempt 1: exit 1\nattempt 2: exit 0\n{SCRIPT}",
            "spawns": 2,
            "calls": CALLS,
            "attempts": 2,
        },
    )
    put("coder/10/call/1", "worker_call", 4, None, {**call(1), "response": "another session's call"})
    put("coder/2/spawn/1", "worker_spawn", 4, None, {"spawn": 1})
    with st.store.transaction():
        st.store.execute(
            "UPDATE evaluations SET status='delivered', score=2.5, coder_report=?, coder_end='finished' WHERE id=1",
            (REPORT,),
        )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    directory: Path = tmp_path_factory.mktemp("command-viewer") / "st"
    st = Station.create(directory, parse_config(config()))
    try:
        recorded(st)
    finally:
        st.close()
    return directory, web_client(create_app(directory))


def test_the_page_shows_the_starts_the_calls_in_order_the_attempts_the_end_and_the_report(
    site: tuple[Path, Any],
) -> None:
    page = site[1].get("/research/1/coder").text
    assert [int(n) for n in re.findall(r'id="call-(\d+)"', page)] == list(range(1, CALLS + 1))  # 10 after 9
    assert "Take the square root." in page and "12 model calls" in page and "1,100 tokens in / 110 out" in page
    assert re.search(r'id="start-2">Start 2 of the command at tick 4', page)
    fifth = page[page.index('id="call-5"') : page.index('id="call-6"')]
    assert "tick 4" in fifth and "Answer 5: write the program." in fifth and "Question 5" in fifth
    last = page[page.index(f'id="call-{CALLS}"') : page.index('id="attempts"')]
    assert "status 429" in last and "Error" in last and "rate limited" in last
    assert "another session" not in page  # coder/10's call is not evaluation 1's
    assert re.search(
        r'id="attempt-1">Official attempt 1 \(<code>workspace/solution.py</code>\), tick 3:\s*'
        r"not scored \(error: SyntaxError: invalid syntax\)",
        page,
    )
    assert re.search(r'id="attempt-2">Official attempt 2 .*tick 4:\s*the station\'s score <b>2.5</b>', page)
    end = page[page.index('id="command-end"') : page.index('id="report"')]
    assert (
        "finished" in end and "exited with status 0" in end and "2 starts, 12 model calls, 2 official attempts" in end
    )
    assert "attempt 2: exit 0" in end
    report = page[page.index('id="report"') :]
    assert re.search(r"The station's score of this evaluation: <b>2.5</b>", report) and "own words" in report
    assert "<h2>Final Status</h2>" in report and "words on final status." in report  # Markdown, rendered


def test_model_and_command_text_is_escaped(site: tuple[Path, Any]) -> None:
    page = site[1].get("/research/1/coder").text
    assert "<script>alert" not in page
    call_ten = page[page.index('id="call-10"') : page.index('id="call-11"')]
    end = page[page.index('id="command-end"') : page.index('id="report"')]
    assert "&lt;script&gt;" in call_ten and "&lt;script&gt;" in end


def test_a_long_session_is_paged_in_numeric_order(site: tuple[Path, Any]) -> None:
    store = Store(site[0])
    try:
        second = recorded_command(store, "coder/1", page=2, per_page=5)
        last = recorded_command(store, "coder/1", page=99, per_page=5)
        cut = recorded_command(store, "coder/1", per_page=1, shown_chars=10)
    finally:
        store.close()
    assert [c.number for c in second.calls] == [6, 7, 8, 9, 10] and (second.pages, second.last_page) == (3, False)
    assert [c.number for c in last.calls] == [11, 12] and last.page == 3 and last.last_page
    assert second.starts == [(1, 3), (2, 4)] and second.total_calls == CALLS
    assert cut.calls[0].response.text == '{"choices"' and cut.calls[0].response.more > 0


def test_a_running_session_says_it_has_not_ended(site: tuple[Path, Any]) -> None:
    running = site[1].get("/research/2/coder").text
    assert re.search(r'id="start-1">Start 1 of the command at tick 4', running)
    assert "No model call recorded yet." in running and "No official attempt yet." in running
    assert "The command has not ended yet." in running and "No report yet." in running
