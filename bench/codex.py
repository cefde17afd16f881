"""Codex's ``codex sandbox -- true`` for the warm server's section (``bench/server.py``):
installed from the npm registry into ``bench/.codex`` (git-ignored), timed both through npm's
node launcher and through the native binary (the musl build) the package carries."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import startup  # bench/startup.py: the repository's root

CODEX_DIR = startup.ROOT / "bench" / ".codex"  # git-ignored: node_modules and CODEX_HOME
CODEX_PACKAGE = "@openai/codex"
NPM_TIMEOUT = 600.0


def codex_commands(env: dict[str, str], cwd: str) -> tuple[dict[str, list[str]], dict[str, Any]]:
    """``codex sandbox -- true`` by npm's launcher and by the native binary, if installable;
    the commands and what to report (the version, or why not)."""
    launcher = CODEX_DIR / "node_modules" / ".bin" / "codex"
    install = ["install", "--prefix", str(CODEX_DIR), "--no-audit", "--no-fund", CODEX_PACKAGE]
    if not launcher.is_file():
        npm = shutil.which("npm")
        if npm is None:
            return {}, {"skipped": "`npm` is not on PATH, so Codex could not be installed"}
        if why := _fails([npm, *install], None, None, NPM_TIMEOUT):
            return {}, {"skipped": f"`npm install {CODEX_PACKAGE}`: {why}"}
    (CODEX_DIR / "home").mkdir(exist_ok=True)  # CODEX_HOME: it must exist, outside /tmp
    commands = {"codex": [str(launcher), "sandbox", "--", "true"]}
    native = sorted(CODEX_DIR.glob("node_modules/@openai/codex-linux-*/vendor/*/bin/codex"))
    if native:
        commands["codex_native"] = [str(native[0]), "sandbox", "--", "true"]
    info: dict[str, Any] = {"skipped_cases": {}}
    for name, argv in list(commands.items()):  # the first run sets Codex up: allow 120 s
        if why := _fails(argv, env, cwd, 120.0):
            info["skipped_cases"][name] = f"`codex sandbox -- true`: {why}"
            del commands[name]
    version = subprocess.run(  # with CODEX_HOME: Codex writes under it
        [launcher, "--version"], env=env, capture_output=True, text=True, check=False
    )
    info["version"] = version.stdout.strip()
    if not commands:
        info["skipped"] = "; ".join(info["skipped_cases"].values())
    return commands, info


def _fails(argv: list[str], env: dict[str, str] | None, cwd: str | None, timeout: float) -> str:
    """Why ``argv`` failed (its status and the first error line, else the last), or ``""``."""
    try:
        proc = subprocess.run(
            argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        return f"took over {timeout:g} s"
    if proc.returncode == 0:
        return ""
    lines = proc.stderr.strip().splitlines() or ["no output"]
    line = next((x for x in lines if "error" in x.lower()), lines[-1]).strip()
    return f"failed ({proc.returncode}): {line}"
