"""What every mutant shares: the mistake's machinery (:class:`Mutant`) and the helpers that
make one (a module with a name swapped, bwrap's options rewritten)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, ClassVar

import attrs

from stockade.confine import protected, seccomp, system_secrets
from stockade.confine.promises import Promise
from stockade.confine.provider import SandboxProvider, sealed_memfd
from stockade.request.plan import HiddenPath, LaunchPlan
from stockade.request.spec import ExecSpec


class Shim:
    """A module with some names replaced: every other name is the module's own."""

    def __init__(self, module: ModuleType, **overrides: object) -> None:
        self._module = module
        self.__dict__.update(overrides)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


Patch = tuple[object, str, object]


class Mutant(SandboxProvider):
    """One mistake: ``patches`` hold while ``confine`` and ``hides`` run; ``mutate`` may
    rewrite the plan. ``BREAKS``: the promise the kit must name; ``SELECT``: the ``-k``
    expression of the kit's attacks to run; ``ROOT``: only root can see the harm."""

    BREAKS: ClassVar[Promise]
    SELECT: ClassVar[str]
    ROOT: ClassVar[bool] = False
    CONFINES_NOTHING: ClassVar[bool] = False  # as root the kit must refuse to attack it
    ALSO: ClassVar[frozenset[Promise]] = frozenset()  # more promises it must name

    def patches(self) -> list[Patch]:
        return []

    def mutate_spec(self, spec: ExecSpec) -> ExecSpec:
        return spec

    def mutate(self, plan: LaunchPlan, spec: ExecSpec) -> LaunchPlan:
        del spec
        return plan

    @contextlib.contextmanager
    def _mutated(self) -> Iterator[None]:
        saved = []
        try:
            for target, name, value in self.patches():
                saved.append((target, name, getattr(target, name)))
                setattr(target, name, value)
            yield
        finally:
            for target, name, value in reversed(saved):
                setattr(target, name, value)

    def confine(self, spec: ExecSpec) -> LaunchPlan:
        spec = self.mutate_spec(spec)
        with self._mutated():
            plan = super().confine(spec)  # type: ignore[safe-super]
        if plan.facts.provider != self.PLUGIN_NAME:  # a copy says its own name (Landlock's
            facts = attrs.evolve(plan.facts, provider=self.PLUGIN_NAME)  # engine names it)
            plan = attrs.evolve(plan, facts=facts)
        return self.mutate(plan, spec)

    def hides(self, path: str, spec: ExecSpec) -> HiddenPath | None:
        spec = self.mutate_spec(spec)
        with self._mutated():
            return super().hides(path, spec)


# --- helpers for the mistakes -----------------------------------------------------------------


def without_secret(prefix: str) -> Shim:
    real = system_secrets.system_secrets

    def found(homes: Any, extra: Any = ()) -> list[str]:
        return [p for p in real(homes, extra) if not p.startswith(prefix)]

    return Shim(system_secrets, system_secrets=found)


def survey_without(name: str) -> Shim:
    real = protected.survey

    def survey(*args: Any, **kw: Any) -> protected.Survey:
        found = real(*args, **kw)
        kept = tuple(p for p in found.read_only if os.path.basename(p) != name)
        return attrs.evolve(found, read_only=kept)

    return Shim(protected, survey=survey)


def setid_allowed() -> Shim:
    """:mod:`stockade.confine.seccomp` whose filter never has the setuid rule: every
    ``required(...)`` as if asked with ``setid=True``."""

    def required(**kw: Any) -> bytes:
        return seccomp.required(**{**kw, "setid": True})

    return Shim(seccomp, required=required)


def bwrap_args(plan: LaunchPlan, change: Callable[[list[str]], list[str]]) -> LaunchPlan:
    """``plan`` with bwrap's options (its ``--args`` memfd) rewritten by ``change``."""
    old = plan.pass_fds[0]
    raw = os.pread(old, 1 << 24, 0)
    args = change([a.decode() for a in raw.split(b"\0")[:-1]])
    new = sealed_memfd("stockade-bwrap-args", b"".join(a.encode() + b"\0" for a in args))
    os.close(old)
    argv = list(plan.argv)
    argv[argv.index("--args") + 1] = str(new)
    return attrs.evolve(plan, argv=argv, pass_fds=(new, *plan.pass_fds[1:]))


def drop(args: list[str], option: str, values: int = 0) -> list[str]:
    out, skip = [], 0
    for arg in args:
        if skip:
            skip -= 1
        elif arg == option:
            skip = values
        else:
            out.append(arg)
    return out


def rebind(args: list[str], paths: set[str], old: str, new: str) -> list[str]:
    out = list(args)
    for i in range(len(out) - 2):
        if out[i] == old and out[i + 1] in paths and out[i + 1] == out[i + 2]:
            out[i] = new
    return out
