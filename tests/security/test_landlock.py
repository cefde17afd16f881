"""What only the Landlock provider has to prove: it starts where namespaces are refused,
it stays sound under concurrency, and it reports partial enforcement honestly."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from stockade.config.schema import Config, PluginsConfig
from stockade.errors import SandboxUnavailable
from stockade.host import Host
from stockade.testing import AllowAll

pytestmark = pytest.mark.sandboxes("landlock")

# The start of a child process where user namespaces are refused, as under a container's
# seccomp profile: no_new_privs, then the shared policy, which refuses them.
REFUSE_NAMESPACES = """
import ctypes, json, sys
from stockade.confine import seccomp
from stockade_landlock.engine import _load_filter
assert ctypes.CDLL(None).prctl(38, 1, 0, 0, 0) == 0
_load_filter(seccomp.bpf_program(network=True, unix=True, cache_dir=""))
"""

NO_NAMESPACES = (
    REFUSE_NAMESPACES
    + """
from stockade.config.schema import Config
from stockade.host import Host
from stockade.testing import AllowAll
from stockade.request.spec import ExecRequest
ws, secret, home = sys.argv[1:]
with Host(Config(), plugins=[AllowAll()]) as host:
    bwrap = host.doer.providers.probe(host.sandboxes.get("bubblewrap"))
    result = host.run(ExecRequest(["cat", secret], ws, mode="workspace-write", env={"HOME": home}))
    print(json.dumps({"bwrap": [bwrap.usable, bwrap.detail], "provider": result.sandbox.provider,
                      "exit": result.exit_code, "out": result.stdout.text,
                      "enforcement": result.sandbox.enforcement}))
