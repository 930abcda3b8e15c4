"""The study's pages in a real headless Chromium (as tests/test_web_browser.py runs it, one browser for
the module): the measures page renders its plots and its interaction network (SVG elements in the
rendered page, pixels drawn in their screenshots), and clicks lead from a count to the records it
counts, from a node to its agent, and from an evaluation to its idea-flow tree and on.
Screenshots go to test-artifacts/.
"""
from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
from PIL import Image
from selenium.webdriver.common.by import By
from test_web_browser import browser, log_in, serve, shot, wait_for  # noqa: F401 - browser: the module's fixture
from test_web_study import MEASURES, build_society

from station.apps.web.app import create_app


@pytest.fixture(scope="module")
def site(browser, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:  # noqa: F811 - the fixture above
    app = create_app(build_society(tmp_path_factory.mktemp("society") / "st"))
    url, server, thread = serve(app)
    log_in(browser, url, app)
    yield url
    server.should_exit = True
    thread.join(10)


def drawn(element) -> float:
    """The share of the element's screenshot that is not background (near-white)."""
    image = Image.open(io.BytesIO(element.screenshot_as_png)).convert("L")
    pixels = list(image.getdata())
    return sum(1 for p in pixels if p < 200) / len(pixels)


def click(driver, element) -> None:
    """A real click, on the element scrolled to the middle of the window (the sticky header hides the top)."""
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", element)
    element.click()


def test_the_measures_page_renders_its_plots_and_network_and_its_links_lead_to_the_records(browser, site) -> None:  # noqa: F811
    browser.get(site + MEASURES)
    plots = browser.find_elements(By.CSS_SELECTOR, "#metric-plots svg")
    assert len(plots) == 9 and all(p.size["width"] > 200 and p.size["height"] > 100 for p in plots)
    assert browser.find_elements(By.CSS_SELECTOR, "#metric-density polyline.series")
    network = browser.find_element(By.ID, "network")
    assert len(network.find_elements(By.CSS_SELECTOR, "circle.net-node")) == 4  # three agents and the reviewer
    assert len(network.find_elements(By.CSS_SELECTOR, "a circle.net-node")) == 3  # the agents lead to their pages
    assert len(network.find_elements(By.CSS_SELECTOR, "line.net-edge")) >= 6
    assert drawn(network) > 0.01 and drawn(plots[0]) > 0.01  # lines and dots, not an empty frame
    shot(browser, "study-measures")  # scrolled to the plots by their screenshot

    click(browser, browser.find_element(By.CSS_SELECTOR, "#study-totals a[href*='kind=mail']"))
    wait_for(lambda: "kind=mail" in browser.current_url, what="the list of mail acts")
    assert browser.find_element(By.ID, "edge-total").text == "3"
    click(browser, browser.find_element(By.CSS_SELECTOR, "#study-edges a.record"))
    wait_for(lambda: "/mail/1" in browser.current_url, what="the mail the first act is")
    assert "Shall we compare notes?" in browser.find_element(By.TAG_NAME, "main").text

    browser.get(site + MEASURES)
    node = browser.find_element(By.CSS_SELECTOR, "#network a[href$='/agents/Ada%20I'] circle")
    browser.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", node)
    wait_for(lambda: browser.current_url.endswith("/agents/Ada%20I"), what="the node's agent")
    assert browser.find_element(By.TAG_NAME, "h1").text == "Ada I"


def test_an_evaluations_idea_tree_is_drawn_and_leads_on(browser, site) -> None:  # noqa: F811
    browser.get(site + "/research/4")
    click(browser, browser.find_element(By.ID, "idea-tree-link"))
    wait_for(lambda: browser.current_url.endswith("/study/ideas/4"), what="the tree")
    tree = browser.find_element(By.ID, "idea-tree")
    assert len(tree.find_elements(By.CSS_SELECTOR, "circle.tree-node")) == 5
    assert len(tree.find_elements(By.CSS_SELECTOR, "line.tree-step.cross")) == 3
    assert drawn(tree) > 0.005
    shot(browser, "study-idea-tree")
    root = tree.find_element(By.CSS_SELECTOR, "a[href$='/research/2'] circle")
    browser.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", root)
    wait_for(lambda: browser.current_url.endswith("/research/2"), what="the root's page")
    assert browser.find_element(By.TAG_NAME, "h1").text.startswith("Evaluation #2")
