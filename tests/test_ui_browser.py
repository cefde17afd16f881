"""``stockade ui`` in a real headless Chromium: what a person sees, clicks and gets.

The browser is the system's (Debian's ``chromium`` at /usr/bin/chromium, installed by
``.ci/run``), driven by Playwright; nothing is downloaded. Where it is missing these tests
are skipped with the reason in the summary; in CI a missing browser fails the run (they are
the acceptance of the page, not an optional extra).

The run page's screenshot, taken with a held command on it, goes to the test's own temporary
folder; ``STOCKADE_REFRESH_SCREENSHOT=1`` writes it to ``docs/img/run-page.png`` instead,
which ``docs/ui.md`` shows (a deliberate refresh, never a side effect of a test run).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect, sync_playwright

sys.path.insert(0, str(Path(__file__).parent))
from helpers.ci import require
from helpers.ui import Ui  # the same server helper as the HTTP tests

CHROMIUM = "/usr/bin/chromium"
DOCS_SCREENSHOT = Path(__file__).parents[1] / "docs" / "img" / "run-page.png"


@pytest.fixture
def screenshot(tmp_path: Path) -> Path:
    """Where the run page's picture goes: the docs only when asked to refresh them."""
    if os.environ.get("STOCKADE_REFRESH_SCREENSHOT") == "1":
        return DOCS_SCREENSHOT
    return tmp_path / "run-page.png"


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    require(os.access(CHROMIUM, os.X_OK), f"{CHROMIUM} is missing: apt-get install chromium")
    # Chromium's own sandbox cannot start as root; the page under test is what matters here.
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=args, headless=True)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser, ui: Ui) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    opened = context.new_page()
    dialogs: list[str] = []
    opened.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    errors: list[str] = []
    opened.on(
        "console", lambda message: errors.append(message.text) if message.type == "error" else None
    )
    opened.goto(ui.url)  # the token sets the cookie, then the URL drops it
    assert opened.url == f"http://127.0.0.1:{ui.port}/"
    yield opened
    context.close()
    assert dialogs == [], "a script ran that the page did not serve"
    assert errors == [], errors  # a CSP violation is a console error too


def test_a_held_command_is_shown_and_letting_it_go_ahead_runs_exactly_that(ui, page, screenshot):
    ui.run(["echo", "checking the workspace"])
    ui.run(["ls", "-la"])
    run, step = ui.hold(["sh", "-c", 'echo "built at $0" > build.txt; cat build.txt', "step-3"])
    page.goto(f"http://127.0.0.1:{ui.port}/pending")
    card = page.locator(f"#held-{run}-{step}")
    expect(card).to_contain_text("""sh -c 'echo "built at $0" > build.txt; cat build.txt' step-3""")
    expect(card.locator("ol.argv li")).to_have_text(
        ["sh", "-c", 'echo "built at $0" > build.txt; cat build.txt', "step-3"]
    )
    expect(card).to_contain_text("Why it waits:")
    expect(card).to_contain_text("destroys")
    expect(page.locator("#waiting-count")).to_have_text("1")
    page.click(f"#held-{run}-{step} a")  # to the run page, where the timeline is
    expect(page.locator(f"#step-{step} button.go")).to_be_visible()
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(screenshot), full_page=True)
    page.click(f"#step-{step} button.go")
    expect(page.locator("#notice")).to_contain_text(f"step {step} let go ahead by")
    the_step = page.locator(f"#step-{step}")
    expect(the_step).to_have_class(re.compile(r"\bstate-ok\b"), timeout=20_000)
    expect(the_step.locator("pre")).to_have_text("built at step-3\n")
    expect(the_step.locator(".changes")).to_contain_text("build.txt")
    expect(the_step).to_contain_text("(stockade ui)")
    expect(page.locator("#waiting-count")).to_have_text("0")
    # What ran is what was shown: the recorded result's argv, and its effect.
    (result,) = ui.results(run, step)
    assert result["argv"] == ["sh", "-c", 'echo "built at $0" > build.txt; cat build.txt', "step-3"]
    assert (ui.ws / "build.txt").read_text() == "built at step-3\n"
    # The link to the whole stream gives it as text.
    page.click(f"#step-{step} .stdout a")
    assert page.locator("body").inner_text() == "built at step-3\n"


