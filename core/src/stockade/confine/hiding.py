"""What a sandbox hides from a command: asked before it starts, and after it fails.

Each confining provider hides some folders (the host's ``/tmp``, ``/var/tmp``, ``/run``,
``/dev/shm``, masked credential stores, system secrets, ``deny_read``, Stockade's store)
and shows some again beneath them (a workspace under ``/tmp``, a ``--grant-write``
folder). It fills a :class:`Hiding` from the same lists it masks with and answers
:meth:`~stockade.confine.provider.SandboxProvider.hides` from it, so every provider answers by one
rule. The host asks twice: before a command starts (a program, or the interpreter its
``#!`` line names, in a hidden folder is refused with :class:`~stockade.errors.SpawnFailed`
naming the folder and the fix, instead of failing inside with a raw error), and after a
failed run (arguments that name a hidden path are listed in the facts, ``denied`` set).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import TYPE_CHECKING

import attrs
from attrs import frozen

from .. import resolved
from ..errors import SpawnFailed
from ..request.literals import HiddenKind
from ..request.plan import HiddenPath, SandboxFacts
from ..request.result import ProcessOutcome
from ..request.spec import ExecSpec

if TYPE_CHECKING:
    from .provider import SandboxProvider

# Paths that name the command's own process or descriptors: nothing of the host's there.
_OWN = ("/proc", "/dev/fd", "/dev/stdin", "/dev/stdout", "/dev/stderr")
_MAX_ARGUMENTS = 256  # arguments looked at after a failed run (an argv may be huge)
_MAX_FOUND = 16  # hidden arguments listed at most
_MAX_SHEBANGS = 4  # the kernel follows this many nested #! interpreters


def _veils(items: Iterable[tuple[str, HiddenKind]]) -> tuple[tuple[str, HiddenKind], ...]:
    return tuple(items)


def _folders(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(items)


def _depth(path: str) -> int:
    return path.rstrip("/").count("/")


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


@frozen
class Hiding:
    """The folders a sandbox hides from one command, and those it shows again beneath them.

    Folders are laid outer before inner: a shown folder shows what lies beneath it until
    a hidden one inside it hides it again; at one path, hiding wins (a mask is laid over a
    bind; a Landlock carve-out takes the rights its grant gave). A path is reported with
    the outermost hidden folder below the last shown one (beneath a private ``/tmp``, a
    ``deny_read`` folder adds nothing: ``/tmp`` is the cause).

    Attributes:
        hidden: ``(folder, kind)``: resolved folders or files whose host content the
            command cannot see.
        shown: resolved folders bound or granted again (workspace, writable roots, caches).
    """

    hidden: tuple[tuple[str, HiddenKind], ...] = attrs.field(converter=_veils)
    shown: tuple[str, ...] = attrs.field(default=(), converter=_folders)

    def find(self, path: str) -> HiddenPath | None:
        """Where ``path`` (absolute) is hidden, as named or as it resolves; ``None`` when
        the command sees it (or ``path`` is relative)."""
        if not os.path.isabs(path):
            return None
        named = "/" + os.path.normpath(path).lstrip("/")
        for form in dict.fromkeys((named, resolved.realpath(named))):
            veil = self._veil(form)
            if veil is not None:
                return HiddenPath(path, veil[0], veil[1])
        return None

    def _veil(self, path: str) -> tuple[str, HiddenKind] | None:
        # Outer before inner, a shown folder before a hidden one at the same path.
        layers: list[tuple[int, int, str, HiddenKind | None]] = [
            (_depth(f), 1, f, k) for f, k in self.hidden if _inside(path, f)
        ]
        if not layers:
            return None
        layers += [(_depth(f), 0, f, None) for f in self.shown if _inside(path, f)]
        veil: tuple[str, HiddenKind] | None = None
        for _, _, folder, kind in sorted(layers, key=lambda layer: layer[:2]):
            if kind is None:
                veil = None  # shown again from here down
            elif veil is None:
                veil = (folder, kind)  # a hidden folder within a hidden one adds nothing
        return veil


class Recent:
    """The :class:`Hiding` of the specs a provider confined last, so that asking about a
    spec right after confining it costs no second survey of its workspace."""

    def __init__(self, size: int = 32) -> None:
        self._size = size
        self._items: OrderedDict[tuple[object, ...], Hiding] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _key(spec: ExecSpec) -> tuple[object, ...]:
        # Everything a provider's hiding depends on; never the credentials in ``env``.
        return (
            spec.action_id,
            spec.mode,
            spec.cwd,
            spec.workspace,
            spec.env.get("HOME"),
            spec.grant_writable,
            spec.hidden,
            spec.system_secrets,
            spec.home,
            spec.caches,
            spec.writable_dotfiles,
        )

    def remember(self, spec: ExecSpec, hiding: Hiding) -> None:
        """Keep ``hiding`` as what ``spec`` is hidden from."""
        key = self._key(spec)
        with self._lock:
            self._items[key] = hiding
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def recall(self, spec: ExecSpec) -> Hiding | None:
        """What was kept for ``spec``, if anything."""
        with self._lock:
            return self._items.get(self._key(spec))


def interpreters(program: str) -> list[str]:
    """The absolute interpreters ``program``'s ``#!`` line names, then theirs (the kernel
    follows up to four); empty for a binary, or a file the host cannot read."""
    found: list[str] = []
    current = program
    for _ in range(_MAX_SHEBANGS):
        try:
            with open(current, "rb") as handle:
                head = handle.read(256)
        except OSError:
            break
        if not head.startswith(b"#!"):
            break
        words = head[2:].split(b"\n", 1)[0].split()
        if not words:
            break
        interpreter = os.fsdecode(words[0])
        if not os.path.isabs(interpreter) or interpreter in found:
            break
        found.append(interpreter)
        current = interpreter
    return found


def refuse_hidden_program(provider: SandboxProvider, spec: ExecSpec) -> None:
    """Refuse, before it starts, a program (or its ``#!`` interpreter) that ``provider``
    hides: inside the sandbox it would fail with a raw ``No such file`` or ``Permission
    denied``, or start without what lies beside it (a virtualenv's ``pyvenv.cfg``).

    Raises:
        SpawnFailed: naming the program, the hidden path, the folder that hides it and
            what to do (exit status 126).
    """
    found = provider.hides(spec.program, spec)
    via = None
    if found is None:
        for interpreter in interpreters(spec.program):
            found = provider.hides(interpreter, spec)
            if found is not None:
                via = interpreter
                break
    if found is None:
        return
    subject = "it" if via is None else f"its #! interpreter {via}"
    grant = _grantable(found)
    details: dict[str, object] = {
        "program": spec.program,
        "hidden": found.path,
        "folder": found.folder,
        "kind": found.kind,
        "reason": found.reason,
    }
    if via is not None:
        details["interpreter"] = via
    if grant is not None:
        details["grant"] = grant
    raise SpawnFailed(
        f"cannot start {spec.program}: {subject} lies in {found.folder}, which the sandbox "
        f"hides ({found.reason})",
        hint=_hint(found, grant),
        details=details,
    )


def _grantable(found: HiddenPath) -> str | None:
    """The folder just below a private folder that holds ``found``: a ``--grant-write``
    shows it (and only it) to the command. ``None`` when there is none to name."""
    if found.kind != "private":
        return None
    named = "/" + os.path.normpath(found.path).lstrip("/")
    for form in (named, resolved.realpath(named)):
        rest = form[len(found.folder.rstrip("/")) + 1 :] if _inside(form, found.folder) else ""
        if "/" in rest:
            return os.path.join(found.folder, rest.split("/", 1)[0])
    return None


def _hint(found: HiddenPath, grant: str | None) -> str:
    if found.kind == "private":
        move = (
            f"move or install it outside {found.folder} (a virtualenv: make it outside "
            "/tmp and /var/tmp, e.g. in the workspace)"  # noqa: S108 - advice, not a path
        )
        if grant is None:
            return move
        return f"{move}, or show its folder to this command with `--grant-write {grant}`"
    if found.kind == "deny-read":
        return f"install it elsewhere, or take {found.folder} out of deny_read"
    if found.kind == "private-data":
        return "it is private data: a person grants one command it with `--read-private`"
    return "the sandbox hides that folder on purpose: install or move the program elsewhere"


def hidden_arguments(
    provider: SandboxProvider, spec: ExecSpec, facts: SandboxFacts, outcome: ProcessOutcome
) -> SandboxFacts:
    """``facts``, with ``hidden`` (and ``denied``) set when a failed run named a path
    ``provider`` hides: an argument that is an absolute path, or ``--option=/path``.

    Only a path that exists on the host, or whose folder does (a file it was to write),
    counts; a run that succeeded, timed out or was aborted keeps its facts.
    """
    if outcome.exit_code in (0, None) or outcome.timed_out or outcome.aborted:
        return facts
    found: list[HiddenPath] = []
    seen: set[str] = set()
    for argument in spec.argv[1 : _MAX_ARGUMENTS + 1]:
        path = _path_in(argument)
        if path is None or path in seen or len(found) >= _MAX_FOUND:
            continue
        seen.add(path)
        if not (os.path.lexists(path) or os.path.isdir(os.path.dirname(path))):
            continue
        try:
            hidden = provider.hides(path, spec)
        except Exception:  # noqa: BLE001, S112 - a hint must never cost the result
            continue
        if hidden is not None:
            found.append(hidden)
    if not found:
        return facts
    return attrs.evolve(facts, denied=True, hidden=(*facts.hidden, *found))


def _path_in(argument: str) -> str | None:
    """The absolute path an argument names (``/x`` or ``--opt=/x``), if any."""
    if argument.startswith("-") and "=" in argument:
        argument = argument.split("=", 1)[1]
    if not argument.startswith("/") or "\0" in argument:
        return None
    if any(_inside(argument, own) for own in _OWN):
        return None
    return argument
