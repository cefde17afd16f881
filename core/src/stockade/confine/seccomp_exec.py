"""Load the shared seccomp filter in a sandbox whose runner cannot take ``--seccomp FD``.

bwrap loads the filter itself, right before the command (``--seccomp FD``); the Landlock
provider loads it on the spawning thread (``LaunchPlan.restrict``). A provider whose runner
has no such option (util-linux ``unshare``, a home-made init) puts this launcher last, in
front of the command::

    RUNNER [OPTIONS...] PYTHON -I -S -c SOURCE FD PROGRAM ARGV0 [ARG...]

:func:`launcher` builds that tail, from a descriptor :func:`stockade.confine.seccomp.program_fd`
made (pass it in ``LaunchPlan.pass_fds``). Inside the sandbox, once the runner has made its
namespaces and mounts (which the filter refuses: it denies ``unshare``, ``mount``,
``setns``, ...), the launcher reads the BPF program from ``FD``, closes it, sets
``no_new_privs``, installs the filter on itself with ``seccomp(2)`` and becomes the command
(:func:`stockade.run.spawn.become`). If any step fails it says why on stderr and exits with
status 127: the command never runs without the filter.

Why by hand: libseccomp compiles the policy on the host (:mod:`stockade.confine.seccomp`);
loading a compiled program is two system calls. The launcher runs as ``python -I -S`` with
the standard library only (a virtualenv under ``/tmp`` is hidden in the sandbox), so it is
carried in as source, as the bubblewrap provider's egress forwarder is. This module
therefore imports nothing of Stockade at its top.
"""

from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Callable, Iterable, Sequence

__all__ = ["install", "launcher", "main", "read_program", "source"]

_PR_SET_NO_NEW_PRIVS = 38
_SECCOMP_SET_MODE_FILTER = 1
_SYS_SECCOMP = {"x86_64": 317, "aarch64": 277}
_BPF_INSN = 8  # bytes in one struct sock_filter
_MAX_INSNS = 4096  # BPF_MAXINSNS: the kernel refuses a longer program
FAILED = 127
"""The launcher's exit status when it could not load the filter or start the command."""


class _SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def install(program: bytes) -> None:
    """Set ``no_new_privs`` and install the BPF ``program`` on the calling thread; what it
    starts after this inherits both, for good.

    Raises:
        ValueError: ``program`` is not a whole number of BPF instructions, or too long.
        OSError: the kernel refused (no seccomp, an unknown machine, a bad program).
    """
    if not program or len(program) % _BPF_INSN or len(program) // _BPF_INSN > _MAX_INSNS:
        raise ValueError(f"not a BPF program: {len(program)} bytes")
    number = _SYS_SECCOMP.get(platform.machine())
    if number is None:
        raise OSError(0, f"no seccomp system call number known for {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}")
    buffer = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // _BPF_INSN, ctypes.cast(buffer, ctypes.c_void_p))
    if libc.syscall(number, _SECCOMP_SET_MODE_FILTER, 0, ctypes.byref(prog)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"seccomp(SECCOMP_SET_MODE_FILTER): {os.strerror(err)}")


def read_program(fd: int) -> bytes:
    """The whole content of ``fd`` from offset 0 (a sealed memfd holds one BPF program)."""
    size = os.fstat(fd).st_size
    data = b""
    while len(data) < size:
        chunk = os.pread(fd, size - len(data), len(data))
        if not chunk:
            break
        data += chunk
    return data


def main(args: Sequence[str], become: Callable[[str, Sequence[str]], None]) -> int:
    """``FD PROGRAM ARGV0 [ARG...]``: load the filter from ``FD``, then ``become(PROGRAM,
    [ARGV0, ARG...])``. Returns :data:`FAILED` (after a line on stderr) when it cannot."""
    if len(args) < 3 or not args[0].isdigit():
        os.write(2, b"stockade seccomp launcher: usage: FD PROGRAM ARGV0 [ARG...]\n")
        return FAILED
    fd = int(args[0])
    try:
        program = read_program(fd)
        os.close(fd)  # the command must not hold it
        install(program)
    except (OSError, ValueError) as error:
        os.write(2, f"stockade: the seccomp filter was not loaded: {error}\n".encode())
        return FAILED
    become(args[1], list(args[2:]))
    return FAILED  # become returns only when it failed (it exits first, in practice)


def launcher(
    fd: int,
    program: str,
    argv: Sequence[str],
    *,
    python: str | None = None,
    hidden: Iterable[str] | None = None,
) -> tuple[str, ...]:
    """The argv that loads the filter in ``fd`` and then runs ``program`` as ``argv``: put
    it after the runner's own options, and ``fd`` in the plan's ``pass_fds``.

    Args:
        fd: a descriptor holding the BPF program (:func:`stockade.confine.seccomp.program_fd`).
        program: the command's executable, absolute (``spec.program``).
        argv: the command's argv, ``argv[0]`` included (``spec.argv``).
        python: the interpreter to run it with, as the sandbox sees it; by default this
            one's real file, else its base interpreter's, else ``/usr/bin/python3``: the
            first that lies in none of ``hidden``.
        hidden: folders the sandbox hides; default
            :data:`stockade.confine.scratch.SCRATCH_DIRS`.

    Raises:
        stockade.errors.SandboxUnavailable: every candidate interpreter lies in ``hidden``.
    """
    interpreter = python or _python(hidden)
    return (interpreter, "-I", "-S", "-c", source(), str(fd), program, *argv)


def _python(hidden: Iterable[str] | None) -> str:
    import sys

    from ..errors import SandboxUnavailable
    from .protected import inside
    from .scratch import SCRATCH_DIRS

    folders = list(SCRATCH_DIRS if hidden is None else hidden)
    base = getattr(sys, "_base_executable", sys.executable)
    for candidate in (os.path.realpath(sys.executable), os.path.realpath(base), "/usr/bin/python3"):
        if os.path.isfile(candidate) and not inside(candidate, folders):
            return candidate
    raise SandboxUnavailable(
        "no Python interpreter outside the folders the sandbox hides can load the seccomp filter",
        hint="install python3 in a system directory, or run Stockade from one",
        details={"hidden": folders},
    )


_SOURCE: list[str] = []


def source() -> str:
    """The launcher's program for ``python -c``: :mod:`stockade.run.spawn`'s source, this
    module's, and a call of :func:`main` with ``spawn.become``."""
    if not _SOURCE:
        import inspect
        import sys

        from ..run import spawn

        future = "from __future__ import annotations\n"
        body = inspect.getsource(sys.modules[__name__]).replace(future, "", 1)
        call = "import sys\nraise SystemExit(main(sys.argv[1:], become))\n"
        _SOURCE.append(f"{inspect.getsource(spawn)}\n{body}\n{call}")
    return _SOURCE[0]
