"""The viewer's pages of the workers' sessions: the research coder's (/research/<id>/coder) and the
archive surveyor's (/surveys/<id>), read from the recorded inputs (station.workers.views).

One small station is made for the module, with no tick run: evaluation 1 is an instruction whose
coder session is walked by the real scripted coder through the Research Counter's coder toolbox
(its file tools in the local sandbox; its official attempts run by a test runner that scores what
compiles), evaluation 2 a direct submission; survey 1 is walked by a model of the test's own through
the Archive Surveyor's toolbox: ten reports too short (error results), a provider failure, then a
report holding a script and links.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from helpers import web_client
from test_coder_mode import config

from rooms.archive.config import SurveyConfig
from rooms.archive.survey_session import SurveyToolbox
from rooms.research import coder
from rooms.research.config import ResearchConfig
from rooms.research.store import insert_evaluation
from station.apps.web.app import create_app
from station.apps.web.export import export
from station.apps.world import Station
from station.core.config import parse_config
from station.core.model_api import ModelError, Reply, Usage
from station.executors import LocalExecutor
from station.models.scripted_coder import ScriptedCoder
from station.workers.sandbox_tools import SandboxTools, Surface
from station.workers.session import model_call, walk_session
from station.workers.views import recorded_session

PROGRAM = "import math\n\n\ndef main():\n    return math.sqrt(6.25)\n"
INSTRUCTION = f"Take the square root.\n\n```python\n{PROGRAM}```\n"
HOSTILE = "<script>alert('x')</script> [click](javascript:alert(1)) [away](https://evil.example/) [far](//evil.example)"
REPORT = f"# Survey\n\nEvaluation 1 is the one to read: [its page](/research/1). {HOSTILE} " + "word " * 30


def recorder(st: Station, tick: int) -> Any:
    """A fetch that records each missing input in the station's store, as the background workers do."""

    def fetch(key: str, kind: str, make: Any) -> dict[str, Any] | None:
        found = st.store.get_input(key)
        if found is None:
            found = make()
            st.store.record_input(key, kind, tick, None, found)
        return found

    return fetch


def attempt_run(number: int, code: str) -> dict[str, Any]:
    """An official attempt's run payload: what compiles scores 2.5, the rest crashed."""
    try:
        compile(code, "solution.py", "exec")
    except SyntaxError as err:
        return {"status": "error", "success": False, "score": None, "error": f"SyntaxError: {err.msg}"}
    return {"status": "ok", "success": True, "score": 2.5, "details": "ok"}


def coded(st: Station, directory: Path) -> None:
    """Evaluation 1's coder session, recorded; its row delivered with the report and the score."""
    with st.store.transaction():
        number = insert_evaluation(st.store, task="1", author="Spiro I", session=1, lineage="Spiro", tick=2,
                                   title="Square root", tags=[], abstract="A root.", code="",
                                   instruction=INSTRUCTION, sees_all=False)
        insert_evaluation(st.store, task="1", author="Spiro I", session=1, lineage="Spiro", tick=2,
                          title="Direct", tags=[], abstract="Code.", code=PROGRAM)
    workspace = directory / "workspace"
    workspace.mkdir()
    executor = LocalExecutor()
    try:
        outcome = coder.walk(
            {"id": number}, recorder(st, 3), texts=st.ctx.texts, task=None,
            cfg=parse_config(config()).section(ResearchConfig).coder, max_code_chars=100_000,
            sandbox=SandboxTools(executor, [Surface("workspace", workspace, writable=True)]), workspace=workspace,
            opening_text=INSTRUCTION, call=model_call(ScriptedCoder, "coder"), run_attempt=attempt_run)
    finally:
        executor.close()
    assert outcome is not None and outcome.end == "finished"
    with st.store.transaction():
        st.store.execute("UPDATE evaluations SET status='delivered', score=2.5, coder_report=?, coder_end=? "
                         "WHERE id=?", (outcome.report + f"\n\n{HOSTILE}", outcome.end, number))


class Surveyor:
    """Ten reports too short, a provider failure, then the report; its replies hold a script too."""

    name = "toy-surveyor"

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, messages: Any, *, system: Any, agent: str, tools: Any = None) -> Reply:
        self.calls += 1
        if self.calls == 11:
            raise ModelError("the provider is overloaded")
        report = REPORT if self.calls > 11 else f"Too short, try {self.calls}."
        return Reply(text=f"Attempt {self.calls} <script>bad()</script>", usage=Usage(100, 10),
                     tool_calls=[{"id": f"c{self.calls}", "name": "finish", "arguments": {"report": report}}])


