"""The Landlock provider's engine: rulesets, scratch and the filter, built on demand.

Landlock needs no user namespace, so it works where bubblewrap cannot start: under
Ubuntu's AppArmor restriction, in containers, as an ordinary user on kernels from 5.13.

How it is applied. Landlock and seccomp restrict the calling *thread* and whatever it starts
afterwards. So nothing runs in a forked child of the (multi-threaded) host: the ruleset and
the filter are prepared here, in the host, and the executor spawns the command from a fresh
thread that first calls :meth:`Prepared.restrict` on itself (``no_new_privs``, Landlock,
seccomp). The thread ends right after the spawn; the host's other threads are untouched.

What it enforces, in both modes: read and execute everywhere except the credential stores,
the system secrets, the host's ``/tmp``, ``/run`` and ``~/.cache`` and the other runs'
scratch (names there stay listable, contents do not), writes only to the run's own scratch
directory (``TMPDIR``) and, in ``workspace-write``, to the writable roots (their protected
paths are snapshotted by the host and put back after the run; the credential stores in them
are masked); no TCP (ABI 4) and the shared seccomp policy
(no sockets but netlink, and Unix ones only when allowed); abstract Unix sockets and signals
scoped to the sandbox (ABI 6); device ioctls refused (ABI 5). On an older ABI the missing
parts are listed, and the run happens only when ``accept_partial`` is set.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
import threading
import weakref
from collections.abc import Mapping
from typing import Any

import attrs
from attrs import frozen

from stockade import resolved
from stockade.confine import protected, seccomp, stores, system_secrets
from stockade.confine.hiding import Hiding, Recent
from stockade.confine.provider import looks_denied, proxy_env
from stockade.errors import SandboxUnavailable
from stockade.request.literals import HiddenKind
from stockade.request.plan import LaunchPlan, Probe, SandboxFacts
from stockade.request.result import ProcessOutcome
from stockade.request.spec import ExecSpec
from stockade.trees import remove_tree

from . import abi, supervisor
from .loading import load_filter as _load_filter
from .prepared import FULL_ABI, Prepared, missing_at
from .rules import Rule, build, expand
from .settings import Settings
from .supervisor import terminals
from .supervisor.rules import Rules
from .supervisor.serve import Supervisor

__all__ = ["FULL_ABI", "Engine", "Prepared", "_load_filter", "missing_at"]

# The host's scratch and socket directories: unreadable; a private TMPDIR replaces them.
# /dev too: only the devices below are granted (no disks, no terminals, no /dev/shm).
PRIVATE_DIRS = ("/tmp", "/var/tmp", "/run", "/var/run", "/dev")  # noqa: S108 - masked
_SINK = abi.FS_READ_FILE | abi.FS_WRITE_FILE | abi.FS_IOCTL_DEV  # ioctls there are harmless
DEVICES = {
    "/dev/null": _SINK,
    "/dev/zero": _SINK,
    "/dev/full": _SINK,
    "/dev/random": abi.FS_READ_FILE,
    "/dev/urandom": abi.FS_READ_FILE,
}
# What a masked path keeps: its names can be listed (Landlock cannot take that away from a
# directory above it without taking it from everything there), nothing else.
MASKED_KEEPS = abi.FS_READ_DIR
_MAX_BASES = 16  # cached rule expansions per provider (one per workspace and mode, mostly)
_MAX_SPARE = 8  # emptied scratch directories kept for the next runs


@frozen
class _Base:
    """A cached expansion of the shared rules, what it was made from, and the rulesets
    built from it, one per scratch directory (reused while that directory lives)."""

    rules: tuple[Rule, ...]
    listed: tuple[tuple[str, int], ...]  # (directory, mtime_ns) whose entries made rules
    hiding: Hiding  # what these rules keep from a command, the run's scratch aside
    built: dict[str, int] = attrs.field(factory=dict, eq=False)  # scratch -> ruleset fd

    def close(self) -> None:
        for fd in self.built.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self.built.clear()

    def fresh(self) -> bool:
        for directory, mtime in self.listed:
            try:
                if os.stat(directory).st_mtime_ns != mtime:
                    return False
            except OSError:
                return False
        return True


class Engine:
    """The Landlock provider's work, imported only when a command is confined with it."""

    PLUGIN_NAME = "landlock"

    def __init__(self, options: Mapping[str, Any]) -> None:
        self.settings = Settings.parse(options)
        self._prepared: dict[int, Prepared] = {}
        self._bases: dict[tuple[object, ...], _Base] = {}
        self._lock = threading.Lock()
        self._scratch: str | None = None
        self._spare: list[str] = []
        self.recent = Recent()  # what each spec confined last is hidden from
        self._veil = terminals.Veil()

    def _supervised(self) -> bool:
        return self.settings.supervise and supervisor.unavailable() is None

    @staticmethod
    def probe() -> Probe:
        """Whether Landlock is enabled here, which ABI it offers, and the seccomp filter."""
        level = abi.version()
        if level == 0:
            return Probe(
                False,
                "Landlock is not enabled in this kernel (needs 5.13 and landlock in lsm=)",
            )
        why = seccomp.unavailable()
        if why is not None:
            return Probe(
                False, f"Landlock ABI {level}; but the seccomp filter cannot be built: {why}"
            )
        missing = missing_at(level)
        gaps = (
            f"; partial: no {', no '.join(missing)} (runs need "
            "plugins.settings.landlock.accept_partial = true)"
            if missing
            else ""
        )
        why = supervisor.unavailable()
        held = (
            "; supervisor: protected paths read-only while a command runs"
            if why is None
            else f"; no supervisor ({why}): protected paths are put back after each run"
        )
        return Probe(True, f"Landlock ABI {level}{gaps}{held}")

    def level(self) -> int:
        """The ABI in use: the kernel's, capped by the ``max_abi`` setting."""
        level = abi.version()
        cap = self.settings.max_abi
        return min(level, cap) if cap is not None else level

    def confine(self, spec: ExecSpec) -> LaunchPlan:
        """Prepare the ruleset and the filter; the plan's ``restrict`` applies them."""
        level = self.level()
        if level == 0:
            raise SandboxUnavailable(
                "Landlock is not enabled in this kernel",
                hint="run `stockade doctor`; boot with lsm=...,landlock or use bubblewrap",
            )
        missing = missing_at(level, unix_sockets=self.settings.unix_sockets)
        if missing and not self.settings.accept_partial:
            raise SandboxUnavailable(
                f"Landlock ABI {level} cannot enforce: {'; '.join(missing)}",
                hint="set plugins.settings.landlock.accept_partial = true to run anyway",
                details={"abi": level, "missing": list(missing)},
            )
        port = spec.egress.port if spec.egress is not None else None
        if port is not None and level < 4:
            raise SandboxUnavailable(
                f"Landlock ABI {level} has no TCP rules, so a network command cannot be held "
                "to its egress proxy here",
                hint="run network commands under bubblewrap, or on a kernel with Landlock ABI 4",
                details={"abi": level},
            )
        # The writes are direct: a setuid or setgid bit is refused, by the supervisor (which
        # tells a folder from a file) or, without one, by the filter.
        program = seccomp.required(
            network=port is not None,
            unix=self.settings.unix_sockets,
            setid=self._supervised(),
            cache_dir=self.settings.seccomp_cache,
        )
        writable = self._writable(spec)
        survey = self._survey(spec, writable)
        base = self._base(level, spec, writable, port, survey)
        scratch = self._take_scratch()
        hidden, shown = base.hiding.hidden, base.hiding.shown
        self.recent.remember(spec, Hiding(hidden, (*shown, scratch)))
        try:
            ruleset = self._ruleset(level, base, port, scratch)
        except BaseException:
            self._give_back(scratch)
            raise
        guard, veil = None, None
        if self._supervised():
            guard = Supervisor(Rules.of(survey) if survey is not None else Rules())
            veil = self._veil.ruleset(level)
        prepared = Prepared(ruleset, program, scratch, base.rules, guard, veil)
        self._prepared[prepared.ruleset] = prepared
        env = {**spec.env, "TMPDIR": scratch, "XDG_CACHE_HOME": os.path.join(scratch, "cache")}
        if port is not None:
            env.update(proxy_env(port, _trust(spec, scratch)))
        facts = SandboxFacts(
            self.PLUGIN_NAME,
            spec.mode,
            enforcement="partial" if missing else "full",
            missing=missing,
            protection=None if survey is None else ("read-only" if survey.held else "put-back"),
        )
        return LaunchPlan.from_spec(
            spec, facts, env=env, restrict=prepared.restrict, new_session=True, protection=survey
        )

    def interpret(self, plan: LaunchPlan, outcome: ProcessOutcome) -> SandboxFacts:
        """Add ``denied`` when a failed run's stderr reads like a Landlock or seccomp refusal."""
        if looks_denied(outcome):
            return attrs.evolve(plan.facts, denied=True)
        return plan.facts

    def release(self, plan: LaunchPlan) -> None:
        """Close the ruleset and give the scratch directory back."""
        restrict = plan.restrict
        owner = getattr(restrict, "__self__", None)
        if isinstance(owner, Prepared) and self._prepared.pop(owner.ruleset, None) is owner:
            if owner.supervisor is not None:
                owner.supervisor.stop()
            if owner.veil is not None:
                os.close(owner.veil)
            with contextlib.suppress(OSError):
                os.close(owner.ruleset)
            self._give_back(owner.scratch)

    def _writable(self, spec: ExecSpec) -> list[str]:
        """The writable roots of ``spec``, resolved: in ``read-only`` only its run home."""
        home = (spec.home,) if spec.home else ()
        if spec.mode != "workspace-write":
            return protected.writable_roots(home)
        return protected.writable_roots(
            (
                spec.workspace,
                *self.settings.writable_roots,
                *spec.grant_writable,
                *spec.caches,
                *home,
            )
        )

    def _survey(self, spec: ExecSpec, writable: list[str]) -> protected.Survey | None:
        """The protected paths in the writable roots but the run's home and caches (the
        agent's own scratch), looked for on every run. Landlock cannot keep them read-only
        without closing the folders above them to new entries, so it does not: the host
        snapshots them and puts them back after the run (``held`` false)."""
        own = {resolved.realpath(p) for p in (*spec.caches, *((spec.home,) if spec.home else ()))}
        roots = [r for r in writable if r not in own]
        if spec.mode != "workspace-write" or not roots:
            return None
        settings = self.settings
        found = protected.survey(
            roots,
            settings.scan_limit,
            setting="plugins.settings.landlock.scan_limit",
            writable_dotfiles=protected.opened(spec.writable_dotfiles),
        )
        return attrs.evolve(
            found,
            held=self._supervised(),
            snapshot_limit=settings.snapshot_limit_mb << 20,
            snapshot_setting="plugins.settings.landlock.snapshot_limit_mb",
        )

    def _base(
        self,
        level: int,
        spec: ExecSpec,
        writable: list[str],
        port: int | None = None,
        survey: protected.Survey | None = None,
    ) -> _Base:
        """The shared rules for these grants and carve-outs, expanded once while they hold.

        The system secrets are looked for on every run; the expansion into rules is reused
        for as long as the same carve-outs exist and no directory it listed has changed. Each
        run builds its ruleset from it (see :func:`_ruleset`). The protected paths of
        ``survey`` are not carved out (the host puts them back after the run), but its
        credential stores are: masked, as under a home.
        """
        settings = self.settings
        every = abi.FS_ALL
        keep: list[str] = []
        cache = seccomp.cache_path(
            network=port is not None,
            unix=settings.unix_sockets,
            setid=self._supervised(),
            cache_dir=settings.seccomp_cache,
        )
        keep += [sys.prefix, sys.base_prefix]
        if cache is not None:
            keep.append(os.path.dirname(cache))
        veils = self._veils(spec, writable, survey)
        masked = [path for path, _ in veils]
        grants = [("/", abi.FS_READ)]
        grants += [(root, every) for root in writable]
        # Caches (inside the hidden store) are read in every mode, written in one that writes.
        grants += [(c, abi.FS_READ) for c in spec.caches if c not in writable]
        grants += list(DEVICES.items())
        if self._supervised():  # the supervisor's domain; the command's veil takes it back
            grants += list(terminals.DEVICES.items())
        carveouts = [(p, every & ~MASKED_KEEPS) for p in masked if os.path.lexists(p)]
        carveouts += [(p, every & ~abi.FS_READ) for p in keep if os.path.lexists(p)]
        key = (level, tuple(grants), tuple(carveouts), port)
        with self._lock:
            cached = self._bases.get(key)
            if cached is not None and cached.fresh():
                return cached
            listed: list[str] = []
            rules = expand(grants, carveouts, listed)
            stamps = tuple((d, _mtime(d)) for d in listed)
            hiding = Hiding(
                [(resolved.realpath(p), kind) for p, kind in veils if os.path.lexists(p)],
                [resolved.realpath(g) for g, _ in grants[1:]],  # all but "/"
            )
            base = _Base(tuple(rules), stamps, hiding)
            if cached is not None:
                cached.close()  # each plan holds its own duplicate
            if len(self._bases) >= _MAX_BASES and key not in self._bases:
                _, oldest = self._bases.popitem()
                oldest.close()
            self._bases[key] = base
            return base

    def _veils(
        self, spec: ExecSpec, writable: list[str], survey: protected.Survey | None
    ) -> list[tuple[str, HiddenKind]]:
        """What the rules carve out of every read, and why (system secrets looked for now)."""
        homes = protected.homes(spec.env, os.environ)
        secrets = system_secrets.system_secrets(homes, spec.system_secrets)  # globs expanded now
        system_secrets.refuse_bound_secrets((*writable, spec.workspace, *spec.caches), secrets)
        veils: list[tuple[str, HiddenKind]] = [(p, "private") for p in PRIVATE_DIRS]
        veils += [(p, "deny-read") for p in self.settings.deny_read]
        veils += [(p, "store") for p in spec.hidden]
        veils += [(p, "private-data") for p in spec.private_data]
        veils += [(p, "socket") for p in protected.socket_paths(os.environ)]
        # Every run's scratch: listable, and only a run's own is granted (per run).
        veils.append((self._scratch_parent(), "private"))
        veils += [(p, "system-secret") for p in secrets]
        for home in homes:
            veils.append((os.path.join(home, ".cache"), "private"))
            veils += [(os.path.join(home, n), "credential-store") for n in stores.CREDENTIAL_STORES]
        veils += [(p, "credential-store") for p in (survey.masked if survey is not None else ())]
        return veils

    def _ruleset(self, level: int, base: _Base, port: int | None, scratch: str) -> int:
        """This run's ruleset (a descriptor the plan owns): ``base``'s rules and one for its
        own ``scratch``, so no run reads or writes another's.

        Built once per scratch directory and rules, and reused (duplicated) when the same
        emptied directory serves a later run: it grants nothing another run holds.
        """
        with self._lock:
            built = base.built.get(scratch)
            if built is not None:
                return os.dup(built)
        fd = build(level, base.rules, port, scratch)
        with self._lock:
            current = any(b is base for b in self._bases.values())
            if current and scratch not in base.built and len(base.built) < _MAX_SPARE:
                base.built[scratch] = fd
                return os.dup(fd)
        return fd

    def _forget(self, scratch: str) -> None:
        """Close the rulesets built for ``scratch``: it is being removed."""
        with self._lock:
            for base in self._bases.values():
                fd = base.built.pop(scratch, None)
                if fd is not None:
                    os.close(fd)

    def close(self) -> None:
        """Close every cached ruleset and remove the spare scratch folders and their parent.

        Plans still unreleased keep their own ruleset duplicates; the host closes this only
        after its commands are done."""
        with self._lock:
            bases, self._bases = list(self._bases.values()), {}
            spare, self._spare = self._spare, []
            parent, self._scratch = self._scratch, None
        for base in bases:
            base.close()
        self._veil.close()
        for folder in [*spare, *([parent] if parent else [])]:
            remove_tree(folder)  # without recursion: a command's home, of any depth

    def _take_scratch(self) -> str:
        """An empty scratch directory of this run's own: a spare one, or a new one."""
        with self._lock:
            if self._spare:
                return self._spare.pop()
        return tempfile.mkdtemp(prefix="run-", dir=self._scratch_parent())

    def _give_back(self, scratch: str) -> None:
        """Keep an emptied scratch directory for the next run; its inode is never shared
        by two runs at once, and nothing of one run is left for the next."""
        try:
            with os.scandir(scratch) as entries:
                empty = next(entries, None) is None
        except OSError:
            return
        if not empty:
            self._forget(scratch)
            remove_tree(scratch)  # without recursion: the command made a tree of any depth
            return
        with self._lock:
            if len(self._spare) < _MAX_SPARE:
                self._spare.append(scratch)
                return
        self._forget(scratch)
        with contextlib.suppress(OSError):
            os.rmdir(scratch)

    def _scratch_parent(self) -> str:
        """This provider's directory of run scratch directories (made once, removed at exit)."""
        with self._lock:
            if self._scratch is None:
                self._scratch = tempfile.mkdtemp(prefix="stockade-landlock-")
                weakref.finalize(self, remove_tree, self._scratch)
            return self._scratch


def _mtime(directory: str) -> int:
    """``directory``'s mtime, or -1 when it is gone (an expansion that listed it is stale)."""
    try:
        return os.stat(directory).st_mtime_ns
    except OSError:
        return -1


def _trust(spec: ExecSpec, scratch: str) -> str | None:
    """The run's trust bundle, copied into the command's scratch folder (the proxy's own
    folder lies where Landlock allows no read); ``None`` without one."""
    if spec.egress is None or spec.egress.ca_bundle is None:
        return None
    copy = os.path.join(scratch, os.path.basename(spec.egress.ca_bundle))
    shutil.copyfile(spec.egress.ca_bundle, copy)
    return copy
