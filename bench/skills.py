"""A section of the bench: what running a skill's script costs (``bench/run.py``).

The example skill ``unit-convert``'s ``scripts/convert.py 5 km mi``, three ways, interleaved
in the same run, all in the same workspace:

- ``skill``: the skill tool (``SkillTool(..., unsafe=True)``): find the skills, check the
  resource, the gate, copy the skill into the workspace, run it through the host in the
  default sandbox, remove the copy;
- ``host``: ``Host.run`` of the same argv in a copy made once, in the same sandbox (the
  baseline for what the skill tool adds around a command);
- ``raw``: ``subprocess.run`` of the same script with the system ``python3``, unconfined
  (the baseline for the whole path).

No target is set by an issue: the figures say what the gate and the copy cost.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import timing  # bench/timing.py

EXAMPLES = Path(__file__).resolve().parents[1] / "skills"
ARGS = ["5", "km", "mi"]


def bench_skills(interleaved: timing.Interleave, runs: int = 40, warmup: int = 5) -> dict[str, Any]:
    """The skill tool, ``Host.run`` and raw ``subprocess`` running the same script."""
    from stockade.config.schema import Config, SkillsConfig
    from stockade.host import Host
    from stockade.request.spec import ExecRequest
    from stockade_skills import SkillTool
    from stockade_skills.catalog import Catalog
    from stockade_skills.resources import materialize

    here = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="stockade-bench-skills-", dir=Path.home()) as ws:
        os.chdir(ws)
        config = Config(skills=SkillsConfig(project=(str(EXAMPLES),), user=()))
        host = Host(config, environ={**os.environ, "PATH": "/usr/bin:/bin"})
        try:
            tool = SkillTool(host, unsafe=True)
            skill = Catalog.find([(str(EXAMPLES), "project")]).get("unit-convert")
            root, _ = materialize(skill, ws)
            argv = ["python3", "scripts/convert.py", *ARGS]

            def via_skill() -> int:
                out = tool("unit-convert", "scripts/convert.py", execute=True, args=ARGS)
                return 0 if out.result is not None and "3.10686" in out.text else 1

            def via_host() -> int:
                result = host.run(ExecRequest(argv, root))
                return result.exit_code or 0

            def raw() -> int:
                return subprocess.run(
                    ["/usr/bin/python3", "scripts/convert.py", *ARGS],
                    cwd=root,
                    capture_output=True,
                    stdin=subprocess.DEVNULL,
                    check=False,
                ).returncode

            stats = interleaved({"skill": via_skill, "host": via_host, "raw": raw}, runs, warmup)
            provider = host.run(ExecRequest(argv, root)).sandbox.provider
        finally:
            host.close()
            os.chdir(here)
    return {"runs": runs, "warmup": warmup, "provider": provider, **stats}


def report_skills(
    stats: dict[str, Any], row: Callable[[str, dict[str, float]], str], head: str, number: int
) -> None:
    """Print the section (``row`` and ``head`` are bench/run.py's ``_row`` and header)."""
    print(
        f"\n{number}. Skills: unit-convert scripts/convert.py {' '.join(ARGS)} under "
        f"{stats['provider']}, interleaved: {stats['runs']} runs each after "
        f"{stats['warmup']} warm-up"
    )
    print(head)
    print(row("skill tool (gate, copy, run, remove)", stats["skill"]))
    print(row("Host.run of the same argv", stats["host"]))
    print(row("raw subprocess, unconfined", stats["raw"]))
    skill, host, raw = (stats[k]["median"] for k in ("skill", "host", "raw"))
    print(
        f"  the skill tool adds {skill - host:+.2f} ms to Host.run ({skill / host:.2f}x); "
        f"Host.run is {host / raw:.2f}x raw"
    )
