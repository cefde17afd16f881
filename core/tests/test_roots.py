"""The rule of writable roots: the lists, path tricks (generated), and the host's refusal.

Core tests run without sandbox plugins, so a command the rule lets through stops later,
at confinement, with ``sandbox_unavailable``: that error (not ``unsafe_root``) is how these
tests see that the rule admitted it. The sandboxes' own attacks are in
``tests/security/test_roots.py``.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import PurePosixPath

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from stockade.config.schema import Config, PluginsConfig, StoreConfig
from stockade.confine.roots import (
    SHARED_FOLDERS,
    SYSTEM_TREES,
    SYSTEM_TREES_BUT_OWN_HOME,
    RootRules,
)
from stockade.confine.stores import CREDENTIAL_STORES
from stockade.errors import PolicyHeld, SandboxUnavailable, UnsafeRoot
from stockade.request.spec import ExecRequest

FULL = "danger-full-access"
HOMES = ("/home/alice", "/var/lib/jenkins", "/root", "/srv/svc")
STORE = "/home/alice/.local/state/stockade"


def rules(own: str | None = "/home/alice") -> RootRules:
    return RootRules(HOMES, own_home=own, stores=(STORE,))


@pytest.mark.parametrize(
    ("path", "rule"),
    [
        ("/", "root"),
        ("/etc", "system"),
        ("/etc/ssh", "system"),
        ("/usr/local/src/project", "system"),
        ("/var", "system"),
        ("/var/log", "system"),
        ("/opt/tool", "system"),
        ("/run/user/1000", "system"),
        ("/dev/shm", "system"),
        ("/tmp", "shared"),
        ("/var/tmp", "shared"),
        ("/home", "shared"),
        ("/mnt", "shared"),
        ("/media", "shared"),
        ("/home/alice", "home"),
        ("/root", "home"),
        ("/var/lib/jenkins", "home"),
        ("/home/alice/.ssh", "credentials"),
        ("/home/alice/.aws/sub", "credentials"),
        ("/home/alice/.config/gh", "credentials"),
        ("/home/alice/.gnupg/private", "credentials"),
        ("/home/alice/.local", "holds_store"),
        ("/home/alice/.local/state", "holds_store"),
        (STORE, "store"),
        (STORE + "/blobs", "store"),
        (STORE + "/workspaces", "store"),
        (STORE + "/homes/run1", "store"),
        ("/root/project", "system"),  # /root is another account's here: alice is not root
        ("/var/lib/jenkins/workspace", "system"),
        ("/srv/svc/site", "system"),
    ],
)
def test_refused(path, rule):
    refusal = rules().refusal(path)
    assert refusal is not None, path
    assert refusal.rule == rule, refusal


@pytest.mark.parametrize(
    "path",
    [
        "/home/alice/project",
        "/home/alice/.config",  # a home's subfolder: the protected names inside it are kept
        "/home/alice/.cache/build",
        "/home/bob/project",  # another person's home's subfolder: their permissions decide
        "/tmp/build",
        "/var/tmp/build",
        "/mnt/data/project",
        "/media/usb/project",
        "/run/media/alice/usb",
        "/work/project",
        "/etcetera",  # a neighbour of a system folder's name is not that folder
        "/usr2/project",
        "/tmpx",
        "/homework",
        "/home/alice2/x",
        STORE + "/workspaces/ci",
        STORE + "/workspaces/ci/sub",
    ],
)
def test_allowed(path):
    assert rules().refusal(path) is None, path


def test_the_own_home_opens_its_system_folder_and_nothing_else():
    jenkins = rules(own="/var/lib/jenkins")
    assert jenkins.refusal("/var/lib/jenkins/workspace/job") is None
    assert jenkins.refusal("/var/lib/jenkins").rule == "home"
    assert jenkins.refusal("/var/lib/other").rule == "system"
    root = rules(own="/root")
    assert root.refusal("/root/project") is None
    assert root.refusal("/root").rule == "home"
    assert root.refusal("/root/.ssh").rule == "credentials"
    # A home that is a system folder itself opens nothing beneath it.
    for own in ("/var", "/opt", "/srv", "/usr/sbin", "/bin", "/"):
        assert rules(own=own).refusal(posixpath.join(own, "lib", "x")) is not None, own
    assert rules(own=None).refusal("/root/project").rule == "system"


# --- generated path strings --------------------------------------------------------------

SEGMENTS = [
    "etc",
    "etcetera",
    "usr",
    "usr2",
    "var",
    "tmp",
    "lib",
    "root",
    "home",
    "alice",
    "alice2",
    ".ssh",
    ".local",
    "state",
    "stockade",
    "workspaces",
    "project",
    "x",
    "..",
    ".",
    "",
]
path_strings = st.builds(
    lambda parts, trailing: "/" + "/".join(parts) + ("/" if trailing else ""),
    st.lists(st.sampled_from(SEGMENTS), max_size=7),
    st.booleans(),
)


def oracle(path: str, own: str = "/home/alice") -> str | None:  # noqa: PLR0911 - one per rule
    """The rule again, written over path parts instead of strings: the rule it breaks."""
    p = PurePosixPath(path)

    def under(folder: str) -> bool:
        return p != PurePosixPath(folder) and p.is_relative_to(folder)

    def at_or_under(folder: str) -> bool:
        return p.is_relative_to(folder)

    if p == PurePosixPath("/"):
        return "root"
    shared = any(under(folder) for folder in SHARED_FOLDERS)
    if any(at_or_under(tree) for tree in SYSTEM_TREES) and not shared:
        return "system"
    if str(p) in SHARED_FOLDERS:
        return "shared"
    if str(p) in HOMES:
        return "home"
    if any(at_or_under(t) for t in SYSTEM_TREES_BUT_OWN_HOME) and not shared and not under(own):
        return "system"
    if any(PurePosixPath(home).is_relative_to(p) for home in HOMES):
        return "holds_home"
    if any(at_or_under(f"{home}/{name}") for home in HOMES for name in CREDENTIAL_STORES):
        return "credentials"
    if PurePosixPath(STORE).is_relative_to(p):
        return "store" if str(p) == STORE else "holds_store"
    if under(STORE) and not under(STORE + "/workspaces"):
        return "store"
    return None


@given(path_strings)
def test_the_rule_agrees_with_a_parts_oracle_on_any_normalised_path(path):
    normal = posixpath.normpath(path).replace("//", "/")
    refusal = rules().refusal(normal)
    assert (refusal.rule if refusal else None) == oracle(normal), normal


@given(path_strings, st.sampled_from(["", "/", "//", "/./", "/x/..", "/x/../"]))
def test_dots_slashes_and_trailing_slashes_do_not_change_the_verdict(path, noise):
    """``check`` resolves first: a path spelled another way gets the same verdict."""
    plain = rules()

    def verdict(p: str) -> str | None:
        try:
            plain.check(p, role="grant")
        except UnsafeRoot as error:
            return str(error.details["rule"])
        return None

    normal = os.path.realpath(path)
    assert verdict(path + noise) == verdict(normal) == oracle(normal), (path, noise)


@pytest.fixture
def tree(tmp_path):
    """A fake home with a project and a credential store, and symlinks pointing out."""
    home = tmp_path / "home"
    (home / "project" / "sub").mkdir(parents=True)
    (home / ".ssh").mkdir()
    (tmp_path / "ws").mkdir()
    links = {"to_etc": "/etc", "to_home": str(home), "to_project": str(home / "project")}
    for name, target in links.items():
        (tmp_path / "ws" / name).symlink_to(target)
    (home / "project" / "up").symlink_to("../..")
    (home / "project" / "ssh").symlink_to("../.ssh")
    return tmp_path


TREE_SEGMENTS = ["ws", "home", "project", "sub", "to_etc", "to_home", "to_project", "up", "ssh"]


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=300)
@given(
    st.lists(st.sampled_from([*TREE_SEGMENTS, "..", ".", ""]), min_size=1, max_size=6),
    st.booleans(),
)
@example(parts=["ws", "to_home"], trailing=False)
@example(parts=["ws", "to_project", "..", "project"], trailing=True)
@example(parts=["home", "project", "up", "home", "ssh"], trailing=False)
@example(parts=["ws", "to_etc", ".."], trailing=False)
def test_no_spelling_reaches_a_refused_folder(tree, parts, trailing):
    """What the kernel reaches by a path the rule accepts is never a refused folder.

    The kernel's own resolution (``/proc/self/fd`` of an ``O_PATH`` descriptor) is the
    oracle, not ``os.path.realpath``, which the rule itself uses.
    """
    home = str(tree / "home")
    here = RootRules((home,), own_home=None, stores=())
    path = str(tree) + "/" + "/".join(parts) + ("/" if trailing else "")
    try:
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY)
    except OSError:
        return
    try:
        reached = os.readlink(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)
    try:
        accepted = here.check(path, role="grant")
    except UnsafeRoot as error:
        assert error.details["resolved"] == reached
        return
    assert accepted == reached
    p = PurePosixPath(reached)
    assert p != PurePosixPath(home) and not PurePosixPath(home).is_relative_to(p)
    assert not p.is_relative_to(home + "/.ssh")
    assert not any(p.is_relative_to(t) for t in SYSTEM_TREES)


# --- the host refuses before deciding, and records it ------------------------------------


@pytest.fixture
def home(tmp_path, monkeypatch):
    """``$HOME`` pointing at a small folder of the test's own, with a project in it."""
    folder = tmp_path / "home"
    (folder / "project").mkdir(parents=True)
    (folder / ".profile").write_text("# the canary\n")
    (folder / ".ssh").mkdir()
    monkeypatch.setenv("HOME", str(folder))
    return folder


