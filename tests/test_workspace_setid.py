"""No setuid or setgid bit lands (issue 37's review): a command run as root that makes a
setuid-root program in its workspace (``cp /bin/true s; chmod 4755 s``), or gives one to a
file there, leaves it without the bit, whether it lands by a rename (a folder), by a copy
(a fork mounted as an overlay); a snapshot and its export drop the bits too. The filter is
given no setuid rule, so the landing is judged alone. (A direct writer, Landlock, never
lands: its supervisor and filter refuse the bits, tests/security/test_setid.py.)
The canaries are the files' modes; the control lets the bit land."""

from __future__ import annotations

import io
import os
import stat
import tarfile
from pathlib import Path

import pytest

from stockade.config.schema import Config, store_folder
from stockade.confine import seccomp
from stockade.layers import across, snapshots
from stockade.request.spec import ExecRequest

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="a setuid-root program is root's")
SETID = "cp /bin/true s && chmod 4755 s && cp /bin/true g && chmod 2755 g && chmod 6755 old"


@pytest.fixture
def store() -> str:
    return store_folder(Config())


def _bits(folder: str) -> dict[str, int]:
    return {n: os.stat(os.path.join(folder, n)).st_mode & 0o7777 for n in ("s", "g", "old")}


@ROOT_ONLY
@pytest.mark.parametrize("where", ["folder", "overlay fork"])
@pytest.mark.parametrize("landing", ["plain", "control"])
def test_no_setid_bit_lands(  # noqa: PLR0917 - parameters
    tmp_path, store, make_host, monkeypatch, where, landing
):
    source = tmp_path / "ws"
    source.mkdir()
    (source / "old").write_bytes(Path("/bin/true").read_bytes())
    os.chmod(source / "old", 0o755)  # noqa: S103 - a program's mode
    folder, snap = str(source), None
    if where == "overlay fork":
        snap = snapshots.take(str(source), store=store)
        folder = snapshots.fork_one(snap, store=store).folder
    # The landing alone is judged here, whatever the filter says of the bits (it refuses
    # them where the writes are direct: tests/security/test_setid.py).
    real = seccomp.required
    monkeypatch.setattr(seccomp, "required", lambda **kw: real(**{**kw, "setid": True}))
    if landing == "control":
        monkeypatch.setattr(across, "SAFE", 0o7777)
        monkeypatch.setattr(across, "drop_privileges", lambda *args: None)
    host = make_host(allow_all=True, config=Config(sandbox="bubblewrap"))
    try:
        result = host.run(ExecRequest(["sh", "-c", SETID], folder, workspace=folder))
        assert result.exit_code == 0, result.stderr.text
        assert result.sandbox.writes == "layered"
        bits = _bits(folder)
        if landing == "plain":
            assert bits == {"s": 0o755, "g": 0o755, "old": 0o755}  # the canaries
        else:
            assert bits == {"s": 0o4755, "g": 0o2755, "old": 0o6755}  # the breach
    finally:
        if snap is not None:
            snapshots.discard(snap, store=store)


def test_a_snapshot_and_its_export_drop_privileges_bits(tmp_path, store):
    (tmp_path / "s").write_bytes(b"#!/bin/sh\n")
    os.chmod(tmp_path / "s", 0o6755)  # noqa: S103 - the attack
    assert os.stat(tmp_path / "s").st_mode & 0o6000  # the control: the source has them
    snap = snapshots.take(str(tmp_path), store=store)
    try:
        assert stat.S_IMODE(os.stat(Path(snap.folder, "s")).st_mode) == 0o755
        out = io.BytesIO()
        os.chmod(Path(snap.folder, "s"), 0o6755)  # noqa: S103 - as if set in the store by other means
        snapshots.export(snap, out)
        out.seek(0)
        with tarfile.open(fileobj=out) as tar:
            assert tar.getmember("s").mode == 0o755
    finally:
        snapshots.discard(snap, store=store)
