"""``protected.existing``: where a path leads and whether it is a folder, from one descriptor,
as the masks need it: the same answer as ``lexists``, ``real``, ``exists`` and ``isdir`` one
after another (what it replaced), for every kind of path a home may hold."""

from __future__ import annotations

import os
from pathlib import Path

from stockade.confine import protected


def _by_steps(path: str) -> tuple[str, bool] | None:
    if not os.path.lexists(path):
        return None
    real = protected.real(path)
    if not os.path.exists(real):
        return None
    return real, os.path.isdir(real)


def test_existing_answers_as_the_steps_it_replaced(tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("x")
    (tmp_path / "to-folder").symlink_to(tmp_path / "folder")
    (tmp_path / "to-file").symlink_to("file")  # relative
    (tmp_path / "chain").symlink_to(tmp_path / "to-folder")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "locked").mkdir(mode=0o000)
    names = [
        "folder", "file", "to-folder", "to-file", "chain", "dangling", "loop", "missing",
        "folder/..", "to-folder/../file", "file/below", "locked",
    ]  # fmt: skip
    found = {name: protected.existing(str(tmp_path / name)) for name in names}
    assert found == {name: _by_steps(str(tmp_path / name)) for name in names}
    real = str(tmp_path.resolve())
    assert found["chain"] == (f"{real}/folder", True)
    assert found["to-file"] == (f"{real}/file", False)
    assert found["dangling"] is None and found["loop"] is None and found["missing"] is None
