"""Private data is a capability: fifty ways to read a private file, in each sandbox.

The workspace holds a canary under ``private/`` (glob ``private/*``), one in ``keys/a.pem``
(glob ``*.pem``, any depth), a symlink and a hard link to the first made before the run. Each
way (programs, options, copies, links, archives, interpreters, other spellings) runs without a
grant: none of its output, nor any file it leaves, holds the canary (plain, hex or base64),
and the run holds no private data. The control runs the same ways granted (``--read-private``):
each reads the canary, and the run holds private data (``grant``). A hypothesis test checks
that the taint of a run never depends on how argv spells a path.
"""

from __future__ import annotations

import base64
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stockade.errors import PolicyDenied, PolicyHeld
from stockade.request.spec import Profile

from .test_breaker import config, taints

WAYS: dict[str, list[list[str]]] = {
    "cat": [["cat", "private/notes.txt"]],
    "cat ./": [["cat", "./private/notes.txt"]],
    "cat //": [["cat", "private//notes.txt"]],
    "cat ..": [["cat", "private/../private/notes.txt"]],
    "cat absolute": [["cat", "{ws}/private/notes.txt"]],
    "cat /proc/self/cwd": [["cat", "/proc/self/cwd/private/notes.txt"]],
    "cat /proc/self/root": [["cat", "/proc/self/root{ws}/private/notes.txt"]],
    "cat a .pem at depth": [["cat", "keys/a.pem"]],
    "symlink made before": [["cat", "link-before"]],
    "hard link made before": [["cat", "hard-before"]],
    "head": [["head", "-c", "4096", "private/notes.txt"]],
    "tail": [["tail", "private/notes.txt"]],
    "sed": [["sed", "-n", "p", "private/notes.txt"]],
    "awk": [["awk", "1", "private/notes.txt"]],
    "grep -r": [["grep", "-r", "CANARY", "."]],
    "grep -e glued": [["grep", "-rheCANARY", "private"]],
    "sort": [["sort", "private/notes.txt"]],
    "uniq": [["uniq", "private/notes.txt"]],
    "tac": [["tac", "private/notes.txt"]],
    "cut": [["cut", "-c1-", "private/notes.txt"]],
    "paste": [["paste", "private/notes.txt"]],
    "nl": [["nl", "private/notes.txt"]],
    "fold": [["fold", "private/notes.txt"]],
    "strings": [["strings", "private/notes.txt"]],
    "diff": [["diff", "/dev/null", "private/notes.txt"]],
    "base64": [["base64", "private/notes.txt"]],
    "od hex": [["od", "-An", "-tx1", "private/notes.txt"]],
    "dd if=": [["dd", "if=private/notes.txt", "status=none"]],
    "env cat": [["env", "cat", "private/notes.txt"]],
    "nice cat": [["nice", "cat", "private/notes.txt"]],
    "timeout cat": [["timeout", "5", "cat", "private/notes.txt"]],
    "xargs cat": [["sh", "-c", "echo private/notes.txt | xargs cat"]],
    "find -exec": [["find", "private", "-type", "f", "-exec", "cat", "{{}}", ";"]],
    "cp then cat": [["cp", "private/notes.txt", "out/cp.txt"], ["cat", "out/cp.txt"]],
    "install then cat": [
        ["install", "-m", "644", "private/notes.txt", "out/in.txt"],
        ["cat", "out/in.txt"],
    ],
    "cp -r the folder": [["cp", "-r", "private", "out/copied"], ["cat", "out/copied/notes.txt"]],
    "symlink made in the run": [["ln", "-s", "../private/notes.txt", "out/l"], ["cat", "out/l"]],
    "hard link made in the run": [["ln", "private/notes.txt", "out/h"], ["cat", "out/h"]],
    "mv out and back": [
        ["sh", "-c", "mv private/notes.txt out/m; cat out/m; mv out/m private/notes.txt"]
    ],
    "tar then extract": [
        ["tar", "-cf", "out/a.tar", "private"],
        ["tar", "-xOf", "out/a.tar"],
    ],
    "tar -C": [["tar", "-C", "private", "-cf", "out/b.tar", "."], ["tar", "-xOf", "out/b.tar"]],
    "gzip then zcat": [
        ["sh", "-c", "gzip -c private/notes.txt > out/n.gz"],
        ["zcat", "out/n.gz"],
    ],
    "sh redirect": [["sh", "-c", "cat < private/notes.txt"]],
    "sh cd": [["sh", "-c", "cd private && cat notes.txt"]],
    "sh glob": [["sh", "-c", "cat p*/n*"]],
    "python open": [["/usr/bin/python3", "-c", "print(open('private/notes.txt').read())"]],
    "python os.open by fd": [
        [
            "/usr/bin/python3",
            "-c",
            "import os; fd=os.open('private', 0); "
            "print(open(f'/proc/self/fd/{{fd}}/notes.txt').read())",
        ]
    ],
    "python shutil copy": [
        ["/usr/bin/python3", "-c", "import shutil; shutil.copy('private/notes.txt', 'out/py.txt')"],
        ["cat", "out/py.txt"],
    ],
    "perl": [["perl", "-ne", "print", "private/notes.txt"]],
    "git diff --no-index": [["git", "diff", "--no-index", "/dev/null", "private/notes.txt"]],
    "curl file://": [["curl", "-s", "file://{ws}/private/notes.txt"]],
}


def leaked(canary: str, text: str) -> bool:
    """Whether ``text`` holds the canary, plainly, in hex or in base64."""
    flat = "".join(text.split())
    forms = (canary, canary.encode().hex(), base64.b64encode(canary.encode()).decode()[:-4])
    return any(form in flat for form in forms) or canary.encode().hex() in flat.replace("0a", "")


