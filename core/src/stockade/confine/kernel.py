"""Facts about this kernel that decide which confinement can work (for ``stockade doctor``).

Read-only probes: nothing here changes the process. The Landlock ABI version comes from
``landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)``, which has no binding
in the standard library or in a maintained package, hence the raw syscall through ctypes.
"""

from __future__ import annotations

import os
import platform

from attrs import frozen

_SYS_LANDLOCK_CREATE_RULESET = {"x86_64": 444, "aarch64": 444}
_LANDLOCK_CREATE_RULESET_VERSION = 1


@frozen
class Fact:
    """One thing checked on this machine.

    Attributes:
        name: what was checked.
        ok: whether it is usable.
        detail: what was found, or why it is missing.
    """

    name: str
    ok: bool
    detail: str


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return None


def user_namespaces() -> Fact:
    """Whether unprivileged user namespaces look enabled."""
    limit = _read("/proc/sys/user/max_user_namespaces")
    clone = _read("/proc/sys/kernel/unprivileged_userns_clone")
    apparmor = _read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
    if limit == "0":
        return Fact("user namespaces", False, "user.max_user_namespaces is 0")
    if clone == "0":
        return Fact("user namespaces", False, "kernel.unprivileged_userns_clone is 0")
    if apparmor == "1":
        return Fact(
            "user namespaces",
            False,
            "AppArmor restricts unprivileged user namespaces (Ubuntu 24.04 default)",
        )
    return Fact("user namespaces", True, f"max_user_namespaces={limit}")


def landlock_abi() -> Fact:
    """The Landlock ABI version the kernel offers, if any."""
    number = _SYS_LANDLOCK_CREATE_RULESET.get(platform.machine())
    if number is None:
        return Fact("landlock", False, f"unknown syscall number on {platform.machine()}")
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    abi = libc.syscall(
        number, None, ctypes.c_size_t(0), ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION)
    )
    if abi < 0:
        err = ctypes.get_errno()
        why = {38: "not built into this kernel", 95: "disabled at boot (lsm= lacks landlock)"}
        return Fact("landlock", False, why.get(err, os.strerror(err)))
    return Fact("landlock", True, f"ABI version {abi}")


def seccomp() -> Fact:
    """Whether seccomp filters are available."""
    actions = _read("/proc/sys/kernel/seccomp/actions_avail")
    if actions is None:
        return Fact("seccomp", False, "/proc/sys/kernel/seccomp is missing")
    return Fact("seccomp", True, f"actions: {actions}")


def all_facts() -> list[Fact]:
    """Every kernel fact, in a stable order."""
    return [user_namespaces(), landlock_abi(), seccomp()]
