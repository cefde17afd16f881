"""Writable roots that must never be: homes, system folders, the store (issue 20 item 2).

Each attack asks for write access to a folder the rule refuses and tries to plant or change
a canary there; its control makes the same write in a folder the rule allows, and sees it
land, in the same sandbox. The rule is the core's (``stockade.confine.roots``), so the refusal comes
before any sandbox starts; both backends are run to show that nothing in either lets the
write through another way, and that the allowed folders really are writable.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import shutil
import tempfile
from pathlib import Path

import pytest

from stockade.config.schema import Config, StoreConfig
from stockade.errors import UnsafeRoot

APPEND = 'printf "%s\\n" "$2" >> "$1"'  # sh -c APPEND _ FILE TEXT: the same write everywhere


def append(box, target, cwd, **kw):
    """The request that appends the box's canary to ``target``, run from ``cwd``."""
    request = box.request(["sh", "-c", APPEND, "_", str(target), box.canary], preapproved=True)
    return _with(request, cwd=str(cwd), **kw)


def _with(request, **changes):
    import attrs

    return attrs.evolve(request, **changes)


def refused(host, request, rule):
    """Run ``request``; it must be refused by the rule ``rule``, before anything ran."""
    with pytest.raises(UnsafeRoot) as caught:
        host.run(request)
    assert caught.value.code == "unsafe_root"
    assert caught.value.details["rule"] == rule, caught.value.details
    return caught.value


def lands(host, box, folder):
    """The control: the same append, in ``folder`` as the workspace, lands there."""
    target = Path(folder) / "control.txt"
    result = host.run(append(box, target, folder))
    assert result.exit_code == 0, result.stderr.text
    assert target.read_text() == box.canary + "\n"


@pytest.fixture
def fake_home(box, monkeypatch):
    """``$HOME`` of the host pointing at a small folder holding a ``.profile`` canary."""
    home = box.root / "fake-home"
    (home / "project").mkdir(parents=True)
    (home / ".profile").write_text("# untouched\n")
    monkeypatch.setenv("HOME", str(home))
    return home


def test_a_small_home_cannot_be_the_workspace(host, box, fake_home):
    """`stockade run` at ``$HOME``: no appending to ``~/.profile``, however small the home."""
    error = refused(host, append(box, fake_home / ".profile", fake_home), "home")
    assert "--mode read-only" in (error.hint or "")
    assert (fake_home / ".profile").read_text() == "# untouched\n"
    autostart = fake_home / ".config" / "autostart"
    planted = ["sh", "-c", 'mkdir -p "$1" && echo "$2" > "$1/x.desktop"', "_", str(autostart), "x"]
    refused(host, _with(box.request(planted, preapproved=True), cwd=str(fake_home)), "home")
    assert not autostart.exists()
    lands(host, box, fake_home / "project")


def test_the_commands_own_home_cannot_be_the_workspace(host, box):
    (box.home / ".bashrc").write_text("# untouched\n")
    refused(host, append(box, box.home / ".bashrc", box.home), "home")
    assert (box.home / ".bashrc").read_text() == "# untouched\n"
    (box.home / "project").mkdir()
    lands(host, box, box.home / "project")


def test_the_passwd_home_cannot_be_the_workspace(host, box, monkeypatch):
    """The account's home from the password database counts, whatever ``$HOME`` says."""
    monkeypatch.setenv("HOME", str(box.root / "elsewhere"))
    real_home = pwd.getpwuid(os.getuid()).pw_dir
    target = Path(real_home) / f"stockade-roots-canary-{box.canary}"
    try:
        refused(host, append(box, target, real_home), "home")
        assert not target.exists()
    finally:
        with contextlib.suppress(FileNotFoundError):
            target.unlink()
    lands(host, box, box.ws)  # the box lies in a subfolder of that very home


@pytest.fixture
def etc_canary():
    """A file of the test's own in /etc (root only), removed afterwards."""
    if os.getuid() != 0:
        yield None
        return
    path = Path("/etc") / f"stockade-roots-canary-{secrets.token_hex(6)}"
    path.write_text("# untouched\n")
    try:
        yield path
    finally:
        path.unlink()


def _etc_attack(host, box, etc_canary, cwd, rule="system", **kw):
    target = etc_canary or Path("/etc") / f"stockade-roots-canary-{box.canary}"
    try:
        refused(host, append(box, target, cwd, **kw), rule)
        if etc_canary is not None:
            assert etc_canary.read_text() == "# untouched\n"
        else:
            assert not target.exists()
    finally:
        if etc_canary is None:
            with contextlib.suppress(FileNotFoundError, PermissionError):
                target.unlink()


def test_etc_cannot_be_the_workspace(host, box, etc_canary):
    """As root with the current directory at /etc, /etc does not become writable."""
    _etc_attack(host, box, etc_canary, "/etc")
    lands(host, box, box.ws)


def test_a_symlink_to_etc_is_still_etc(host, box, etc_canary):
    (box.ws / "etc-link").symlink_to("/etc")
    _etc_attack(host, box, etc_canary, box.ws / "etc-link")
    (box.ws / "ok-link").symlink_to(box.outside)
    lands(host, box, box.ws / "ok-link")


def test_dotdot_walking_out_is_still_etc(host, box, etc_canary):
    depth = len(box.ws.parts)
    walk = str(box.ws) + "/.." * depth + "/etc/"
    _etc_attack(host, box, etc_canary, walk)
    lands(host, box, f"{box.ws}/../outside")