def kinds(log):
    return [(e.kind, getattr(e, "code", None)) for e in log.events]


def test_workspace_write_at_a_home_is_refused_before_the_decision_and_recorded(
    make_host, event_log, home
):
    host = make_host(plugins=[event_log], allow_all=True)
    request = ExecRequest(["sh", "-c", "echo evil >> .profile"], str(home), preapproved=True)
    with pytest.raises(UnsafeRoot) as caught:
        host.run(request)
    error = caught.value
    assert error.code == "unsafe_root" and error.exit_status == 126
    assert error.details["rule"] == "home" and error.details["role"] == "workspace"
    assert "--mode read-only" in (error.hint or "")
    assert kinds(event_log) == [("action", None), ("error", "unsafe_root")]
    assert (home / ".profile").read_text() == "# the canary\n"


def test_a_refused_root_is_never_held_for_a_person(make_host, event_log, home):
    host = make_host(plugins=[event_log])  # the built-in policy: a shell asks
    with pytest.raises(UnsafeRoot):
        host.run(ExecRequest(["sh", "-c", "rm -f none"], str(home), origin="api"))
    assert host.store.waiting() == []
    # The control: the same command in the project is held, not refused.
    with pytest.raises(PolicyHeld):
        host.run(ExecRequest(["sh", "-c", "rm -f none"], str(home / "project"), origin="api"))


