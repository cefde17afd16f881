"""The setup inside the namespaces: the mounts, an init as PID 1, then the seccomp launcher.

``unshare --user --map-root-user --mount --pid --fork ...`` starts this as
``python -I -S -c SOURCE LAYOUT_FD LAUNCHER_ARGV...``: root of a user namespace of its own
(its capabilities reach only that namespace), in a mount namespace of its own. Standard
library only: it is carried in as source (:func:`stockade_unshare.provider.inside_source`),
because a virtualenv under ``/tmp`` is hidden once the mounts are laid.

In order: read the layout (JSON) from ``LAYOUT_FD``; open every folder to bind again before
anything covers it; make the whole tree read-only with one ``mount_setattr``; lay a fresh
``/dev``; lay the mounts outer before inner (private scratch, writable and read-only binds,
protected paths, masks); make the masks read-only; bring the loopback interface up; for a
``network`` command, start relaying the namespace's proxy port to the egress proxy; then
fork. The child drops every capability and becomes the launcher, which loads the seccomp
filter and becomes the command. This process stays as PID 1, so that the command is not:
the kernel does not deliver ``SIGTERM`` to a namespace's init without a handler, and the
command must get the grace signal of a timeout. It reaps every orphan and exits with the
command's status (``128+N`` for a death by signal ``N``, as bwrap does). When it exits, the
kernel kills what is left in the namespace.

Any failure before the command starts ends it with :data:`SETUP_FAILED` and one line on
stderr starting ``stockade-unshare:``; the command never runs half confined.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import socket
import struct
import sys

SETUP_FAILED = 125
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 16384, 1 << 18
_MS_NOSUID, _MS_NODEV = 2, 4
_SYS_MOUNT_SETATTR = 442  # the same number on every architecture (added in 5.12)
_MOUNT_ATTR_RDONLY, _MOUNT_ATTR_NOSUID, _MOUNT_ATTR_NODEV = 1, 2, 4
_AT_FDCWD, _AT_RECURSIVE = -100, 0x8000
_O_PATH = getattr(os, "O_PATH", 0o10000000)
_PR_CAPBSET_DROP, _PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL = 24, 47, 4
_libc = ctypes.CDLL(None, use_errno=True)


class SetupError(Exception):
    """A step of the setup failed; the command must not start."""


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    rc = _libc.mount(
        source.encode() if source else None,
        target.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )
    _check(rc, f"mount {fstype or 'bind'} on {target}")


def _read_only(
    path: str, *, recursive: bool = False, writable: bool = False, extra: int = 0
) -> None:
    """Set (or, with ``writable``, clear) the read-only attribute of the mount at ``path``,
    and set the ``extra`` attributes."""
    if writable:
        attr = struct.pack("QQQQ", extra, _MOUNT_ATTR_RDONLY, 0, 0)
    else:
        attr = struct.pack("QQQQ", _MOUNT_ATTR_RDONLY | extra, 0, 0, 0)
    flags = _AT_RECURSIVE if recursive else 0
    buf = ctypes.create_string_buffer(attr, len(attr))
    rc = _libc.syscall(_SYS_MOUNT_SETATTR, _AT_FDCWD, path.encode(), flags, buf, len(attr))
    _check(rc, f"mount_setattr {path}")


def _mount_point(path: str, *, is_dir: bool) -> None:
    """Make ``path`` exist to mount on (inside a tmpfs laid before it)."""
    if os.path.lexists(path):
        return
    if is_dir:
        os.makedirs(path, exist_ok=True)
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))


def lay(layout: dict[str, object]) -> None:
    """Lay the mounts ``layout`` lists (see :func:`stockade_unshare.layout.build`)."""
    ops: list[list[str]] = layout["ops"]  # type: ignore[assignment]
    devices: list[str] = layout["devices"]  # type: ignore[assignment]
    # Open every source first: a tmpfs laid later may cover it.
    binds = ("bind", "protect")
    sources = {op[1]: os.open(op[1], _O_PATH | os.O_CLOEXEC) for op in ops if op[0] in binds}
    sources.update({d: os.open(d, _O_PATH | os.O_CLOEXEC) for d in devices})
    null = sources.get("/dev/null") or os.open("/dev/null", _O_PATH | os.O_CLOEXEC)
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
    _read_only("/", recursive=True)
    _mount("tmpfs", "/dev", "tmpfs", _MS_NOSUID, "mode=0755")
    for device in devices:
        _mount_point(device, is_dir=False)
        _mount(f"/proc/self/fd/{sources[device]}", device, None, _MS_BIND)
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, f"/dev/{name}")
    masks = []
    for kind, path, how in ops:
        if kind == "scratch":
            _mount_point(path, is_dir=True)
            _mount("tmpfs", path, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=1777")
        elif kind in binds:
            _mount_point(path, is_dir=os.path.isdir(f"/proc/self/fd/{sources[path]}"))
            _mount(f"/proc/self/fd/{sources[path]}", path, None, _MS_BIND)
            _read_only(path, writable=how == "rw")
        elif kind == "mask-dir":
            _mount_point(path, is_dir=True)
            _mount("tmpfs", path, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755")
            masks.append(path)
        elif kind == "mask-file":  # /dev/null on a nodev mount: it cannot even be opened
            _mount_point(path, is_dir=False)
            _mount(f"/proc/self/fd/{null}", path, None, _MS_BIND)
            _read_only(path, extra=_MOUNT_ATTR_NOSUID | _MOUNT_ATTR_NODEV)
    for path in (*masks, "/dev"):  # read-only last: until now mount points could be made
        _read_only(path)
    for fd in {*sources.values(), null}:  # this process stays as init: it keeps none
        os.close(fd)


def loopback_up() -> None:
    """Bring ``lo`` up in the new network namespace (down when it is made)."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifreq = fcntl.ioctl(s.fileno(), siocgifflags, struct.pack("16sH14x", b"lo", 0))
        flags = struct.unpack("16sH14x", ifreq)[1]
        fcntl.ioctl(s.fileno(), siocsifflags, struct.pack("16sH14x", b"lo", flags | iff_up))


