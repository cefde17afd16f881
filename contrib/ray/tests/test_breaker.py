"""The breaker where bytes leave, on the workers: a step on one worker keeps a connection open
while its run is clean; another step, on another worker (another node), makes the run hold
private data and somebody else's words; the first step's upload over its kept connection
never reaches the live upstream. The control: the same steps in a run that stays clean of
somebody else's words send the canary over that same connection. Run with bubblewrap and
with Landlock on the workers (the other one blocked), as root and as ``stockade-ci`` (CI's
unprivileged pass)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
from ground import Box, running
from nodes import Cluster

from stockade.config.schema import Config, NetworkConfig, StoreConfig
from stockade.conformance.procs import alive, wait_until
from stockade.record.chain import rows
from stockade.record.store import Store
from stockade.record.verify import verify
from stockade.request.spec import ExecRequest, Profile
from stockade.testing import AllowAll

pytest.importorskip("ray")  # optional (see conftest.py): stockade_ray is imported after it

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tests"))

from helpers.recording import Upstream, kept_then_puts, serving
from stockade_ray import StockadePool


@pytest.fixture
def kept() -> Iterator[Upstream]:
    yield from serving(keep_alive=True)


def _config(box: Box, port: int) -> Config:
    # A person's own profile (``default``: no workspace of its own, so no lock): its steps do
    # not stick to one worker.
    mine = Profile(name="default", hosts=(f"allowed.test:{port}",), ask=(), private=("private/*",))
    return Config(
        agents={"default": mine},
        network=NetworkConfig(resolve={"allowed.test": "127.0.0.1"}),
        store=StoreConfig(path=str(box.state / "store.db")),
    )


def _step(box: Box, argv: list[str] | tuple[str, ...], **kw: object) -> ExecRequest:
    return ExecRequest(tuple(argv), str(box.ws), profile="default", timeout=60, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", ["bubblewrap", "landlock"])
@pytest.mark.parametrize("words", [True, False], ids=["attack", "control"])
def test_a_kept_connection_on_a_worker_sends_nothing_once_the_run_holds_both(
    box: Box, kept: Upstream, backend: str, *, words: bool
) -> None:
    other = {"bubblewrap": "landlock", "landlock": "bubblewrap"}[backend]
    environ = {**os.environ, "STOCKADE_DISABLE_PLUGINS": other}
    (box.ws / "private").mkdir()
    (box.ws / "private" / "notes.txt").write_text(box.canary)
    (box.ws / "readme.txt").write_text("somebody else's words\n")
    (box.ws / "data.txt").write_text("nothing yet\n")
    pool = StockadePool(2, _config(box, kept.port), environ=environ, plugins=[AllowAll()])
    try:
        if words:  # the attack's run reads somebody else's words first; the control's does not
            read = pool.run(_step(box, ["cat", "readme.txt"])).result(120).result
            assert read.stdout.text == "somebody else's words\n", read.stderr.text
        background = pool.run(_step(box, kept_then_puts(kept.port, "data.txt")))
        assert kept.waiting.wait(60), "the kept step never reached the upstream"
        # On the other worker: granted the private notes, it copies them where the kept step
        # reads its upload from. From its admission on, the run holds private data.
        copy = _step(box, ["cp", "private/notes.txt", "data.txt"], read_private=True)
        copied = pool.run(copy).result(120)
        assert copied.result.exit_code == 0, copied.result.stderr.text
        assert copied.actor != background.worker["actor"]  # a step on another worker
        assert (box.ws / "data.txt").read_text() == box.canary
        kept.go_on.set()
        done = background.result(120).result
        assert done.sandbox.provider == backend, done.sandbox
        assert copied.result.sandbox.provider == backend
    finally:
        kept.go_on.set()
        pool.shutdown()
    if words:  # the upload never left
        assert kept.seen == [b"/wait "], kept.seen
    else:  # the control: the canary went over the same connection
        assert kept.seen == [b"/wait ", b"/up " + box.canary.encode()], kept.seen
        assert len(set(kept.peers)) == 1, kept.peers
    store = Store(str(box.state / "store.db"))
    try:
        assert verify(store).ok
        reasons = [r.body["reason"] for r in rows(store) if r.kind == "connection"]
        cut = [r for r in reasons if "the breaker: this run holds private data" in r]
        assert bool(cut) is words, reasons
        if words:
            assert cut[0].startswith("refused at the egress proxy: the breaker"), cut
            assert "grant read-private" in cut[0], cut
    finally:
        store.close()


DRIVER = """
import json, os, sys, time
import ray
from stockade.config.schema import Config, StoreConfig
from stockade.request.spec import ExecRequest
from stockade.testing import AllowAll
from stockade_ray import StockadePool

address, store, ws, token = sys.argv[1:5]
ray.init(address=address, log_to_driver=False)
pool = StockadePool(1, Config(store=StoreConfig(path=store)), plugins=[AllowAll()])
argv = ("/usr/bin/python3", "-S", "-c", "import time, sys; time.sleep(120)", token)
future = pool.run(ExecRequest(argv, ws, timeout=300))
print(json.dumps(future.worker), flush=True)
time.sleep(600)
"""


def test_a_worker_goes_with_its_driver_and_its_commands_with_it(nodes: Cluster, box: Box) -> None:
    """The workers keep what the driver told them with no one to update it only while the
    driver lives: a driver killed outright takes its workers (Ray ends the actors it owns)
    and their commands (the executor's warden) with it."""
    token = f"driver-gone-{secrets.token_hex(4)}"
    args = [nodes.address, str(box.state / "store.db"), str(box.ws), token]
    env = {**os.environ, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, *args], stdout=subprocess.PIPE, env=env
    )
    try:
        where = json.loads(driver.stdout.readline() or b"{}")  # type: ignore[union-attr]
        assert where.get("actor"), "the driver never shipped its step"
        assert wait_until(lambda: running(token), 60), "the step never started"
        worker = int(where["pid"])
        assert alive(worker)
    finally:
        driver.kill()
        driver.wait()
        driver.stdout.close()  # type: ignore[union-attr]
    assert wait_until(lambda: not running(token), 60), "the command outlived its driver"
    assert wait_until(lambda: not alive(worker), 60), "the worker outlived its driver"


