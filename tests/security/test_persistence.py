"""The kit's persistence attacks (:mod:`stockade.conformance.suite.test_persistence`), the
configuration of writable dotfiles, the file tools' names and Landlock's snapshot limit."""

from __future__ import annotations

import attrs
import pytest

from stockade.config.schema import Config, PluginsConfig
from stockade.conformance.suite.test_persistence import *  # noqa: F403
from stockade.errors import SandboxUnavailable
from stockade.request.spec import Profile


def test_a_profile_naming_an_unknown_dotfile_is_refused():
    from stockade.config.load import structure_config
    from stockade.errors import ConfigError

    with pytest.raises(ValueError, match="writable_dotfiles"):
        Profile(writable_dotfiles=(".git",))
    table = {"agents": {"default": {"writable_dotfiles": [".bashrc", ".git"]}}}
    with pytest.raises(ConfigError, match=r"got '\.git' @ \$\.agents\['default'\]"):
        structure_config(table, source="test.toml")
    opened = structure_config({"agents": {"default": {"writable_dotfiles": ["*"]}}}, source="t")
    assert opened.profile("default").writable_dotfiles == ("*",)  # the control


@pytest.mark.sandboxes("landlock")
def test_a_snapshot_too_large_is_refused(make_host, box):
    # Without the supervisor (off, or a kernel without it) the host snapshots instead.
    settings = {"landlock": {"snapshot_limit_mb": 1, "supervise": False}}
    config = Config(sandbox="landlock", plugins=PluginsConfig(settings=settings))
    host = make_host(allow_all=True, config=config)
    (box.ws / ".vscode").mkdir()
    (box.ws / ".vscode" / "big").write_bytes(b"x" * (2 << 20))
    with pytest.raises(SandboxUnavailable, match="snapshot_limit_mb") as caught:
        host.run(box.py("open('ran', 'w')"))
    assert caught.value.details["path"] == str(box.ws / ".vscode")
    assert not (box.ws / "ran").exists()
    ok = make_host(allow_all=True, config=attrs.evolve(config, plugins=PluginsConfig()))
    assert ok.run(box.py("open('ran', 'w')")).exit_code == 0  # the control: the default


def test_the_file_tools_keep_the_same_names(tmp_path):
    """The file tools (MCP ``file_write``/``file_read``) run in the host, unconfined: they
    refuse the dotfiles, run-later folders and credential stores themselves."""
    from stockade.errors import UsageError
    from stockade.workspace.files import Workspace

    root = tmp_path / "ws"
    (root / ".aws").mkdir(parents=True)
    (root / ".aws" / "config").write_text("CANARY")
    (root / "link").symlink_to(".aws/config")  # a relative link stays inside
    with Workspace(str(root)) as ws:
        for path in (".bashrc", "sub/.gitconfig", ".config/autostart/x.desktop", ".ssh/x"):
            with pytest.raises(UsageError, match="protected"):
                ws.file_write(path, "evil", make_parents=True)
            assert not (root / path).exists()
        for path in (".aws/config", "link"):
            with pytest.raises(UsageError, match="credential store"):
                ws.file_read(path)
        ws.file_write("bashrc", "ok")  # the controls: neighbours stay open
        assert ws.file_read("bashrc").text == "ok"
