"""What layered workspaces cost (:mod:`stockade.layers`): ``uv run python bench/layers.py``.

Four figures, each against a baseline measured in the same run, interleaved:

1. **Set-up.** ``Host.run(["mkdir", "-p", "d"])`` (``d`` there already: an empty layer; a
   ``reads`` command such as ``true`` runs read-only, with no layer) under bubblewrap in
   ``workspace-write`` with layers against the same host with ``layers = false`` (direct
   writes), and raw ``bwrap true``
   with one ``--overlay`` against raw ``bwrap true`` with a ``--bind``: what the layer adds
   (making it, the journal, the mount, landing an empty layer). Target: **+1 ms**.
2. **Commit of 1,000 new files** (in 10 folders): :func:`stockade.layers.land` alone, on an
   upper folder made outside the timing. Target: **at most 50 ms**.
3. **One changed file in a 100,000-file workspace**: landing a layer holding that one file,
   against today's watch path (``changes.Watch(root)`` then ``finish()``, inotify) on the
   same tree. Target: **at most 2 ms**.
4. **Copy-up of a 100 MB file**: ``sh -c 'echo x >> big'`` in bwrap over an overlay, against
   the same with the folder bound directly: the first write to an existing file copies it
   whole into the layer.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from stockade_bubblewrap import discover
from stockade_bubblewrap.layout import overlay_args

import timing  # bench/timing.py
from stockade.config.schema import Config, PluginsConfig
from stockade.host import Host
from stockade.layers import Rules, Tally, land
from stockade.layers.place import Layer
from stockade.request.spec import ExecRequest
from stockade.run.changes import Watch
from stockade.testing import AllowAll

SETUP_TARGET_MS, COMMIT_TARGET_MS, ONE_TARGET_MS = 1.0, 50.0, 2.0


def _bwrap(*mount: str, command: tuple[str, ...] = ("true",)) -> Callable[[], int]:
    argv = [discover.select().path, "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/"]
    argv += ["--dev", "/dev", "--proc", "/proc", *mount, "--", *command]
    return lambda: subprocess.run(argv, check=False).returncode


def setup(base: Path, runs: int) -> dict[str, timing.Stats]:
    ws = base / "ws"
    ws.mkdir()
    layered = Host(Config(sandbox="bubblewrap"), plugins=[AllowAll()])
    off = {"bubblewrap": {"layers": False}}
    direct = Host(
        Config(sandbox="bubblewrap", plugins=PluginsConfig(settings=off)), plugins=[AllowAll()]
    )
    (ws / "d").mkdir()
    # A command that writes (``true`` only reads: it runs read-only, with no layer at all);
    # ``mkdir -p`` of a folder that exists leaves its layer empty: set-up and landing alone.
    request = ExecRequest(["mkdir", "-p", "d"], str(ws), mode="workspace-write")
    upper, work = base / "upper", base / "work"

    def fresh_overlay() -> int:
        for folder in (upper, work):
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
        return overlay()

    overlay = _bwrap(*overlay_args(str(ws), str(upper), str(work)))

    def run(host: Host) -> int:
        result = host.run(request)
        assert result.sandbox.writes == ("direct" if host is direct else "layered")
        return result.exit_code or 0

    cases = {
        "Host.run mkdir -p, layered": lambda: run(layered),
        "Host.run mkdir -p, direct (layers = false)": lambda: run(direct),
        "raw bwrap true, --overlay": fresh_overlay,
        "raw bwrap true, --bind": _bwrap("--bind", str(ws), str(ws)),
    }
    try:
        figures = timing.interleaved(cases, runs, max(runs // 10, 3))
        # CPU time, which a machine busy with other work does not inflate: the host's own
        # (layers made, journal, landing an empty layer) and the children's (bwrap, mount).
        for name in ("Host.run mkdir -p, layered", "Host.run mkdir -p, direct (layers = false)"):
            figures[f"{name}, CPU (host + children)"] = _cpu_of(cases[name], runs)
        for name in ("raw bwrap true, --overlay", "raw bwrap true, --bind"):
            figures[f"{name}, CPU (children)"] = _cpu_of(cases[name], runs)
        return figures
    finally:
        layered.close()
        direct.close()


def stages(base: Path, runs: int) -> dict[str, timing.Stats]:
    """Where ``Host.run`` spends its own time, CPU per stage (what a machine busy with other
    work inflates least), for ``true`` (a ``reads`` command: read-only, no layer) and for a
    layered ``mkdir -p``; against raw bwrap with the very flags the provider builds for
    ``true`` (``bench/confined.py``), CPU of this process and its children."""
    import confined  # bench/confined.py: the raw argv of the same request

    ws = confined.plant_workspace(base / "stages")
    (ws / "d").mkdir()
    host = Host(Config(sandbox="bubblewrap"), plugins=[AllowAll()])
    figures: dict[str, timing.Stats] = {}
    try:
        true = ExecRequest(["true"], str(ws), mode="workspace-write", origin="cli")
        template, bpf = confined.raw_argv(host, true)
        filter_fd = os.memfd_create("bench-seccomp", 0)
        os.write(filter_fd, bpf)
        argv = [arg.replace("{fd}", str(filter_fd)) for arg in template]
        # After a first run this process is a child subreaper: bwrap's namespace init (which
        # does the mounts) is then reaped here, so its CPU counts for raw bwrap too.
        host.run(true)

        def raw() -> int:
            os.lseek(filter_fd, 0, os.SEEK_SET)
            done = subprocess.run(
                argv,
                pass_fds=(filter_fd,),
                capture_output=True,
                stdin=subprocess.DEVNULL,
                env={},
                check=False,
            )
            confined.reap_orphans()
            return done.returncode

        for name, case in (
            ("raw bwrap true (the provider's flags), CPU", raw),
            ("Host.run true, CPU", lambda: host.run(true).exit_code or 0),
        ):
            figures[name] = _cpu_of(case, runs)
            figures[f"{name}, this process's own"] = _own_cpu_of(case, runs)
        for label, request in (
            ("true", true),
            ("mkdir -p, layered", ExecRequest(["mkdir", "-p", "d"], str(ws), origin="cli")),
        ):
            figures.update(_stage_cpu(host, request, label, runs))
        os.close(filter_fd)
    finally:
        host.close()
    return figures


def _stage_cpu(host: Host, request: ExecRequest, label: str, runs: int) -> dict[str, timing.Stats]:
    """CPU per stage of ``host.run(request)``, the stages called as :meth:`Host.run` does."""
    names = ("admit", "prepare", "carry out (host's own)", "carry out (children)", "record")
    samples: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(runs + 3):
        mine, kids = _cpu(), _cpu(resource.RUSAGE_CHILDREN)
        admission = host.admit(request)
        after_admit = _cpu()
        prepared = host.prepare(admission)
        after_prepare = _cpu()
        carried = host.carry_out(prepared)
        after_carry = _cpu()
        host.finish(admission.spec, carried)
        end, kids_after = _cpu(), _cpu(resource.RUSAGE_CHILDREN)
        values = (
            after_admit - mine,
            after_prepare - after_admit,
            after_carry - after_prepare,
            kids_after - kids,  # bwrap and the command, reaped while it was carried out
            end - after_carry,
        )
        for name, value in zip(names, values, strict=True):
            samples[name].append(value)
    return {f"{label}: {name}": timing.summarize(v[3:]) for name, v in samples.items()}


def _own_cpu_of(case: Callable[[], int], runs: int) -> timing.Stats:
    """The CPU time of ``case`` in this process alone (no children), in ms."""
    samples = []
    for _ in range(runs):
        before = _cpu()
        case()
        samples.append(_cpu() - before)
    return timing.summarize(samples)


def _cpu_of(case: Callable[[], int], runs: int) -> timing.Stats:
    """The CPU time of ``case``, this process's and its children's, in ms."""
    samples = []
    for _ in range(runs):
        before = _cpu() + _cpu(resource.RUSAGE_CHILDREN)
        status = case()
        samples.append(_cpu() + _cpu(resource.RUSAGE_CHILDREN) - before)
        if status != 0:
            raise SystemExit(f"bench: a case exited with status {status}")
    return timing.summarize(samples)


def _upper(base: Path, root: Path, files: dict[str, bytes]) -> Layer:
    folder = Path(tempfile.mkdtemp(dir=base))
    layer = Layer(str(root), str(folder), str(base))
    for rel, data in files.items():
        path = Path(layer.upper) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return layer


def commit(base: Path, runs: int) -> dict[str, timing.Stats]:
    root = base / "root1000"
    for n in range(10):
        (root / f"d{n}").mkdir(parents=True)
    new = {f"d{n % 10}/new{n}.txt": b"x" for n in range(1000)}
    samples, cpu = [], []
    for _ in range(runs):
        layer = _upper(base, root, new)
        tally = Tally()
        start, used = time.perf_counter(), _cpu()
        land(layer, Rules(str(base / "q")), tally)
        samples.append((time.perf_counter() - start) * 1000)
        cpu.append(_cpu() - used)
        assert len(tally.created) == 1000
        for n in range(10):
            shutil.rmtree(root / f"d{n}")
            (root / f"d{n}").mkdir()
        shutil.rmtree(layer.folder)
    return {
        "land 1,000 new files": timing.summarize(samples),
        "land 1,000 new files, CPU time (user + system)": timing.summarize(cpu),
    }


def _cpu(who: int = resource.RUSAGE_SELF) -> float:
    """CPU time so far, user and system, in ms (what a busy machine's wait for a core does
    not inflate), of this process or (``RUSAGE_CHILDREN``) its reaped children."""
    used = resource.getrusage(who)
    return (used.ru_utime + used.ru_stime) * 1000


def one_change(base: Path, runs: int) -> dict[str, timing.Stats]:
    root = base / "root100k"
    for d in range(100):
        folder = root / f"d{d}"
        folder.mkdir(parents=True)
        for f in range(1000):
            (folder / f"f{f}").touch()

    landed: list[float] = []
    cpu: list[float] = []

    def layered() -> int:
        layer = _upper(base, root, {"d50/f500": b"changed"})  # made outside the figure
        start, used = time.perf_counter(), _cpu()
        land(layer, Rules(str(base / "q")), Tally())
        landed.append((time.perf_counter() - start) * 1000)
        cpu.append(_cpu() - used)
        shutil.rmtree(layer.folder)
        return 0

    def watched() -> int:
        watch = Watch(str(root), max_entries=200_000)
        (root / "d50" / "f500").write_bytes(b"changed")
        watch.finish()
        return 0

    figures = timing.interleaved(
        {"(layer made, landed)": layered, "watch + finish (100,000 files)": watched}, runs, 2
    )
    del figures["(layer made, landed)"]
    figures["land 1 changed file (100,000 files)"] = timing.summarize(landed[-runs:])
    figures["land 1 changed file, CPU time"] = timing.summarize(cpu[-runs:])
    return figures


def copy_up(base: Path, runs: int) -> dict[str, timing.Stats]:
    ws = base / "big"
    ws.mkdir()
    with open(ws / "big", "wb") as big:
        big.truncate(0)
        big.write(os.urandom(1 << 20) * 100)
    upper, work = base / "bu", base / "bw"
    append = ("sh", "-c", f"echo x >> {ws}/big")
    overlay = _bwrap(*overlay_args(str(ws), str(upper), str(work)), command=append)

    def fresh() -> int:
        for folder in (upper, work):
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
        return overlay()

    direct = _bwrap("--bind", str(ws), str(ws), command=append)
    return timing.interleaved(
        {"append to a 100 MB file, layered (copy-up)": fresh, "same, direct": direct}, runs, 1
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    figures: dict[str, timing.Stats] = {}
    base = Path(tempfile.mkdtemp(dir=Path.home(), prefix=".stockade-bench-"))
    try:
        for section in (stages, setup, commit, one_change):
            figures.update(section(base, args.runs))
        figures.update(copy_up(base, max(args.runs // 4, 5)))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(timing.HEAD)
    for name, stats in figures.items():
        print(timing.row(name, stats))
    added = (
        figures["Host.run mkdir -p, layered"]["median"]
        - figures["Host.run mkdir -p, direct (layers = false)"]["median"]
    )
    kernel = (
        figures["raw bwrap true, --overlay"]["median"] - figures["raw bwrap true, --bind"]["median"]
    )
    cpu_added = (
        figures["Host.run mkdir -p, layered, CPU (host + children)"]["median"]
        - figures["Host.run mkdir -p, direct (layers = false), CPU (host + children)"]["median"]
    )
    verdicts = {
        "layer set-up (Host, layered - direct)": (added, SETUP_TARGET_MS),
        "layer set-up, CPU time (Host, layered - direct)": (cpu_added, SETUP_TARGET_MS),
        "of which the overlay mount (raw bwrap)": (kernel, SETUP_TARGET_MS),
        "commit of 1,000 new files": (figures["land 1,000 new files"]["median"], COMMIT_TARGET_MS),
        "commit of 1,000 new files, CPU time": (
            figures["land 1,000 new files, CPU time (user + system)"]["median"],
            COMMIT_TARGET_MS,
        ),
        "1 changed file of 100,000": (
            figures["land 1 changed file (100,000 files)"]["median"],
            ONE_TARGET_MS,
        ),
        "1 changed file of 100,000, CPU time": (
            figures["land 1 changed file, CPU time"]["median"],
            ONE_TARGET_MS,
        ),
    }
    for label, (value, target) in verdicts.items():
        met = "met" if value <= target else "NOT met"
        print(f"  {label:<62} {value:>10.3f} ms   target <= {target:g} ms: {met}")
    print("BENCH " + json.dumps({"figures": figures, "python": sys.version.split()[0]}))


if __name__ == "__main__":
    main()
