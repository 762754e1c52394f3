"""Every page at a phone's 390x844 and a laptop's 1280x800 (issue 39): the document never scrolls sideways (its
scroll width is at most the viewport's; wide tables scroll inside their own box), the navigation collapses into a
menu on the phone and opens, and no select cuts its chosen label. Screenshots of every page at both sizes go to
test-artifacts/e2e/responsive/."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from e2e_runs import World, finished_run, new_team
from e2e_support import ARTIFACTS, Server, open_signed_in
from playwright.sync_api import Browser, Page, expect
from sqlalchemy import Engine

from backend.db.session import make_engine

pytestmark = pytest.mark.e2e

SIZES = {"phone": (390, 844), "laptop": (1280, 800)}
NAV_ROUTES = """() => [...document.querySelectorAll("nav.topbar a[href^='#/']")]
  .map(a => a.getAttribute('href').slice(1))"""
OVERFLOW = """() => ({scroll: document.documentElement.scrollWidth, viewport: window.innerWidth,
  wide: [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > window.innerWidth + 1
        && getComputedStyle(e).position !== 'fixed').slice(0, 5).map(e => e.tagName + '.' + e.className)})"""
# a select whose chosen option's text is wider than the box shows it cut
CUT_SELECTS = """() => [...document.querySelectorAll('select')].filter(s => s.offsetParent !== null).filter(s => {
  const probe = document.createElement('span'); const style = getComputedStyle(s);
  probe.style.font = style.font; probe.style.position = 'absolute'; probe.style.whiteSpace = 'pre';
  probe.textContent = s.options[s.selectedIndex]?.text ?? ''; document.body.appendChild(probe);
  const room = s.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight) - 16;
  const cut = probe.getBoundingClientRect().width > room + 1; probe.remove(); return cut;
}).map(s => (s.name || s.getAttribute('aria-label') || '?') + ': ' + s.options[s.selectedIndex]?.text)"""


@pytest.fixture(scope="module")
def world(api_server: Server, pg_url: str) -> Iterator[tuple[World, int, int]]:
    engine: Engine = make_engine(pg_url)
    world = new_team(api_server, "responsive")
    job = finished_run(engine, world, "a-rather-long-run-name-for-the-runs-table", [0.1, 0.2, 0.3, 0.4])
    other = finished_run(engine, world, "another-run", [0.1, 0.15, 0.2, 0.25], training={"lr": 1e-5})
    engine.dispose()
    yield world, int(job["id"]), int(other["id"])


def _loaded(page: Page, job_id: int) -> None:
    """The page's heading is shown and the rows it is about (the run) have arrived where it lists runs."""
    expect(page.locator("main h1, main h2").first).to_be_visible()
    if page.get_by_test_id("jobs-table").count() or "/compare" in page.url:
        expect(page.locator("main")).to_contain_text("a-rather-long-run-name")
    if f"/jobs/{job_id}" in page.url:
        expect(page.locator("main h2").first).to_contain_text("a-rather-long-run-name")


@pytest.mark.parametrize("size", list(SIZES))
def test_no_page_scrolls_sideways(browser: Browser, api_server: Server, world: tuple[World, int, int],
                                  size: str) -> None:
    team, job_id, other_id = world
    width, height = SIZES[size]
    context = browser.new_context(viewport={"width": width, "height": height})
    context.set_default_timeout(30_000)
    page = context.new_page()
    out = ARTIFACTS / "responsive"
    out.mkdir(parents=True, exist_ok=True)
    failures: list[str] = []
    try:
        open_signed_in(page, api_server, team.token, "/jobs")
        expect(page.locator("nav.topbar a").first).to_be_attached()
        # every page the navigation offers, a job's page and Compare
        routes = [*page.evaluate(NAV_ROUTES), f"/jobs/{job_id}", f"/compare?ids={job_id},{other_id}"]
        assert {"/jobs", "/submit", "/models", "/datasets", "/cluster", "/team", "/alerts", "/sessions"} <= set(routes)
        for route in routes:
            page.goto(f"{api_server.url}/#{route}")
            _loaded(page, job_id)
            measured = page.evaluate(OVERFLOW)
            if measured["scroll"] > measured["viewport"]:
                failures.append(f"{route}: document {measured['scroll']} px wide > {measured['viewport']} "
                                f"({measured['wide']})")
            if size == "laptop" and route == "/jobs":  # the runs table fits whole (it used to clip a column)
                box = page.get_by_test_id("jobs-table").locator("xpath=..")
                inner = box.evaluate("e => [e.scrollWidth, e.clientWidth]")
                if inner[0] > inner[1]:
                    failures.append(f"/jobs: the runs table is {inner[0]} px wide in a {inner[1]} px box")
            cut = page.evaluate(CUT_SELECTS)
            if cut:
                failures.append(f"{route}: select labels cut: {cut}")
            page.screenshot(path=str(out / f"{size}-{route.strip('/').replace('/', '-').replace('?', '-')}.png"),
                            full_page=True)
        if size == "phone":  # the navigation is one menu button until opened
            nav_link = page.locator("nav.topbar").get_by_role("link", name="Datasets", exact=True)
            expect(nav_link).to_be_hidden()
            page.get_by_role("button", name="Menu").click()
            nav_link.click()
            expect(page.locator("main h2").first).to_contain_text("Datasets")
            expect(nav_link).to_be_hidden()  # choosing a page closes the menu
    finally:
        context.close()
    assert not failures, "\n".join(failures)
