"""System secrets stay unreadable in every confined mode, as root too.

The real ``/etc/shadow`` (with ``/etc/passwd`` beside it as the control); canaries planted at
secret paths and at their neighbours' names (as root, removed after); and the list
``system_secrets`` adds from configuration, its globs expanded at every run. As an
unprivileged user the real files are unreadable anyway, so each test also checks that the
provider says it masks them (``hides``) and, when it keeps ``private-view``, that the mask is
in place inside (``/dev/null`` over the file, or nothing there).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
from pathlib import Path

import attrs
import pytest

from stockade.config.schema import Config
from stockade.confine.promises import Promise
from stockade.errors import SandboxUnavailable

ROOT = os.geteuid() == 0

# Reads each path every way an attacker might, and prints what came back.
READ = """
import json, os, sys
out = {}
for path in sys.argv[1:]:
    tries = {}
    for how, name in (("plain", path), ("dots", "/" + path.replace("/", "//./")),
                      ("proc", "/proc/self/root" + path)):
        try:
            with open(name, "rb") as f:
                tries[how] = f.read().decode("latin-1")
        except OSError as error:
            tries[how] = f"refused {error.errno}"
    try:
        st = os.stat(path)
        tries["stat"] = [st.st_mode, os.major(st.st_rdev), os.minor(st.st_rdev)]
    except OSError as error:
        tries["stat"] = f"refused {error.errno}"
    if os.access(os.getcwd(), os.W_OK):  # a link into the workspace, then read through it
        link = os.path.join(os.getcwd(), "link-" + os.path.basename(path))
        try:
            os.link(path, link)
            tries["hardlink"] = open(link, "rb").read().decode("latin-1")
        except OSError as error:
            tries["hardlink"] = f"refused {error.errno}"
        sym = os.path.join(os.getcwd(), "sym-" + os.path.basename(path))
        try:
            os.symlink(path, sym)
            tries["symlink"] = open(sym, "rb").read().decode("latin-1")
        except OSError as error:
            tries["symlink"] = f"refused {error.errno}"
    out[path] = tries