def test_a_double_click_runs_the_step_once(ui, page):
    run, step = ui.hold(["sh", "-c", "echo once >> count.txt"])
    page.goto(f"http://127.0.0.1:{ui.port}/runs/{run}")
    page.dblclick(f"#step-{step} button.go")
    expect(page.locator(f"#step-{step}")).to_have_class(re.compile(r"\bstate-ok\b"), timeout=20_000)
    assert (ui.ws / "count.txt").read_text() == "once\n"
    assert len(ui.results(run, step)) == 1


def test_decline_records_the_decline(ui, page):
    run, step = ui.hold(["touch", "unwanted.txt"])
    page.goto(f"http://127.0.0.1:{ui.port}/pending")
    page.click(f"#held-{run}-{step} button.no")
    expect(page.locator("#notice")).to_contain_text(f"step {step} declined by")
    expect(page.locator(f"#step-{step}")).to_have_class(re.compile(r"\bstate-declined\b"))
    expect(page.locator(f"#step-{step} .outcome")).to_contain_text("(stockade ui): it never ran")
    expect(page.locator(f"#step-{step} button")).to_have_count(0)
    assert ui.state(run, step) == "declined"
    assert not (ui.ws / "unwanted.txt").exists()
    page.goto(f"http://127.0.0.1:{ui.port}/pending")
    expect(page.locator("#pending")).to_contain_text("Nothing waits for a person.")


def test_hostile_output_is_shown_as_text_and_runs_nothing(ui, page):
    hostile = (
        "<script>alert('script')</script><img src=x onerror=\"alert('img')\">"
        "<b id=injected>bold</b><style>body{display:none}</style>"
    )
    ui.run(["echo", hostile])
    run = ui.agent.run_id
    page.goto(f"http://127.0.0.1:{ui.port}/runs/{run}")
    expect(page.locator("#step-1 pre")).to_have_text(hostile + "\n")
    expect(page.locator("#step-1 code.line")).to_contain_text("<script>alert")
    assert page.locator("#injected").count() == 0
    assert page.locator("img").count() == 0
    assert page.locator("main script, main style").count() == 0
    assert page.locator("script").count() == 1  # /static/live.js
    assert page.locator("body").is_visible()


def test_a_new_step_appears_without_a_reload(ui, page):
    ui.run(["echo", "first"])
    run = ui.agent.run_id
    page.goto(f"http://127.0.0.1:{ui.port}/runs/{run}")
    expect(page.locator("#live-status")).to_have_text("live")
    page.evaluate("window.stillTheSamePage = true")
    expect(page.locator("#step-2")).to_have_count(0)
    ui.run(["echo", "second, while the page is open"])  # another host records it
    expect(page.locator("#step-2 pre")).to_have_text("second, while the page is open\n")
    held_run, step = ui.hold(["touch", "later.txt"])
    assert held_run == run
    expect(page.locator(f"#step-{step} button.go")).to_be_visible()
    expect(page.locator("#waiting-count")).to_have_text("1")
    expect(page.locator("#summary")).to_contain_text("3 steps: 2 ok")
    # Answered elsewhere (the CLI's way), the page follows too.
    ui.agent.answer(run, step, approve=False, by="someone at a terminal")
    expect(page.locator(f"#step-{step} .outcome")).to_contain_text(
        "declined by someone at a terminal"
    )
    assert page.evaluate("window.stillTheSamePage") is True
    assert page.locator("#timeline > li").count() == 3


@pytest.fixture
def lenient(browser: Browser, ui: Ui) -> Iterator[Page]:
    """A page whose console may report failed loads (a 404 page, a poll that cannot reach
    the server): those are what these tests cause; any other console error still fails."""
    context = browser.new_context(viewport={"width": 1200, "height": 900})
    opened = context.new_page()
    dialogs: list[str] = []
    opened.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    errors: list[str] = []
    opened.on(
        "console", lambda message: errors.append(message.text) if message.type == "error" else None
    )
    opened.goto(ui.url)
    yield opened
    context.close()
    assert dialogs == []
    others = [text for text in errors if "Failed to load resource" not in text]
    assert others == [], others


