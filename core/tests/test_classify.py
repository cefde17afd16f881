"""The built-in classifier: a table of argv cases across the classes, and properties."""

from __future__ import annotations

import string

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from stockade.policy import classifier as classify
from stockade.policy.classifier import classify_argv
from stockade.policy.programs import INLINE, SHELLS
from stockade.policy.script import READ_SHELLS

CASES = {
    "reads": [
        "ls",
        "ls -la",
        "cat README.md",
        "head -n 5 f",
        "tail -f log",
        "wc -l f",
        "grep -r x .",
        "rg TODO",
        "find . -name '*.py'",
        "find . -type f -print",
        "stat f",
        "file f",
        "diff a b",
        "pwd",
        "echo hi",
        "true",
        "false",
        "which git",
        "whoami",
        "id",
        "date",
        "uname -a",
        "printenv PATH",
        "du -sh .",
        "df -h",
        "tree",
        "cut -d: -f1 f",
        "uniq f",
        "jq . f.json",
        "sha256sum f",
        "realpath f",
        "basename /a/b",
        "dirname /a/b",
        "readlink -f f",
        "sed s/a/b/ f",
        "git diff -Oorder.txt",
        "git -C sub log -p",
        "sed -n 1p f",
        "sort f",
        "sort -u f",
        "git status",
        "git log --oneline",
        "git diff HEAD",
        "git show HEAD",
        "git blame f",
        "git branch",
        "git branch --list",
        "git branch -a",
        "git rev-parse HEAD",
        "git ls-files",
        "git -C sub status",
        "git tag",
        "git remote -v",
        "git stash list",
        "git clean -n",
        "go vet ./...",
        "go version",
        "pip list",
        "pip show x",
        "cargo tree",
        "command -v ls",
        "env ls",
        "env FOO=1 cat f",
        "nice -n 5 grep x f",
        "nohup ls",
        "timeout 5 cat f",
        "sudo -u bob cat f",
        "stdbuf -oL grep x f",
        "time ls",
        "env",
        "xargs echo",
        "/usr/bin/ls -l",
        "/bin/cat f",
    ],
    "writes": [
        "git log --output=pwned",
        "git diff --output x",
        "git show --output=f HEAD",
        "cp a b",
        "mv a b",
        "mkdir d",
        "mkdir -p a/b",
        "touch f",
        "tee f",
        "ln -s a b",
        "chmod +x f",
        "make",
        "make test",
        "cmake ..",
        "ninja",
        "gcc x.c",
        "tar xf a.tar",
        "unzip a.zip",
        "pytest",
        "pytest -q tests",
        "ruff check .",
        "mypy .",
        "tsc",
        "sed -i s/a/b/ f",
        "sed -i.bak s/a/b/ f",
        "sed --in-place s/a/b/ f",
        "sed -ni p f",
        "sort -o out f",
        "find . -fprint out",
        "find . -exec touch {} ;",
        "git add .",
        "git commit -m x",
        "git checkout main",
        "git switch dev",
        "git merge dev",
        "git stash",
        "git rebase main",
        "git init",
        "git branch new",
        "git tag v1",
        "git remote add o url",
        "git reset HEAD~1",
        "go build ./...",
        "go test ./...",
        "cargo build",
        "cargo test",
        "npm run build",
        "npm test",
        "pip uninstall x",
        "python script.py",
        "python3 -m venv ve",
        "python -m pytest",
        "node app.js",
        "ruby x.rb",
        "perl x.pl",
        "mystery-tool",
        "./local-script",
        "rsync -a a/ b/",
        "nice make",
        "busybox touch f",
    ],
    "network": [
        "git fetch",
        "git pull",
        "git push",
        "git push origin main",
        "git clone url",
        "git ls-remote url",
        "git submodule update --init",
        "git remote update",
        "go mod download",
        "go get x",
        "go install x@latest",
        "pip install x",
        "pip3 install -r req.txt",
        "uv sync",
        "uv add x",
        "uv pip install x",
        "npm install",
        "npm ci",
        "pnpm add x",
        "yarn add x",
        "cargo install x",
        "cargo add x",
        "curl https://example.com",
        "wget url",
        "ssh host",
        "scp a host:b",
        "rsync a host:b",
        "gh pr list",
        "ping host",
        "timeout 30 curl url",
        "env A=1 git fetch",
        "sudo pip install x",
    ],
    "destroys": [
        "rm f",
        "rm -rf /",
        "rmdir d",
        "shred f",
        "dd if=/dev/zero of=f",
        "mkfs.ext4 /dev/x",
        "truncate -s 0 f",
        "find . -delete",
        "find . -exec rm {} ;",
        "find . -execdir rm {} +",
        "git reset --hard",
        "git -c core.fsmonitor=./x status",
        "git -c diff.external=./x diff",
        "git --config-env=core.pager=X log",
        "git grep -Ovim x",
        "git grep --open-files-in-pager=./x x",
        "git clean -f",
        "git clean -fd",
        "git push --force",
        "git push -f origin main",
        "git push --force-with-lease",
        "git push origin :branch",
        "git push origin +main",
        "git branch -D x",
        "git checkout -- .",
        "git restore f",
        "git stash drop",
        "git rm f",
        "sh -c 'rm x'",
        "bash -c 'echo $HOME'",
        "bash script.sh",
        "zsh",
        "dash -c 'x; rm y'",
        "fish -c x",
        "python -c 1",
        "python3 -c 'print(1)'",
        "python3.11 -c 1",
        "node -e 1",
        "node --eval 1",
        "perl -e 1",
        "ruby -e 1",
        "php -r 1",
        "awk '{print}' f",
        "env sh -c 'ls *'",
        "nice -n 1 rm f",
        "timeout 5 rm f",
        "sudo rm f",
        "xargs rm",
        "xargs -n1 rm -f",
        "busybox rm f",
        "nohup bash x.sh",
        "rsync -a --delete a/ b/",
    ],
}