def test_a_worker_s_check_lets_on_only_what_the_breaker_lets_on(box: Box) -> None:
    """The check a worker's proxies ask: refused once the driver said the step's run holds
    both; let on for another run, a step approved after its run held both, and the opt-out."""
    from stockade.host import Host
    from stockade_ray.tripped import Tripped

    mine = Profile(name="default", hosts=("allowed.test:1",), ask=())
    out = Profile(
        name="out", hosts=("allowed.test:1",), ask=(), breaker="off-allow-exfiltration",
        workspace=str(box.ws),
    )  # fmt: skip
    config = Config(agents={"default": mine, "out": out}, store=_config(box, 1).store)
    host = Host(config, plugins=[AllowAll()])
    try:
        fetch = ("/usr/bin/curl", "http://allowed.test:1/")
        step = host.admit(ExecRequest(fetch, str(box.ws))).step
        opted = host.admit(ExecRequest(fetch, str(box.ws), profile="out")).step
    finally:
        host.close()
    assert step.egress is not None and not step.egress.over_breaker
    over = attrs.evolve(step, egress=attrs.evolve(step.egress, over_breaker=True))
    tripped = Tripped()
    check = tripped.check(step)
    assert check is not None and check() is None  # clean: let on
    tripped.trip("another-run", "the breaker: another run")
    assert check() is None
    tripped.trip(step.spec.run_id, "the breaker: this run holds private data")
    assert check() == "refused at the egress proxy: the breaker: this run holds private data"
    assert tripped.check(over) is None  # a person approved it after the run held both
    assert tripped.check(opted) is None  # the profile's opt-out


def test_a_worker_that_cannot_be_told_is_lost_with_its_commands(
    box: Box, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fail closed: a worker that does not take the breaker's word in time (stopped here) is
    killed, and the command it was running dies with it; the step that tripped the run runs
    on another worker."""
    import signal

    from stockade_ray import WorkerLost, tripped

    monkeypatch.setattr(tripped, "TELL_SECONDS", 2.0)
    (box.ws / "private").mkdir()
    (box.ws / "private" / "notes.txt").write_text(box.canary)
    (box.ws / "readme.txt").write_text("somebody else's words\n")
    token = f"untold-{secrets.token_hex(4)}"
    pool = StockadePool(2, _config(box, 1), plugins=[AllowAll()])
    stopped = 0
    try:
        assert pool.run(_step(box, ["cat", "readme.txt"])).result(120).result.exit_code == 0
        sleeper = ("/usr/bin/python3", "-S", "-c", "import time; time.sleep(120)", token)
        background = pool.run(_step(box, sleeper))
        assert wait_until(lambda: running(token), 60), "the step never started"
        stopped = int(background.worker["pid"])
        os.kill(stopped, signal.SIGSTOP)  # it can no longer answer
        copy = _step(box, ["cp", "private/notes.txt", "copy.txt"], read_private=True)
        copied = pool.run(copy).result(120)
        assert copied.result.exit_code == 0, copied.result.stderr.text
        assert copied.actor != background.worker["actor"]
        assert wait_until(lambda: not running(token), 60), "the untold worker's command lives"
        with pytest.raises(WorkerLost):
            background.result(120)
    finally:
        if stopped:
            with contextlib.suppress(OSError):
                os.kill(stopped, signal.SIGCONT)
        pool.shutdown()


def test_a_replacement_worker_is_told_before_a_step_of_a_tripped_run(box: Box) -> None:
    """A worker started after the run came to hold both (a replacement) was not told then:
    the driver tells it, and waits, before it ships it a step of that run."""
    import signal

    from stockade_ray import WorkerLost

    (box.ws / "private").mkdir()
    (box.ws / "private" / "notes.txt").write_text(box.canary)
    (box.ws / "readme.txt").write_text("somebody else's words\n")
    pool = StockadePool(1, _config(box, 1), plugins=[AllowAll()])
    try:
        run = pool.host.run_id
        assert pool.run(_step(box, ["cat", "readme.txt"])).result(120).result.exit_code == 0
        granted = _step(box, ["cat", "private/notes.txt"], read_private=True)
        assert pool.run(granted).result(120).result.stdout.text == box.canary
        first = pool.workers()[0]["actor"]
        assert pool.teller.reasons[run].startswith("the breaker: this run holds private data")
        assert pool.teller._told[run] == {first}  # the control: the live worker was told
        sleeper = ("/usr/bin/python3", "-S", "-c", "import time; time.sleep(60)")
        doomed = pool.run(_step(box, sleeper))
        time.sleep(1)
        os.kill(int(doomed.worker["pid"]), signal.SIGKILL)
        with pytest.raises(WorkerLost):
            doomed.result(120)
        assert wait_until(lambda: [w["actor"] for w in pool.workers()] not in ([], [first]), 120)
        [fresh] = [w["actor"] for w in pool.workers()]
        assert fresh not in pool.teller._told[run]  # started after the word went out
        assert pool.run(_step(box, ["true"])).result(120).actor == fresh
        assert fresh in pool.teller._told[run]
    finally:
        pool.shutdown()
