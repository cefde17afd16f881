"""``stockade ui``: the real server, started by the real CLI, spoken to over real sockets.

Each test starts ``stockade --config CFG ui --port 0 --no-open`` as a child process with
the test's private ``XDG_STATE_HOME``, reads the URL it prints, and makes HTTP requests
with ``http.client`` (so every header, the ``Host`` one included, is what the test says).
The commands it shows are run by a real host in the test process, in an agent profile
whose ``writes`` wait for a person; nothing of the core is mocked.

The helpers here are imported by ``test_ui_browser.py`` too.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import select
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

from stockade.errors import PolicyHeld
from stockade.host import Host
from stockade.record.blobs import blob_dir
from stockade.record.store import open_store
from stockade.request.spec import ExecRequest

CLI = [sys.executable, "-c", "from stockade.cli import entry; entry()"]
CONFIG = """\
[agents.careful]
workspace = "{ws}"
ask = ["writes"]

[agents.careful.budget]
steps = 50

[agents.offline]
workspace = "{ws}"

[agents.online]
workspace = "{ws}"
hosts = ["example.org"]
"""
CSP = (
    "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; "
    "img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)


class Ui:
    """A running ``stockade ui`` and what a test needs to talk to it."""

    def __init__(self, tmp: Path) -> None:
        self.ws = tmp / "ws"
        self.ws.mkdir()
        self.config = tmp / "stockade.toml"
        self.config.write_text(CONFIG.format(ws=self.ws), encoding="utf-8")
        self.errors = (tmp / "ui.err").open("w")
        self.proc = subprocess.Popen(
            [*CLI, "--config", str(self.config), "ui", "--port", "0", "--no-open"],
            stdout=subprocess.PIPE,
            stderr=self.errors,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            cwd=tmp,
        )
        line = self._first_line(timeout=30)
        found = re.search(r"http://127\.0\.0\.1:(\d+)/\?token=([\w-]+)", line)
        assert found, f"no URL in {line!r}"
        self.url = found.group(0)
        self.port = int(found.group(1))
        self.token = found.group(2)
        self.cookie = f"stockade-ui-{self.port}={self.token}"
        self.host = f"127.0.0.1:{self.port}"
        self._agent: Host | None = None

    def _first_line(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        assert ready, "stockade ui printed nothing"
        return self.proc.stdout.readline().decode()

    def request(
        self,
        method: str,
        path: str,
        *,
        body: str | None = None,
        headers: dict[str, str] | None = None,
        cookie: bool = True,
    ) -> tuple[int, dict[str, str], str]:
        """One request; status, headers (lower-case names) and body."""
        sent = {"Host": self.host, **(headers or {})}
        if cookie:
            sent.setdefault("Cookie", self.cookie)
        if body is not None:
            sent.setdefault("Content-Type", "application/x-www-form-urlencoded")
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            connection.request(method, path.partition("#")[0], body=body, headers=sent)
            response = connection.getresponse()
            return (
                response.status,
                {name.lower(): value for name, value in response.getheaders()},
                response.read().decode("utf-8", "replace"),
            )
        finally:
            connection.close()

    def get(self, path: str, **kwargs: object) -> tuple[int, dict[str, str], str]:
        return self.request("GET", path, **kwargs)  # type: ignore[arg-type]

    def page(self, path: str) -> str:
        status, _, body = self.get(path)
        assert status == 200, (status, body)
        return body

    def form(self, page: str, step: int) -> dict[str, str]:
        """The hidden fields of the answer form for ``step`` on ``page``."""
        forms = re.findall(
            r'<form method="post" action="/answer" class="answer">(.*?)</form>', page, re.S
        )
        for found in forms:
            fields = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', found))
            if fields.get("step") == str(step):
                return fields
        raise AssertionError(f"no answer form for step {step}")

    def answer(
        self, run: str, step: int, answer: str, **changes: str
    ) -> tuple[int, dict[str, str], str]:
        fields = {**self.form(self.page(f"/runs/{run}"), step), "answer": answer, **changes}
        return self.request(
            "POST", "/answer", body=urlencode(fields), headers={"Origin": f"http://{self.host}"}
        )

    @property
    def agent(self) -> Host:
        """The agent's host: its commands are the steps of one run."""
        if self._agent is None:
            self._agent = Host.from_environment(str(self.config))
        return self._agent

    def run(self, argv: list[str], profile: str = "careful", **request: object) -> None:
        """Run ``argv`` as the agent's next step (it must not be held)."""
        self.agent.run(ExecRequest(argv, profile=profile, **request))

    def hold(self, argv: list[str], profile: str = "careful") -> tuple[str, int]:
        """Ask for ``argv`` as the agent's next step; it must be held: its run and step."""
        with pytest.raises(PolicyHeld) as held:
            self.agent.run(ExecRequest(argv, profile=profile))
        return held.value.details["run_id"], held.value.details["step"]

    def state(self, run: str, step: int) -> str:
        store = open_store(self.agent.config)
        try:
            return store.get(run, step).state
        finally:
            store.close()

    def results(self, run: str, step: int) -> list[dict[str, object]]:
        from stockade.record.chain import rows

        store = open_store(self.agent.config)
        try:
            return [
                r.body["result"] for r in rows(store, run) if r.step == step and r.kind == "result"
            ]
        finally:
            store.close()

    def wait_for(self, check: Callable[[], object], timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            assert time.monotonic() < deadline, "timed out waiting"
            assert self.proc.poll() is None, "stockade ui ended"
            time.sleep(0.05)

    def stop(self) -> None:
        if self._agent is not None:
            self._agent.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.errors.close()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def ui(tmp_path: Path) -> Iterator[Ui]:
    server = Ui(tmp_path)
    try:
        yield server
    finally:
        server.stop()
    assert server.proc.returncode == 0, (tmp_path / "ui.err").read_text()


# --- the door: token, cookie, host, CSRF, origin, loopback ----------------------------------


def test_every_path_refuses_a_request_without_the_token(ui):
    for path in ("/", "/pending", "/live/runs", "/static/style.css", "/static/live.js", "/runs/r1"):
        status, headers, body = ui.get(path, cookie=False)
        assert status == 403, path
        assert "access token" in body
        assert headers["content-security-policy"] == CSP


def test_a_wrong_token_is_refused_in_the_url_and_in_the_cookie(ui):
    wrong = ui.token[:-2] + ("AA" if not ui.token.endswith("AA") else "BB")
    assert ui.get(f"/?token={wrong}", cookie=False)[0] == 403
    assert ui.get("/", headers={"Cookie": f"stockade-ui-{ui.port}={wrong}"})[0] == 403
    assert ui.get("/", headers={"Cookie": f"other={ui.token}"})[0] == 403  # the name counts
    assert ui.get(f"/?token={wrong}")[0] == 403  # a bad token is not excused by the cookie


def test_the_token_sets_a_strict_cookie_and_leaves_the_url(ui):
    status, headers, _ = ui.get(f"/pending?token={ui.token}", cookie=False)
    assert status == 303
    assert headers["location"] == "/pending"
    cookie = headers["set-cookie"]
    assert cookie.startswith(f"stockade-ui-{ui.port}={ui.token};")
    assert "HttpOnly" in cookie
    assert "SameSite=Strict" in cookie
    status, headers, body = ui.get("/pending", headers={"Cookie": cookie.split(";")[0]})
    assert status == 200
    assert "Waiting for you" in body


def test_every_response_carries_the_security_headers_and_no_cors(ui):
    for method, path in (("GET", "/"), ("GET", "/static/live.js"), ("OPTIONS", "/answer")):
        status, headers, _ = ui.request(
            method,
            path,
            headers={"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"},
        )
        assert headers["content-security-policy"] == CSP
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["referrer-policy"] == "no-referrer"
        assert headers["cache-control"] == "no-store"
        assert headers["x-frame-options"] == "DENY"
        assert not [name for name in headers if name.startswith("access-control-")]
        if method == "OPTIONS":
            assert status in (403, 405)  # no preflight is ever answered
    assert "server" not in ui.get("/")[1]


def test_another_host_name_is_refused_even_with_the_token(ui):
    # DNS rebinding: a page on evil.example, resolved to 127.0.0.1, reaches this port with
    # its own name in Host (and the browser would not send the cookie; here it even has it).
    for host in (
        f"evil.example:{ui.port}",
        "127.0.0.1",
        f"127.0.0.1:{ui.port + 1}",
        f"[::1]:{ui.port}",
    ):
        status, _, body = ui.get("/", headers={"Host": host})
        assert status == 403, host
        assert "own address" in body
    assert ui.get("/", headers={"Host": f"localhost:{ui.port}"})[0] == 200


def test_a_cross_site_post_is_refused_and_the_step_stays_held(ui):
    run, step = ui.hold(["touch", "made.txt"])
    fields = {**ui.form(ui.page(f"/runs/{run}"), step), "answer": "approve"}
    without = {k: v for k, v in fields.items() if k != "csrf"}
    attempts = [
        ({}, without),  # no CSRF field
        ({}, {**fields, "csrf": "x" * 43}),  # a wrong one
        ({"Origin": "http://evil.example"}, fields),  # the right one, from another origin
        ({"Origin": f"http://127.0.0.1:{ui.port + 1}"}, fields),  # another port is another origin
        ({"Origin": "null"}, fields),  # an opaque origin (a sandboxed frame, a data: page)
        ({"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}, fields),
        ({"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "cors"}, fields),
    ]
    for headers, form in attempts:
        status, _, _ = ui.request("POST", "/answer", body=urlencode(form), headers=headers)
        assert status == 403, (headers, sorted(form))
    # A form that is not urlencoded is not read at all.
    status, _, _ = ui.request(
        "POST", "/answer", body=json.dumps(fields), headers={"Content-Type": "application/json"}
    )
    assert status == 403
    assert ui.state(run, step) == "held"
    assert not (ui.ws / "made.txt").exists()
    # The page's own form, from the page's own origin, is answered.
    status, headers, _ = ui.request(
        "POST",
        "/answer",
        body=urlencode(fields),
        headers={"Origin": f"http://{ui.host}", "Sec-Fetch-Site": "same-origin"},
    )
    assert status == 303
    ui.wait_for(lambda: ui.state(run, step) == "done")


def non_loopback_addresses() -> list[str]:
    """This machine's IPv4 addresses other than 127.0.0.0/8."""
    found = set()
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        listing = subprocess.run(
            ["ip", "-o", "-4", "addr", "show"],
            capture_output=True,
            text=True,
            check=False,
            timeout=10,
        )
        found.update(re.findall(r"inet (\d+\.\d+\.\d+\.\d+)/", listing.stdout))
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the route's source
        found.add(probe.getsockname()[0])
    with contextlib.suppress(OSError):
        found.add(socket.gethostbyname(socket.gethostname()))
    return sorted(address for address in found if not address.startswith("127."))


def listening_addresses(port: int) -> set[str]:
    """The local addresses with a socket listening on ``port`` (IPv4 and IPv6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as handle:
            for line in list(handle)[1:]:
                local, _remote, state = line.split()[1:4]
                address, hex_port = local.split(":")
                if int(hex_port, 16) == port and state == "0A":  # LISTEN
                    found.add(address)
    return found


def test_only_loopback_is_listened_on(ui):
    # The kernel's own table: one listening socket, on 127.0.0.1 (0100007F), none on IPv6.
    assert listening_addresses(ui.port) == {"0100007F"}
    addresses = non_loopback_addresses()
    for address in addresses:
        with socket.socket() as sock:
            sock.settimeout(5)
            with pytest.raises(OSError):  # refused: nothing listens there
                sock.connect((address, ui.port))
    with socket.socket(socket.AF_INET6) as sock, pytest.raises(OSError):
        sock.connect(("::1", ui.port))
    # The same connection to loopback works: the refusals above are not an accident.
    with socket.create_connection(("127.0.0.1", ui.port), timeout=5):
        pass


def test_there_is_no_way_to_ask_for_another_address(tmp_path):
    for option in ("--host", "--bind", "--ip"):
        proc = subprocess.run(
            [*CLI, "ui", option, "0.0.0.0", "--no-open"],  # noqa: S104 - it must be refused
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
        assert proc.returncode != 0
        assert "unrecognized arguments" in proc.stderr or "usage" in proc.stderr.lower()


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


# --- the command line ---------------------------------------------------------------------


def test_the_cli_does_not_import_the_web_stack_unless_ui_is_chosen():
    # stockade_ui.plugin is loaded by every host (it offers the command); the server is not.
    web = ("starlette", "uvicorn", "jinja2", "stockade_ui.app", "stockade_ui.server")
    code = (
        "import sys; from stockade.cli import main; main(['pending']); "
        f"print(sorted(m for m in {web!r} if m in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert proc.stdout.strip() == "[]"


def test_without_stockade_ui_the_command_says_what_to_install():
    proc = subprocess.run(
        [*CLI, "ui", "--no-open"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        env={**os.environ, "STOCKADE_DISABLE_PLUGINS": "ui"},
    )
    assert proc.returncode == 125
    assert "error[plugin]: the run page is not installed" in proc.stderr
    assert "pip install stockade-ui" in proc.stderr


def test_a_taken_port_is_a_clear_error(ui):
    proc = subprocess.run(
        [*CLI, "ui", "--port", str(ui.port), "--no-open"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 125
    assert f"cannot listen on 127.0.0.1:{ui.port}" in proc.stderr


def test_an_approved_step_waits_for_a_busy_workspace_then_runs_from_the_page(ui):
    from stockade.workspace.folders import Locks

    run, step = ui.hold(["touch", "late.txt"])
    other = Locks(ui.agent.config, "r-other")
    with other.hold(str(ui.ws)):
        assert ui.answer(run, step, "approve")[0] == 303
        ui.wait_for(lambda: "r-other" in ui.page(f"/runs/{run}"))
        page = ui.page(f"/runs/{run}")
        assert "The page could not run it:" in page
        assert ui.state(run, step) == "approved"  # not spent by the refusal
        assert "Run it now" in page
    assert ui.answer(run, step, "run")[0] == 303
    ui.wait_for(lambda: ui.state(run, step) == "done")
    assert (ui.ws / "late.txt").exists()
    assert "The page could not run it:" not in ui.page(f"/runs/{run}")


def test_stopping_the_server_aborts_the_steps_it_started(ui):
    run, step = ui.hold(["sh", "-c", "sleep 60"])
    assert ui.answer(run, step, "approve")[0] == 303
    ui.wait_for(lambda: ui.state(run, step) == "running")
    started = time.monotonic()
    ui.proc.send_signal(signal.SIGTERM)
    assert ui.proc.wait(30) == 0
    assert time.monotonic() - started < 20
    (result,) = ui.results(run, step)
    assert result["aborted"] is True
    assert ui.state(run, step) == "done"
