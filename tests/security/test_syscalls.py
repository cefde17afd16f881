"""The kit's seccomp attacks (:mod:`stockade.conformance.suite.test_syscalls`), and the
filter's cache and loading as the project's two providers use them."""

from __future__ import annotations

import errno
import os
import subprocess
import sys

import pytest

from stockade.config.schema import Config, PluginsConfig
from stockade.confine import seccomp
from stockade.conformance.suite.test_syscalls import *  # noqa: F403

from .conftest import PYTHON


def test_the_compiled_program_is_cached_privately(tmp_path):
    cache = tmp_path / "cache"
    first = seccomp.bpf_program(network=True, unix=True, cache_dir=str(cache))
    files = list(cache.iterdir())
    assert len(files) == 1
    assert files[0].stat().st_mode & 0o777 == 0o600
    assert cache.stat().st_mode & 0o777 == 0o700
    assert seccomp._read_cache(str(files[0])) == first
    files[0].chmod(0o644)  # a cache file others could have written is not trusted
    assert seccomp._read_cache(str(files[0])) is None
    files[0].chmod(0o600)
    files[0].write_bytes(b"short")
    assert seccomp._read_cache(str(files[0])) is None


UNIX_SOCKET = """
import socket
try:
    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
    print("unix socket made")
except OSError as error:
    print("refused", error.errno)
"""

POISON = """
import os, sys
path = sys.argv[1]
ALLOW_ALL = bytes([6, 0, 0, 0, 0, 0, 0xFF, 0x7F])  # one instruction: ret SECCOMP_RET_ALLOW
def overwrite():
    with open(path, "wb") as f:
        f.write(ALLOW_ALL)
def replace():
    with open(path + ".new", "wb") as f:
        f.write(ALLOW_ALL)
    os.replace(path + ".new", path)
def unlink():
    os.unlink(path)
for attempt in (overwrite, replace, unlink):
    try:
        attempt()
        print("changed")
    except OSError as error:
        print("refused", error.strerror)
"""


def test_a_command_cannot_poison_a_filter_cache_inside_its_workspace(make_host, box):
    """The cache lies in the workspace: a command that rewrote it would disarm the next run."""
    cache = box.ws / "cache"
    config = Config(
        sandbox=box.sandbox,
        plugins=PluginsConfig(settings={box.sandbox: {"seccomp_cache": str(cache)}}),
    )
    host = make_host(allow_all=True, config=config)
    (box.ws / "work").mkdir()  # under Landlock the top level, above the cache, takes no new files
    control = host.run(box.py("open('work/written', 'w').write('ok')"))
    assert control.exit_code == 0 and (box.ws / "work" / "written").read_text() == "ok"
    (program,) = cache.iterdir()
    before = program.read_bytes()
    result = host.run(box.py(POISON, str(program)))
    assert "changed" not in result.stdout.text, result.stdout.text
    assert result.stdout.text.count("refused") == 3
    assert program.read_bytes() == before
    # A fresh host in a fresh process reads the cache again: the filter still holds.
    fresh = subprocess.run(
        [sys.executable, "-c", FRESH_RUN, str(box.ws), str(cache), str(box.home), box.sandbox],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert fresh.stdout.strip() == f"refused {errno.EPERM}", fresh.stderr


FRESH_RUN = f"""
import sys
from stockade.config.schema import Config, PluginsConfig
from stockade.host import Host
from stockade.testing import AllowAll
from stockade.request.spec import ExecRequest
ws, cache, home, sandbox = sys.argv[1:]
settings = {{sandbox: {{"seccomp_cache": cache}}}}
config = Config(sandbox=sandbox, plugins=PluginsConfig(settings=settings))
with Host(config, plugins=[AllowAll()]) as host:
    argv = ["{PYTHON}", "-S", "-c", {UNIX_SOCKET!r}]
    result = host.run(ExecRequest(argv, ws, mode="workspace-write", env={{"HOME": home}}))
    print(result.stdout.text.strip())
"""


def test_without_pyseccomp_the_sandbox_is_unavailable_not_a_crash(box):
    code = f"""
import sys
sys.modules["pyseccomp"] = None  # as if it were not installed
from stockade.config.schema import Config, PluginsConfig
from stockade.errors import SandboxUnavailable
from stockade.host import Host
from stockade.testing import AllowAll
from stockade.request.spec import ExecRequest
settings = {{{box.sandbox!r}: {{"seccomp_cache": ""}}}}
config = Config(sandbox={box.sandbox!r}, plugins=PluginsConfig(settings=settings))
with Host(config, plugins=[AllowAll()]) as host:
    probe = host.sandboxes.get({box.sandbox!r}).probe()
    print("probe", probe.usable, probe.detail)
    try:
        host.run(ExecRequest(["true"], {str(box.ws)!r}, mode="workspace-write"))
    except SandboxUnavailable as error:
        print("unavailable", error.message)
"""
    env = {**os.environ, "XDG_CACHE_HOME": str(box.home / "empty-cache")}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("probe False") and "pyseccomp is not installed" in lines[0]
    assert lines[1].startswith("unavailable") and "pyseccomp is not installed" in lines[1]


def test_the_filter_descriptor_is_sealed():
    fd = seccomp.program_fd(network=False)
    try:
        with pytest.raises(PermissionError):
            os.write(fd, b"\0" * 8)
        with pytest.raises(PermissionError):
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)
