"""Masks, scratch, binds and protected paths nest in any order, and bwrap starts.

Layouts are generated adversarially: the workspace, the command's home, the host's home, the
run home, the caches, the hidden store and extra secrets are put anywhere in a small tree,
inside one another and inside homes' ``.cache`` and ``.ssh``. Every generated layout must
start under bwrap (or be refused before it starts, naming the paths), and inside it every
canary must be seen exactly where the layout's rules say: hidden under a mask, seen through
a bind laid beneath one.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stockade.config.schema import Config
from stockade.confine import protected as paths
from stockade.errors import SandboxUnavailable

from .conftest import PYTHON

NAMES = ("a", ".cache", ".ssh", ".git")
NODES = ["/".join(p) for depth in (1, 2, 3) for p in itertools.product(NAMES, repeat=depth)]
_RANK = {"scratch": 0, "bind": 1, "mask": 2}  # laid in this order at one path: the last wins

# Reads every canary it is given and tries to write in each writable root.
PROBE = """
import json, os, sys
canaries, roots = json.loads(sys.argv[1]), json.loads(sys.argv[2])
seen = {}
for path in canaries:
    try:
        seen[path] = open(path).read()
    except OSError as error:
        seen[path] = error.errno
wrote = {}
for root in roots:
    try:
        with open(os.path.join(root, ".probe"), "w") as f:
            f.write("x")
        os.unlink(os.path.join(root, ".probe"))
        wrote[root] = True
    except OSError as error:
        wrote[root] = error.errno
