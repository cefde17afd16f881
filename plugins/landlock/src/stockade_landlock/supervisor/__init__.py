"""The Landlock provider's supervisor: refuses, while the command runs, what Landlock cannot.

Landlock only grants, so inside a writable workspace it cannot keep ``.git``, agent config
or dotfiles read-only. A second seccomp filter (:mod:`.bpf`) sends every call that creates,
opens for writing, truncates, renames, links or removes a path to a supervisor thread in the
command's own Landlock domain (:mod:`.serve`), which resolves the path as the kernel would
for the command (:mod:`.resolve`), refuses the protected paths (:mod:`.rules`) and performs
the rest itself (:mod:`.calls`), handing back the result or the descriptor. The same
holds for a socket's name (:mod:`.sockets`), a file's flags (:mod:`.flags`), its attributes
and times (:mod:`.metadata`), and a folder that becomes a repository by what it holds
(:mod:`.repositories`).
"""

from __future__ import annotations

import functools
import os
import platform

__all__ = ["declared", "unavailable"]

MIN_KERNEL = (5, 14)  # SECCOMP_ADDFD_FLAG_SEND


def declared() -> bool:
    """Whether this machine's kernel and architecture have what the supervisor needs, by
    their names alone (cheap: read when the provider's class is made)."""
    return _version_gap() is None


@functools.cache
def unavailable() -> str | None:
    """Why the supervisor cannot run on this kernel, or ``None`` when it can."""
    gap = _version_gap()
    if gap is not None:
        return gap
    from . import kernel  # ctypes and the C library: only when a run or a probe asks

    if not kernel.sizes_match():
        return "this kernel's seccomp notification structures differ from the supervisor's"
    return None


def _version_gap() -> str | None:
    if platform.machine() != "x86_64":
        return f"the supervisor's filter is written for x86_64, not {platform.machine()}"
    release = os.uname().release.split("-")[0].split(".")
    try:
        version = (int(release[0]), int(release[1]))
    except (IndexError, ValueError):
        return f"cannot read the kernel's version from {os.uname().release!r}"
    if version < MIN_KERNEL:
        return f"Linux {version[0]}.{version[1]} has no SECCOMP_ADDFD_FLAG_SEND (needs 5.14)"
    return None