def test_proc_magic_links_to_etc_are_still_etc(host, box, etc_canary):
    _etc_attack(host, box, etc_canary, "/proc/self/root/etc")
    _etc_attack(host, box, etc_canary, box.ws, grant_writable=["/proc/thread-self/root/etc"])
    lands(host, box, f"/proc/self/root{box.ws}")


def test_a_provider_refuses_a_root_that_was_swapped_after_the_check(host, box, fake_home):
    """The providers check each root again: a folder made a symlink to /etc or to the
    home after the host's check is still refused when the sandbox is built."""
    import attrs

    admitted = host.prepare(host.admit(append(box, box.ws / "x", box.ws)))
    admitted.release()
    provider = host.doer.providers.provider_for(admitted.spec)
    for swapped, rule in (("/etc", "system"), (str(fake_home), "home")):
        for spec in (
            attrs.evolve(admitted.spec, workspace=swapped),
            attrs.evolve(admitted.spec, grant_writable=(swapped,)),
        ):
            with pytest.raises(UnsafeRoot) as caught:
                provider.confine(spec)
            assert caught.value.details["rule"] == rule
    provider.release(provider.confine(admitted.spec))  # the control: the real spec confines


def test_a_grant_of_usr_is_refused(host, box):
    target = Path("/usr/local") / f"stockade-roots-canary-{box.canary}"
    try:
        refused(host, append(box, target, box.ws, grant_writable=["/usr"]), "system")
        refused(host, append(box, target, box.ws, grant_writable=["/usr/local/"]), "system")
        walk = str(box.ws) + "/.." * len(box.ws.parts) + "/usr"
        refused(host, append(box, target, box.ws, grant_writable=[walk]), "system")
        assert not target.exists()
    finally:
        with contextlib.suppress(FileNotFoundError):
            target.unlink()
    # The control: a grant of a folder outside the workspace opens it for this command.
    granted = box.outside / "granted.txt"
    result = host.run(append(box, granted, box.ws, grant_writable=[str(box.outside)]))
    assert result.exit_code == 0, result.stderr.text
    assert granted.read_text() == box.canary + "\n"


def test_the_store_and_a_folder_holding_it_are_refused(make_host, box):
    keep = box.outside / "keep"
    state, project = keep / "state", keep / "project"
    state.mkdir(parents=True)
    project.mkdir()
    config = Config(sandbox=box.sandbox, store=StoreConfig(str(state / "store.db")))
    host = make_host(allow_all=True, config=config)
    lands(host, box, project)  # the control; it also makes the store and records in it
    db = state / "store.db"
    assert db.exists()
    refused(host, append(box, db, keep), "holds_store")
    refused(host, append(box, db, state), "store")
    refused(host, append(box, db, project, grant_writable=[str(state)]), "store")
    assert box.canary.encode() not in db.read_bytes()
    assert not (state / "control.txt").exists() and not (keep / "control.txt").exists()


def test_a_folder_in_var_tmp_may_be_the_workspace(host, box):
    """/var/tmp itself is shared and refused; a folder of one's own inside it is fine."""
    folder = Path(tempfile.mkdtemp(prefix="stockade-roots-", dir="/var/tmp"))
    try:
        lands(host, box, folder)
        refused(host, append(box, folder / "x", "/var/tmp"), "shared")
        refused(host, append(box, "/var/lib/x", "/var/lib"), "system")
    finally:
        shutil.rmtree(folder)


def test_read_only_and_reading_commands_still_run_in_a_home_and_in_etc(host, box, fake_home):
    """Only writable roots are refused: reading from a home or /etc still works."""
    for folder in (fake_home, "/etc"):
        shown = host.run(_with(box.request(["ls", "-a"], mode="read-only"), cwd=str(folder)))
        assert shown.exit_code == 0, shown.stderr.text
        # ``echo`` only reads, so it runs read-only in workspace-write too: admitted.
        echoed = host.run(_with(box.request(["echo", "hi"]), cwd=str(folder)))
        assert (echoed.exit_code, echoed.stdout.text) == (0, "hi\n")
        assert echoed.sandbox.mode == "read-only"
    assert (
        ".profile"
        in host.run(
            _with(box.request(["ls", "-a"], mode="read-only"), cwd=str(fake_home))
        ).stdout.text
    )
    # And a read-only command cannot write there either: the sandbox still holds.
    tried = host.run(append(box, fake_home / ".profile", fake_home, mode="read-only"))
    assert tried.exit_code != 0
    assert (fake_home / ".profile").read_text() == "# untouched\n"


def test_the_cli_refuses_etc_with_exit_126(box, capsys, monkeypatch):
    from stockade.cli import main

    monkeypatch.chdir("/etc")
    target = f"/etc/stockade-roots-canary-{box.canary}"
    try:
        status = main(["run", "--sandbox", box.sandbox, "--yes", "--", "touch", target])
        err = capsys.readouterr().err
        assert status == 126, err
        assert "error[unsafe_root]" in err and "/etc is a system folder" in err
        assert not os.path.exists(target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target)
    monkeypatch.chdir(box.ws)
    assert main(["run", "--sandbox", box.sandbox, "--yes", "--", "touch", "made"]) == 0
    assert (box.ws / "made").exists()
