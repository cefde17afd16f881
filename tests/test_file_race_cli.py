"""``stockade file read`` against a symlink swapped between the private-data check and the
read: the read is checked again as the file its descriptor opened. A racing process flips
the name from another process; the control, without that second check, reads the canary."""

from __future__ import annotations

from pathlib import Path

from stockade.cli.commands import main
from stockade.conformance.suite.racing import flipping
from stockade.workspace.files import Workspace


def test_file_read_checks_the_file_it_opened_not_the_path(home_tmp: Path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_STATE_HOME", str(home_tmp / "state"))
    monkeypatch.setenv("STOCKADE_NO_SERVER", "1")
    monkeypatch.delenv("STOCKADE_RUN", raising=False)
    ws = home_tmp / "ws"
    (ws / "private").mkdir(parents=True)
    (ws / "private" / "key").write_text("canary-private\n")
    (ws / "open.txt").write_text("open\n")
    (ws / "notes").symlink_to("open.txt")
    config = home_tmp / "stockade.toml"
    config.write_text(f'[agents.keeper]\nworkspace = "{ws}"\nprivate = ["private/*"]\n')
    argv = ["--config", str(config), "file", "read", "--profile", "keeper", "--json", "notes"]
    plain = Workspace.file_read

    def unchecked(self, path, *, offset=0, limit=256 * 1024, check=None):
        return plain(self, path, offset=offset, limit=limit)

    checked, control = "", ""
    with flipping(ws / "notes", ["private/key", "open.txt"]):
        # Pairs until the control has read the canary (the race was won), 40 at least.
        for count in range(400):
            main(argv)
            checked += capsys.readouterr().out
            with monkeypatch.context() as patch:
                patch.setattr(Workspace, "file_read", unchecked)
                main(argv)
            control += capsys.readouterr().out
            if count >= 40 and "canary-private" in control:
                break
    assert "canary-private" in control  # the race was won: the test can see a breach
    assert "canary-private" not in checked and '"open\\n"' in checked  # JSON text
