"""The viewer in a real headless Chromium (Debian's chromium and chromedriver, installed by
scripts/setup): the browser logs in through the login address, as the operator does with the one
`station serve` prints; pages render real data from a scripted 60-tick station, and Pause and
Resume on the operator page change the running station's state. Screenshots go to test-artifacts/.
"""
from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
import uvicorn
from conftest import ROOT, copy_station
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from station.apps.web.app import create_app
from station.apps.web.runner import StationRunner
from station.core.store import Store

ARTIFACTS = ROOT / "test-artifacts"
IMPLICIT_WAIT_S = 5


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1280,1600"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))
    driver.set_page_load_timeout(30)
    driver.implicitly_wait(IMPLICIT_WAIT_S)  # elements of a page still loading after a click are waited for
    ARTIFACTS.mkdir(exist_ok=True)
    yield driver
    driver.quit()


def absent(driver: webdriver.Chrome, by: str, value: str) -> bool:
    """Whether the loaded page has no such element, asked without the implicit wait (which would
    spend its whole 5 s on an element that is rightly not there)."""
    driver.implicitly_wait(0)
    try:
        return not driver.find_elements(by, value)
    finally:
        driver.implicitly_wait(IMPLICIT_WAIT_S)


def serve(app) -> tuple[str, uvicorn.Server, threading.Thread]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started, "the web server did not start"
    return f"http://127.0.0.1:{port}", server, thread


def log_in(driver: webdriver.Chrome, url: str, app, then: str = "/") -> None:
    """Open the app's login address (one use each), going on to `then`: the token leaves the address."""
    driver.get(url + app.state.login.address(then))
    assert driver.current_url == url + then


@pytest.fixture(scope="module")
def site(browser: webdriver.Chrome, demo60_cited: tuple[Path, int, int]) -> Iterator[str]:
    """demo60 served, with one paper citing its author's evaluation (the same records otherwise)."""
    app = create_app(demo60_cited[0])
    url, server, thread = serve(app)
    log_in(browser, url, app)  # its cookie is named by its port: logins to the other tests' servers leave it be
    yield url
    server.should_exit = True
    thread.join(10)


