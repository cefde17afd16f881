"""A host running inside a Stockade run (its environment carries STOCKADE_RUN_ID).

It starts a child of its own with plain ``subprocess`` (not through Stockade), runs one
command through a Host, and prints whether its own child survived the run's sweep.
"""

from __future__ import annotations

import subprocess

from stockade.host import Host
from stockade.request.spec import ExecRequest
from stockade.testing import AllowAll

own = subprocess.Popen(["sleep", "30"])
try:
    with Host(plugins=[AllowAll()]) as host:
        host.run(ExecRequest(["true"], mode="danger-full-access"))
    print(f"own child alive: {own.poll() is None}")
finally:
    own.kill()
    own.wait()
