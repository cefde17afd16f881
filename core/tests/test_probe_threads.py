"""A warm server's first calls come on threads at once: a provider is probed by one of
them, once, and the bubblewrap provider's look for the wheel's ``bwrap`` never runs
``sysconfig`` from two threads (before Python 3.13 its first use publishes a half-filled
dict: a bench saw ``probe failed: 'userbase'``, kept for the server's life)."""

from __future__ import annotations

import sysconfig
import threading
import time
from collections.abc import Callable

import pytest
from stockade_bubblewrap import discover

from stockade.config.schema import Config
from stockade.confine.provider import SandboxProvider
from stockade.confine.select import Providers
from stockade.request.plan import Probe

THREADS = 8


class Overlap:
    """Counts how many threads are inside at once (a thread inside twice counts once)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inside: dict[int, int] = {}
        self.most = self.calls = 0

    def around(self, work: Callable[[], object]) -> object:
        me = threading.get_ident()
        with self.lock:
            self.inside[me] = self.inside.get(me, 0) + 1
            self.calls += 1
            self.most = max(self.most, len(self.inside))
        try:
            time.sleep(0.02)  # wide enough for every other thread to arrive
            return work()
        finally:
            with self.lock:
                self.inside[me] -= 1
                if not self.inside[me]:
                    del self.inside[me]


def _at_once(call: Callable[[], object]) -> list[object]:
    start = threading.Barrier(THREADS)
    got: list[object] = []

    def one() -> None:
        start.wait()
        got.append(call())

    threads = [threading.Thread(target=one) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return got


def test_a_provider_is_probed_once_by_one_thread() -> None:
    seen = Overlap()

    class Slow(SandboxProvider):
        PLUGIN_NAME = "slow-probe"

        @classmethod
        def probe(cls) -> Probe:
            seen.around(lambda: None)
            return Probe(True, "")

    providers = Providers(Config(), {})  # type: ignore[arg-type] - only probe is called
    got = _at_once(lambda: providers.probe(Slow))
    assert seen.calls == 1 and seen.most == 1
    assert len(got) == THREADS and all(p == Probe(True, "") for p in got)


def test_the_wheels_bwrap_is_looked_for_by_one_thread_at_a_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen = Overlap()
    real = sysconfig.get_path
    monkeypatch.setattr(sysconfig, "get_path", lambda *a: seen.around(lambda: real(*a)))
    found = _at_once(discover.wheel_binary.__wrapped__)
    assert seen.most == 1, f"{seen.most} threads were in sysconfig at once"
    assert len(set(found)) == 1  # and every thread found the same
