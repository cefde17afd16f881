"""``stockade ui``'s pages over HTTP: the run list, the 404 pages, output line ends, the
permission sentence and the held card's network line.

The same real server and host as ``test_ui_door.py`` (the ``ui`` fixture, :mod:`helpers.ui`);
each claim has its control in the same test (the page that does exist, the run that does, the
lone CR).
"""

from __future__ import annotations

import html
import re
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

import attrs

from stockade.config.load import load_config
from stockade.host import Host
from stockade.record.chain import rows
from stockade.record.store import open_store
from stockade.request.spec import ExecRequest

sys.path.insert(0, str(Path(__file__).parent))
from helpers.ui import Ui

BIG = str(1 << 64)  # past SQLite's integers: Python's int takes it, the store cannot


def text_of(fragment: str) -> str:
    """What a person reads in an HTML fragment: tags dropped, entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def row_of(page: str, run: str) -> str:
    """The runs list's row of ``run``."""
    start = page.index('<tr class="status-')
    rows = page[start:].split("</tr>")
    (found,) = [row for row in rows if f'href="/runs/{run}"' in row]
    return found


# --- the run list -------------------------------------------------------------------------


def test_the_run_list_shows_each_runs_date_first_command_steps_and_what_waits(ui):
    ui.run(["echo", "hello world"])
    ui.run(["ls"])
    run, step = ui.hold(["touch", "new file.txt"])
    other = Host.from_environment(str(ui.config))  # a second agent: a run of its own
    try:
        other.run(ExecRequest(["printf", "safe\u202etxt"], profile="careful"))
        second = other.run_id
    finally:
        other.close()
    page = ui.page("/")
    first_row = row_of(page, run)
    shown = text_of(first_row)
    assert time.strftime("%Y-%m-%d") in shown  # the date, even today
    first = re.search(r'<td class="first">(.*?)</td>', first_row, re.S).group(1)
    assert text_of(first) == "echo 'hello world'"  # the first command only, as shell words
    assert "3 2 ok, 0 failed, 0 denied, 0 declined" in shown  # steps, and how they ended
    assert f"step {step}: touch 'new file.txt'" in shown  # what waits, by step and command
    assert f'href="/runs/{run}#step-{step}"' in first_row
    # The other run: its own first command, hidden characters drawn as escapes, nothing waits.
    second_row = row_of(page, second)
    assert '<span class="esc" title="U+202E">\\u202e</span>' in second_row
    assert "\u202e" not in page
    assert "nothing" in text_of(second_row.split('class="waits"')[1])
    # The live twin draws the same list.
    _, headers, _ = ui.get("/")
    ui.run(["echo", "later"])
    status, _, body = ui.get(f"/live/runs?since={headers['x-stockade-version']}")
    assert status == 200
    assert f"step {step}: touch 'new file.txt'" in text_of(row_of(body, run))


def test_the_verify_box_counts_the_run_apart_from_the_whole_record(ui):
    ui.run(["echo", "one"])
    ui.run(["echo", "two"])
    run = ui.agent.run_id
    other = Host.from_environment(str(ui.config))
    try:
        for word in ("three", "four", "five"):
            other.run(ExecRequest(["echo", word], profile="careful"))
        second = other.run_id
    finally:
        other.close()
    for shown, blobs in ((run, 2), (second, 3)):
        box = text_of(ui.page(f"/runs/{shown}").split('id="verdict"')[1].split("</section>")[0])
        events = 3 * blobs + 1  # action, permission, result per command; a run's 1st output
        assert f"This run: {events} events, and its {blobs} output blobs" in box, box
        assert "The whole record they are part of: 17 events" in box, box


# --- 404s ---------------------------------------------------------------------------------


def origin(ui: Ui) -> dict[str, str]:
    return {"Origin": f"http://{ui.host}"}


def assert_not_found_page(ui: Ui, path: str, says: str) -> str:
    status, headers, body = ui.get(path)
    assert status == 404, (path, status, body)
    assert headers["content-type"] == "text/html; charset=utf-8", path
    assert '<header class="top">' in body  # the page's own header, with its links
    assert '<a id="back" href="/">Back to the run list</a>' in body
    assert says in text_of(body), (path, text_of(body))
    return body