@pytest.fixture
def planted(box):
    ws = box.ws
    (ws / "private").mkdir()
    (ws / "private" / "notes.txt").write_text(box.canary + "\n")
    (ws / "keys").mkdir()
    (ws / "keys" / "a.pem").write_text(box.canary + "\n")
    (ws / "out").mkdir()
    (ws / "readme.txt").write_text("somebody else's words\n")
    (ws / "link-before").symlink_to("private/notes.txt")
    os.link(ws / "private" / "notes.txt", ws / "hard-before")
    return ws


def conf(box):
    return config(box, 9, private=("private/*", "*.pem"))


def steps(make_host, box, granted: bool):
    host = make_host(config=conf(box))
    for name, ways in WAYS.items():
        texts = []
        for way in ways:
            argv = [a.format(ws=box.ws) for a in way]
            request = box.request(argv, profile="a", preapproved=True, read_private=granted)
            try:
                result = host.run(request)
            except (PolicyDenied, PolicyHeld) as refused:  # it did not run: nothing read either
                texts.append(refused.message)
                continue
            texts += [result.stdout.text, result.stderr.text]
        yield host, name, "\n".join(texts)


def test_fifty_ways_without_a_grant_read_nothing(make_host, box, planted) -> None:
    assert len(WAYS) >= 50
    got = []
    for host, name, text in steps(make_host, box, granted=False):
        if leaked(box.canary, text):
            got.append(name)
        host_taints = [t for t in taints(host) if t[0] == "private"]
        assert not host_taints, (name, host_taints)
    for path in planted.rglob("*"):  # nor did any copy it left behind hold it
        hidden = "private" in path.parts or path.name == "hard-before" or path.suffix == ".pem"
        if path.is_file() and not hidden and not path.is_symlink():
            assert not leaked(box.canary, path.read_bytes().decode(errors="replace")), path
    assert got == []


def test_fifty_ways_granted_read_it_and_the_run_is_private(make_host, box, planted) -> None:
    missed, last = [], None
    for host, name, text in steps(make_host, box, granted=True):
        last = host
        if not leaked(box.canary, text) and name not in GRANTED_MISSES:
            missed.append(name)
    assert missed == []
    assert last is not None
    assert any(t[:2] == ("private", "grant") for t in taints(last))


GRANTED_MISSES = {
    # curl is classed network: granted, its run holds both kinds, so the breaker holds it.
    "curl file://",
}


def test_a_file_tool_read_is_refused_without_a_grant(make_host, box, planted) -> None:
    host = make_host(config=conf(box))
    profile = host.config.profile("a")
    for name in (
        "private/notes.txt",
        "link-before",
        "hard-before",
        "keys/a.pem",
        "./private//notes.txt",
    ):
        with pytest.raises(PolicyDenied, match="private data"):
            host.breaker.file_read(str(planted), name, profile, granted=False)
    host.breaker.file_read(str(planted), "readme.txt", profile, granted=False)  # the control
    host.breaker.file_read(str(planted), "private/notes.txt", profile, granted=True)


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(
    spelling=st.lists(
        st.sampled_from(["", ".", "..", "private", "notes.txt", "x", "/proc/self/cwd", "@", "="]),
        max_size=6,
    ).map("/".join),
    prefix=st.sampled_from(["", "-d@", "--data=", "if=", "-T"]),
)
def test_taint_never_depends_on_how_argv_spells_a_path(tmp_path_factory, spelling, prefix) -> None:
    """The private taint of a step is a function of its grant alone, whatever its argv says."""
    from stockade.policy.private import for_step
    from stockade.request.spec import ExecSpec

    ws = tmp_path_factory.mktemp("ws")
    (ws / "private").mkdir(exist_ok=True)
    (ws / "private" / "notes.txt").write_text("canary\n")
    profile = Profile(name="a", private=("private/*",))
    for granted in (False, True):
        spec = ExecSpec(
            "a1",
            ("cat", prefix + spelling),
            program="/usr/bin/cat",
            cwd=str(ws),
            env={},
            stdin=b"",
            timeout=1,
            kill_grace=1,
            mode="workspace-write",
            sandbox="auto",
            output_limit=1,
            read_private=granted,
        )
        masked, grant = for_step(spec, profile, str(ws), [])
        assert (grant is not None) == granted
        assert masked.private_data == (() if granted else (str(ws / "private" / "notes.txt"),))


def test_a_run_that_holds_private_data_already_sees_it(make_host, box, planted) -> None:
    """A step with a credential (or of a run that holds private data) is granted the private
    paths: seeing them adds nothing to what its run holds. The control: a run without one."""
    env = {**os.environ, "STOCKADE_SECRET_GH": "s3cret-value"}
    host = make_host(config=conf(box), environ=env)
    read = host.run(box.request(["cat", "private/notes.txt"], profile="a", credentials={"T": "gh"}))
    assert read.stdout.text == box.canary + "\n", read.stderr.text
    assert ("private", "grant", "the run holds private data already: hard-before, keys/a.pem, "
            "private/notes.txt") in taints(host)  # fmt: skip
    later = host.run(box.request(["cat", "keys/a.pem"], profile="a"))  # its next step too
    assert later.stdout.text == box.canary + "\n", later.stderr.text
    clean = make_host(config=conf(box), environ=env)
    assert box.canary not in clean.run(box.request(["cat", "keys/a.pem"], profile="a")).stdout.text
