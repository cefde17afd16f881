"""The tree keeps its shape: no import circles in core or bench, core never imports a plugin,
no plugin imports another, processes start only in ``stockade-local`` and the spawn module,
deciding (``policy``) and doing (``run``) never import each other, no source file over 500
lines. The rules and how they are read are in ``tests/helpers/layout.py``.

Today's exceptions are listed in :data:`KNOWN`, one reason each; the commit that removes
one deletes its entry (an entry that no longer happens fails the second test). Then the
checker itself is tested on small trees, so each rule is shown to fail.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from helpers import layout

ROOT = Path(__file__).resolve().parent.parent

KNOWN: dict[tuple[str, str, str], str] = {}
"""Violations allowed for now, by ``(rule, path, detail)``, each with why (none: issue 23
left the tree with every rule kept)."""


@pytest.fixture(scope="module")
def found() -> list[layout.Violation]:
    return layout.check(ROOT)


def test_the_tree_keeps_its_layout(found):
    new = [str(v) for v in found if v.key not in KNOWN]
    assert not new, "layout rules broken (file:line: [rule] what):\n" + "\n".join(new)


def test_every_known_exception_still_happens(found):
    happening = {v.key for v in found}
    stale = [" ".join(key) for key in KNOWN if key not in happening]
    assert not stale, "KNOWN lists what no longer happens; delete:\n" + "\n".join(stale)


def test_the_checker_reads_the_whole_tree():
    mods = {m.path: m for m in layout.modules(ROOT)}
    assert mods["core/src/stockade/cli/run.py"].name == "stockade.cli.run"
    assert mods["plugins/local/src/stockade_local/__init__.py"].name == "stockade_local"
    assert mods["contrib/ui/src/stockade_ui/server.py"].group == "contrib"
    assert mods["bench/timing.py"].name == "timing"
    # The executor starts processes (allowed there): the checker sees them.
    executor = mods["plugins/local/src/stockade_local/executor.py"]
    assert "import subprocess" in {what for _, what in layout.read(ROOT, executor).starts}


# --- the checker on small trees --------------------------------------------------------------


def tree(root: Path, files: dict[str, str]) -> Path:
    for name, source in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    return root


def by_rule(root: Path, rule: str) -> list[str]:
    return [str(v) for v in layout.check(root) if v.rule == rule]


def test_a_circle_is_found_through_relative_and_function_level_imports(tmp_path):
    tree(
        tmp_path,
        {
            "core/src/pkg/__init__.py": "",
            "core/src/pkg/a.py": "from . import b\n",
            "core/src/pkg/sub/__init__.py": "",
            "core/src/pkg/b.py": "def later():\n    from .sub import c\n",
            "core/src/pkg/sub/c.py": "import os\n\n\nfrom ..a import name\n",
            "core/src/pkg/d.py": "from pkg import a\n",  # into the circle, not part of it
        },
    )
    assert by_rule(tmp_path, "import-cycle") == [
        "core/src/pkg/a.py:1: [import-cycle] pkg.a <-> pkg.b <-> pkg.sub.c "
        "(core/src/pkg/a.py:1 imports pkg.b; core/src/pkg/b.py:2 imports pkg.sub.c; "
        "core/src/pkg/sub/c.py:4 imports pkg.a)"
    ]


def test_imports_under_type_checking_make_no_circle(tmp_path):
    tree(
        tmp_path,
        {
            "core/src/pkg/a.py": "from pkg import b\n",
            "core/src/pkg/b.py": (
                "import typing\nif typing.TYPE_CHECKING:\n    from pkg import a\n"
                "else:\n    import os\n"
            ),
        },
    )
    assert by_rule(tmp_path, "import-cycle") == []
    (tmp_path / "core/src/pkg/b.py").write_text(
        "if TYPE_CHECKING:\n    pass\nelse:\n    import pkg.a\n"
    )
    assert by_rule(tmp_path, "import-cycle") == [
        "core/src/pkg/a.py:1: [import-cycle] pkg.a <-> pkg.b "
        "(core/src/pkg/a.py:1 imports pkg.b; core/src/pkg/b.py:4 imports pkg.a)"
    ]


def test_a_bench_circle_is_found_and_bench_names_are_its_own(tmp_path):
    tree(
        tmp_path,
        {
            "core/src/record/__init__.py": "import run\n",  # not bench's run: no edge
            "bench/run.py": "import record\nimport timing\n",
            "bench/record.py": "import timing\nif __name__ == '__main__':\n    import run\n",
            "bench/timing.py": "import gc\n",
        },
    )
    assert by_rule(tmp_path, "import-cycle") == [
        "bench/record.py:3: [import-cycle] record <-> run "
        "(bench/record.py:3 imports run; bench/run.py:1 imports record)"
    ]


def test_process_starts_are_found_outside_the_executor_and_spawn(tmp_path):
    start = (
        "import os as o\nimport subprocess\nfrom os import execv, path\n"
        "def f():\n    from multiprocessing import pool\n    import pty, webbrowser\n"
        "    o.fork()\n    o.posix_spawnp('x', [], {})\n    o.system('x')\n    o.getpid()\n"
    )
    tree(
        tmp_path,
        {
            "plugins/x/src/stockade_x/m.py": start,
            "plugins/x/src/stockade_x/n.py": "import os.path\nos.execvp('x', ['x'])\n",
            "plugins/local/src/stockade_local/executor.py": start,
            "core/src/pkg/spawn.py": start,
            "core/src/pkg/run/spawn.py": start,
            "core/src/pkg/other/spawn.py": "import subprocess\n",
        },
    )
    assert by_rule(tmp_path, "process-start") == [
        "core/src/pkg/other/spawn.py:1: [process-start] import subprocess",
        "plugins/x/src/stockade_x/m.py:2: [process-start] import subprocess",
        "plugins/x/src/stockade_x/m.py:3: [process-start] from os import execv",
        "plugins/x/src/stockade_x/m.py:5: [process-start] from multiprocessing import ...",
        "plugins/x/src/stockade_x/m.py:6: [process-start] import pty",
        "plugins/x/src/stockade_x/m.py:6: [process-start] import webbrowser",
        "plugins/x/src/stockade_x/m.py:7: [process-start] os.fork",
        "plugins/x/src/stockade_x/m.py:8: [process-start] os.posix_spawnp",
        "plugins/x/src/stockade_x/m.py:9: [process-start] os.system",
        "plugins/x/src/stockade_x/n.py:2: [process-start] os.execvp",
    ]


def test_core_and_plugins_keep_to_themselves(tmp_path):
    tree(
        tmp_path,
        {
            "core/src/pkg/cli.py": (
                "import importlib\nimport stockade_x.server\n"
                "def f():\n    importlib.import_module('stockade_y')\n    return 'stockade_error'\n"
            ),
            "plugins/x/src/stockade_x/server.py": "from stockade_x import own\nimport pkg.cli\n",
            "plugins/x/src/stockade_x/own.py": "",
            "contrib/y/src/stockade_y/__init__.py": "from stockade_x.server import serve\n",
        },
    )
    assert by_rule(tmp_path, "core-imports-plugin") == [
        "core/src/pkg/cli.py:2: [core-imports-plugin] imports stockade_x",
        "core/src/pkg/cli.py:4: [core-imports-plugin] names stockade_y",
    ]
    assert by_rule(tmp_path, "plugin-imports-plugin") == [
        "contrib/y/src/stockade_y/__init__.py:1: [plugin-imports-plugin] imports stockade_x"
    ]


def test_policy_and_run_never_import_each_other_once_they_exist(tmp_path):
    tree(
        tmp_path,
        {
            "core/src/pkg/request.py": "",
            "core/src/pkg/policy/__init__.py": "",
            "core/src/pkg/policy/decide.py": "from .. import request\nfrom ..run import doer\n",
            "core/src/pkg/run/__init__.py": "",
            "core/src/pkg/run/doer.py": "import pkg.request\nimport pkg.policy\n",
            "core/src/pkg/runner.py": "from pkg.policy import decide\n",  # not run/
        },
    )
    assert by_rule(tmp_path, "policy-run") == [
        "core/src/pkg/policy/decide.py:2: [policy-run] imports pkg.run.doer",
        "core/src/pkg/run/doer.py:2: [policy-run] imports pkg.policy",
    ]


def test_a_file_over_500_lines_is_found(tmp_path):
    tree(
        tmp_path,
        {
            "core/src/pkg/long.py": "x = 1\n" * 501,
            "core/src/pkg/fits.py": "x = 1\n" * 500,
            "bench/long.py": "x = 1\n" * 501,
        },
    )
    assert by_rule(tmp_path, "file-size") == [
        "bench/long.py:1: [file-size] over 500 lines (501)",
        "core/src/pkg/long.py:1: [file-size] over 500 lines (501)",
    ]