def test_the_run_list_shows_what_each_run_is_and_links_what_waits(ui, page):
    ui.run(["echo", "hello world"])
    run, step = ui.hold(["touch", "new file.txt"])
    page.goto(f"http://127.0.0.1:{ui.port}/")
    row = page.locator("table.runs tbody tr").filter(has=page.locator(f'a[href="/runs/{run}"]'))
    expect(row.locator("td.first")).to_have_text("echo 'hello world'")
    expect(row.locator("td.date a")).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d$"))
    expect(row.locator("td.waits")).to_have_text(f"step {step}: touch 'new file.txt'")
    row.locator("td.waits a").click()
    assert page.url == f"http://127.0.0.1:{ui.port}/runs/{run}#step-{step}"
    expect(page.locator(f"#step-{step} button.go")).to_be_visible()


def test_an_unknown_run_is_a_page_with_a_way_back(ui, lenient):
    page = lenient
    response = page.goto(f"http://127.0.0.1:{ui.port}/runs/no-such-run")
    assert response is not None
    assert response.status == 404
    expect(page.locator("header.top nav")).to_contain_text("Runs")
    expect(page.locator("#missing")).to_have_text("no run no-such-run in the record.")
    page.click("#back")
    assert page.url == f"http://127.0.0.1:{ui.port}/"
    expect(page.locator("h1")).to_have_text("Runs")


def test_the_buttons_are_off_while_the_page_cannot_reach_its_server(ui, lenient):
    page = lenient
    run, step = ui.hold(["sh", "-c", "echo went >> went.txt"])
    page.goto(f"http://127.0.0.1:{ui.port}/runs/{run}")
    go, no = page.locator(f"#step-{step} button.go"), page.locator(f"#step-{step} button.no")
    expect(page.locator("#live-status")).to_have_text("live")
    expect(go).to_be_enabled()
    page.route("**/live/**", lambda route: route.abort())  # the server is out of reach
    expect(page.locator("#live-status")).to_have_text("not updating: the server is gone")
    expect(go).to_be_disabled()
    expect(no).to_be_disabled()
    expect(page.locator(f"#step-{step} .offline")).to_contain_text(
        "Answers are off: the page cannot reach its server"
    )
    expect(go).to_have_attribute("title", re.compile("^Answers are off"))
    page.unroute("**/live/**")
    page.route("**/live/**", lambda route: route.fulfill(status=403, body="no"))
    expect(page.locator(f"#step-{step} .offline")).to_contain_text("the server answered 403")
    expect(go).to_be_disabled()
    page.unroute("**/live/**")  # it answers again: the buttons come back
    expect(page.locator("#live-status")).to_have_text("live")
    expect(go).to_be_enabled()
    expect(page.locator(f"#step-{step} .offline")).to_have_count(0)
    assert ui.state(run, step) == "held"  # nothing was answered meanwhile
    go.click()
    expect(page.locator(f"#step-{step}")).to_have_class(re.compile(r"\bstate-ok\b"), timeout=20_000)
    assert (ui.ws / "went.txt").read_text() == "went\n"


def test_a_stopped_server_turns_the_buttons_off(ui, lenient):
    page = lenient
    run, step = ui.hold(["touch", "never.txt"])
    page.goto(f"http://127.0.0.1:{ui.port}/pending")
    go = page.locator(f"#held-{run}-{step} button.go")
    expect(go).to_be_enabled()
    ui.stop()
    expect(page.locator("#live-status")).to_have_text("not updating: the server is gone")
    expect(go).to_be_disabled()
    expect(page.locator(f"#held-{run}-{step} .offline")).to_be_visible()


def test_output_and_the_held_card_read_plainly(ui, page):
    ui.run(["printf", "one\\r\\ntwo\\r\\nsafe\\revil\\n"])
    run, step = ui.hold(["curl", "-s", "https://example.org/"], profile="offline")
    page.goto(f"http://127.0.0.1:{ui.port}/runs/{run}")
    output = page.locator("#step-1 pre")
    expect(output).to_have_text("one\ntwo\nsafe\\revil\n")  # one marked escape, no \x0d
    expect(output.locator(".esc")).to_have_count(1)
    network = page.locator(f"#step-{step} dd.network")
    expect(network).to_be_visible()
    expect(network).to_have_class(re.compile(r"\bnet-none\b"))
    expect(network).to_contain_text("letting it go ahead runs it with no network")
