"""The breaker tells its watcher (a Ray pool's driver) once, when its run comes to hold both
kinds: counted in this process, or seen in the record from another process."""

from __future__ import annotations

from pathlib import Path

from stockade.config.schema import Config, StoreConfig
from stockade.host import Host
from stockade.request.spec import Profile


def config(tmp_path: Path) -> Config:
    ws = tmp_path / "ws"
    (ws / "private").mkdir(parents=True)
    (ws / "private" / "notes.txt").write_text("notes\n")
    (ws / "readme.txt").write_text("words\n")
    agent = Profile(name="a", workspace=str(ws), ask=(), private=("private/*",))
    return Config(agents={"a": agent}, store=StoreConfig(path=str(tmp_path / "store.db")))


def test_told_once_when_this_process_counts_both(tmp_path: Path) -> None:
    host = Host(config(tmp_path))
    try:
        told: list[str] = []
        host.breaker.on_both = told.append
        profile, ws = host.config.profile("a"), host.config.profile("a").workspace
        assert ws is not None
        host.breaker.file_tool("read", ws, "readme.txt", profile)  # somebody else's words
        assert told == []  # the control: one kind is not both
        host.breaker.file_tool("read", ws, "private/notes.txt", profile)
        host.breaker.file_tool("read", ws, "private/notes.txt", profile)
        assert len(told) == 1 and told[0].startswith("the breaker: this run holds private data")
        assert host.breaker.both() == told[0]
    finally:
        host.close()


def test_told_when_the_record_shows_another_process_made_it_both(tmp_path: Path) -> None:
    made = config(tmp_path)
    host, other = Host(made), Host(made)
    try:
        told: list[str] = []
        host.breaker.on_both = told.append
        profile, ws = made.profile("a"), made.profile("a").workspace
        assert ws is not None
        host.breaker.file_tool("read", ws, "readme.txt", profile)
        theirs = other.for_run(run_id=host.run_id)  # another host writing the same run
        theirs.breaker.file_tool("read", ws, "private/notes.txt", profile)
        assert told == []  # not seen yet
        host.breaker.holds()  # the driver's next look at the record
        assert len(told) == 1 and "private-path private/notes.txt" in told[0]
    finally:
        other.close()
        host.close()
