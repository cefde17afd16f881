"""A pool's live lock (issue 37's review): a worker that opened ``POOL.live`` just before
another pool unlinked it (that pool found the pool dead meanwhile) must not keep a shared
lock on the unlinked file, or the next pool makes a new one, locks it, and discards the
live pool's forks. The canary is such a fork; the control takes the check away."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from stockade.layers import mounts
from stockade.layers import snapshots as layers

pytest.importorskip("ray")  # optional (see conftest.py)

from stockade_ray import layered


@pytest.mark.parametrize("check", ["checked", "control"])
def test_a_live_pools_forks_survive_a_lock_on_an_unlinked_file(tmp_path, monkeypatch, check):
    monkeypatch.setattr(mounts, "refusal", lambda store: "links: no mount needed here")
    store = str(tmp_path / "state")
    base = os.path.join(store, layered.INDEX)
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "f.txt").write_text("canary\n")
    if check == "control":
        monkeypatch.setattr(layered, "_current", lambda *args: True)  # as it was
    opened = layered._open_live
    raced = []

    def racing(where: str, pool: str) -> int:
        fd = opened(where, pool)
        if pool == "live" and not raced:  # opened, not yet locked: another pool starts
            raced.append(fd)
            os.close(layered.start_pool(store, "other"))
        return fd

    os.makedirs(os.path.join(base, "live"), mode=0o700)  # its index: a dead pool's, so far
    monkeypatch.setattr(layered, "_open_live", racing)
    held = layered.start_pool(store, "live")  # the worker of pool `live`
    monkeypatch.setattr(layered, "_open_live", opened)
    assert raced  # the race was run
    try:
        snap = layers.take(str(tmp_path / "ws"), store=store)  # the worker forks
        index = os.path.join(base, "live")
        os.makedirs(index, mode=0o700, exist_ok=True)
        Path(index, "digest").write_text(snap.id)
        fork = layers.fork_one(snap, store=store).folder
        os.close(layered.start_pool(store, "next"))  # the next pool on the node
        if check == "control":
            assert not os.path.exists(fork)  # the breach: a live pool's fork discarded
            return
        assert Path(fork, "f.txt").read_text() == "canary\n"  # the canary
        layers.discard(snap, store=store)
    finally:
        os.close(held)
