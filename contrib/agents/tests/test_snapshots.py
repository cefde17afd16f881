"""The SDK's workspace snapshots on Stockade's (``stockade.layers.snapshots``), through the
SDK's own session API: stop takes one, resume puts it back, a second stop replaces it, its
tar hydrates the SDK's own local client, forks share it; binary files round-trip."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from agents.sandbox import Manifest
from agents.sandbox.errors import (
    SnapshotPersistError,
    WorkspaceArchiveReadError,
    WorkspaceReadNotFoundError,
)
from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient
from agents.sandbox.snapshot import LocalSnapshotSpec

from stockade.config.schema import store_folder
from stockade.errors import UsageError
from stockade.layers import snapshots
from stockade_agents import (
    REFUSED,
    StockadeSandboxClient,
    StockadeSandboxClientOptions,
    StockadeSnapshot,
    StockadeSnapshotSpec,
)

SANDBOXES = ("bubblewrap", "landlock")
# Every byte value, NUL, invalid UTF-8 (a lone continuation byte, an overlong form, 0xff).
BINARY = bytes(range(256)) * 3 + b"\x00\x80\xc0\xaf\xff\xfe" + os.urandom(4096)


def workspace(host) -> Path:
    return Path(host.config.agents["tester"].workspace or "")


@pytest.mark.parametrize("sandbox", SANDBOXES)
@pytest.mark.asyncio
async def test_stop_takes_a_stockade_snapshot_and_resume_puts_it_back(make_host, sandbox):
    host = make_host(sandbox)
    client = StockadeSandboxClient(host)
    ws = workspace(host)
    options = StockadeSandboxClientOptions(profile="tester")
    session = await client.create(snapshot=StockadeSnapshotSpec(), options=options)
    async with session:
        made = await session.exec("mkdir -p sub && echo hi > sub/a.txt")
        assert made.exit_code == 0, made.stderr
        await session.write(Path("blob.bin"), io.BytesIO(BINARY))
    taken = session.state.snapshot
    assert isinstance(taken, StockadeSnapshot) and taken.taken is not None
    first = snapshots.get(taken.taken, store=store_folder(host.config))
    assert (Path(first.folder) / "sub" / "a.txt").read_text() == "hi\n"
    assert (Path(first.folder) / "blob.bin").read_bytes() == BINARY
    # The workspace moves on after the snapshot.
    (ws / "sub" / "a.txt").write_text("changed\n")
    (ws / "late.txt").write_text("after the snapshot\n")
    # The state as the SDK's RunState carries it; a tampered one names another store,
    # which the client never trusts (its own host's store is used).
    payload = session.state.model_dump(mode="json")
    decoy = ws.parent / "decoy"
    (decoy / "snapshots" / taken.taken).mkdir(parents=True)
    (decoy / "snapshots" / taken.taken / "planted").write_text("x")
    payload["snapshot"]["store"] = str(decoy)
    resumed = await client.resume(client.deserialize_session_state(payload))
    async with resumed:
        assert sorted(p.name for p in ws.iterdir()) == ["blob.bin", "sub"]
        assert (ws / "sub" / "a.txt").read_text() == "hi\n"
        assert (await resumed.read(Path("blob.bin"))).read() == BINARY
        await resumed.exec("echo two > two.txt")
    again = resumed.state.snapshot
    assert isinstance(again, StockadeSnapshot) and again.taken not in (None, taken.taken)
    assert again.store == store_folder(host.config)
    # One SDK snapshot holds one Stockade snapshot: the first was discarded.
    with pytest.raises(UsageError):
        snapshots.get(taken.taken, store=store_folder(host.config))
    # Exported as the SDK's tar: the SDK's own local client hydrates from it.
    local = await UnixLocalSandboxClient().create(manifest=Manifest(root=str(ws.parent / "l")))
    async with local:
        with await again.restore() as tar:
            await local.hydrate_workspace(tar)
    assert (ws.parent / "l" / "two.txt").read_text() == "two\n"
    assert (ws.parent / "l" / "blob.bin").read_bytes() == BINARY


@pytest.mark.asyncio
async def test_forks_share_a_snapshot_and_need_layers(make_host, home_tmp):
    host = make_host("bubblewrap")
    client = StockadeSandboxClient(host)
    session = await client.create(
        snapshot=StockadeSnapshotSpec(), options=StockadeSandboxClientOptions(profile="tester")
    )
    async with session:
        await session.write(Path("base.txt"), io.BytesIO(b"base\n"))
    taken = session.state.snapshot
    assert isinstance(taken, StockadeSnapshot)
    first, second = client.fork(taken, 2)
    one = await client.create(manifest=first)
    async with one:
        wrote = await one.exec("echo mine >> base.txt && echo new > new.txt")
    assert wrote.exit_code == 0, wrote.stderr
    assert Path(first.root, "base.txt").read_text() == "base\nmine\n"
    # The other fork and the snapshot keep the shared file as it was.
    assert Path(second.root, "base.txt").read_text() == "base\n"
    assert not Path(second.root, "new.txt").exists()
    assert (Path(taken.stockade().folder) / "base.txt").read_text() == "base\n"
    # Where writes would be direct (Landlock), a command in a fork of hard links is refused
    # before it runs; in a fork mounted as an overlay (root's), it runs, and its write stays
    # in that fork.
    landlock = StockadeSandboxClient(make_host("landlock"))
    two = await landlock.create(manifest=second)
    async with two:
        direct = await two.exec("echo x > base.txt")
    if snapshots.overlaid(str(second.root), store=store_folder(host.config)):
        assert direct.exit_code == 0, direct.stderr
        assert Path(second.root, "base.txt").read_text() == "x\n"
        assert Path(first.root, "base.txt").read_text() == "base\nmine\n"
    else:
        assert direct.exit_code == REFUSED and b"is a fork" in direct.stderr
        assert Path(second.root, "base.txt").read_text() == "base\n"
    assert (Path(taken.stockade().folder) / "base.txt").read_text() == "base\n"
    client.discard(taken)
    assert taken.stockade() is None and not os.path.exists(first.root)


@pytest.mark.asyncio
async def test_the_sdks_own_snapshots_still_work(make_host, home_tmp):
    # A LocalSnapshotSpec: the tar path (persist_workspace / hydrate), the clear done by the
    # host (the SDK's `ls` and `rm -rf` would be commands the policy holds).
    host = make_host("landlock")
    client = StockadeSandboxClient(host)
    ws = workspace(host)
    spec = LocalSnapshotSpec(base_path=home_tmp / "tars")
    options = StockadeSandboxClientOptions(profile="tester")
    session = await client.create(snapshot=spec, options=options)
    async with session:
        await session.write(Path("kept.bin"), io.BytesIO(BINARY))
    (ws / "late.txt").write_text("x")
    resumed = await client.resume(session.state)
    async with resumed:
        assert sorted(p.name for p in ws.iterdir()) == ["kept.bin"]
        assert (ws / "kept.bin").read_bytes() == BINARY
    # A Stockade snapshot is taken from a folder: another backend's tar is refused.
    with pytest.raises(SnapshotPersistError):
        await StockadeSnapshot(id="x").persist(io.BytesIO(b""))


@pytest.mark.parametrize("size", [0, 1, 255 * 1024, 256 * 1024 + 1, 1024 * 1024])
@pytest.mark.asyncio
async def test_binary_files_round_trip_exactly(make_host, size):
    client = StockadeSandboxClient(make_host("landlock"))
    data = (BINARY * (size // len(BINARY) + 1))[:size]
    session = await client.create(options=StockadeSandboxClientOptions(profile="tester"))
    async with session:
        await session.write(Path("data/blob"), io.BytesIO(data))
        assert (await session.read(Path("data/blob"))).read() == data


@pytest.mark.asyncio
async def test_a_private_file_is_not_read_through_the_session(make_host):
    # As the MCP file_read: the profile's private paths are refused without a grant.
    host = make_host("landlock")
    ws = Path(host.config.agents["keeper"].workspace or "")
    (ws / "private").mkdir()
    (ws / "private" / "key").write_bytes(b"canary-private\n")
    (ws / "open.txt").write_bytes(b"open\n")
    client = StockadeSandboxClient(host)
    session = await client.create(options=StockadeSandboxClientOptions(profile="keeper"))
    async with session:
        with pytest.raises(WorkspaceArchiveReadError, match="private"):
            await session.read(Path("private/key"))
        assert (await session.read(Path("open.txt"))).read() == b"open\n"  # control


@pytest.mark.asyncio
async def test_the_docs_snapshot_example_runs(docs_example, home_tmp):
    from stockade.config.load import parse_config
    from stockade.host import Host

    ws = home_tmp / "ws"
    ws.mkdir()
    with Host(parse_config('sandbox = "landlock"\n')) as host:
        forks = await docs_example.keep_and_fork(host, str(ws), 2)
    assert len(forks) == 2
    assert [Path(f, "notes.txt").read_text() for f in forks] == ["draft\nmore\n"] * 2


@pytest.mark.asyncio
async def test_a_snapshot_id_never_leads_out_of_the_store(make_host, home_tmp):
    host = make_host("landlock")
    store = store_folder(host.config)
    (home_tmp / "planted").mkdir()
    (home_tmp / "planted" / "f").write_text("x")
    for taken in (f"snap-../../{home_tmp}/planted", "snap-/etc", "../snapshots", "snap-"):
        forged = StockadeSnapshot(id="s", store=store, taken=taken)
        assert forged.stockade() is None and not await forged.restorable()
        with pytest.raises(UsageError):
            StockadeSandboxClient(host).fork(forged, 1)


@pytest.mark.asyncio
async def test_a_symlink_swapped_after_the_check_never_reads_private_data(make_host, monkeypatch):
    # Another process flips `notes` between an open file and a private one: the path is
    # checked, then opened. Each part read is checked again as the file it opened.
    from stockade.conformance.suite.racing import flipping
    from stockade.workspace.files import Workspace

    host = make_host("landlock")
    ws = Path(host.config.agents["keeper"].workspace or "")
    (ws / "private").mkdir()
    (ws / "private" / "key").write_bytes(b"canary-private\n")
    (ws / "open.txt").write_bytes(b"open\n")
    (ws / "notes").symlink_to("open.txt")
    plain = Workspace.file_bytes

    def unchecked(self, path, *, offset=0, limit=256 * 1024, check=None):
        return plain(self, path, offset=offset, limit=limit)

    async def read(session) -> bytes | None:
        try:
            return (await session.read(Path("notes"))).read()
        except (WorkspaceArchiveReadError, WorkspaceReadNotFoundError):
            return None

    client = StockadeSandboxClient(host)
    session = await client.create(options=StockadeSandboxClientOptions(profile="keeper"))
    checked: set[bytes | None] = set()
    control: set[bytes | None] = set()
    async with session:
        with flipping(ws / "notes", ["private/key", "open.txt"]):
            # Pairs until the control has read the canary (the race was won), 40 at least.
            for count in range(400):
                checked.add(await read(session))
                with monkeypatch.context() as patch:
                    patch.setattr(Workspace, "file_bytes", unchecked)
                    control.add(await read(session))
                if count >= 40 and b"canary-private\n" in control:
                    break
    assert b"canary-private\n" in control  # the race was won: the test can see a breach
    assert b"canary-private\n" not in checked and b"open\n" in checked
