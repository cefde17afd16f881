"""Example backends: an executor and a sandbox provider (tested by tests/test_docs_plugins.py).

``DryRunExecutor`` (``executor = "dry-run"``) starts nothing: it reports the argv it was
handed as the command's output, which shows what a sandbox provider would run.
``NiceProvider`` (``sandbox = "nice"``) runs the program under ``nice -n 10``. It confines
nothing, so it declares ``danger-full-access`` as its only mode and the host never picks it
for a confined mode.
"""

from __future__ import annotations

import hashlib
import shlex
import shutil
from collections.abc import Callable

from stockade import hookimpl
from stockade.confine.provider import SandboxProvider
from stockade.errors import SandboxUnavailable
from stockade.request.plan import LaunchPlan, Probe, SandboxFacts
from stockade.request.result import CollectedOutput, ProcessOutcome
from stockade.request.spec import ExecSpec
from stockade.run.executor import AbortToken, Executor


# --8<-- [start:executor]
class DryRunExecutor(Executor):
    """Runs nothing; the "output" is the argv the plan would have started."""

    PLUGIN_NAME = "dry-run"

    def run(self, plan: LaunchPlan, *, abort: AbortToken | None = None) -> ProcessOutcome:
        """Report ``plan.argv`` as stdout and exit 0."""
        text = shlex.join(plan.argv) + "\n"
        return ProcessOutcome(
            0,
            None,
            timed_out=False,
            aborted=abort is not None and abort.aborted,
            duration=0.0,
            stdout=_collected(text),
            stderr=_collected(""),
        )


def _collected(text: str) -> CollectedOutput:
    data = text.encode()
    return CollectedOutput(
        text, False, total_bytes=len(data), sha256=hashlib.sha256(data).hexdigest()
    )


@hookimpl
def stockade_register_executors(register: Callable[[type[Executor]], None]) -> None:
    """Register ``dry-run``."""
    register(DryRunExecutor)


# --8<-- [end:executor]


# --8<-- [start:provider]
class NiceProvider(SandboxProvider):
    """Runs the program at a lower CPU priority. It confines nothing, and says so."""

    PLUGIN_NAME = "nice"
    MODES = frozenset({"danger-full-access"})
    PRIORITY = 0

    @classmethod
    def probe(cls) -> Probe:
        """Usable when a ``nice`` binary is on PATH."""
        path = shutil.which("nice")
        if path is None:
            return Probe(False, "no nice on PATH (install coreutils)")
        return Probe(True, f"lowers CPU priority with {path}")

    def confine(self, spec: ExecSpec) -> LaunchPlan:
        """Prefix the argv with ``nice -n N``; refuse, never degrade, when that is impossible."""
        if spec.mode not in self.MODES:
            raise SandboxUnavailable(f"nice cannot enforce mode {spec.mode}")
        runner = shutil.which("nice")
        if runner is None:
            raise SandboxUnavailable("nice is no longer on PATH", hint="install coreutils")
        niceness = str(int(self.options.get("niceness", 10)))
        return LaunchPlan.from_spec(
            spec,
            SandboxFacts(self.PLUGIN_NAME, spec.mode),
            executable=runner,
            argv=("nice", "-n", niceness, spec.program, *spec.argv[1:]),
        )


@hookimpl
def stockade_register_sandboxes(register: Callable[[type[SandboxProvider]], None]) -> None:
    """Register ``nice``."""
    register(NiceProvider)


# --8<-- [end:provider]