@pytest.mark.parametrize("through", ["direct", "symlink", "dotdot", "env-home-of-command"])
def test_every_spelling_of_a_home_is_refused(make_host, home, tmp_path, through):
    host = make_host(allow_all=True)
    env = {}
    cwd = str(home)
    if through == "symlink":
        (tmp_path / "link").symlink_to(home)
        cwd = str(tmp_path / "link")
    elif through == "dotdot":
        cwd = f"{home}/project/../project/.."
    elif through == "env-home-of-command":
        other = tmp_path / "other-home"
        other.mkdir()
        cwd, env = str(other), {"HOME": str(other)}
    with pytest.raises(UnsafeRoot) as caught:
        host.run(ExecRequest(["touch", "x"], cwd, env=env, mode="workspace-write"))
    assert caught.value.details["rule"] == "home"


@pytest.mark.parametrize("mode", ["read-only", FULL])
def test_only_writable_roots_are_refused(make_host, home, mode):
    host = make_host(allow_all=True)
    request = ExecRequest(["touch", "x"], str(home), mode=mode)
    if mode == FULL:  # unconfined and explicit: it has no writable root to refuse
        assert host.run(ExecRequest(["pwd"], str(home), mode=mode)).stdout.text == f"{home}\n"
        return
    with pytest.raises(SandboxUnavailable) as caught:  # past the rule, at confinement
        host.run(request)
    assert "read-only" in caught.value.message


