"""Forks unpack a snapshot without ever writing outside the fork: archives naming ``..``,
an absolute path, a hard link or a device are refused, and a link is never written through
(a file below a link's name lands in a real folder, and the link is then refused), where
the same archive without the trick unpacks whole (the control). Exports keep binary files
whole and name what changed."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from stockade.errors import UsageError

pytest.importorskip("ray")  # optional (see conftest.py)

from stockade_ray.forks import TooLarge, export, manifest, pack, unpack


def _archive(*members: tuple[str, bytes | str | None, bytes]) -> bytes:
    """Members as (name, kind, content): kind ``b"f"`` a file, ``b"d"`` a folder, ``b"l"``
    a link to ``content``, ``b"h"`` a hard link to it, ``b"c"`` a character device."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, kind, content in members:
            info = tarfile.TarInfo(name)
            if kind == b"f":
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
                continue
            info.type = {
                b"d": tarfile.DIRTYPE,
                b"l": tarfile.SYMTYPE,
                b"h": tarfile.LNKTYPE,
                b"c": tarfile.CHRTYPE,
            }[kind]  # type: ignore[index]
            info.linkname = content.decode()
            tar.addfile(info)
    return out.getvalue()


@pytest.mark.parametrize(
    "member",
    [
        ("../escape.txt", b"f", b"x"),
        ("/tmp/escape.txt", b"f", b"x"),
        ("a/../../escape.txt", b"f", b"x"),
        ("hard", b"h", b"/etc/passwd"),
        ("null", b"c", b""),
    ],
)
def test_a_trick_member_is_refused(tmp_path: Path, member: tuple[str, bytes, bytes]) -> None:
    good = _archive(("ok.txt", b"f", b"fine"))
    assert unpack(good, str(tmp_path / "control")) == 1  # the control unpacks
    with pytest.raises(UsageError):
        unpack(_archive(("ok.txt", b"f", b"fine"), member), str(tmp_path / "fork"))
    assert not (tmp_path / "escape.txt").exists()


def test_a_link_is_never_written_through(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    trick = _archive(("link", b"l", str(outside).encode()), ("link/evil.txt", b"f", b"x"))
    with pytest.raises(FileExistsError):
        unpack(trick, str(tmp_path / "fork"))
    assert list(outside.iterdir()) == []
    assert (tmp_path / "fork" / "link" / "evil.txt").read_bytes() == b"x"  # a real folder
    kept = _archive(("f.txt", b"f", b"x"), ("up", b"l", b".."))
    unpack(kept, str(tmp_path / "fork2"))  # links themselves are kept, as links
    assert (tmp_path / "fork2" / "up").is_symlink()


def test_a_snapshot_round_trips_and_exports_its_changes(tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "sub").mkdir(parents=True)
    blob = bytes(range(256)) * 1000
    (source / "sub" / "blob.bin").write_bytes(blob)
    (source / "gone.txt").write_text("bye")
    fork = tmp_path / "fork"
    unpack(pack(str(source), cap=10**7), str(fork))
    base = manifest(str(fork))
    assert (fork / "sub" / "blob.bin").read_bytes() == blob
    (fork / "gone.txt").unlink()
    (fork / "new.txt").write_text("hi")
    changed = export(str(fork), cap=10**7, base=base)
    assert changed.files == ("new.txt",) and changed.deleted == ("gone.txt",)
    with pytest.raises(TooLarge):
        export(str(fork), cap=1000)