def surveyed(st: Station) -> None:
    """Survey 1 (asked by Spiro I), walked to its end; survey 10's first input, which survey 1 must not show."""
    with st.store.transaction():
        number = st.store.execute(
            "INSERT INTO surveys(tick, agent, session, lineage, prompt, opening, papers, evaluations, "
            "brief_evaluations) VALUES(2, 'Spiro I', 1, 'Spiro', 'What works? <script>q()</script>', 'Survey.', "
            "'[]', '[1]', '[]')").lastrowid
    row = st.store.one("SELECT * FROM surveys WHERE id=?", (number,))
    surveyor = Surveyor()
    toolbox = SurveyToolbox(row, SandboxTools(None, []), SurveyConfig(min_words=20), st.ctx.texts)
    session = walk_session(f"survey/{number}", recorder(st, 4), system="Survey.", opening="Survey.", toolbox=toolbox,
                           call=model_call(lambda: surveyor, "surveyor"), max_turns=20)
    assert session is not None and session.end == "finished" and len(session.turns) == 12
    st.store.record_input("survey/10/turn/1", "worker_turn", 5, None, {"text": "another survey's turn"})


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    directory = tmp_path_factory.mktemp("workers")
    st = Station.create(directory / "st", parse_config(config()))
    try:
        coded(st, directory)
        surveyed(st)
    finally:
        st.close()
    return directory / "st", web_client(create_app(directory / "st"))


def turn_order(html: str) -> list[int]:
    return [int(n) for n in re.findall(r'id="turn-(\d+)"', html)]


def test_the_coder_session_shows_each_turn_its_attempts_scores_and_the_report(site: tuple[Path, Any]) -> None:
    _, client = site
    evaluation = client.get("/research/1").text
    assert 'href="/research/1/coder"' in evaluation
    page = client.get("/research/1/coder").text
    assert turn_order(page) == [1, 2, 3, 4, 5, 6]
    assert "Take the square root." in page  # the author's instruction
    told = page[page.index('id="opening"'):]  # and the first message the coder got, as recorded
    assert "What the coder was told" in told and "Take the square root." in told[: told.index("</details>")]
    assert "improt math" in page and page.count('class="tool-name">write_file<') == 2
    assert re.search(r'id="attempt-1">Official attempt 1:\s*not scored \(error: SyntaxError: invalid syntax\)', page)
    assert re.search(r'id="attempt-2">Official attempt 2:\s*the station\'s score <b>2.5</b>', page)
    report = page[page.index('id="report"'):]
    assert "own words" in report and re.search(r"The station's score of this evaluation: <b>2.5</b>", report)
    assert "## Final Status" not in report and "<h2>Final Status</h2>" in report  # Markdown, rendered


def test_the_survey_shows_turn_ten_after_nine_errors_marked_and_the_report(site: tuple[Path, Any]) -> None:
    _, client = site
    page = client.get("/surveys/1").text
    assert turn_order(page) == list(range(1, 13))
    assert page.count('class="tool-result failed"') == 10 and page.count("<b class=\"result-error\">Error</b>") == 10
    assert "The model call failed" in page and "overloaded" in page
    assert "another survey" not in page
    report = page[page.index('id="report"'):]
    assert "Evaluation" in report and "own words" in report
    assert 'href="/surveys/1"' in client.get("/agents/Spiro%20I").text


def test_a_long_session_is_paged_in_numeric_order_within_its_prefix(site: tuple[Path, Any]) -> None:
    directory, _ = site
    from station.core.store import Store

    store = Store(directory)
    try:
        second = recorded_session(store, "survey/1", page=3, per_page=5)
        beyond = recorded_session(store, "survey/1", page=99, per_page=5)
        other = recorded_session(store, "survey/10")
        cut = recorded_session(store, "survey/1", per_page=1, shown_chars=10)
    finally:
        store.close()
    assert (second.total_turns, second.pages, [t.number for t in second.turns]) == (12, 3, [11, 12])
    assert beyond.page == 3 and second.last_page
    assert second.turns[0].failure and second.turns[1].calls[0].final
    assert [t.number for t in other.turns] == [1] and other.total_turns == 1
    text, result = cut.turns[0].text, cut.turns[0].calls[0].result
    assert (text.text, text.more) == ("Attempt 1 ", len("Attempt 1 <script>bad()</script>") - 10) and result.more > 0


def test_model_text_is_escaped_and_its_links_stay_in_the_station(site: tuple[Path, Any]) -> None:
    _, client = site
    for path in ("/research/1/coder", "/surveys/1"):
        page = client.get(path).text
        assert "<script>alert" not in page and "<script>bad" not in page and "<script>q" not in page
        assert "&lt;script&gt;" in page
        links = re.findall(r'href="([^"]*)"', page)
        assert [link for link in links if not link.startswith(("/", "#")) or link.startswith("//")] == []
    assert 'href="/research/1"' in client.get("/surveys/1").text.split('id="report"')[1]  # a station link stays


@pytest.mark.parametrize("path", ["/research/2/coder", "/research/99/coder", "/research/abc/coder",
                                  "/surveys/2", "/surveys/abc", "/surveys/1?page=x"])
def test_a_session_that_does_not_exist_is_a_404(site: tuple[Path, Any], path: str) -> None:
    _, client = site
    answer = client.get(path)
    assert answer.status_code == 404 and "Not found" in answer.text


def test_the_export_holds_the_session_pages(site: tuple[Path, Any], tmp_path: Path) -> None:
    directory, _ = site
    export(directory, tmp_path / "site")
    coder_page = (tmp_path / "site" / "research" / "1" / "coder.html").read_text()
    survey_page = (tmp_path / "site" / "surveys" / "1.html").read_text()
    assert "Official attempt 2" in coder_page and turn_order(survey_page) == list(range(1, 13))
