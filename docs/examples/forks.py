"""Snapshot a workspace, fork it, run one command in each fork, export and discard.

Run it with ``python docs/examples/forks.py FOLDER`` (bubblewrap with layers needed).
"""

from __future__ import annotations

import io
import sys
import tarfile

from stockade.config.schema import Config, store_folder
from stockade.host import Host
from stockade.layers import snapshots
from stockade.request.spec import ExecRequest
from stockade.testing import AllowAll


def rollouts(folder: str, count: int = 3) -> list[str]:
    """Fork ``folder`` ``count`` times, write one file per fork, and say what each holds;
    the snapshot's export still holds what was taken."""
    config = Config(sandbox="bubblewrap")
    store = store_folder(config)
    snap = snapshots.take(folder, store=store)  # an immutable id: snap.id
    forks = snapshots.fork(snap, count, store=store)  # each a workspace of its own
    seen = []
    with Host(config, plugins=[AllowAll()]) as host:
        for n, fork in enumerate(forks):
            argv = ["sh", "-c", f"echo episode {n} > result.txt && ls"]
            result = host.run(ExecRequest(argv, fork, workspace=fork))
            seen.append(result.stdout.text.split())
    stream = io.BytesIO()
    snapshots.export(snap, stream)  # the snapshot, as it was taken
    stream.seek(0)
    with tarfile.open(fileobj=stream) as tar:
        exported = sorted(tar.getnames())
    snapshots.discard(snap, store=store)  # and its forks
    return [" ".join(names) for names in seen] + [f"snapshot: {' '.join(exported)}"]


if __name__ == "__main__":
    for line in rollouts(sys.argv[1]):
        print(line)