def test_unknown_runs_and_paths_are_html_404_pages_with_a_way_back(ui):
    ui.run(["echo", "one"])
    run = ui.agent.run_id
    assert ui.get(f"/runs/{run}")[0] == 200  # control: the run that exists
    assert_not_found_page(ui, "/runs/no-such-run", "no run no-such-run in the record")
    body = assert_not_found_page(
        ui, "/runs/%3Cscript%3Ealert(1)%3Cb%3E", "no run <script>alert(1)<b> in"
    )
    assert "<script>alert" not in body  # the path is text, not markup
    assert_not_found_page(ui, "/nothing/here", "nothing is at /nothing/here")
    assert_not_found_page(ui, "/static/other.js", "no file other.js")
    assert_not_found_page(ui, f"/runs/{run}/steps/1/stdin", "no stream stdin")
    assert_not_found_page(ui, f"/runs/{run}/steps/7/stdout", f"step 7 of run {run} has no result")
    assert ui.get(f"/runs/{run}/steps/1/stdout")[0] == 200  # control


def test_a_huge_step_number_is_a_404_not_a_500(ui):
    ui.run(["echo", "one"])
    run = ui.agent.run_id
    for step in (BIG, str(1 << 63), "9" * 400):
        assert_not_found_page(ui, f"/runs/{run}/steps/{step}/stdout", "has no result")
    largest = str((1 << 63) - 1)  # the largest the store can hold: a step that is not there
    assert_not_found_page(ui, f"/runs/{run}/steps/{largest}/stderr", "has no result")
    # The neighbours: a huge event number in a live update, a huge step in an answer.
    status, _, body = ui.get(f"/live/runs/{run}?since={BIG}.0")
    assert status == 200, body
    status, _, body = ui.get(f"/live/runs/{run}?since=%D9%A1%D9%A2.0")  # Arabic-Indic digits
    assert status == 200, body
    held_run, step = ui.hold(["touch", "x"])
    fields = {**ui.form(ui.page(f"/runs/{held_run}"), step), "answer": "approve"}
    for bad in (BIG, "-1", "x"):
        status, _, body = ui.request(
            "POST", "/answer", body=urlencode({**fields, "step": bad}), headers=origin(ui)
        )
        assert status == 400, (bad, body)
    assert ui.state(held_run, step) == "held"
    assert ui.answer(held_run, step, "decline")[0] == 303  # control: the real step answers


def test_the_live_twin_of_an_unknown_run_is_a_404(ui):
    ui.run(["echo", "one"])
    run = ui.agent.run_id
    assert ui.get(f"/live/runs/{run}?since=0.0")[0] == 200  # control
    assert ui.get("/live/runs/no-such-run?since=0.0")[0] == 404
    assert ui.get("/live/runs/no-such-run")[0] == 404


# --- what a step shows --------------------------------------------------------------------


def test_crlf_is_a_line_end_and_a_lone_cr_is_still_an_escape(ui):
    ui.run(["printf", "one\\r\\ntwo\\r\\nsafe\\revil\\r\\r\\n"])
    run = ui.agent.run_id
    page = ui.page(f"/runs/{run}")
    cr = '<span class="esc" title="U+000D">\\r</span>'
    assert f"<pre>one\ntwo\nsafe{cr}evil{cr}\n</pre>" in page
    assert page.count(cr) == 2  # the lone CR and the CR before CRLF, not each line end
    status, _, body = ui.get(f"/runs/{run}/steps/1/stdout")
    assert status == 200
    assert body == "one\r\ntwo\r\nsafe\revil\r\r\n"  # the whole stream keeps every byte


def test_the_permission_line_reads_as_a_sentence(ui):
    ui.run(["rm", "-f", "absent.txt"], preapproved=True)  # destroys, approved in advance
    run, step = ui.hold(["touch", "later.txt"])
    page = ui.page(f"/runs/{run}")
    step_1 = text_of(page[page.index('id="step-1"') : page.index(f'id="step-{step}"')])
    assert (
        "destroys \u2014 allowed in advance (--yes); the policy would have asked: "
        "destroys always waits for a person"
    ) in step_1
    assert "by preapproved" not in step_1
    assert "approved in advance:" not in step_1
    assert ui.answer(run, step, "approve")[0] == 303
    ui.wait_for(lambda: ui.state(run, step) == "done")
    page = ui.page(f"/runs/{run}")
    later = text_of(page[page.index(f'id="step-{step}"') :])
    assert re.search(
        r"writes \u2014 let go ahead by \S+ \(stockade ui\); the policy had asked: "
        r"writes is in agents\.careful\.ask",
        later,
    ), later
    assert "allowed: approved:" not in later