def shot(driver: webdriver.Chrome, name: str) -> None:
    driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def wait_for(condition, timeout: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except WebDriverException:  # the page is being replaced (a form's redirect): look again
            pass
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_browser_without_a_login_sees_only_the_login_form_and_each_address_works_once(browser, demo60) -> None:
    app = create_app(demo60)
    url, server, thread = serve(app)
    try:
        browser.get(url + "/agents/Guest_1")
        assert browser.find_element(By.TAG_NAME, "h1").text == "Log in" and 'id="tick-' not in browser.page_source
        shot(browser, "login")
        used = app.state.login.address()
        browser.find_element(By.NAME, "token").send_keys(used.rsplit("=", 1)[1])  # the token typed, not opened
        browser.find_element(By.CSS_SELECTOR, "form button").click()
        # the address changes when the navigation commits, before the new page is there: wait for its heading
        wait_for(
            lambda: browser.current_url == url + "/agents/Guest_1"
            and browser.find_element(By.TAG_NAME, "h1").text == "Guest_1",
            what="the page asked for",
        )
        port = url.rsplit(":", 1)[1]
        browser.delete_cookie(f"station_session_{port}")  # another browser, or this one after a restart
        browser.get(url + used + "&next=/research")
        assert "used already" in browser.find_element(By.ID, "error").text and "Guest_1" not in browser.page_source
        log_in(browser, url, app, "/research")  # the address the server printed next
        assert browser.find_elements(By.CSS_SELECTOR, "#leaderboard tr")
    finally:
        server.should_exit = True
        thread.join(10)


def test_the_headers_logout_button_ends_the_login(browser, demo60) -> None:
    app = create_app(demo60)
    url, server, thread = serve(app)
    try:
        log_in(browser, url, app, "/agents/Guest_1")
        browser.find_element(By.ID, "logout").click()
        wait_for(lambda: browser.find_element(By.TAG_NAME, "h1").text == "Log in", what="the login page")
        assert "Logged out" in browser.find_element(By.ID, "notice").text
        browser.get(url + "/agents/Guest_1")
        assert browser.find_element(By.TAG_NAME, "h1").text == "Log in" and 'id="tick-' not in browser.page_source
        # A login that ends while its page is open (expired, or logged out in another tab): the page says so
        log_in(browser, url, app, "/agents/Guest_1")
        app.state.site.sessions.end(browser.get_cookie(f"station_session_{url.rsplit(':', 1)[1]}")["value"])
        wait_for(lambda: "log in again" in browser.find_element(By.ID, "live-state").text, what="the ended login shown")
    finally:
        server.should_exit = True
        thread.join(10)


def test_the_overview_shows_agents_and_the_best_score(browser, site) -> None:
    browser.get(site + "/")
    rows = browser.find_elements(By.CSS_SELECTOR, "#agents tr")
    assert len(rows) >= 2
    assert browser.find_element(By.ID, "tick").text == "61"
    assert "Best on task 1" in browser.find_element(By.ID, "overview-cards").text
    shot(browser, "overview")


def test_an_agent_dialogue_with_collapsible_prompts(browser, site) -> None:
    browser.get(site + "/agents/Guest_1?tick=1")
    turn = browser.find_element(By.ID, "tick-1")
    prompt = turn.find_element(By.CSS_SELECTOR, "details.prompt")
    assert not prompt.find_element(By.TAG_NAME, "pre").is_displayed()  # collapsed
    prompt.find_element(By.TAG_NAME, "summary").click()
    assert "System Information" in prompt.text
    actions = turn.find_elements(By.CSS_SELECTOR, "pre.reply .action")
    assert actions and actions[0].text.startswith("/execute_action{")
    shot(browser, "dialogue")


def test_a_paper_with_its_review(browser, site, demo60) -> None:
    store = Store(demo60)
    number = store.scalar("SELECT MIN(number) FROM capsules WHERE room='archive' AND deleted=0")
    store.close()
    browser.get(f"{site}/papers/{number}")
    assert browser.find_element(By.CSS_SELECTOR, "#paper h1").text
    review = browser.find_element(By.ID, "review").text
    assert "score" in review.lower()
    shot(browser, "paper")


def test_the_leaderboard_plot(browser, site) -> None:
    browser.get(site + "/research")
    plot = browser.find_element(By.ID, "score-plot-1")
    assert plot.size["width"] > 300 and plot.size["height"] > 100
    dots = plot.find_elements(By.CSS_SELECTOR, "a circle.dot")
    assert len(dots) >= 5
    assert plot.find_elements(By.CSS_SELECTOR, "path.best") and plot.find_elements(By.CSS_SELECTOR, "path.lineage-best")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#leaderboard tr")) > 5
    shot(browser, "leaderboard")
    # A dot says what it is and leads to its evaluation.
    title = dots[-1].find_element(By.TAG_NAME, "title").get_attribute("textContent")
    assert re.match(r"#(\d+) .+ — .+: -?[\d.]+", title), title
    browser.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", dots[-1])
    wait_for(lambda: browser.current_url.endswith("/research/" + title[1:title.index(" ")]), what="the dot's page")


def test_from_the_overview_to_the_best_result_and_its_author(browser, site, demo60) -> None:
    browser.get(site + "/")
    browser.find_element(By.ID, "best-1").click()
    best = int(browser.current_url.rsplit("/", 1)[1])
    assert best == best_evaluation(demo60)
    author = query_one(demo60, "SELECT author FROM evaluations WHERE id=?", (best,))
    browser.find_element(By.ID, "author").click()
    assert browser.find_element(By.TAG_NAME, "h1").text == author
    shot(browser, "agent-works")


def test_from_a_paper_to_the_result_it_cites_its_author_and_what_it_built_on(browser, site, demo60_cited) -> None:
    """By clicks only: the papers, a paper citing an evaluation, that evaluation (which lists the paper
    as citing it), its author (whose page lists the paper), and the evaluation it built on."""
    directory, number, cited = demo60_cited
    browser.get(site + "/")
    browser.find_element(By.CSS_SELECTOR, "header a[href='/papers']").click()
    browser.find_element(By.CSS_SELECTOR, f"a[href$='/papers/{number}']").click()
    shot(browser, "paper-citing")
    browser.find_element(By.CSS_SELECTOR, f"#paper a.ref[href$='/research/{cited}']").click()
    assert browser.current_url.endswith(f"/research/{cited}")
    assert f"/papers/{number}" in browser.find_element(By.CSS_SELECTOR, "#cited-by a").get_attribute("href")
    browser.find_element(By.ID, "author").click()
    author, session, task = query_one(directory, "SELECT author, session, task FROM evaluations WHERE id=?", (cited,))
    assert browser.find_element(By.TAG_NAME, "h1").text == author
    assert browser.find_elements(By.CSS_SELECTOR, f"#agent-papers a[href$='/papers/{number}']")
    browser.back()
    browser.find_element(By.ID, "built-on").click()
    base = query_one(directory, "SELECT MAX(id) FROM evaluations WHERE session=? AND task=? AND id<?",
                     (session, task, cited))
    assert browser.current_url.endswith(f"/research/{base}")  # the author's previous submission
    assert browser.find_element(By.TAG_NAME, "h1").text.startswith(f"Evaluation #{base}")


def test_a_filtered_leaderboard_reloads_to_the_same_view(browser, site) -> None:
    browser.get(site + "/research")
    Select(browser.find_element(By.ID, "filter-lineage")).select_by_visible_text("Gauss")
    Select(browser.find_element(By.ID, "filter-sort")).select_by_visible_text("score")
    browser.find_element(By.ID, "filter-from").send_keys("10")
    browser.find_element(By.ID, "apply-filters").click()
    wait_for(lambda: "lineage=Gauss" in browser.current_url, what="the filtered address")
    shown = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#leaderboard tr")]
    assert len(shown) > 1 and all("Gauss" in row for row in shown[1:])
    scores = [float(r.find_elements(By.TAG_NAME, "td")[-1].text)
              for r in browser.find_elements(By.CSS_SELECTOR, "#leaderboard tr")[1:]]
    assert scores == sorted(scores, reverse=True)
    address = browser.current_url
    shot(browser, "leaderboard-filtered")
    browser.get(site + "/")
    browser.get(address)  # a shared link, opened afresh
    assert [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#leaderboard tr")] == shown
    assert Select(browser.find_element(By.ID, "filter-lineage")).first_selected_option.text == "Gauss"
    assert Select(browser.find_element(By.ID, "filter-sort")).first_selected_option.text == "score"
    assert browser.find_element(By.ID, "filter-from").get_attribute("value") == "10"


def query_one(directory: Path, sql: str, params: tuple = ()) -> Any:
    """The one row `sql` selects (its one value, if it selects one column)."""
    store = Store(directory)
    try:
        row = tuple(store.one(sql, params))
    finally:
        store.close()
    return row[0] if len(row) == 1 else row


def best_evaluation(directory: Path) -> int:
    return query_one(directory, "SELECT id FROM evaluations WHERE score IS NOT NULL ORDER BY score DESC, id LIMIT 1")


def test_the_diff_page_shows_added_and_removed_lines(browser, site, demo60) -> None:
    # The best evaluation that built on its author's previous submission, with other code.
    best = query_one(demo60, "SELECT b.id FROM evaluations b JOIN evaluations a ON a.id=(SELECT MAX(p.id) FROM "
                             "evaluations p WHERE p.session=b.session AND p.task=b.task AND p.id<b.id) "
                             "WHERE a.code!=b.code AND b.score IS NOT NULL ORDER BY b.score DESC, b.id LIMIT 1")
    browser.get(f"{site}/research/{best}")
    browser.find_element(By.ID, "diff-link").click()
    added = browser.find_elements(By.CSS_SELECTOR, "#diff .add")
    removed = browser.find_elements(By.CSS_SELECTOR, "#diff .del")
    assert added and removed
    assert all(a.text.startswith("+") for a in added) and all(r.text.startswith("-") for r in removed)
    green, red = (e.value_of_css_property("background-color") for e in (added[0], removed[0]))
    assert green != red  # told apart at a glance
    summary = browser.find_element(By.ID, "diff-summary").text
    assert f"{len(added)} line" in summary and f"{len(removed)} removed" in summary
    shot(browser, "diff")
    # Another base, chosen on the page.
    Select(browser.find_element(By.ID, "against")).select_by_index(1)
    browser.find_element(By.CSS_SELECTOR, "form.jump button").click()
    wait_for(lambda: "against=" in browser.current_url, what="the other diff")
    assert browser.find_element(By.ID, "diff-base").text.startswith("#")


def test_the_lineage_tree(browser, site) -> None:
    browser.get(site + "/lineages")
    lineages = browser.find_elements(By.CSS_SELECTOR, "#lineage-tree section.lineage")
    assert len(lineages) >= 2
    bars = browser.find_elements(By.CSS_SELECTOR, ".timeline .life")
    assert bars and all(bar.size["width"] > 0 for bar in bars)
    shot(browser, "lineages")


def test_pause_and_resume_from_the_page_change_the_running_station(browser, demo60, tmp_path) -> None:
    directory = copy_station(demo60, tmp_path / "st")
    runner = StationRunner(directory)
    app = create_app(directory, runner=runner)
    url, server, thread = serve(app)
    try:
        log_in(browser, url, app, "/operator")
        assert browser.find_element(By.ID, "run-state").text == "stopped"
        browser.find_element(By.ID, "resume").click()
        wait_for(lambda: browser.find_element(By.ID, "run-state").text == "running", what="running")
        assert browser.find_element(By.ID, "run-limit").text == "running with no tick limit"
        wait_for(lambda: _tick(directory) >= 62, timeout=120, what="a tick to pass")
        shot(browser, "operator-running")
        browser.find_element(By.ID, "pause").click()
        wait_for(lambda: not runner.running_here, timeout=120, what="the engine to stop")
        browser.get(url + "/operator")
        wait_for(lambda: browser.find_element(By.ID, "run-state").text == "stopped", what="stopped")
        shot(browser, "operator-paused")
        assert _tick(directory) >= 62
    finally:
        runner.pause()
        runner.wait(60)
        server.should_exit = True
        thread.join(10)


def test_a_bad_setting_shows_its_error_and_a_good_one_its_whole_outcome(browser, demo60, tmp_path) -> None:
    directory = copy_station(demo60, tmp_path / "st")
    app = create_app(directory)
    url, server, thread = serve(app)
    try:
        log_in(browser, url, app, "/operator")
        browser.find_element(By.ID, "set-key").send_keys("lifecycle.max_age")
        browser.find_element(By.ID, "set-value").send_keys("3")
        browser.find_element(By.ID, "set").click()
        wait_for(lambda: "cannot be changed" in browser.find_element(By.ID, "error").text, what="the error banner")
        assert browser.find_element(By.ID, "set-key").get_attribute("value") == "lifecycle.max_age"
        assert absent(browser, By.ID, "done")
        shot(browser, "operator-refused")
        for field, text in (("set-key", "turns"), ("set-value", "concurrent")):
            browser.find_element(By.ID, field).clear()
            browser.find_element(By.ID, field).send_keys(text)
        browser.find_element(By.ID, "set").click()
        wait_for(lambda: browser.find_elements(By.ID, "done"), what="the success banner")
        assert re.fullmatch(r"operator command #\d+ \(set\) queued", browser.find_element(By.ID, "done").text)
        assert browser.current_url == url + "/operator" and absent(browser, By.ID, "error")
        shot(browser, "operator-done")
    finally:
        server.should_exit = True
        thread.join(10)


def _tick(directory: Path) -> int:
    store = Store(directory)
    try:
        return store.get_meta("tick")
    finally:
        store.close()


def test_the_static_export_opens_from_disk_and_its_links_work(browser, demo60_site) -> None:
    site, pages = demo60_site  # `station export` of demo60, made once per run (conftest)
    assert pages > 40
    # Every link of every page points at a file of the site.
    broken = []
    for page in site.rglob("*.html"):
        for _, href in re.findall(r"""href=(["'])([^"'#]+)""", page.read_text(encoding="utf-8")):
            if not href.startswith(("http:", "https:")) and not (page.parent / unquote(href)).exists():
                broken.append(f"{page.relative_to(site)} -> {href}")
    assert not broken, broken[:5]
    browser.get((site / "index.html").as_uri())
    assert browser.find_element(By.ID, "tick").text == "61"
    browser.find_element(By.LINK_TEXT, "Papers").click()
    first = browser.find_element(By.CSS_SELECTOR, "#papers td a")
    title = first.text
    first.click()
    assert browser.find_element(By.CSS_SELECTOR, "#paper h1").text == title
    assert browser.current_url.startswith("file://")
    browser.find_element(By.LINK_TEXT, "Agents").click()
    browser.find_element(By.LINK_TEXT, "Guest_1").click()
    assert browser.find_element(By.ID, "tick-1")
    browser.find_element(By.LINK_TEXT, "Research").click()
    assert browser.find_element(By.ID, "score-plot-1")
    assert "Operator" not in browser.find_element(By.TAG_NAME, "nav").text
    shot(browser, "export-research")


def test_the_best_packing_is_drawn_on_its_evaluation_page(browser, site, demo60) -> None:
    best = best_evaluation(demo60)
    browser.get(f"{site}/research/{best}")
    drawing = browser.find_element(By.ID, "packing")
    circles = drawing.find_elements(By.CSS_SELECTOR, "circle")
    assert len(circles) == 26
    square = drawing.find_element(By.CSS_SELECTOR, ".square").rect
    for circle in circles:  # every circle is drawn inside the square, as the verifier demands
        box = circle.rect
        assert box["x"] >= square["x"] - 1 and box["x"] + box["width"] <= square["x"] + square["width"] + 1
        assert box["y"] >= square["y"] - 1 and box["y"] + box["height"] <= square["y"] + square["height"] + 1
    assert abs(square["width"] - square["height"]) < 2  # a square, not a stretched box
    shot(browser, "evaluation-packing")


def forecasting_like(demo60: Path, target: Path) -> Path:
    """A copy of the demo whose scores are a forecasting task's: negative MAEs 0.00002 apart in all."""
    directory = copy_station(demo60, target)
    store = Store(directory)
    with store.transaction():
        store.execute("UPDATE evaluations SET score=-0.14132 + (id % 5) * 0.000005 WHERE score IS NOT NULL")
    store.close()
    return directory


def test_the_forecasting_plot_tick_labels_differ_and_span_the_data(browser, demo60, tmp_path) -> None:
    directory = forecasting_like(demo60, tmp_path / "st")
    app = create_app(directory)
    url, server, thread = serve(app)
    try:
        log_in(browser, url, app, "/research")
        plot = browser.find_element(By.ID, "score-plot-1")
        labels = [t.text for t in plot.find_elements(By.CSS_SELECTOR, "text.tick-label[text-anchor='end']")]
        values = [float(label) for label in labels]
        assert len(labels) >= 3 and len(set(labels)) == len(labels), labels
        assert min(values) <= -0.14132 + 1e-12 and max(values) >= -0.14130 - 1e-12
        assert max(values) - min(values) < 0.0001  # the axis spans the data, not a range around it
        grid = plot.find_elements(By.CSS_SELECTOR, ".grid")
        assert len(grid) >= len(labels)
        shot(browser, "leaderboard-forecasting-scale")
    finally:
        server.should_exit = True
        thread.join(10)


def test_a_training_run_shows_its_learning_curves(browser, demo60, tmp_path) -> None:
    """The viewer's side of a training task's figure (the evaluators' side: tests/test_figures.py)."""
    directory = copy_station(demo60, tmp_path / "st")
    store = Store(directory)
    curves = {"kind": "curves", "x_label": "epoch", "panels": [
        {"title": "validation MAE", "lower_is_better": True,
         "series": [{"label": f"trial {n}", "values": [0.2 / (e + 1) + 0.01 * n for e in range(30)]} for n in range(3)]},
        {"title": "training loss", "lower_is_better": True,
         "series": [{"label": f"trial {n}", "values": [0.5 / (e + 1) ** 0.5 for e in range(30)]} for n in range(3)]},
    ]}
    with store.transaction():
        key = store.scalar("SELECT input_key FROM evaluation_versions WHERE evaluation=2 AND version=1")
        payload = store.get_input(key)
        store.execute("UPDATE inputs SET payload=? WHERE key=?", (json.dumps({**payload, "figure": curves}), key))
    store.close()
    app = create_app(directory)
    url, server, thread = serve(app)
    try:
        log_in(browser, url, app, "/research/2")
        panels = browser.find_elements(By.CSS_SELECTOR, "#figure svg.curve")
        assert len(panels) == 2
        assert len(panels[0].find_elements(By.CSS_SELECTOR, "polyline")) == 3
        assert "trial 2" in panels[0].text and "validation MAE" in browser.find_element(By.ID, "figure").text
        shot(browser, "evaluation-curves")
    finally:
        server.should_exit = True
        thread.join(10)


def test_the_study_page_draws_whole_lives_over_the_window(browser, site) -> None:
    browser.get(site + "/study?first=1&last=60")
    plot = browser.find_element(By.ID, "token-plot")
    assert 1 <= len(plot.find_elements(By.CSS_SELECTOR, "polyline")) <= 10
    assert "was Guest_" in plot.text  # a guest and its ascended self: one line, both names
    assert browser.find_element(By.ID, "room-actions").text
    shot(browser, "study")