print(json.dumps(out))
"""


def _read(host, box, mode, *paths):
    import json

    result = host.run(box.py(READ, *map(str, paths), mode=mode))
    assert result.exit_code == 0, result.stderr.text
    return json.loads(result.stdout.text)


def _reads(tries):
    """What each way of reading returned (not the stat)."""
    return [v for k, v in tries.items() if k != "stat"]


def _masked_in_place(host, box, mode, path, tries, *, config=None):
    """The mask itself: the provider says it hides ``path`` as a system secret, and with
    ``private-view`` the file inside is ``/dev/null``, or a file in a masked folder is not
    there at all."""
    del host
    assert os.path.lexists(path) or not ROOT, path  # it is there on the host
    hidden = box.hides(path, mode=mode, config=config)
    if hidden is None or hidden.kind != "system-secret":
        return False
    if box.keeps(Promise.PRIVATE_VIEW):
        found = tries["stat"]
        if isinstance(found, list):
            return stat.S_ISCHR(found[0]) and found[1:] == [1, 3]
        return found == "refused 2"
    return True


@pytest.mark.promise(Promise.SYSTEM_SECRETS)
def test_the_real_shadow_file_is_masked_and_passwd_is_not(host, box, mode):
    out = _read(host, box, mode, "/etc/shadow", "/etc/gshadow", "/etc/passwd")
    passwd = out["/etc/passwd"]
    assert passwd["plain"].startswith("root:"), passwd  # control: /etc is readable
    assert passwd["plain"] == Path("/etc/passwd").read_text(encoding="latin-1")
    for path in ("/etc/shadow", "/etc/gshadow"):
        if not os.path.exists(path):
            continue
        tries = out[path]
        for got in _reads(tries):
            assert got.startswith("refused") or got == "", (path, tries)
        if ROOT:  # the host itself can read it: the attack had something to find
            assert Path(path).read_text(encoding="latin-1").startswith("root:")
        assert _masked_in_place(host, box, mode, path, tries), (path, tries)
    assert box.hides("/etc/passwd", mode=mode) is None  # the control: passwd is not masked


@contextlib.contextmanager
def _planted(path: Path, text: str):
    """A file at ``path`` (and any folder it needs), removed afterwards with those folders."""
    made: list[Path] = []
    for parent in reversed(path.parents):
        if not parent.exists():
            parent.mkdir(mode=0o755)
            made.append(parent)
    path.write_text(text)
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)
        for folder in reversed(made):
            shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.promise(Promise.SYSTEM_SECRETS)
@pytest.mark.skipif(not ROOT, reason="plants canaries under /etc; the config test covers users")
def test_planted_secrets_are_masked_and_their_neighbours_are_not(host, box, mode):
    tag = secrets.token_hex(4)
    # sudo skips a sudoers.d file whose name has a dot; sshd reads only its HostKey files.
    sudoers = Path(f"/etc/sudoers.d/stockade-canary.{tag}")
    key = Path(f"/etc/ssh/ssh_host_stockade{tag}_key")
    pub = Path(f"/etc/ssh/ssh_host_stockade{tag}_key.pub")
    shadow = Path(f"/etc/shadow.stockade-{tag}")  # a backup's name beside the real one
    control = Path(f"/etc/stockade-control-{tag}")
    host.run(box.py("pass", mode=mode))  # warm every cache first: globs expand per run
    with contextlib.ExitStack() as planted:
        for path in (sudoers, key, shadow):
            planted.enter_context(_planted(path, f"# {box.canary}\n"))
        planted.enter_context(_planted(pub, "ssh-ed25519 PUBLIC\n"))
        planted.enter_context(_planted(control, "CONTROL\n"))
        out = _read(host, box, mode, sudoers, key, shadow, pub, control)
        ways = ("plain", "dots", "proc", *(("symlink",) if mode == "workspace-write" else ()))
        for how in ways:  # the neighbour stays readable, every way
            assert out[str(pub)][how] == "ssh-ed25519 PUBLIC\n", out[str(pub)]
        assert out[str(control)]["plain"] == "CONTROL\n"
        for path in (sudoers, key, shadow):
            tries = out[str(path)]
            assert box.canary not in str(tries), (path, tries)
            assert _masked_in_place(host, box, mode, str(path), tries), (path, tries)
    assert box.canary not in "".join(
        p.read_text(errors="replace") for p in box.ws.rglob("*") if p.is_file()
    )


@pytest.mark.promise(Promise.SYSTEM_SECRETS)
def test_configured_secrets_are_masked_with_their_globs_expanded_at_each_run(make_host, box, mode):
    keys = box.outside / "keys"
    keys.mkdir()
    (keys / "a.key").write_text(box.canary)
    (keys / "a.pub").write_text("PUBLIC")
    config = Config(sandbox=box.sandbox, system_secrets=(str(keys / "*.key"),))
    host = make_host(allow_all=True, config=config)
    first = _read(host, box, mode, keys / "a.key", keys / "a.pub", box.secret)
    assert first[str(keys / "a.pub")]["plain"] == "PUBLIC"  # control: a neighbour is read
    assert first[str(box.secret)]["plain"] == box.canary  # and the canary itself, unlisted
    assert box.canary not in str(first[str(keys / "a.key")]), first
    # Made after the first run: the glob is expanded again for the next.
    (keys / "b.key").write_text(box.canary)
    second = _read(host, box, mode, keys / "b.key", keys / "a.pub")
    assert box.canary not in str(second[str(keys / "b.key")]), second
    assert second[str(keys / "a.pub")]["plain"] == "PUBLIC"
    tries = second[str(keys / "b.key")]
    assert _masked_in_place(host, box, mode, str(keys / "b.key"), tries, config=config), tries
    # Without the key, the same host setup reads it: the test sees a breach when there is one.
    plain = make_host(allow_all=True, config=Config(sandbox=box.sandbox))
    assert _read(plain, box, mode, keys / "b.key")[str(keys / "b.key")]["plain"] == box.canary


@pytest.mark.promise(Promise.SYSTEM_SECRETS)
def test_a_home_named_at_a_secret_does_not_unmask_it(host, box, mode):
    """``HOME`` is the command's to name: set at a secret, it must not lift the mask."""
    import json

    for home in ("/etc/shadow", "/etc", "/etc/ssl/private"):
        request = box.py(READ, "/etc/shadow", "/etc/passwd", mode=mode, env={"HOME": home})
        result = host.run(request)
        assert result.exit_code == 0, result.stderr.text
        out = json.loads(result.stdout.text)
        assert out["/etc/passwd"]["plain"].startswith("root:")  # the control
        tries = out["/etc/shadow"]
        assert all(got.startswith("refused") or got == "" for got in _reads(tries)), tries
        if box.keeps(Promise.PRIVATE_VIEW):
            assert _masked_in_place(host, box, mode, "/etc/shadow", tries), (home, tries)
    request = box.py("pass", mode=mode, env={"HOME": "/etc/shadow"})
    from stockade.policy.resolve import resolve

    spec = resolve(request, Config(sandbox=box.sandbox), os.environ)
    hidden = box.provider().hides("/etc/shadow", spec)
    assert hidden is not None and hidden.kind == "system-secret", hidden


@pytest.mark.promise(Promise.SYSTEM_SECRETS)
def test_a_workspace_inside_a_secret_is_refused_before_it_starts(make_host, box, mode):
    vault = box.outside / "vault"
    (vault / "proj").mkdir(parents=True)
    (vault / "token").write_text(box.canary)
    config = Config(sandbox=box.sandbox, system_secrets=(str(vault),))
    host = make_host(allow_all=True, config=config)
    request = box.py("print(open('../token').read())", mode=mode)
    inside = attrs.evolve(request, cwd=str(vault / "proj"))
    with pytest.raises(SandboxUnavailable) as refused:
        host.run(inside)
    assert refused.value.details == {"path": str(vault / "proj"), "secret": str(vault)}
    assert str(vault) in refused.value.message
    # The control: the same command from the workspace beside it runs (and is refused the read).
    beside = host.run(attrs.evolve(request, argv=(*request.argv[:-1], "print('ran')")))
    assert beside.exit_code == 0 and beside.stdout.text == "ran\n", beside.stderr.text


@pytest.mark.promise(Promise.SYSTEM_SECRETS)
@pytest.mark.skipif(ROOT, reason="as root, /root is the running user's own home")
def test_another_users_root_home_is_masked(host, box):
    import json

    probe = (
        "import json, os\n"
        "try:\n"
        "    print(json.dumps(os.listdir('/root')))\n"
        "except OSError as e:\n"
        "    print(json.dumps(e.errno))\n"
    )
    result = host.run(box.py(probe))
    assert result.exit_code == 0, result.stderr.text
    if box.keeps(Promise.PRIVATE_VIEW):
        assert json.loads(result.stdout.text) == []  # an empty tmpfs, where the host says EACCES
    hidden = box.hides("/root/.bashrc", mode="read-only")
    assert hidden is not None and hidden.kind == "system-secret", hidden