class _CapHeader(ctypes.Structure):
    _fields_ = (("version", ctypes.c_uint32), ("pid", ctypes.c_int))


class _CapData(ctypes.Structure):
    _fields_ = (
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    )


def drop_capabilities() -> None:
    """Empty the bounding, ambient and thread sets: root of the namespace gets none back
    when it execs (with an empty bounding set there is nothing to grant)."""
    with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as f:
        last = int(f.read())
    for cap in range(last + 1):
        _check(_libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0), f"drop capability {cap}")
    _check(_libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient")
    header, data = _CapHeader(0x20080522, 0), (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), ctypes.byref(data)), "capset(none)")


def init(child: int) -> int:
    """Reap every process until ``child`` ends; return its status.

    It forwards no signal: the executor sends the grace ``SIGTERM`` to every descendant of
    the runner (``runner=True``), the command included, and a forwarded copy would reach the
    command twice (a ``trap`` would run twice). Signals sent to this process itself are
    dropped by the kernel: it has no handler, and it is the namespace's init.
    """
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return SETUP_FAILED
        if pid == child:
            code = os.waitstatus_to_exitcode(status)
            return 128 - code if code < 0 else code


def forward(port: int, proxy: str) -> None:
    """Listen on the namespace's ``127.0.0.1:port``; relay each connection, both ways, to
    the egress proxy's Unix socket ``proxy`` (bound in by the layout), on threads of this
    process. The command cannot reach ``proxy`` itself: seccomp refuses it Unix sockets."""
    import threading

    listener = socket.create_server(("127.0.0.1", port))  # close-on-exec: not inherited

    def pump(source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(1 << 16):
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def relay(conn: socket.socket) -> None:
        with conn, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as upstream:
            try:
                upstream.connect(proxy)
            except OSError:
                return
            back = threading.Thread(target=pump, args=(upstream, conn), daemon=True)
            back.start()
            pump(conn, upstream)
            back.join()

    def serve() -> None:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=relay, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()


def main(args: list[str]) -> int:
    """``LAYOUT_FD LAUNCHER_ARGV...``: set up, then run the launcher under an init."""
    try:
        fd = int(args[0])
        with os.fdopen(fd, "rb") as f:
            layout = json.loads(f.read())
        lay(layout)
        if layout.get("loopback"):
            loopback_up()
        egress = layout.get("egress")
        if egress:
            forward(int(egress["port"]), str(egress["socket"]))
        os.chdir(layout["cwd"])
    except (OSError, ValueError, KeyError, IndexError, SetupError) as error:
        os.write(2, f"stockade-unshare: setup failed: {error}\n".encode())
        return SETUP_FAILED
    child = os.fork()
    if child == 0:
        try:
            drop_capabilities()
            os.execv(args[1], args[1:])  # noqa: S606 - the launcher: filter, then the command
        except BaseException as error:  # noqa: BLE001 - the child must never return
            os.write(2, f"stockade-unshare: cannot start the command: {error}\n".encode())
        finally:
            os._exit(SETUP_FAILED)
    return init(child)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