"""
)


def test_where_namespaces_are_refused_auto_picks_landlock_and_stays_confined(box):
    import json

    secret = box.home / ".ssh" / "id_rsa"
    secret.parent.mkdir()
    secret.write_text(box.canary)
    proc = subprocess.run(
        [sys.executable, "-c", NO_NAMESPACES, str(box.ws), str(secret), str(box.home)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["bwrap"][0] is False, out  # bubblewrap really could not start here
    assert "user namespaces are blocked here" in out["bwrap"][1], out["bwrap"][1]
    assert (out["provider"], out["enforcement"]) == ("landlock", "full")
    assert out["exit"] != 0 and box.canary not in out["out"]


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_eight_threads_a_hundred_commands_each(host, box):
    from helpers import procs
    from stockade_local.reaper import own_children

    (box.ws / "work").mkdir()
    request = box.request(["sh", "-c", "echo $$ > work/$$ && cat work/$$"])
    host.run(request)  # start the warden and warm the caches before counting
    for leftover in (box.ws / "work").iterdir():
        leftover.unlink()
    admitted = host.prepare(host.admit(request))
    admitted.provider.release(admitted.plan)
    parent = Path(admitted.plan.env["TMPDIR"]).parent  # the provider's scratch parent
    engine = admitted.provider.engine  # type: ignore[attr-defined]

    def kept() -> int:  # rulesets kept for reuse, one per spare scratch folder at most
        return sum(len(base.built) for base in engine._bases.values())

    before, children = _fds() - kept(), set(own_children())
    errors: list[BaseException] = []
    outputs: list[str] = []

    def worker() -> None:
        try:
            for _ in range(100):
                result = host.run(request)
                assert result.exit_code == 0, result.stderr.text
                outputs.append(result.stdout.text)
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not any(thread.is_alive() for thread in threads), "deadlock: a worker never ended"
    assert not errors, errors[:3]
    assert len(outputs) == 800
    assert sorted(p.name for p in (box.ws / "work").iterdir()) == sorted(
        {text.strip() for text in outputs}
    )
    # At most 8 spares per rule set. A test beside this one that plants a system secret
    # (the kit's, under /etc) changes the rules, so another base may be kept too.
    assert all(len(b.built) <= 8 for b in engine._bases.values()), [
        (k, len(b.built)) for k, b in engine._bases.items()
    ]
    assert _fds() - kept() == before, "descriptors leaked"
    assert procs.wait_until(lambda: set(own_children()) <= children, timeout=30), "processes left"
    left = list(parent.iterdir())  # only emptied ones, kept as spares for later runs
    assert len(left) <= 8 and all(not any(d.iterdir()) for d in left), left


def test_closing_the_host_frees_its_rulesets_and_scratch(box):
    from stockade.conformance.procs import open_fds

    def used_once() -> tuple[set[tuple[str, str]], Path]:
        host = Host(Config(sandbox="landlock"), plugins=[AllowAll()])
        try:
            result = host.run(box.request(["true"]))
            assert result.exit_code == 0 and result.sandbox.provider == "landlock"
            admitted = host.prepare(host.admit(box.request(["true"])))
            admitted.provider.release(admitted.plan)
            parent = Path(admitted.plan.env["TMPDIR"]).parent  # the provider's scratch parent
            held = open_fds()
        finally:
            host.close()
        return held, parent

    used_once()  # the first host loads what stays for the process (filters, libraries)
    before = open_fds()
    held, parent = used_once()
    # Control: while the host was open it did keep a ruleset (what closing must free).
    assert any("landlock-ruleset" in target for _, target in held - before)
    assert not open_fds() - before, "a closed host left descriptors open"
    assert not parent.exists(), "a closed host left its scratch folders"


def test_an_old_abi_is_refused_unless_partial_is_accepted(make_host, box):
    strict = make_host(
        allow_all=True,
        config=Config(
            sandbox="landlock", plugins=PluginsConfig(settings={"landlock": {"max_abi": 4}})
        ),
    )
    with pytest.raises(SandboxUnavailable, match="Landlock ABI 4 cannot enforce") as caught:
        strict.run(box.request(["true"]))
    assert "signals to processes outside the sandbox (ABI 6)" in caught.value.details["missing"]
    settings = {"landlock": {"max_abi": 4, "accept_partial": True}}
    lenient = make_host(
        allow_all=True, config=Config(sandbox="landlock", plugins=PluginsConfig(settings=settings))
    )
    result = lenient.run(box.py(f"open({str(box.secret)!r}, 'a').write('x')"))
    assert result.exit_code != 0 and box.secret.read_text() == box.canary  # still confined
    assert result.sandbox.enforcement == "partial"
    assert result.sandbox.missing == (
        "device ioctls (ABI 5)",
        "signals to processes outside the sandbox (ABI 6)",
    )


def test_each_run_gets_an_empty_scratch_that_others_cannot_write(host, box):
    first = host.run(box.request(["sh", "-c", 'echo secret > "$TMPDIR/left"; echo "$TMPDIR"']))
    assert first.exit_code == 0, first.stderr.text
    second = host.run(box.request(["sh", "-c", 'ls -A "$TMPDIR"; echo "$TMPDIR"']))
    listing, where = second.stdout.text.rsplit("\n", 2)[0], second.stdout.text.split()[-1]
    assert "left" not in second.stdout.text and listing == where
    # A run cannot write into another's scratch while both run (the second layer allows
    # only its own).
    (box.ws / "work").mkdir()
    holder = threading.Thread(
        target=host.run, args=(box.request(["sh", "-c", 'echo "$TMPDIR" > work/a; sleep 3']),)
    )
    holder.start()
    try:
        from helpers import procs

        assert procs.wait_until((box.ws / "work" / "a").exists, timeout=30)
        other = (box.ws / "work" / "a").read_text().strip()
        attack = f'echo x > {other}/planted; echo "$?"; touch "$TMPDIR/mine" && echo own'
        third = host.run(box.request(["sh", "-c", attack]))
        assert third.stdout.text == "2\nown\n", (third.stdout.text, third.stderr.text)
        assert "Permission denied" in third.stderr.text
        assert not os.path.exists(os.path.join(other, "planted"))
    finally:
        holder.join()


DOCTOR_WITHOUT_NAMESPACES = (
    REFUSE_NAMESPACES
    + """
from stockade.cli import main
sys.exit(main(["doctor", "--json"]))
"""
)


def test_doctor_shows_the_fallback_and_why(box):
    import json

    env = {k: v for k, v in os.environ.items() if k not in ("STOCKADE_DISABLE_PLUGINS",)}
    env["XDG_CONFIG_HOME"] = str(box.root / "no-config")
    proc = subprocess.run(
        [sys.executable, "-c", DOCTOR_WITHOUT_NAMESPACES],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    mode = next(m for m in report["modes"] if m["name"] == "workspace-write")
    assert mode["ok"], mode
    assert mode["detail"].startswith("sandbox landlock (fallback: bubblewrap cannot run:"), mode


def test_unix_sockets_below_abi_6_are_listed_as_missing(make_host, box):
    settings = {"landlock": {"max_abi": 5, "accept_partial": True, "unix_sockets": True}}
    host = make_host(
        allow_all=True, config=Config(sandbox="landlock", plugins=PluginsConfig(settings=settings))
    )
    result = host.run(box.request(["true"]))
    assert result.sandbox.missing == (
        "signals to processes outside the sandbox (ABI 6)",
        "abstract Unix sockets outside the sandbox (ABI 6)",
    )
