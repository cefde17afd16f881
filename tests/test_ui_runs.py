"""What ``stockade ui`` shows of a run and how it takes answers: output as text, each step
with its decision, result and changes, a changed output or record reported, answers taken
once, and live updates of only what changed.

Each test starts the real server with the real CLI (the ``ui`` fixture, :mod:`helpers.ui`);
the commands it shows are run by a real host in the test process."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import urlencode

from stockade.record.blobs import blob_dir
from stockade.record.store import open_store

# --- what it shows ------------------------------------------------------------------------


def test_command_output_is_shown_as_text(ui):
    ui.run(["echo", "<script>alert(1)</script><img src=x onerror=alert(2)>"])
    run = ui.agent.run_id
    page = ui.page(f"/runs/{run}")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;" in page
    assert "<script>alert" not in page
    assert "<img" not in page
    assert page.count("<script") == 1  # only /static/live.js
    status, headers, body = ui.get(f"/runs/{run}/steps/1/stdout")
    assert status == 200
    assert headers["content-type"] == "text/plain; charset=utf-8"
    assert headers["x-content-type-options"] == "nosniff"
    assert body == "<script>alert(1)</script><img src=x onerror=alert(2)>\n"


def test_invisible_and_control_characters_in_a_held_command_are_drawn_as_escapes(ui):
    run, step = ui.hold(["touch", "safe\u202etxt.exe", "a\x1b[2Jb"])
    page = ui.page(f"/runs/{run}")
    assert '<span class="esc" title="U+202E">\\u202e</span>' in page
    assert '<span class="esc" title="U+001B">\\x1b</span>' in page
    assert "\u202e" not in page
    assert "\x1b" not in page
    assert ui.state(run, step) == "held"


def test_the_run_page_pairs_each_step_with_its_decision_result_and_changes(ui):
    ui.run(["echo", "first"])
    ui.run(["ls", "/nonexistent-dir"])
    run, step = ui.hold(["touch", "new.txt"])
    page = ui.page(f"/runs/{run}")
    assert "3 steps: 1 ok, 1 failed, 0 denied, 0 declined, 1 waiting" in page
    assert "budget: 3 of 50 steps" in page
    assert "stockade verify:</strong> ok" in page
    step_1 = page[page.index('id="step-1"') : page.index('id="step-2"')]
    assert "reads \u2014 allowed: reads is not in agents.careful.ask" in step_1
    assert "by builtin-policy" in step_1
    assert "exit 0 in" in step_1
    assert "<pre>first\n</pre>" in step_1
    step_2 = page[page.index('id="step-2"') : page.index('id="step-3"')]
    assert "exit 2" in step_2
    assert "stderr" in step_2
    step_3 = page[page.index('id="step-3"') :]
    assert "writes \u2014 held for a person: writes is in agents.careful.ask" in step_3
    assert "Let it go ahead" in step_3
    assert "Decline" in step_3
    assert "<code>touch</code>" in step_3
    assert "<code>new.txt</code>" in step_3
    # Let go ahead over HTTP: it runs, and its result and changed file appear.
    assert ui.answer(run, step, "approve")[0] == 303
    ui.wait_for(lambda: ui.state(run, step) == "done")
    page = ui.page(f"/runs/{run}")
    step_3 = page[page.index('id="step-3"') :]
    assert "by root (stockade ui)" in step_3 or "(stockade ui)" in step_3
    assert "changed files (1)" in step_3
    assert '<li class="created">+ <code>new.txt</code></li>' in step_3
    assert "Let it go ahead" not in step_3
    runs = ui.page("/")
    assert f'href="/runs/{run}"' in runs
    assert "3 of 50 steps" in runs


def test_a_long_output_shows_head_and_tail_and_links_the_whole_stream(ui):
    ui.run(["seq", "1", "5000"])
    run = ui.agent.run_id
    page = ui.page(f"/runs/{run}")
    head = "\n".join(str(n) for n in range(1, 13))
    tail = "\n".join(str(n) for n in range(4989, 5001))
    assert f"<pre>{head}\n</pre>" in page
    assert f"<pre>{tail}\n</pre>" in page
    assert "left out" in page
    assert "\n2500\n" not in page
    status, _, body = ui.get(f"/runs/{run}/steps/1/stdout")
    assert status == 200
    assert body == "".join(f"{n}\n" for n in range(1, 5001))


def test_a_changed_output_or_record_is_reported_not_shown(ui):
    ui.run(["echo", "the truth"])
    run = ui.agent.run_id
    result = ui.results(run, 1)[0]
    digest = result["stdout"]["blob"]  # type: ignore[index]
    store = open_store(ui.agent.config)
    blob = Path(blob_dir(store)) / digest[:2] / digest
    store.close()
    assert blob.read_text() == "the truth\n"
    blob.write_text("a lie\n")
    page = ui.page(f"/runs/{run}")
    assert "its content was changed" in page
    assert "a lie" not in page
    status, _, body = ui.get(f"/runs/{run}/steps/1/stdout")
    assert status == 500
    assert "a lie" not in body
    # An edited event breaks the chain, and the run page says so.
    db = sqlite3.connect(open_store(ui.agent.config).path)
    with db:
        db.execute("UPDATE events SET body = replace(body, 'echo', 'ECHO') WHERE seq = 1")
    db.close()
    page = ui.page(f"/runs/{run}")
    assert "the record does not verify:</strong> event 1 was changed after it was recorded" in page


# --- answers ------------------------------------------------------------------------------


def test_a_second_answer_is_refused_with_a_clear_message_and_the_step_runs_once(ui):
    run, step = ui.hold(["sh", "-c", "echo ran >> count.txt"])
    fields = {**ui.form(ui.page(f"/runs/{run}"), step), "answer": "approve"}
    first = ui.request("POST", "/answer", body=urlencode(fields))
    second = ui.request("POST", "/answer", body=urlencode(fields))
    assert first[0] == second[0] == 303
    ui.wait_for(lambda: ui.state(run, step) == "done")
    page = ui.page(second[1]["location"])
    assert f"step {step} of run {run} was already answered (let go ahead by" in page
    assert "this answer changed nothing: a step runs at most once" in page
    assert (ui.ws / "count.txt").read_text() == "ran\n"
    assert len(ui.results(run, step)) == 1


def test_decline_records_who_declined_and_nothing_runs(ui):
    run, step = ui.hold(["touch", "never.txt"])
    status, headers, _ = ui.answer(run, step, "decline")
    assert status == 303
    assert ui.state(run, step) == "declined"
    store = open_store(ui.agent.config)
    assert store.get(run, step).answered_by.endswith("(stockade ui)")
    store.close()
    page = ui.page(headers["location"])
    assert f"step {step} declined by" in page
    assert "declined by" in page[page.index(f'id="step-{step}"') :]
    assert not (ui.ws / "never.txt").exists()
    assert ui.results(run, step) == []


def test_an_answer_to_something_else_than_what_was_shown_is_refused(ui):
    run, step = ui.hold(["touch", "shown.txt"])
    status, headers, _ = ui.answer(run, step, "approve", shown="0" * 64)
    assert status == 303
    assert "is not what the page showed" in ui.page(headers["location"])
    assert ui.state(run, step) == "held"


# --- live updates -------------------------------------------------------------------------


def test_the_live_endpoint_answers_only_what_changed(ui):
    ui.run(["echo", "one"])
    run = ui.agent.run_id
    _, headers, _ = ui.get(f"/runs/{run}")
    version = headers["x-stockade-version"]
    assert ui.get(f"/live/runs/{run}?since={version}")[0] == 204
    ui.run(["echo", "two"])
    status, headers, body = ui.get(f"/live/runs/{run}?since={version}")
    assert status == 200
    assert 'id="step-2"' in body
    assert 'id="step-1"' not in body  # only the step that changed
    assert 'id="summary"' in body
    assert ui.get(f"/live/runs/{run}?since={headers['x-stockade-version']}")[0] == 204
    _, headers, _ = ui.get("/")
    assert ui.get(f"/live/runs?since={headers['x-stockade-version']}")[0] == 204
    ui.hold(["touch", "x"])
    status, _, body = ui.get(f"/live/pending?since={headers['x-stockade-version']}")
    assert status == 200
    assert 'id="waiting-count" class="count some">1<' in body
