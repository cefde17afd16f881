"""The conformance kit, measured by mutation: each broken provider of
``tests/kit_mutants/stockade_kit_mutants/`` must fail the kit with the promise it breaks.

Each mutant is installed out of tree, as a backend author's package would be (a
``*.dist-info`` with a ``stockade`` entry point on ``PYTHONPATH``), and judged by
``python -m stockade.conformance`` on the attacks of the promise it breaks (its ``SELECT``),
two at a time. The unchanged providers pass the same attacks in ``tests/security`` (the
kit's modules there run against bubblewrap and Landlock), which is this check's control.
The catch rate is in ``docs/providers.md``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

HERE = Path(__file__).parent / "kit_mutants"
sys.path.insert(0, str(HERE))

import stockade_kit_mutants as mutants  # noqa: E402 - found through the path above

from stockade.conformance.ground import REFUSED  # noqa: E402

ROOT = os.geteuid() == 0

WORKERS = 2


def _dist(folder: Path) -> None:
    """The mutants' distribution metadata, as ``pip install`` would leave it."""
    info = folder / "stockade_kit_mutants-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: stockade-kit-mutants\nVersion: 0\n"
    )
    (info / "entry_points.txt").write_text("[stockade]\nkit-mutants = stockade_kit_mutants\n")


def _judge(cls: type[mutants.Mutant], folder: Path) -> tuple[int, str, str]:
    """Run the kit against ``cls``: its exit status, its table and its output."""
    work = folder / cls.PLUGIN_NAME
    work.mkdir()
    table = work / "table.md"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(folder), str(HERE)]),
        "XDG_STATE_HOME": str(work / "state"),
        "XDG_RUNTIME_DIR": str(work / "run"),
    }
    (work / "run").mkdir(mode=0o700)
    argv = [sys.executable, "-m", "stockade.conformance", "--sandbox", cls.PLUGIN_NAME]
    argv += ["-q", "-k", cls.SELECT, "--conformance-table", str(table)]
    done = subprocess.run(
        argv, cwd=work, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    text = table.read_text() if table.exists() else ""
    return done.returncode, text, done.stdout[-4000:] + done.stderr[-2000:]


@pytest.fixture(scope="module")
def verdicts(request, tmp_path_factory):
    """Every selected mutant's kit run, started at once, two at a time."""
    folder = tmp_path_factory.mktemp("mutants")
    _dist(folder)
    wanted = {
        item.callspec.params["cls"]
        for item in request.session.items
        if item.module is request.module and hasattr(item, "callspec")
    }
    pool = ThreadPoolExecutor(WORKERS)
    runs: dict[str, Future[tuple[int, str, str]]] = {
        cls.PLUGIN_NAME: pool.submit(_judge, cls, folder)
        for cls in mutants.MUTANTS
        if cls in wanted and (ROOT or not cls.ROOT)
    }
    yield runs
    pool.shutdown(wait=True, cancel_futures=True)


def _row(table: str, promise: str) -> str:
    for line in table.splitlines():
        if line.startswith(f"| {promise} |"):
            return line
    return ""


@pytest.mark.parametrize("cls", mutants.MUTANTS, ids=lambda c: c.PLUGIN_NAME)
def test_the_kit_fails_the_mutant_naming_the_promise_it_breaks(cls, verdicts):
    if cls.ROOT and not ROOT:
        pytest.skip("only root can see this mistake's harm")
    status, table, output = verdicts[cls.PLUGIN_NAME].result()
    if cls.CONFINES_NOTHING and ROOT:  # the kit refuses before any attack
        assert status == REFUSED, output
        assert f"refusing to attack {cls.PLUGIN_NAME} as root" in output, output
        return
    assert table, output  # the kit ran and judged it
    row = _row(table, cls.BREAKS.value)
    assert status == 1, f"{cls.PLUGIN_NAME} passed the kit:\n{table}\n{output}"
    assert "| FAIL |" in row, f"{cls.BREAKS.value} not named:\n{table}\n{output}"
    assert f"FAILED {cls.BREAKS.value}" in table or f", {cls.BREAKS.value}" in table
    for promise in cls.ALSO:
        assert "| FAIL |" in _row(table, promise.value), f"{promise.value} not named:\n{table}"


def test_every_promise_has_a_mutant():
    """At least one mutant per core promise the kit can see broken by one (the rest are
    listed here, with why none is kept)."""
    from stockade.confine.promises import Promise

    without = {
        Promise.ORDINARY_WORK: "a provider too strict for it fails other promises' controls",
        Promise.QUOTA: "the host keeps the quota (stockade.run.quota), not the provider",
        Promise.SWAP_SAFE: "bubblewrap pins it; a Landlock mutant needs a path-following rule",
        Promise.NOTHING_OUTLIVES: "the executor's sweep and a PID namespace keep it twice",
        Promise.NO_TERMINAL_INJECTION: "a session of its own and seccomp's ioctl rule keep it",
    }
    broken = {p for cls in mutants.MUTANTS for p in (cls.BREAKS, *cls.ALSO)}
    assert set(Promise) - broken - set(without) == set()
