"""Every command's result lists what it changed in its workspace, exactly, in both
sandboxes; nothing outside the workspace is ever listed."""

from __future__ import annotations

import pytest

from stockade.config.schema import Config
from stockade.request.spec import Profile


@pytest.fixture
def host(box, make_host):
    """An agent working in the box's workspace (a person's own profile is not watched)."""
    agent = Profile(name="bot", workspace=str(box.ws))
    return make_host(allow_all=True, config=Config(sandbox=box.sandbox, agents={"bot": agent}))


WORK = (
    "import os\n"
    "open('made.txt', 'w').write('new')\n"
    "open('kept.txt', 'a').write('more')\n"
    "os.remove('gone.txt')\n"
    "os.makedirs('pkg/sub')\n"
    "open('pkg/sub/mod.py', 'w').write('x = 1')\n"
    "os.replace('draft', 'final.txt')\n"
    "os.symlink(os.environ['OUTSIDE'], 'out')\n"
)


def test_the_result_lists_exactly_what_the_command_changed(box, host):
    for name in ("kept.txt", "gone.txt", "untouched.txt", "final.txt", "draft"):
        (box.ws / name).write_text(name)
    (box.outside / "far.txt").write_text("far")
    result = host.run(box.py(WORK, env={"OUTSIDE": str(box.outside)}, profile="bot"))
    assert result.ok, result.stderr.text
    changes = result.changes
    assert changes is not None
    # Under layers the list is the layer itself; else the kernel's inotify reports.
    assert changes.method == ("layer" if result.sandbox.writes == "layered" else "inotify")
    assert changes.created == ("made.txt", "out", "pkg/", "pkg/sub/", "pkg/sub/mod.py")
    assert changes.modified == ("final.txt", "kept.txt")
    assert changes.deleted == ("draft", "gone.txt")
    assert changes.total == 9 and not changes.truncated


def test_a_persons_own_profile_is_not_watched(box, make_host):
    """No watch on a person's own folder; under layers the list costs nothing, so it is
    there (the layer itself), exact."""
    host = make_host(allow_all=True, config=Config(sandbox=box.sandbox))
    result = host.run(box.request(["touch", "x"]))
    assert result.ok and (box.ws / "x").exists()
    if result.sandbox.writes == "layered":
        assert result.changes is not None and result.changes.created == ("x",)
    else:
        assert result.changes is None


def test_a_read_only_command_has_nothing_watched(box, host):
    (box.ws / "a.txt").write_text("a")
    result = host.run(box.request(["cat", "a.txt"], mode="read-only", profile="bot"))
    assert result.ok and result.changes is None


def test_writes_outside_the_workspace_are_never_listed(box, host):
    (box.ws / "link").symlink_to(box.outside)
    attack = (
        "import os\n"
        "for path in ('link/planted', os.environ['OUTSIDE'] + '/planted2'):\n"
        "    try:\n"
        "        open(path, 'w').write('x')\n"
        "    except OSError as e:\n"
        "        print('refused', e.errno)\n"
        "open('inside.txt', 'w').write('ok')\n"
    )
    result = host.run(box.py(attack, env={"OUTSIDE": str(box.outside)}, profile="bot"))
    assert result.stdout.text.count("refused") == 2, result.stdout.text
    assert result.changes is not None
    assert result.changes.created == ("inside.txt",)
    assert [p.name for p in box.outside.iterdir()] == ["secret.txt"]
