"""The run page's server helper: a real ``stockade ui`` started by the real CLI in a child
process, spoken to over real sockets, with a real host in the test process as the agent.

``stockade --config CFG ui --port 0 --no-open`` runs with the test's private
``XDG_STATE_HOME``; :class:`Ui` reads the URL it prints and makes HTTP requests with
``http.client`` (so every header, the ``Host`` one included, is what the test says). The
commands it shows are run by the agent's host in an agent profile whose ``writes`` wait for a
person; nothing of the core is mocked. The ``ui`` fixture (tests/conftest.py) starts one.
"""

from __future__ import annotations

import http.client
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlencode

import pytest

from stockade.errors import PolicyHeld
from stockade.host import Host
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