print(json.dumps({"seen": seen, "wrote": wrote, "cwd": os.getcwd()}))
"""


layouts = st.fixed_dictionaries(
    {
        "workspace": st.sampled_from(NODES),
        "cwd_below": st.sampled_from(["", "a", "a/a"]),
        "home": st.sampled_from(NODES),
        "host_home": st.sampled_from(NODES),
        "run_home": st.none() | st.sampled_from(NODES),
        "caches": st.lists(st.sampled_from(NODES), max_size=2),
        "hidden": st.lists(st.sampled_from(NODES), max_size=2),
        "secrets": st.lists(st.sampled_from(NODES), max_size=2),
        "mode": st.sampled_from(["read-only", "workspace-write"]),
    }
)


@pytest.fixture(scope="module")
def tree():
    """The tree every generated layout is laid over (the runs leave it as it is)."""
    base = Path.home() / ".stockade-tests"
    base.mkdir(mode=0o700, exist_ok=True)
    root = Path(tempfile.mkdtemp(dir=base))
    try:
        yield root, _tree(root)
    finally:
        subprocess.run(["chmod", "-R", "u+rwX", str(root)], check=False)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def bwrap():
    from stockade_bubblewrap import discover

    found = discover.select()
    assert found.usable, found.detail
    return found.path


def _tree(root: Path) -> dict[str, str]:
    """Every node as a folder holding a canary of its own; the canaries by path."""
    canaries = {}
    for node in NODES:
        folder = root / node
        folder.mkdir(parents=True, exist_ok=True)
        canary = folder / "canary"
        canary.write_text(f"CANARY {node}")
        canaries[str(canary)] = f"CANARY {node}"
    return canaries


def _expected_seen(canary: str, layers: list[tuple[str, str]]) -> bool:
    """Whether the rules say ``canary`` is seen: its nearest layer is a bind (the last one
    laid at the deepest path above it), not a mask or scratch."""
    nearest = None
    for path, kind in sorted(layers, key=lambda item: (item[0].count("/"), _RANK[item[1]])):
        if paths.inside(canary, [path]):
            nearest = kind
    return nearest in (None, "bind")


def _run(bwrap: str, args: tuple[str, ...], canaries: list[str], roots: list[str]) -> dict:
    from stockade_bubblewrap.provider import _BASE_ARGS

    proc = subprocess.run(
        [
            bwrap,
            *_BASE_ARGS,
            *args,
            "--",
            PYTHON,
            "-S",
            "-c",
            PROBE,
            json.dumps(canaries),
            json.dumps(roots),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr, args)
    return json.loads(proc.stdout)


@settings(
    max_examples=60,
    deadline=None,
    database=None,  # CI runs it as a user too, who cannot write the checkout's .hypothesis
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(layout=layouts)
@pytest.mark.sandboxes("bubblewrap")
def test_every_generated_layout_starts_and_hides_exactly_what_it_masks(
    bwrap, tree, sandbox, layout
):
    from stockade_bubblewrap import layout as build

    root, canaries = tree
    at = {k: str(root / v) for k, v in layout.items() if isinstance(v, str) and k != "mode"}
    workspace = at["workspace"]
    cwd = os.path.join(workspace, layout["cwd_below"])
    cwd = cwd if os.path.isdir(cwd) else workspace
    env = {"HOME": at["home"]}
    host_env = {"HOME": at["host_home"]}
    try:
        plan = build.build(
            mode=layout["mode"],
            cwd=cwd,
            workspace=workspace,
            env=env,
            host_env=host_env,
            deny_read=[str(root / h) for h in layout["hidden"]],
            scratch=[str(root / layout["run_home"])] if layout["run_home"] else [],
            shared=[str(root / c) for c in layout["caches"]],
            secrets=[str(root / s) for s in layout["secrets"]],
        )
    except SandboxUnavailable as error:  # refused before starting, naming the paths
        if "secret" in error.details:  # a folder it would show lies in a system secret
            assert error.details["secret"] in {str(root / n) for n in layout["secrets"]}
            assert paths.inside(error.details["path"], [error.details["secret"]])
            assert error.details["path"] in error.message
            return
        assert error.details["cwd"] == os.path.realpath(cwd), error
        assert paths.inside(os.path.realpath(cwd), [error.details["masked"]])
        assert error.details["masked"] in error.message
        return
    layers = [(p, "bind") for p in plan.writable]
    layers += [
        (os.path.realpath(p), "bind")
        for p in (workspace, *(str(root / c) for c in layout["caches"]))
    ]
    layers += [(m, "mask") for m in plan.masked]
    for home in paths.homes(env, host_env):
        cache = os.path.join(home, ".cache")
        if os.path.isdir(cache) and not paths.inside(cache, list(plan.writable)):
            layers.append((cache, "scratch"))
    out = _run(bwrap, plan.args, list(canaries), list(plan.writable))
    assert out["cwd"] == os.path.realpath(cwd)
    for canary, text in canaries.items():
        expected = _expected_seen(canary, layers)
        got = out["seen"][canary]
        assert (got == text) == expected, (canary, got, expected, plan.args)
    for writable in plan.writable:  # each writable root is writable, unless masked
        covered = _expected_seen(os.path.join(writable, "x"), layers)
        protected = any(paths.inside(writable, [p]) for p in plan.protected)
        if covered and not protected:
            assert out["wrote"][writable] is True, (writable, out["wrote"], plan.args)


def test_a_home_inside_the_users_cache_with_the_workspace_beside_it(
    make_host, monkeypatch, sandbox
):
    """The issue's case: ``HOME`` in the passwd home's ``~/.cache`` (the store under it)
    and the workspace there too. It used to die in bwrap: ``Can't mkdir parents``."""
    import pwd

    passwd_home = pwd.getpwuid(os.getuid()).pw_dir
    cache = Path(passwd_home) / ".cache"
    cache.mkdir(exist_ok=True)
    base = Path(tempfile.mkdtemp(prefix="stockade-tests-", dir=cache))
    try:
        home, ws = base / "home", base / "ws"
        ws.mkdir()
        home.mkdir()
        store = home / ".local" / "state" / "stockade"
        store.mkdir(parents=True)
        (store / "canary").write_text("STORE CANARY")
        (base / "beside").write_text("CACHE CANARY")
        monkeypatch.delenv("XDG_STATE_HOME", raising=False)
        monkeypatch.setenv("HOME", str(home))
        host = make_host(allow_all=True, config=Config(sandbox=sandbox))
        from stockade.request.spec import ExecRequest

        probe = (
            "import sys\n"
            "open('made', 'w').write('x')\n"
            "for p in sys.argv[1:]:\n"
            "    try:\n"
            "        print(open(p).read())\n"
            "    except OSError as e:\n"
            "        print('refused', e.errno)\n"
        )
        result = host.run(
            ExecRequest(
                [PYTHON, "-S", "-c", probe, str(store / "canary"), str(base / "beside")],
                str(ws),
                mode="workspace-write",
                sandbox=sandbox,
                env={"HOME": str(home)},
                timeout=60,
            )
        )
        assert result.exit_code == 0, result.stderr.text
        assert (ws / "made").exists()  # the control: the workspace is writable
        assert "CANARY" not in result.stdout.text, result.stdout.text
    finally:
        shutil.rmtree(base, ignore_errors=True)
