"""`station serve MULTISTART_DIR`: the branches side by side (state, numbers, papers, one plot, the choice
and the administrator's reports), each branch's own pages under /branch/N/ with their links kept inside it,
agent-written titles escaped, a hostile ledger key or branch folder opening nothing outside `branches/`,
and the export of the whole multistart. The folder is built as `station multistart` builds it: a small
demo start, two branches forked from it with `station replay` (branch seeds 1 and 2) and run on, a third
still pending, the choice made by the best-score rule and the chosen branch installed."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from helpers import web_client

from station.apps.cli import main
from station.apps.cli_commands import replay
from station.apps.multistart import _branch_row, best_score, write_ledger
from station.apps.web.app import create_app
from station.apps.web.branches_app import create_multistart_app
from station.apps.web.export import export
from station.apps.world import Station
from station.core.config import load_config
from station.core.engine import Engine
from station.core.store import Store

ROOT = Path(__file__).resolve().parents[1]
FROM_TICK, UNTIL_TICK = 12, 14  # the fork tick (the start has its first papers), the tick the branches run to
HOSTILE = "<script>alert('title')</script>"


@pytest.fixture(scope="module")
def multistart(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("web-branches") / "ms"
    start = Station.create(out / "start", load_config(ROOT / "configs" / "demo.yaml"))
    try:
        Engine(start).run(until_tick=FROM_TICK)
    finally:
        start.close()
    (out / "branches").mkdir()
    for n in (1, 2):
        replay(out / "start", out / "branches" / str(n), FROM_TICK, n)
        branch = Station.open(out / "branches" / str(n))
        try:
            Engine(branch).run(until_tick=UNTIL_TICK)
        finally:
            branch.close()
    rows = [_branch_row(out, n) for n in (1, 2)]
    chosen, why, _ = best_score(rows, "")
    shutil.copytree(out / "branches" / str(chosen), out / "station")
    store = Store(out / "branches" / "2")  # an agent's paper title that is markup
    with store.transaction():
        store.execute("UPDATE capsules SET title=? WHERE room='archive' AND number=(SELECT MAX(number) "
                      "FROM capsules WHERE room='archive')", (HOSTILE,))
    store.close()
    (out / "outside").mkdir()
    (out / "branches" / "7").symlink_to(out / "start")  # a folder leading out of branches/: no branch
    ledger = {
        "source": "configs/demo.yaml", "start": "start", "branches": 3, "ticks": UNTIL_TICK - FROM_TICK,
        "from_tick": FROM_TICK, "until_tick": UNTIL_TICK,
        "branch": {"1": {"state": "done", "branch_seed": 1}, "2": {"state": "done", "branch_seed": 2},
                   "3": {"state": "pending", "branch_seed": 3}, "7": {"state": "done", "branch_seed": 7},
                   "../outside": {"state": "done", "branch_seed": 9}},
        "choice": {"rule": "best-score", "branch": chosen, "why": why}, "installed": True, "spend_usd": 0.0,
        "cap_reached": "the cost cap <b>max_usd</b> was reached",
    }
    write_ledger(out, ledger)
    (out / "selection.md").write_text(f"Branch {chosen} *kept* its ideas {HOSTILE}\n")
    client = web_client(create_multistart_app(out))
    return {"out": out, "rows": {r.number: r for r in rows}, "chosen": chosen, "why": why, "client": client,
            "page": client.get("/").text}


def column(page: str, number: int) -> str:
    found = re.search(rf'(?s)<section class="branch[^"]*" id="branch-{number}">(.*?)</section>', page)
    assert found, f"no column of branch {number}"
    return found.group(1)


def cell(html: str, name: str) -> str:
    found = re.search(rf'<dd class="{name}">([^<]*)</dd>', html)
    assert found, name
    return found.group(1)


def test_every_branch_has_its_column_with_its_numbers(multistart: dict[str, Any]) -> None:
    page = multistart["page"]
    for n, row in multistart["rows"].items():
        html = column(page, n)
        status = Station.open_to_read(row.directory)
        try:
            agents = status.store.scalar("SELECT COUNT(*) FROM agents WHERE state='active'")
        finally:
            status.close()
        assert cell(html, "state") == "done" and cell(html, "tick") == str(UNTIL_TICK) == str(row.tick)
        assert cell(html, "best") == f"{row.best_score:.6g}" and cell(html, "evaluations") == str(row.evaluations)
        assert cell(html, "agents") == str(agents) and cell(html, "spend") == f"${row.spend_usd:.4f}"
        assert f'href="/branch/{n}/"' in html and "<li>" in html  # its pages, and its last papers
    pending = column(page, 3)
    assert cell(pending, "state") == "pending" and cell(pending, "tick") == "-" and "href" not in pending
    # one plot, a line per branch
    plot = re.search(r'(?s)<figure id="branches-plot">(.*?)</figure>', page).group(1)
    assert plot.count("<polyline") == 2 and "branch 1" in plot and "branch 2" in plot


def test_the_choice_and_the_selection_report_are_shown(multistart: dict[str, Any]) -> None:
    page, chosen = multistart["page"], multistart["chosen"]
    choice = re.search(r'(?s)<section class="choice" id="choice">(.*?)</section>', page).group(1)
    assert f"<b>branch {chosen}</b>" in choice and multistart["why"] in choice and "best-score" in choice
    assert f'id="branch-{chosen}"' in page and 'class="branch chosen"' in page
    assert "the cost cap &lt;b&gt;max_usd&lt;/b&gt; was reached" in page
    report = re.search(r'(?s)<section class="report" id="report-selection">(.*?)</section>', page).group(1)
    assert "<em>kept</em>" in report and "&lt;script&gt;" in report


def test_agent_written_titles_are_escaped(multistart: dict[str, Any]) -> None:
    page = multistart["page"]
    assert "<script>alert" not in page and "&lt;script&gt;alert(&#39;title&#39;)&lt;/script&gt;" in column(page, 2)
    live = multistart["client"].get("/api/live").json()  # the columns as the page refreshes them
    assert "<script>alert" not in live["html"]["branches"] and 'id="branch-2"' in live["html"]["branches"]


def test_a_hostile_ledger_key_or_folder_opens_nothing_outside_branches(multistart: dict[str, Any]) -> None:
    page, client = multistart["page"], multistart["client"]
    assert 'id="branch-7"' in page and "href=\"/branch/7/" not in page  # a link out of branches/: not opened
    assert "outside" not in page
    for path in ("/branch/7/", "/branch/../start/", "/branch/01/", "/branch/3/", "/branch/1x/"):
        assert client.get(path).status_code == 404, path


def test_a_branch_s_pages_keep_their_links_inside_the_branch(multistart: dict[str, Any]) -> None:
    client, out = multistart["client"], multistart["out"]
    for n in (1, 2):
        overview = client.get(f"/branch/{n}/")
        assert overview.status_code == 200
        own = TestClient(create_app(out / "branches" / str(n), static_export=True)).get("/").text
        tick = re.search(r'data-live="tick">(\d+)<', overview.text).group(1)
        assert tick == re.search(r'data-live="tick">(\d+)<', own).group(1)  # this branch's, not another's
        links = re.findall(r"""(?:href|src|action)=["'](/[^"']*)""", overview.text)
        assert links and all(link.startswith((f"/branch/{n}/", "/static/")) or link == "/" for link in links), links
        assert 'data-root="/branch/' + str(n) + '"' in overview.text  # live.js asks under the prefix
        assert f"is branch {n} of the multistart" in overview.text
        paper = re.search(rf'href="(/branch/{n}/papers/\d+)"', column(multistart["page"], n)).group(1)
        assert client.get(paper).status_code == 200
    live = client.get("/branch/1/api/live", headers={"accept": "application/json"}).json()
    assert all(e["href"] is None or e["href"].startswith("/branch/1/") for e in live["events"])
    assert client.post("/branch/1/operator/pause").status_code == 405  # read-only here
    installed = client.get("/station/")
    assert installed.status_code == 200 and "was installed by the multistart" in installed.text


def test_the_page_needs_the_login(multistart: dict[str, Any]) -> None:
    stranger = TestClient(create_multistart_app(multistart["out"]))
    for path in ("/", "/branch/1/", "/api/live"):
        answer = stranger.get(path)
        assert answer.status_code == 401 and "branch 1" not in answer.text, path


def test_the_command_line_serves_and_exports_a_multistart_folder(multistart: dict[str, Any], tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", str(multistart["out"]), "--run"]) == 2  # `station multistart` runs the branches
    assert "is a multistart: `station multistart` runs its branches" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "nothing-here"), "--out", str(tmp_path / "site")]) == 2
    assert "no station (and no multistart)" in capsys.readouterr().err


def test_the_export_of_a_multistart(multistart: dict[str, Any], tmp_path: Path) -> None:
    written = export(multistart["out"], tmp_path / "site", limit=4)
    index = (tmp_path / "site" / "index.html").read_text()
    assert written == 4 and 'href="branch/1.html"' in index and "<script>alert" not in index
    first = (tmp_path / "site" / "branch" / "1.html").read_text()
    assert 'href="../static/style.css"' in first and 'href="1/agents.html"' in first
    assert json.loads((tmp_path / "site" / ".station-export").read_text())["station"].endswith("ms")
