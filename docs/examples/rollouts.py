"""Rollouts on a Ray cluster: N episodes forked from one repository, each a run of its own.

    python docs/examples/rollouts.py --episodes 8 --actors 2 --state /tmp/rollouts

It makes a small repository (a function with a bug, and its test), snapshots it once, and
forks ``--episodes`` episodes from the snapshot over ``--actors`` warm workers. Each episode
is one rollout: it reads the code, writes a candidate fix (every other candidate is wrong),
runs the test, and gets a reward (1 when the test passes) recorded in the signed chain
beside its commands (``episode.annotate``). The changes of each episode are exported as a
tar stream into ``--state/exports``. It checks the chain and prints one JSON line:
``episodes``, ``steps``, ``rewards`` (by episode), ``exported`` (bytes), ``seconds``,
``verified``. It exits 1 when a step failed or the chain did not verify. It starts a local
Ray cluster, or joins one with ``--address``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any

CODE = "def add(a, b):\n    return a - b\n"
TEST = "from app import add\nassert add(2, 3) == 5, add(2, 3)\nprint('ok')\n"
FIXES = ("def add(a, b):\n    return a + b\n", "def add(a, b):\n    return b - a\n")


def repository(folder: str) -> None:
    """The starting state every episode forks from."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "app.py"), "w") as handle:
        handle.write(CODE)
    with open(os.path.join(folder, "test_app.py"), "w") as handle:
        handle.write(TEST)


def rollouts(pool: Any, count: int, state: str) -> tuple[dict[str, float], int, int, int, float]:  # noqa: ANN401
    """Fork ``count`` episodes from the repository and run each: rewards by episode, steps,
    failed steps, bytes exported, seconds."""
    from stockade.request.spec import Budget, ExecRequest, Profile

    # What an episode may do: write its workspace and run the test; nothing asks a person
    # but `destroys` (a shell); at most 6 steps and 120 seconds each.
    agent = Profile(name="rollout", ask=())
    rewards: dict[str, float] = {}
    exported = steps = failed = 0
    source = os.path.join(state, "repository")
    repository(source)
    start = time.perf_counter()
    snapshot = pool.snapshot(source)
    episodes = pool.fork(snapshot, count, profile=agent, budget=Budget(steps=6, duration=120))
    shipped = []  # every episode's steps go out at once; each runs on its worker
    for i, episode in enumerate(episodes):
        fix = {"fix.py": FIXES[i % 2].encode()}
        shipped.append([
            episode.run(ExecRequest(("cat", "app.py"))),
            episode.run(ExecRequest(("cp", "fix.py", "app.py")), files=fix),
            episode.run(ExecRequest(("python3", "test_app.py"))),
        ])  # fmt: skip
    for episode, (read, write, test) in zip(episodes, shipped, strict=True):
        failed += sum(f.result().result.exit_code != 0 for f in (read, write))
        steps += 3
        rewards[episode.name] = 1.0 if test.result().result.exit_code == 0 else 0.0
        episode.annotate("reward", score=rewards[episode.name], by="test_app.py")
        changes = episode.export(changes=True)
        with open(os.path.join(state, "exports", episode.name + ".tar"), "wb") as out:
            out.write(changes.data)
        exported += len(changes.data)
        episode.discard()
    return rewards, steps, failed, exported, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=8, help="how many episodes (8)")
    parser.add_argument("--actors", type=int, default=2, help="how many workers (2)")
    parser.add_argument("--state", required=True, help="the state folder: store, key, exports")
    parser.add_argument("--address", help="join this Ray cluster instead of starting one")
    args = parser.parse_args(argv)

    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")  # `uv run` drivers
    import ray

    from stockade.config.schema import Config, StoreConfig
    from stockade.record.store import Store
    from stockade.record.verify import verify
    from stockade_ray import StockadePool

    state = os.path.abspath(args.state)
    os.makedirs(os.path.join(state, "exports"), mode=0o700, exist_ok=True)
    temp = None
    if args.address:
        ray.init(address=args.address, log_to_driver=False)
    else:  # a short private folder: Ray's socket paths must stay short, and be this user's
        temp = tempfile.mkdtemp(prefix="sr-", dir="/tmp")
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp)
    config = Config(store=StoreConfig(path=os.path.join(state, "store.db")))
    try:
        with StockadePool(args.actors, config) as pool:
            rewards, steps, failed, exported, seconds = rollouts(pool, args.episodes, state)
    finally:
        ray.shutdown()
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
    store = Store(os.path.join(state, "store.db"))
    verified = verify(store).ok
    store.close()
    line = {
        "episodes": args.episodes,
        "steps": steps,
        "rewards": rewards,
        "exported": exported,
        "seconds": round(seconds, 3),
        "verified": verified,
    }
    print(json.dumps(line))
    return 0 if verified and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
