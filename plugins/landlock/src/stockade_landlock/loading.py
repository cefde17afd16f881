"""Loading a BPF program on the calling thread, laid out once so a run costs one call."""

from __future__ import annotations

import ctypes
import os

from . import abi

_SECCOMP_SET_MODE_FILTER = 1
_SYS_SECCOMP = 317  # x86_64; the shared policy is x86_64-only too


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


class _Filter:
    """A BPF program laid out for ``seccomp(2)`` once, so installing it costs one call."""

    def __init__(self, program: bytes) -> None:
        self._buffer = ctypes.create_string_buffer(program, len(program))
        self._prog = _SockFprog(len(program) // 8, ctypes.cast(self._buffer, ctypes.c_void_p))

    def load(self) -> None:
        """Install it on the calling thread (``no_new_privs`` must be set)."""
        rc = abi.libc().syscall(_SYS_SECCOMP, _SECCOMP_SET_MODE_FILTER, 0, ctypes.byref(self._prog))
        if rc != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"seccomp(SET_MODE_FILTER): {os.strerror(err)}")


_filters: dict[bytes, _Filter] = {}


def load_filter(program: bytes) -> None:
    """Install the BPF ``program`` on the calling thread (``no_new_privs`` must be set)."""
    loaded = _filters.get(program)
    if loaded is None:
        loaded = _filters.setdefault(program, _Filter(program))
    loaded.load()
