"""The Landlock provider's supervisor: refuses, while the command runs, what Landlock cannot.

Landlock only grants, so inside a writable workspace it cannot keep ``.git``, agent config
or dotfiles read-only. A second seccomp filter (:mod:`.bpf`) sends every call that creates,
opens for writing, truncates, renames, links or removes a path to a supervisor thread in the
command's own Landlock domain (:mod:`.serve`), which resolves the path as the kernel would
for the command (:mod:`.resolve`), refuses the protected paths (:mod:`.rules`) and performs
the rest itself (:mod:`.calls`), handing back the result or the descriptor.
"""

from __future__ import annotations

import functools
import os
import platform
from collections.abc import Callable

from . import bpf, kernel
from .rules import Rules
from .serve import Supervisor as _Serving

__all__ = ["Rules", "Supervisor", "unavailable"]

MIN_KERNEL = (5, 14)  # SECCOMP_ADDFD_FLAG_SEND


@functools.cache
def unavailable() -> str | None:
    """Why the supervisor cannot run on this kernel, or ``None`` when it can."""
    if platform.machine() != "x86_64":
        return f"the supervisor's filter is written for x86_64, not {platform.machine()}"
    release = os.uname().release.split("-")[0].split(".")
    try:
        version = (int(release[0]), int(release[1]))
    except (IndexError, ValueError):
        return f"cannot read the kernel's version from {os.uname().release!r}"
    if version < MIN_KERNEL:
        return f"Linux {version[0]}.{version[1]} has no SECCOMP_ADDFD_FLAG_SEND (needs 5.14)"
    if not kernel.sizes_match():
        return "this kernel's seccomp notification structures differ from the supervisor's"
    return None


class Supervisor(_Serving):
    """A run's supervisor, armed by the thread that spawns the command."""

    def arm(self, load_policy: Callable[[], None]) -> None:
        """On the spawning thread, Landlock applied: start serving (the thread takes this
        Landlock domain and no filter), load the shared policy, then the notifying filter,
        and hand its listener over. Raises ``OSError`` when a filter cannot be loaded."""
        self.start()
        load_policy()
        self.attach(kernel.install_listener(_program()))


@functools.cache
def _program() -> bytes:
    return bpf.program()
