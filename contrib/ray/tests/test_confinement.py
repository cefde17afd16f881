"""Confinement holds on the workers, with each node's own sandbox: a write outside the
workspace is refused, ``~/.ssh`` is unreadable, and there is no network unless the profile
grants a host; each attack has a control beside it that shows the test could see a breach.
Run against bubblewrap and against Landlock (the other blocked on the worker), and with no
sandbox at all, where the step fails closed naming the node."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ground import PYTHON, Box, Upstream

from stockade.config.schema import Config, NetworkConfig, StoreConfig
from stockade.errors import SandboxUnavailable
from stockade.record.chain import rows
from stockade.record.store import Store
from stockade.record.verify import verify
from stockade.request.spec import ExecRequest, Profile
from stockade.testing import AllowAll

pytest.importorskip("ray")  # optional (see conftest.py): stockade_ray is imported after it

from stockade_ray import StockadePool

CURL = "/usr/bin/curl"

WRITE = """
import sys
for target in sys.argv[1:]:
    try:
        with open(target, "w") as f:
            f.write("written")
        print("WROTE", target)
    except OSError as error:
        print("refused", target, error.strerror)
"""

READ = """
import sys
for path in sys.argv[1:]:
    try:
        print("READ", open(path).read())
    except OSError as error:
        print("unreadable", path, error.strerror)
"""

DIRECT = """
import socket, sys
try:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
    s.sendall(b"GET / HTTP/1.0\\r\\n\\r\\n")
    print("REACHED", s.recv(100))
except OSError as error:
    print("refused", error.errno)
"""


def _config(box: Box, port: int) -> Config:
    net = Profile(name="net", hosts=(f"allowed.test:{port}",), ask=(), workspace=str(box.ws))
    return Config(
        agents={"net": net},
        network=NetworkConfig(resolve={"allowed.test": "127.0.0.1"}),
        store=StoreConfig(path=str(box.state / "store.db")),
    )


def _py(box: Box, source: str, *args: str, **kw: object) -> ExecRequest:
    return ExecRequest(
        (PYTHON, "-S", "-c", source, *args), str(box.ws), mode="workspace-write", timeout=60, **kw
    )  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", ["bubblewrap", "landlock"])
def test_confinement_holds_on_a_worker(box: Box, upstream: Upstream, backend: str) -> None:
    other = {"bubblewrap": "landlock", "landlock": "bubblewrap"}[backend]
    environ = {**os.environ, "STOCKADE_DISABLE_PLUGINS": other}
    planted = Path.home() / ".ssh" / f"stockade-ray-canary-{box.root.name}"
    planted.parent.mkdir(mode=0o700, exist_ok=True)
    planted.write_text(box.canary)
    pool = StockadePool(1, _config(box, upstream.port), environ=environ, plugins=[AllowAll()])
    try:
        # A write outside the workspace is refused; the control, inside it, lands.
        inside = box.ws / "inside.txt"
        wrote = pool.run(_py(box, WRITE, str(box.secret), str(inside))).result(120).result
        assert wrote.sandbox.provider == backend, wrote.sandbox
        assert f"refused {box.secret}" in wrote.stdout.text, wrote.stdout.text
        assert box.secret.read_text() == box.canary
        assert f"WROTE {inside}" in wrote.stdout.text and inside.read_text() == "written"

        # ~/.ssh is unreadable; the control, a canary outside the workspace, is read.
        read = pool.run(_py(box, READ, str(planted), str(box.secret))).result(120).result
        assert read.sandbox.provider == backend
        assert read.stdout.text.count(box.canary) == 1, read.stdout.text  # the control's
        assert f"READ {box.canary}" in read.stdout.text
        assert f"unreadable {planted}" in read.stdout.text or "READ" not in read.stdout.text

        # No network for a command not granted any; a live listener counts what arrives.
        direct = pool.run(_py(box, DIRECT, str(upstream.port))).result(120).result
        assert "REACHED" not in direct.stdout.text, direct.stdout.text
        assert upstream.hits == 0
        # The control: the profile that names the host reaches it, through the proxy only.
        fetch = [CURL, "-sS", "--max-time", "20", f"http://allowed.test:{upstream.port}/"]
        granted = pool.run(ExecRequest(fetch, str(box.ws), profile="net")).result(120).result
        assert granted.stdout.text == Upstream.BODY.decode(), granted.stderr.text
        assert upstream.hits == 1
        around = [*fetch[:4], "--noproxy", "*", f"http://127.0.0.1:{upstream.port}/"]
        missed = pool.run(ExecRequest(around, str(box.ws), profile="net")).result(120).result
        assert missed.exit_code != 0 and upstream.hits == 1
    finally:
        pool.shutdown()
        planted.unlink()
    store = Store(str(box.state / "store.db"))
    assert verify(store).ok
    found = list(rows(store))
    allowed = [r.body for r in found if r.kind == "connection"]
    assert [(c["host"], c["allowed"]) for c in allowed] == [("allowed.test", True)]
    assert {r.body["node"] for r in found if r.kind == "placement"} == {pool.workers()[0]["node"]}
    store.close()


def test_no_sandbox_on_the_node_fails_closed_naming_it(box: Box) -> None:
    environ = {**os.environ, "STOCKADE_DISABLE_PLUGINS": "bubblewrap,landlock"}
    config = Config(store=StoreConfig(path=str(box.state / "store.db")))
    pool = StockadePool(1, config, environ=environ, plugins=[AllowAll()])
    try:
        node = pool.workers()[0]["node"]
        future = pool.run(_py(box, WRITE, str(box.ws / "never.txt")))
        with pytest.raises(SandboxUnavailable, match=node) as refused:
            future.result(120)
        assert refused.value.details["node"] == node
        assert not (box.ws / "never.txt").exists()
        # The control: an explicitly unconfined step runs there.
        full = ExecRequest(("true",), str(box.ws), mode="danger-full-access")
        assert pool.run(full).result(120).result.exit_code == 0
    finally:
        pool.shutdown()
    store = Store(str(box.state / "store.db"))
    errors = [r.body for r in rows(store) if r.kind == "error"]
    assert [e["code"] for e in errors] == ["sandbox_unavailable"]
    assert node in errors[0]["message"]
    store.close()
