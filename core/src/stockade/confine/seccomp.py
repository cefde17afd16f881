"""The seccomp policy every confining backend shares, compiled to BPF by libseccomp.

The policy is data (:data:`DENIED`, :data:`DENIED_IOCTLS`, the socket families) so the docs,
the tests and the compiler read the same list. It allows by default and refuses the calls
that reach past a sandbox: tracing other processes, injecting terminal input, kernel
keyrings, BPF, making namespaces or mounts, and foreign syscall tables (x32, i386), which
kill the process because a filter written for x86_64 numbers cannot judge them.

Compiling needs ``pyseccomp``, whose import alone costs about 20 ms on a small machine (it
runs ``ldconfig`` to find the library). The BPF program is therefore cached on disk, keyed
by a digest of the policy and the machine, in a private (0700) directory; a cache file that
is not ours, not private, in a symlinked directory, or not the right size for a BPF program
is ignored and rebuilt. Whoever can write the cache disarms every later filter, so sandbox
providers keep its directory read-only inside the sandbox (see :func:`cache_path`); an
unconfined (``danger-full-access``) command can rewrite it, as it can rewrite anything else
of the user's, Stockade's own installation included.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import os
import platform
import stat
import threading
from typing import Any

from ..errors import SandboxUnavailable
from .provider import sealed_memfd

__all__ = [
    "CHMODS",
    "CLONE_NAMESPACE_FLAGS",
    "DENIED",
    "DENIED_IOCTLS",
    "PERSONA_FLAGS",
    "SYSV_IPC",
    "allowed_families",
    "bpf_program",
    "cache_path",
    "compile_bpf",
    "default_cache_dir",
    "policy_digest",
    "program_fd",
    "required",
    "unavailable",
]

# syscall -> why it is refused (EPERM). Shown in the docs; keep the reasons short. The calls
# that act on another process are reviewed one by one in docs/seccomp.md ("Other processes").
DENIED: dict[str, str] = {
    "ptrace": "read or steer another process",
    "process_vm_readv": "read another process's memory",
    "process_vm_writev": "write another process's memory",
    "io_uring_setup": "io_uring runs I/O outside the syscall filter",
    "io_uring_enter": "io_uring runs I/O outside the syscall filter",
    "io_uring_register": "io_uring runs I/O outside the syscall filter",
    "keyctl": "kernel keyrings are shared outside the sandbox",
    "add_key": "kernel keyrings are shared outside the sandbox",
    "request_key": "kernel keyrings are shared outside the sandbox",
    "bpf": "load programs into the kernel",
    "perf_event_open": "observe other processes and the kernel",
    "userfaultfd": "a common kernel exploit primitive",
    "kexec_load": "replace the running kernel",
    "kexec_file_load": "replace the running kernel",
    "init_module": "load kernel modules",
    "finit_module": "load kernel modules",
    "delete_module": "unload kernel modules",
    "unshare": "make new namespaces (a way around the mount and user setup)",
    "setns": "join other namespaces",
    "mount": "change the mounts the sandbox is made of",
    "umount2": "uncover what the sandbox masks",
    "pivot_root": "change the root the sandbox is made of",
    "chroot": "change the root the sandbox is made of",
    "fsopen": "the new mount API",
    "fsconfig": "the new mount API",
    "fsmount": "the new mount API",
    "fspick": "the new mount API",
    "move_mount": "the new mount API",
    "open_tree": "the new mount API",
    "mount_setattr": "the new mount API",
    "open_by_handle_at": "open files by handle, bypassing the mount view",
    "name_to_handle_at": "the handle half of open_by_handle_at",
    "pidfd_getfd": "take a copy of another process's descriptor (its sockets, its pipes)",
    "process_madvise": "advise on another process's memory (page it out, read its layout)",
    "process_mrelease": "reap another process's memory (only memory-pressure daemons need it)",
}

# ioctl request -> why it is refused. Compared on the low 32 bits: the kernel truncates the
# request to an unsigned int, so 0x1_0000_5412 is TIOCSTI too.
DENIED_IOCTLS: dict[int, str] = {
    0x5412: "TIOCSTI: push keystrokes into the terminal's input queue",
    0x541C: "TIOCLINUX: the Linux console's selection and input ioctls",
}

# clone() flags that make namespaces; clone3() passes flags in memory, so it is refused with
# ENOSYS and the C library falls back to clone().
CLONE_NAMESPACE_FLAGS = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}

# personality() flags that switch off or weaken address-space protections; querying the
# personality and choosing a plain persona stay allowed.
PERSONA_FLAGS = {
    "ADDR_NO_RANDOMIZE": 0x0040000,
    "MMAP_PAGE_ZERO": 0x0100000,
    "ADDR_COMPAT_LAYOUT": 0x0200000,
    "READ_IMPLIES_EXEC": 0x0400000,
    "ADDR_LIMIT_32BIT": 0x0800000,
    "ADDR_LIMIT_3GB": 0x8000000,
}

# System V IPC: refused (EPERM) unless the provider gives each command an IPC namespace of
# its own (``sysv_ipc=True``). Without one (Landlock), a segment, queue or semaphore set of
# any host process of the same user is one key or id away: neither Landlock's rules nor its
# scopes cover SysV IPC. ``ipc`` is the multiplexer of the 32-bit tables (absent on x86_64).
SYSV_IPC: dict[str, str] = {
    "shmget": "find or make a SysV shared memory segment (the host's, without an IPC namespace)",
    "shmat": "map a SysV shared memory segment: read or write another process's memory",
    "shmctl": "read, change or remove a SysV shared memory segment",
    "msgget": "find or make a SysV message queue",
    "msgsnd": "send to a SysV message queue (another process's)",
    "msgrcv": "take messages from a SysV message queue (another process's)",
    "msgctl": "read, change or remove a SysV message queue",
    "semget": "find or make a SysV semaphore set",
    "semop": "change a SysV semaphore (another process's: a deadlock)",
    "semtimedop": "change a SysV semaphore (another process's: a deadlock)",
    "semctl": "read, change or remove a SysV semaphore set",
    "ipc": "the SysV IPC multiplexer of the 32-bit tables",
}

AF_UNIX, AF_INET, AF_INET6, AF_NETLINK = 1, 2, 10, 16

_lock = threading.Lock()
_compiled: dict[tuple[bool, bool, bool, bool, str | None], bytes] = {}


def allowed_families(*, network: bool, unix: bool = False) -> tuple[int, ...]:
    """The socket families a command may open with ``socket()``.

    ``socketpair(AF_UNIX)`` (pipes between a command's own processes) is always allowed, a
    ``socketpair()`` of any other family never. A ``socket(AF_UNIX)`` is not, unless asked
    for: a pathname socket anywhere the sandbox can see (a docker.sock in some home
    directory) would be reachable, and a path cannot be judged by a syscall filter.
    """
    families = [AF_NETLINK]
    if unix:
        families.append(AF_UNIX)
    if network:
        families += [AF_INET, AF_INET6]
    return tuple(sorted(families))


# Calls that set a file's mode -> the index of their mode argument, and of their flags where
# only some flags make a file (``open`` and ``openat``: ``O_CREAT`` or ``O_TMPFILE``). Where
# nothing else judges them (a command's writes direct: no layer whose landing clears the
# bits, no supervisor), one that sets a setuid or setgid bit is refused: a command run
# as root would otherwise leave a setuid-root program behind. A setgid file
# made without group-execute keeps its bit through its writes, and an access ACL can then
# make it executable without any chmod, so the creating calls are judged too.
CHMODS: dict[str, tuple[int, int | None]] = {
    "chmod": (1, None),
    "fchmod": (1, None),
    "fchmodat": (2, None),
    "fchmodat2": (2, None),
    "creat": (1, None),
    "mknod": (1, None),
    "mknodat": (2, None),
    "open": (2, 1),
    "openat": (3, 2),
}
NUMBERS: dict[str, int] = {"fchmodat2": 452}
"""The one call of :data:`CHMODS` newer than some libseccomp: by its x86_64 number there."""
MAKES = (0o100, 0o20000000)  # O_CREAT, __O_TMPFILE: the flags with which open uses a mode
SETID_BITS = (0o4000, 0o2000)  # S_ISUID, S_ISGID


@functools.cache
def policy_digest(
    *, network: bool, unix: bool = False, sysv_ipc: bool = False, setid: bool = True
) -> str:
    """A digest of the policy as data, with the machine and this module's version."""
    text = repr(
        (
            sorted(DENIED),
            [] if sysv_ipc else sorted(SYSV_IPC),
            [] if setid else sorted(CHMODS.items()),
            sorted(DENIED_IOCTLS),
            sorted(CLONE_NAMESPACE_FLAGS.values()),
            sorted(PERSONA_FLAGS.values()),
            allowed_families(network=network, unix=unix),
            platform.machine(),
            TCP_PROTOCOLS,
            "prlimit64 on others",
            9,  # bump when the compiler below changes
        )
    )
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def compile_bpf(
    *, network: bool, unix: bool = False, sysv_ipc: bool = False, setid: bool = True
) -> bytes:
    """Compile the policy with libseccomp; the raw BPF program.

    ``sysv_ipc`` lets the SysV IPC calls (:data:`SYSV_IPC`) through: only for a provider
    that gives each command an IPC namespace of its own (bubblewrap). Without ``setid``, a
    ``chmod`` or a create that sets a setuid or setgid bit is refused (:data:`CHMODS`), and
    ``openat2`` answers ``ENOSYS``.
    """
    import pyseccomp as sc  # type: ignore[import-untyped]

    f = sc.SyscallFilter(sc.ALLOW)
    f.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
    f.set_attr(sc.Attr.CTL_NNP, 0)  # bwrap sets no_new_privs itself
    # A binary tree of syscall numbers, not a chain: an allowed call, the common case, is
    # judged in a few comparisons instead of one per rule (libseccomp >= 2.5).
    with contextlib.suppress(RuntimeError, OSError, ValueError):
        f.set_attr(sc.Attr.CTL_OPTIMIZE, 2)
    eperm = sc.ERRNO(errno.EPERM)
    for name in [*DENIED, *(() if sysv_ipc else SYSV_IPC)]:
        try:
            f.add_rule(eperm, name)
        except (OSError, RuntimeError, ValueError):
            continue  # a syscall this libseccomp does not know does not exist here either
    for request in DENIED_IOCTLS:
        f.add_rule(eperm, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, request))
    for flag in CLONE_NAMESPACE_FLAGS.values():
        f.add_rule(eperm, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    _deny_personas(f, sc)
    if not setid:
        _deny_setid(f, sc, eperm)
    # prlimit64 on another process with a new limit: RLIMIT_CPU 0 would kill the host.
    f.add_rule(eperm, "prlimit64", sc.Arg(0, sc.GT, 0), sc.Arg(2, sc.NE, 0))
    _deny_families(f, sc, allowed_families(network=network, unix=unix))
    _deny_families(f, sc, (AF_UNIX,), "socketpair")
    if network:
        _tcp_only(f, sc)
    reader, writer = os.pipe()
    try:
        with os.fdopen(writer, "wb", closefd=False) as out:
            f.export_bpf(out)
        os.close(writer)
        writer = -1
        chunks = []
        while chunk := os.read(reader, 65536):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(reader)
        if writer >= 0:
            os.close(writer)


def _deny_setid(f: Any, sc: Any, eperm: Any) -> None:  # noqa: ANN401 - pyseccomp is untyped
    """Refuse each of :data:`CHMODS` whose mode sets a setuid or setgid bit (an ``open``
    only with a flag that makes a file). ``openat2`` passes its mode in memory, out of a
    filter's sight, so it answers ``ENOSYS`` (as ``clone3`` does): callers fall back to
    ``openat``, as on a kernel before 5.6. An empty file made setuid would keep its bits
    when a writer with ``CAP_FSETID`` (the person, as root) later fills it in place."""
    f.add_rule(sc.ERRNO(errno.ENOSYS), "openat2")
    for name, (arg, flags) in CHMODS.items():
        for bit in SETID_BITS:
            rule = sc.Arg(arg, sc.MASKED_EQ, bit, bit)
            for made in (None,) if flags is None else MAKES:
                more = () if made is None else (sc.Arg(flags, sc.MASKED_EQ, made, made),)
                try:
                    f.add_rule(eperm, name, rule, *more)
                except (OSError, RuntimeError, ValueError):  # older than the call: its number
                    if name not in NUMBERS:
                        raise
                    f.add_rule(eperm, NUMBERS[name], rule, *more)


def _deny_families(f: Any, sc: Any, allowed: tuple[int, ...], call: str = "socket") -> None:  # noqa: ANN401 - untyped
    """Refuse ``call`` (``socket`` or ``socketpair``) unless the family is one of ``allowed``.

    The kernel reads the family as a 32-bit int, so every comparison is on the low 32 bits
    (``0x1_0000_0002`` is ``AF_INET``). libseccomp allows one comparison per argument in a
    rule, so each refused family below 64 is a rule, and each bit from 6 up is one more.
    """
    action = sc.ERRNO(errno.EPERM)
    for family in range(64):
        if family not in allowed:
            f.add_rule(action, call, sc.Arg(0, sc.MASKED_EQ, 0xFFFFFFFF, family))
    for bit in range(6, 32):
        f.add_rule(action, call, sc.Arg(0, sc.MASKED_EQ, 1 << bit, 1 << bit))


SOCK_STREAM = 1
SOCK_TYPE_MASK = 0xF  # the type's low bits; SOCK_NONBLOCK and SOCK_CLOEXEC sit above
IPPROTO_TCP = 6
TCP_PROTOCOLS = (0, IPPROTO_TCP)  # 0 picks TCP for an inet stream


def _tcp_only(f: Any, sc: Any) -> None:  # noqa: ANN401 - pyseccomp is untyped
    """With network, an inet socket is a TCP stream: type ``SOCK_STREAM``, protocol 0 or 6.

    The only way out is the egress proxy, a TCP connection. Landlock's port rules judge
    TCP only: an MPTCP (262) or SCTP (132) stream, a datagram or a raw socket would pass
    them. DNS is resolved by the proxy, so nothing in the sandbox needs a datagram. Every
    other type value (0..15 but 1) is a rule; the protocol, read by the kernel as an int,
    is compared on all 64 bits: above 6 is refused (so are high bits the kernel would
    drop), and so is each of 1..5.
    """
    action = sc.ERRNO(errno.EPERM)
    for family in (AF_INET, AF_INET6):
        is_family = sc.Arg(0, sc.MASKED_EQ, 0xFFFFFFFF, family)
        for kind in range(SOCK_TYPE_MASK + 1):
            if kind != SOCK_STREAM:
                f.add_rule(action, "socket", is_family, sc.Arg(1, sc.MASKED_EQ, 0xF, kind))
        f.add_rule(action, "socket", is_family, sc.Arg(2, sc.GT, IPPROTO_TCP))
        for protocol in range(1, IPPROTO_TCP):
            f.add_rule(action, "socket", is_family, sc.Arg(2, sc.EQ, protocol))


def _deny_personas(f: Any, sc: Any) -> None:  # noqa: ANN401 - pyseccomp is untyped
    """Refuse ``personality()`` with a flag that weakens memory protections.

    Setting a flag is refused; querying (``0xffffffff``, every bit set) is not. A value
    with a flag set and any other bit clear is a change, so each pair (flag, bit clear)
    is one rule on the low 32 bits.
    """
    action = sc.ERRNO(errno.EPERM)
    for flag in PERSONA_FLAGS.values():
        for bit in range(32):
            if 1 << bit != flag:
                mask = flag | 1 << bit
                f.add_rule(action, "personality", sc.Arg(0, sc.MASKED_EQ, mask, flag))


def bpf_program(
    *,
    network: bool,
    unix: bool = False,
    sysv_ipc: bool = False,
    setid: bool = True,
    cache_dir: str | None = None,
) -> bytes:
    """The compiled policy: from memory, then the disk cache, then libseccomp.

    Raises:
        ImportError: pyseccomp is not installed (and nothing is cached).
        OSError: libseccomp cannot be loaded.
    """
    path = cache_path(
        network=network, unix=unix, sysv_ipc=sysv_ipc, setid=setid, cache_dir=cache_dir
    )
    key = (network, unix, sysv_ipc, setid, path)
    with _lock:
        program = _compiled.get(key)
        if program is not None:
            return program
        program = _read_cache(path) if path else None
        if program is None:
            program = compile_bpf(network=network, unix=unix, sysv_ipc=sysv_ipc, setid=setid)
            if path:
                _write_cache(path, program)
        _compiled[key] = program
        return program


def unavailable(cache_dir: str | None = None) -> str | None:
    """Why the default policy cannot be had here, or ``None`` when it can.

    Costs nothing once the program is cached; the first time, it compiles (and caches) it.
    """
    try:
        bpf_program(network=False, cache_dir=cache_dir)
    except ImportError as error:
        return f"{_missing(error)}; install stockade[seccomp]"
    except OSError as error:
        return f"{_missing(error)}; install libseccomp2"
    return None


def required(
    *,
    network: bool,
    unix: bool = False,
    sysv_ipc: bool = False,
    setid: bool = True,
    cache_dir: str | None = None,
) -> bytes:
    """:func:`bpf_program`, or ``SandboxUnavailable`` saying what is missing."""
    try:
        return bpf_program(
            network=network, unix=unix, sysv_ipc=sysv_ipc, setid=setid, cache_dir=cache_dir
        )
    except (ImportError, OSError) as error:
        raise SandboxUnavailable(
            f"the seccomp filter cannot be built: {_missing(error)}",
            hint="install stockade[seccomp] and the system's libseccomp2",
        ) from None


def _missing(error: ImportError | OSError) -> str:
    if isinstance(error, ImportError):
        return f"pyseccomp is not installed ({error})"
    return f"libseccomp cannot be loaded ({error})"


def program_fd(
    *, network: bool, unix: bool = False, sysv_ipc: bool = False, cache_dir: str | None = None
) -> int:
    """A fresh sealed descriptor (offset 0) holding the BPF program, for one runner to read:
    bwrap's ``--seccomp FD``, or :func:`stockade.confine.seccomp_exec.launcher` for a runner
    that cannot load a filter itself. The plan owns it: list it in ``pass_fds``."""
    program = bpf_program(network=network, unix=unix, sysv_ipc=sysv_ipc, cache_dir=cache_dir)
    return sealed_memfd("stockade-seccomp", program)


def default_cache_dir() -> str:
    """``$XDG_CACHE_HOME/stockade/seccomp`` (``~/.cache/...`` by default)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "stockade", "seccomp")


def cache_path(
    *,
    network: bool,
    unix: bool = False,
    sysv_ipc: bool = False,
    setid: bool = True,
    cache_dir: str | None = None,
) -> str | None:
    """Where the program for this policy is cached (``None``: ``cache_dir`` is ``""``).

    A sandbox provider must keep this file's directory read-only inside every sandbox whose
    writable roots hold it: a command that could replace the program would disarm the
    filter of every later run.
    """
    directory = cache_dir if cache_dir is not None else default_cache_dir()
    if not directory:
        return None
    digest = policy_digest(network=network, unix=unix, sysv_ipc=sysv_ipc, setid=setid)
    return os.path.join(os.path.abspath(directory), f"{digest}.bpf")


def _read_cache(path: str) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        parent = os.lstat(os.path.dirname(path))  # a symlinked directory is not ours
        if not stat.S_ISDIR(parent.st_mode):
            return None
        private = st.st_mode & 0o077 == 0 and parent.st_mode & 0o077 == 0
        ours = st.st_uid == os.getuid() and parent.st_uid == os.getuid()
        # A BPF instruction is 8 bytes; an empty or ragged file is not a program.
        if not (private and ours and st.st_size and st.st_size % 8 == 0):
            return None
        data = os.read(fd, st.st_size)
        return data if len(data) == st.st_size else None
    finally:
        os.close(fd)


def _write_cache(path: str, program: bytes) -> None:
    directory = os.path.dirname(path)
    with contextlib.suppress(OSError):
        os.makedirs(directory, mode=0o700, exist_ok=True)
        os.chmod(directory, 0o700)
        tmp = f"{path}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, program)
        finally:
            os.close(fd)
        os.replace(tmp, path)
