"""The example at the top of :mod:`stockade.testing` runs as written (it once passed a
``policy=`` argument that ``make_host`` does not take)."""

from __future__ import annotations

import textwrap

from stockade import hookimpl, testing
from stockade.request.spec import ExecSpec


def _example() -> str:
    doc = testing.__doc__ or ""
    block = doc.split("::\n", 1)[1]
    lines = []
    for line in block.splitlines()[1:]:
        if line and not line.startswith("    "):
            break
        lines.append(line)
    return textwrap.dedent("\n".join(lines))


class Counting:
    """An inline plugin: a classifier that abstains and counts the commands it saw."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, ...]] = []

    @hookimpl
    def stockade_classify(self, spec: ExecSpec, rules: object) -> None:
        self.seen.append(spec.argv)


def test_the_docstring_example_runs(make_host, event_log, tmp_path):
    made: list[Counting] = []

    def my_plugin() -> Counting:
        made.append(Counting())
        return made[-1]

    namespace: dict[str, object] = {"MyPlugin": my_plugin}
    exec(compile(_example(), "stockade.testing example", "exec"), namespace)  # noqa: S102
    tests = [f for name, f in namespace.items() if name.startswith("test_")]
    assert len(tests) == 1
    tests[0](make_host=make_host, event_log=event_log, tmp_path=tmp_path)  # type: ignore[operator]
    assert [p.seen for p in made] == [[("true",)]]  # the plugin was really in the host


def test_home_tmp_is_a_private_folder_under_the_home(home_tmp):
    import os
    import stat
    from pathlib import Path

    assert home_tmp.parent == Path.home() / ".stockade-tests"
    assert stat.S_IMODE(os.stat(home_tmp).st_mode) == 0o700
    root = testing.under_home("x-")
    try:
        assert root.name.startswith("x-") and root != home_tmp
    finally:
        root.rmdir()