def test_a_command_that_only_reads_runs_read_only_in_a_home(make_host, home):
    host = make_host(allow_all=True)
    with pytest.raises(SandboxUnavailable) as caught:
        host.run(ExecRequest(["ls"], str(home), mode="workspace-write"))
    assert caught.value.details["mode"] == "read-only"
    with pytest.raises(UnsafeRoot):  # the control: what may write is refused there
        host.run(ExecRequest(["touch", "x"], str(home), mode="workspace-write"))


def test_a_home_subfolder_passes(make_host, home):
    host = make_host(allow_all=True)
    with pytest.raises(SandboxUnavailable) as caught:
        host.run(ExecRequest(["touch", "x"], str(home / "project"), mode="workspace-write"))
    assert caught.value.details["mode"] == "workspace-write"


@pytest.mark.parametrize("mode", ["read-only", "workspace-write", FULL])
def test_a_grant_is_checked_in_every_mode(make_host, event_log, home, mode):
    host = make_host(plugins=[event_log], allow_all=True)
    for grant, rule in (("~", "home"), ("/usr", "system"), ("~/.ssh", "credentials")):
        request = ExecRequest(
            ["true"], str(home / "project"), mode=mode, grant_writable=[grant], preapproved=True
        )
        with pytest.raises(UnsafeRoot) as caught:
            host.run(request)
        assert (caught.value.details["rule"], caught.value.details["role"]) == (rule, "grant")
    assert not [e for e in event_log.events if e.kind in ("grant", "permission")]


def test_a_magic_link_is_resolved_and_an_unreadable_one_refused(make_host, home):
    host = make_host(allow_all=True)

    def rule_of(grant: str) -> object:
        request = ExecRequest(["true"], str(home / "project"), mode=FULL, grant_writable=[grant])
        with pytest.raises(UnsafeRoot) as caught:
            host.run(request)
        return caught.value.details["rule"]

    assert rule_of("/proc/self/root/etc") == "system"
    assert rule_of(f"/proc/thread-self/root{home}") == "home"
    try:
        os.path.realpath("/proc/1/root/etc")
    except PermissionError:  # another process's root: what it reaches cannot be known
        assert rule_of("/proc/1/root/etc") == "unresolvable"


def test_a_configured_writable_root_is_checked(make_host, home, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    settings = {"bubblewrap": {"writable_roots": ["~/project", "/etc"]}}
    host = make_host(allow_all=True, config=Config(plugins=PluginsConfig(settings=settings)))
    with pytest.raises(UnsafeRoot) as caught:
        host.run(ExecRequest(["touch", "x"], str(ws), mode="workspace-write"))
    assert caught.value.details["role"] == "plugins.settings.bubblewrap.writable_roots"
    assert caught.value.details["path"] == "/etc"
    # Read-only ignores writable_roots, so it is not refused for them.
    with pytest.raises(SandboxUnavailable):
        host.run(ExecRequest(["touch", "x"], str(ws), mode="read-only"))


def test_the_store_and_a_folder_holding_it_are_refused(make_host, tmp_path):
    store = tmp_path / "outer" / "state"
    store.mkdir(parents=True)
    config = Config(store=StoreConfig(str(store / "store.db")))
    host = make_host(allow_all=True, config=config)
    for cwd, rule in ((store, "store"), (tmp_path / "outer", "holds_store")):
        with pytest.raises(UnsafeRoot) as caught:
            host.run(ExecRequest(["touch", "x"], str(cwd), mode="workspace-write"))
        assert caught.value.details["rule"] == rule


def test_a_held_step_is_checked_again_when_it_is_released(
    make_host, event_log, tmp_path, monkeypatch
):
    project = tmp_path / "project"
    project.mkdir()
    host = make_host(plugins=[event_log])
    request = ExecRequest(["true"], str(project), mode=FULL, grant_writable=[str(project)])
    with pytest.raises(PolicyHeld) as caught:
        host.run(request)
    run, step = caught.value.details["run_id"], caught.value.details["step"]
    host.answer(run, step, approve=True, by="alice")
    # Since it was held, the granted folder became the home: its release is refused.
    monkeypatch.setenv("HOME", str(project))
    with pytest.raises(UnsafeRoot):
        host.resume(run, step)
    assert kinds(event_log)[-1] == ("error", "unsafe_root")
    assert host.store.get(run, step).state == "failed"
