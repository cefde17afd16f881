"""The supervisor's views of a thread's umask (kept between calls) never outlive a change:
``umask`` between creates, in another thread sharing it, in a child process, through more
processes than views are kept, and threads that come and go; with ``chdir`` and ``fchdir``
between them too (a working directory is never kept). The same script without the
supervisor is the control: every file lands in the same folder with the same mode."""

from __future__ import annotations

import json

import pytest
from stockade_landlock import supervisor

from stockade.config.schema import Config, PluginsConfig

pytestmark = [
    pytest.mark.sandboxes("landlock"),
    pytest.mark.skipif(supervisor.unavailable() is not None, reason="no supervisor here"),
]

SCRIPT = r"""
import json, os, stat, sys, threading
os.umask(0o022)
top = os.getcwd()
for d in ("a", "b", "c", "p"):
    os.mkdir(d)
def make(name):
    os.close(os.open(name, os.O_WRONLY | os.O_CREAT, 0o666))
make("f1")
os.umask(0o077)
make("f2")
os.chdir("a")
make("f3")
fd = os.open(os.path.join(top, "b"), os.O_RDONLY)
os.fchdir(fd)
make("f4")
os.umask(0o002)
def other():
    os.chdir(os.path.join(top, "c"))  # threads share their working directory and umask
    os.umask(0o027)
t = threading.Thread(target=other)
t.start()
t.join()
make("f5")
os.mkdir("d5")
for i in range(70):  # more processes than views: each its own umask and folder
    pid = os.fork()
    if pid == 0:
        os.umask(i % 8 * 0o010)
        if i % 2:
            os.chdir(os.path.join(top, "p"))
        make(f"child{i}")
        os._exit(0)
    os.waitpid(pid, 0)
def worker(i):
    make(f"thread{i}")
threads = [threading.Thread(target=worker, args=(i,)) for i in range(20)]
for t in threads:
    t.start()
for t in threads:
    t.join()
make("f6")
seen = {}
for root, dirs, files in os.walk(top):
    for name in files + dirs:
        path = os.path.join(root, name)
        seen[os.path.relpath(path, top)] = oct(stat.S_IMODE(os.lstat(path).st_mode))
print(json.dumps(seen, sort_keys=True))
"""


def _seen(host, box):
    result = host.run(box.py(SCRIPT))
    assert result.exit_code == 0, result.stderr.text
    return json.loads(result.stdout.text)


def test_views_follow_every_change_of_folder_and_umask(make_host, box):
    before = set(box.ws.iterdir())
    supervised = _seen(make_host(allow_all=True, config=Config(sandbox="landlock")), box)
    for made in set(box.ws.iterdir()) - before:
        _remove(made)
    off = PluginsConfig(settings={"landlock": {"supervise": False}})
    plain = _seen(make_host(allow_all=True, config=Config(sandbox="landlock", plugins=off)), box)
    assert supervised == plain
    assert supervised["f1"] == "0o644" and supervised["f2"] == "0o600"
    assert supervised["a/f3"] == "0o600" and supervised["b/f4"] == "0o600"
    assert supervised["c/f5"] == supervised["c/f6"] == "0o640"
    assert supervised["c/d5"] == "0o750"
    assert len([k for k in supervised if "child" in k]) == 70
    assert supervised["p/child3"] == "0o646" and supervised["c/child0"] == "0o666"
    assert sum(k.startswith("c/thread") for k in supervised) == 20


def _remove(path):
    if path.is_dir():
        for child in path.iterdir():
            _remove(child)
        path.rmdir()
    else:
        path.unlink()
