"""Sections 2 and 3 of the bench: the CLI's start-up, from a venv installed as a user gets it.

2. CLI: ``stockade run --mode danger-full-access -- true`` against ``python -c pass``, both
   from a separate venv installed the way a user gets it (non-editable, bytecode compiled),
   rebuilt only when the sources changed.
3. Start-up breakdown: the top cumulative ``-X importtime`` costs of the CLI's imports.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Final

import confined  # bench/confined.py: its timed command
import timing

ROOT = Path(__file__).resolve().parent.parent
USER_VENV = ROOT / "bench" / ".venv-user"
STAMP = "bench-source-hash"
PACKAGES = ("core", "plugins/local", "plugins/bubblewrap", "plugins/landlock")
DISTS = ("stockade", "stockade_local", "stockade_bubblewrap", "stockade_landlock")
RECIPE = "uv venv; uv pip install --no-sources --compile-bytecode -c <lock> " + " ".join(
    f"./{p}" for p in PACKAGES
)
FLOOR_IMPORTS = "import attrs, pluggy, subprocess"
CLI_TARGET_RATIO = 3.0  # `stockade run -- true` may take at most this many times `python -c pass`
IMPORTS = "import stockade.cli.run, stockade.host, stockade_local.executor"
TOP_IMPORTS = 15
MODE: Final = "danger-full-access"


# --- 2. the user-install venv ----------------------------------------------------------------


def source_hash(python: str) -> str:
    """A digest of everything the user venv is built from (sources, metadata, lock, recipe)."""
    digest = hashlib.sha256(f"{RECIPE}\n{python}\n{sys.version}\n".encode())
    files = [
        p
        for tree in (f"{p}/src" for p in PACKAGES)
        for p in (ROOT / tree).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    ]
    files += [ROOT / "pyproject.toml", ROOT / "uv.lock", ROOT / "core" / "hatch_build.py"]
    files += (ROOT / "core" / "native").glob("*")  # the native client, bin/stockade
    files += [ROOT / p / name for p in PACKAGES for name in ("pyproject.toml", "README.md")]
    for path in sorted(files):
        if path.is_file():
            digest.update(f"{path.relative_to(ROOT)}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _uv(*args: str) -> str:
    proc = subprocess.run(["uv", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"bench: `uv {' '.join(args)}` failed:\n{proc.stderr}")
    return proc.stdout


def ensure_user_venv() -> tuple[Path, bool, float]:
    """The user venv, rebuilt when the sources changed; (path, rebuilt, seconds spent)."""
    digest = source_hash(sys.executable)
    stamp = USER_VENV / STAMP
    if (
        stamp.is_file()
        and stamp.read_text().strip() == digest
        and (USER_VENV / "bin" / "stockade").is_file()
    ):
        return USER_VENV, False, 0.0
    start = time.perf_counter()
    shutil.rmtree(USER_VENV, ignore_errors=True)
    _uv("venv", "--quiet", "--python", sys.executable, str(USER_VENV))
    # Pin third-party versions to the workspace lock so results compare across machines.
    constraints = USER_VENV / "constraints.txt"
    constraints.write_text(
        _uv(
            "export",
            "--frozen",
            "--no-dev",
            "--no-emit-workspace",
            "--no-hashes",
            "--no-header",
            "--format",
            "requirements-txt",
        )
    )
    # --no-sources: otherwise the workspace's `stockade = { workspace = true }` source makes
    # stockade-local's dependency an *editable* stockade (a .pth into core/src, no bytecode).
    _uv(
        "pip",
        "install",
        "--quiet",
        "--no-sources",
        "--compile-bytecode",
        "--python",
        str(USER_VENV / "bin" / "python"),
        "-c",
        str(constraints),
        *(f"./{p}" for p in PACKAGES),
    )
    _verify_installed(USER_VENV)
    stamp.write_text(digest + "\n")
    return USER_VENV, True, time.perf_counter() - start


def _verify_installed(venv: Path) -> None:
    """Refuse to time an editable or uncompiled install: it is not what users run."""
    (site,) = venv.glob("lib/python*/site-packages")
    for dist in DISTS:
        (info,) = site.glob(f"{dist}-*.dist-info")
        direct = json.loads((info / "direct_url.json").read_text())
        if direct.get("dir_info", {}).get("editable"):
            raise SystemExit(f"bench: {dist} was installed editable in {venv}")
        if not any((site / dist / "__pycache__").glob("__init__.*.pyc")):
            raise SystemExit(f"bench: {dist} has no compiled bytecode in {venv}")
    for pth in site.glob("*.pth"):
        if str(ROOT) in pth.read_text():
            raise SystemExit(f"bench: {pth} points into the source tree")


def child_env(config_home: str) -> dict[str, str]:
    """The environment of timed commands: no user config, no source paths, no bytecode writes."""
    drop = {"PYTHONPATH", "STOCKADE_CONFIG", "VIRTUAL_ENV", "PYTHONHOME"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["XDG_CONFIG_HOME"] = config_home
    return env


def bench_cli(venv: Path, runs: int, warmup: int, env: dict[str, str], cwd: str) -> dict[str, Any]:
    """`stockade run -- true` against `python -c pass`, both from the user venv."""
    commands = {
        "stockade": [str(venv / "bin" / "stockade"), "run", "--mode", MODE, "--", "true"],
        "python": [str(venv / "bin" / "python"), "-c", "pass"],
        # What any CLI built on the required libraries pays before running a line of its own.
        "floor": [str(venv / "bin" / "python"), "-c", FLOOR_IMPORTS],
    }
    for name, argv in commands.items():  # show why, if one does not even start
        proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"bench: {name} failed ({proc.returncode}):\n{proc.stderr}")

    cases = timing.interleaved(
        {name: confined.timed_command(argv, env, cwd) for name, argv in commands.items()},
        runs,
        warmup,
    )
    stockade_ms, python_ms = cases["stockade"]["median"], cases["python"]["median"]
    return {
        "runs": runs,
        "warmup": warmup,
        **cases,
        "overhead_ms": stockade_ms - python_ms,
        "ratio": stockade_ms / python_ms,
        "floor_ratio": cases["floor"]["median"] / python_ms,
        "target_ratio": CLI_TARGET_RATIO,
    }


# --- 3. start-up breakdown -------------------------------------------------------------------


def import_breakdown(venv: Path, env: dict[str, str], cwd: str) -> dict[str, Any]:
    """Parse ``-X importtime`` of the CLI's imports: top cumulative rows, self time by package."""
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-X", "importtime", "-c", IMPORTS],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    rows: list[dict[str, Any]] = []
    for line in proc.stderr.splitlines():
        fields = line.removeprefix("import time:").split("|")
        if len(fields) != 3 or not fields[0].strip().isdigit():
            continue
        name = fields[2].rstrip()
        rows.append(
            {
                "module": name.strip(),
                "depth": (len(name) - len(name.lstrip()) - 1) // 2,
                "self_ms": int(fields[0]) / 1000,
                "cumulative_ms": int(fields[1]) / 1000,
            }
        )
    total = sum(row["cumulative_ms"] for row in rows if row["depth"] == 0)
    by_package: dict[str, float] = {}
    for row in rows:
        package = row["module"].split(".")[0]
        by_package[package] = by_package.get(package, 0.0) + row["self_ms"]
    top = sorted(rows, key=lambda row: -row["cumulative_ms"])[:TOP_IMPORTS]
    packages = dict(sorted(by_package.items(), key=lambda kv: -kv[1])[:10])
    return {"command": IMPORTS, "total_ms": total, "top": top, "self_by_package_ms": packages}
