"""The host's own installation stays read-only, even when a writable root holds it.

The Python prefix that runs Stockade (a ``.pth`` planted in its ``site-packages`` runs in
the host itself, at its next start) and the seccomp filter's cache (a program replaced there
disarms every later run) are granted writable for one command, as a person may grant a
folder that happens to hold them. The command tries to plant a file in each and to open the
cached filter for writing. The control: a folder granted beside them takes the file.
Whatever a breach planted is removed after (a ``.pth`` of one comment line runs nothing).
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import sysconfig

import pytest

from stockade.confine import protected, seccomp
from stockade.confine.promises import Promise
from stockade.errors import SandboxUnavailable

# Plants a file at each path of argv[2:] (its JSON list) and opens argv[1] for writing.
PLANT = """
import json, sys
out = {}
for path in json.loads(sys.argv[2]):
    try:
        with open(path, "x") as f:
            f.write("# stockade conformance kit canary\\n")
        out[path] = "planted"
    except OSError as error:
        out[path] = f"refused {error.errno}"
if sys.argv[1]:
    try:
        open(sys.argv[1], "r+b").close()
        out[sys.argv[1]] = "opened"
    except OSError as error:
        out[sys.argv[1]] = f"refused {error.errno}"
print(json.dumps(out))
"""


def _grantable(folder: str) -> bool:
    """Whether a person could grant ``folder`` writable here (not a home, not a system
    folder), and this user could write it anyway (else the attack finds nothing)."""
    try:
        protected.writable_roots([folder])
    except SandboxUnavailable:
        return False
    return os.path.isdir(folder) and os.access(folder, os.W_OK)


@pytest.mark.promise(Promise.HOST_INSTALLATION)
def test_the_hosts_installation_stays_read_only_in_a_writable_root(host, box):
    tag = secrets.token_hex(6)
    host.run(box.py("pass"))  # the filter is compiled and cached by now
    cached = seccomp.cache_path(network=False)
    site = os.path.realpath(sysconfig.get_paths()["purelib"])
    # The roots granted hold the installation (a grant inside it is the person's choice).
    folders = {
        "prefix": os.path.realpath(sys.prefix),
        "cache": os.path.dirname(cached) if cached else "",
    }
    granted = {name: f for name, f in folders.items() if f and _grantable(f)}
    if not granted:
        pytest.xfail(f"cannot arise here: no folder of the installation is grantable ({folders})")
    targets = {name: os.path.join(f, f"kit-{tag}.pth") for name, f in granted.items()}
    if "prefix" in granted and protected.inside(site, [granted["prefix"]]):
        targets["site"] = os.path.join(site, f"kit-{tag}.pth")
    control = str(box.outside / f"kit-{tag}")
    roots = (*granted.values(), str(box.outside))
    existing = cached if "cache" in granted and cached and os.path.exists(cached) else ""
    try:
        request = box.py(
            PLANT,
            existing,
            json.dumps([*targets.values(), control]),
            grant_writable=roots,
            preapproved=True,
        )
        result = host.run(request)
        assert result.exit_code == 0, result.stderr.text
        out = json.loads(result.stdout.text)
        assert out[control] == "planted", out  # the control: the grant is in force
        for name, path in targets.items():
            assert out[path].startswith("refused"), (name, out)
            assert not os.path.exists(path), (name, path)
        if existing:
            assert out[existing].startswith("refused"), out
    finally:
        for path in targets.values():
            if os.path.exists(path):
                os.unlink(path)
