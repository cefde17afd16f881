"""A local Ray cluster for the whole session, and the ground the attacks need.

Ray is optional: without it every test module skips itself, except under CI (``STOCKADE_CI=1``),
where ``.ci/run`` installs it and a missing Ray fails the run. The cluster is started once,
as the docs start a real one (``ray start --head`` and a second ``ray start`` on another
loopback address, token authentication on: :mod:`nodes`), one CPU a node, in a short private
temp folder, so a user other than the one who last ran Ray here can start one too. Canaries
live under the user's home, never under ``/tmp`` (which a sandbox replaces with its own).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from ground import Box, Upstream, unmount_forks
from nodes import Cluster, token_env

# A driver started by `uv run` would have Ray rebuild the project for every worker; token
# authentication must be on in this process too. Both are read when Ray is imported.
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
token_env()

try:
    import ray
except ImportError:  # pragma: no cover - depends on the environment
    if os.environ.get("STOCKADE_CI") == "1":
        raise  # CI installs Ray (.ci/run): its absence is a failure there
    ray = None  # each test module then skips itself (pytest.importorskip)


def pytest_report_header() -> str:
    return "ray: " + (ray.__version__ if ray is not None else "not installed: tests skipped")


@pytest.fixture(scope="session")
def nodes() -> Iterator[Cluster]:
    """The session's cluster, started as the docs start one (``ray start`` with token
    authentication): a head on 127.0.0.1 and a second node on 127.0.0.2 (``side``)."""
    assert ray is not None
    temp = tempfile.mkdtemp(prefix="sr-", dir="/tmp")  # Ray's socket paths must stay short
    made = Cluster(temp)
    try:
        side = made.add_side("side")
        for attempt in range(3):  # the head may still be registering (see nodes.py)
            try:
                ray.init(address=made.address, log_to_driver=False)
                break
            except (ConnectionError, RuntimeError):
                ray.shutdown()
                if attempt == 2:
                    raise
        side.node_id()  # the side node is up
        yield made
    finally:
        ray.shutdown()
        made.stop()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def cluster(nodes: Cluster) -> Cluster:
    return nodes


@pytest.fixture
def box() -> Iterator[Box]:
    base = Path.home() / ".stockade-tests"
    base.mkdir(mode=0o700, exist_ok=True)
    root = Path(tempfile.mkdtemp(dir=base))
    try:
        yield Box(root)
    finally:
        unmount_forks(root)
        subprocess.run(["chmod", "-R", "u+rwX", str(root)], check=False)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = Upstream()
    yield server
    server.close()