def test_the_held_card_says_when_going_ahead_means_no_network(ui):
    run, offline = ui.hold(["curl", "-s", "https://example.org/"], profile="offline")
    _, online = ui.hold(["curl", "-s", "https://example.org/"], profile="online")
    _, writes = ui.hold(["touch", "x"])
    page = ui.page(f"/runs/{run}")

    def network(step: int) -> str:
        card = page[page.index(f'id="step-{step}"') :]
        return text_of(re.search(r'<dd class="network[^"]*">(.*?)</dd>', card, re.S).group(1))

    assert network(offline).startswith(
        "none: letting it go ahead runs it with no network, because profile offline names no"
        " hosts (add hosts = [...] to [agents.offline]"
    )
    assert 'class="network net-none"' in page
    assert network(online) == "only example.org, through the egress proxy"  # control
    assert network(writes) == "none"  # not a network command: nothing to warn about
    pending = ui.page("/pending")
    assert "runs it with no network, because profile offline names no hosts" in text_of(pending)


def test_the_card_names_danger_full_access_as_unconfined(ui):
    from stockade_ui.cards import network_of

    _, step = ui.hold(["curl", "-s", "https://example.org/"], profile="offline")
    store = open_store(ui.agent.config)
    try:
        held = store.get(ui.agent.run_id, step)
    finally:
        store.close()
    config = load_config(str(ui.config), environ={})
    assert network_of(config, held).warn
    unconfined = attrs.evolve(held, spec=attrs.evolve(held.spec, mode="danger-full-access"))
    found = network_of(config, unconfined)
    assert found.warn
    assert "not confined" in found.text


def test_a_step_carried_out_elsewhere_names_its_node_and_actor(ui):
    ui.run(["echo", "here"])
    ui.run(["echo", "there"])
    run = ui.agent.run_id
    store = open_store(ui.agent.config)
    try:
        (action,) = [r for r in rows(store, run) if r.step == 2 and r.kind == "action"]
    finally:
        store.close()
    # What stockade-ray records for a step it ships; a host name that could fool a reader.
    ui.agent.recording.placement(
        action.action_id, node="n" * 40, actor="a" * 32, hostname="gpu\u202e-7"
    )
    page = ui.page(f"/runs/{run}")
    step_1 = text_of(page[page.index('id="step-1"') : page.index('id="step-2"')])
    step_2 = page[page.index('id="step-2"') :].split("</li>\n</ul>")[0]
    assert "carried out on" not in step_1  # the control: a step run here names no node
    where = text_of(re.search(r'<p class="where">(.*?)</p>', step_2, re.S).group(1))
    assert where.endswith(f"; carried out on node {'n' * 40} (gpu\\u202e-7), actor {'a' * 32}")
    assert "\u202e" not in page


def test_a_steps_conflict_layer_and_quarantine_events_are_drawn(ui):
    from stockade.record.events import ConflictEvent, LayerEvent, QuarantineEvent

    ui.run(["echo", "one"])
    ui.run(["echo", "two"])
    run = ui.agent.run_id
    store = open_store(ui.agent.config)
    try:
        (action,) = [r for r in rows(store, run) if r.step == 2 and r.kind == "action"]
    finally:
        store.close()
    record, hostile = ui.agent.recording.record, "/w/evil\x1b[2J.txt"
    record(QuarantineEvent(action.action_id, quarantined=("/w/.vscode",), folder="/q"))
    record(ConflictEvent(action.action_id, paths=(hostile,), rivals=("f00d",), folder="/q"))
    record(LayerEvent(action.action_id, outcome="refused", roots=("/w",), by="alice (terminal)"))
    page = ui.page(f"/runs/{run}")
    step_1 = text_of(page[page.index('id="step-1"') : page.index('id="step-2"')])
    step_2 = text_of(page[page.index('id="step-2"') :].split("</li>\n</ul>")[0])
    assert "kept aside" not in step_1 and "quarantined" not in step_1  # the control
    assert "quarantined (protected names never land): /w/.vscode" in step_2
    assert "kept aside, changed in the folder since it started: /w/evil\\x1b[2J.txt" in step_2
    assert "changed first by f00d" in step_2
    assert "its writes were refused: nothing of them landed (0 paths changed)" in step_2
    assert "by alice (terminal)" in step_2
    assert "\x1b" not in page