def _argv(command: str) -> list[str]:
    import shlex

    return shlex.split(command)


TABLE = [(kind, command) for kind, commands in CASES.items() for command in commands]


def test_the_table_is_large_enough():
    assert len(TABLE) >= 150


@pytest.mark.parametrize(("kind", "command"), TABLE, ids=[c for _, c in TABLE])
def test_each_command_gets_its_class_and_a_reason(kind, command):
    got, why = classify_argv(_argv(command))
    assert got == kind, (command, why)
    assert why


def test_a_wrapper_is_named_in_the_reason():
    assert classify_argv(["nice", "-n", "5", "rm", "f"])[1].endswith("(through nice)")


def test_extra_rules_win_over_the_table():
    mine = {"ls": lambda args: ("network", "this ls is a network client")}
    assert classify_argv(["ls"], mine) == ("network", "this ls is a network client")


_word = st.text(alphabet=string.ascii_letters + string.digits + "-_./=:+@", min_size=0, max_size=12)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(max_size=20), min_size=0, max_size=8))
def test_arbitrary_argv_never_crashes(argv):
    kind, why = classify_argv(argv)
    assert kind in ("reads", "writes", "network", "destroys") and why


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(sorted(SHELLS)), st.lists(_word, max_size=5))
def test_a_shell_is_always_destroys(shell, args):
    # A -c script of sh, bash or dash is read by its parts (test_script.py); nothing else is.
    assume(shell not in READ_SHELLS or not any(a[:1] == "-" and "c" in a for a in args))
    assert classify_argv([shell, *args])[0] == "destroys"


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(sorted(name for name, flags in INLINE.items() if flags)),
    st.lists(_word, max_size=3),
    st.data(),
)
def test_an_interpreter_given_code_inline_is_destroys(name, before, data):
    flag = data.draw(st.sampled_from(sorted(INLINE[name])))
    argv = [name, *[a for a in before if not a.startswith("-")], flag, "code"]
    assert classify_argv(argv)[0] == "destroys", argv


@settings(max_examples=300, deadline=None)
@given(_word.filter(lambda w: w and "/" not in w), st.lists(_word, max_size=4))
def test_an_unknown_program_is_never_reads(name, args):
    known = (
        (classify.READS | classify.WRITES | classify.NETWORK | classify.DESTROYS | SHELLS)
        | set(INLINE)
        | set(classify.RULES)
        | set(classify.WRAPPERS)
    )
    assume(classify._base(name) not in known and not name.startswith("mkfs"))
    assert classify_argv([name, *args])[0] != "reads"


def test_the_host_loads_it_and_classifies_every_command(make_host, tmp_path):
    from stockade.request.spec import ExecRequest

    host = make_host(allow_all=True)
    full = {"mode": "danger-full-access", "cwd": str(tmp_path)}
    assert host.classify(host.admit(ExecRequest(["ls"], **full)).spec).kind == "reads"
    result = host.run(ExecRequest(["rm", "-f", str(tmp_path / "nothing")], **full))
    assert result.classification.kind == "destroys"
    assert result.classification.by == ("builtin-classifier",)
    assert result.classification.reasons == ("rm is listed as destroys",)


def test_a_reads_program_must_be_the_systems_own(tmp_path, make_host):
    from stockade.request.spec import ExecRequest

    fake = tmp_path / "ls"
    fake.write_text("#!/bin/sh\ntouch pwned\n")
    fake.chmod(0o755)
    assert classify_argv(["./ls"])[0] == "writes"
    assert classify_argv(["/usr/bin/ls"])[0] == "reads"
    assert classify_argv(["ls"], path=f"{tmp_path}:/usr/bin")[0] == "writes"
    assert classify_argv(["env", "ls"], path=f"{tmp_path}:/usr/bin")[0] == "writes"
    assert classify_argv(["ls"], path="/usr/bin:/bin")[0] == "reads"
    host = make_host(allow_all=True)
    request = ExecRequest(["./ls"], str(tmp_path), mode="danger-full-access")
    assert host.classify(host.admit(request).spec).kind == "writes"
