"""The build hook that installs the native client as ``bin/stockade`` (``core/native/``).

hatchling builds the package; this hook compiles the C client with the machine's C compiler
(``$CC``, else ``cc`` or ``gcc``) into a folder outside the tree and adds it to the wheel as a
script, so ``uv sync`` (editable), ``pip install`` and ``uv tool install`` all put it in the
environment's ``bin/``. The wheel is then tagged for this platform. Where no compiler is found
or the compile fails, ``bin/stockade`` is the Python client (``native/stockade.py``, whose
``#!python`` line installers rewrite) and the wheel stays pure Python: nothing breaks, only
the start is slower. The Python client is always there as ``stockade-py``.

Written here because no build backend compiles a lone C program into a script: they build
extension modules, which would need Python to start.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sysconfig
import tempfile
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCES = ("client.c", "json.c", "place.c", "start.c")
FLAGS = ("-O2", "-std=c11", "-Wall", "-Wextra", "-s")
HARDENED = (
    "-fstack-protector-strong",
    "-D_FORTIFY_SOURCE=2",
    "-fPIE",
    "-pie",
    "-Wl,-z,relro,-z,now",
)
"""Asked for first; a compiler that refuses one of them builds with :data:`FLAGS` alone."""


class NativeClientHook(BuildHookInterface):  # type: ignore[type-arg]
    """Compile ``native/*.c`` into the wheel's ``stockade`` script."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        """Add the compiled client (or the Python fallback) as the ``stockade`` script."""
        if self.target_name != "wheel":
            return
        native = os.path.join(self.root, "native")
        self._out = tempfile.mkdtemp(prefix="stockade-native-")
        binary = os.path.join(self._out, "stockade")
        why = self._compile(native, binary)
        if why is None:
            build_data["shared_scripts"][binary] = "stockade"
            build_data["pure_python"] = False
            if version == "standard":
                platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
                build_data["tag"] = f"py3-none-{platform}"
        else:
            self.app.display_warning(f"stockade: bin/stockade is the Python client: {why}")
            build_data["shared_scripts"][os.path.join(native, "stockade.py")] = "stockade"

    def finalize(self, version: str, build_data: dict[str, Any], artifact: str) -> None:
        """Remove the folder the client was compiled in."""
        out = getattr(self, "_out", None)
        if out:
            shutil.rmtree(out, ignore_errors=True)

    @staticmethod
    def _compile(native: str, binary: str) -> str | None:
        """Compile the client to ``binary``: ``None``, or why it was not compiled."""
        cc = os.environ.get("CC")
        compiler = shlex.split(cc) if cc else None  # `ccache gcc`, `gcc -m64`: a command line
        if not compiler:
            found = shutil.which("cc") or shutil.which("gcc")
            compiler = [found] if found else None
        if not compiler:
            return "no C compiler was found (set CC, or install gcc)"
        sources = [os.path.join(native, s) for s in SOURCES]
        why = None
        for flags in ((*FLAGS, *HARDENED), FLAGS):
            command = [*compiler, *flags, "-o", binary, *sources]
            try:
                done = subprocess.run(command, capture_output=True, text=True, check=False)
            except OSError as error:
                return f"{compiler[0]} could not run: {error}"
            if done.returncode == 0:
                return None
            why = f"{compiler[0]} failed: {done.stderr.strip()[-2000:]}"
        return why
