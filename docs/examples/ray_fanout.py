"""Fan commands out over a Ray cluster through Stockade, then check the one signed record.

    python docs/examples/ray_fanout.py --commands 200 --actors 4 --state /tmp/fanout

It starts a local Ray cluster (or joins one with ``--address``), makes a pool of ``--actors``
warm workers, runs ``--commands`` commands as that many rollouts' steps (rollout ``i`` is the
agent ``rollout{i % actors}``, whose workspace sticks to one worker), checks the chain the
driver wrote in ``--state``, and prints one JSON line: ``commands``, ``actors``, ``seconds``
(from the first step shipped to the last recorded), ``per_second``, ``failed`` (steps that did
not exit 0) and ``verified`` (``stockade verify`` over the state passed). It exits 1 when a
step failed or the chain did not verify.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commands", type=int, default=200, help="how many commands (200)")
    parser.add_argument("--actors", type=int, default=4, help="how many workers (4)")
    parser.add_argument("--state", required=True, help="the state folder: store, key, workspaces")
    parser.add_argument("--address", help="join this Ray cluster instead of starting one")
    args = parser.parse_args(argv)

    # A driver started by `uv run` would otherwise have Ray rebuild the project per worker.
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    import ray

    from stockade.config.schema import Config, StoreConfig
    from stockade.errors import StockadeError
    from stockade.record.store import Store
    from stockade.record.verify import verify
    from stockade.request.spec import ExecRequest, Profile
    from stockade_ray import StockadePool

    state = os.path.abspath(args.state)
    os.makedirs(state, mode=0o700, exist_ok=True)
    temp = None
    if args.address:
        ray.init(address=args.address, log_to_driver=False)
    else:  # a short private folder: Ray's socket paths must stay short, and be this user's
        temp = tempfile.mkdtemp(prefix="sr-", dir="/tmp")
        cpus = max(2, os.cpu_count() or 2)
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, _temp_dir=temp)
    agents = {f"rollout{i}": Profile(name=f"rollout{i}") for i in range(args.actors)}
    config = Config(agents=agents, store=StoreConfig(path=os.path.join(state, "store.db")))
    failed = 0
    try:
        with StockadePool(args.actors, config) as pool:
            requests = [
                ExecRequest(("echo", f"step {i}"), profile=f"rollout{i % args.actors}")
                for i in range(args.commands)
            ]
            start = time.perf_counter()
            for future in pool.map(requests):
                try:
                    done = future.result()
                except StockadeError as error:
                    print(f"step {future.index}: {error}", file=sys.stderr)
                    failed += 1
                    continue
                failed += done.result.exit_code != 0
            seconds = time.perf_counter() - start
    finally:
        ray.shutdown()
        if temp is not None:
            shutil.rmtree(temp, ignore_errors=True)
    store = Store(os.path.join(state, "store.db"))
    verified = verify(store).ok
    store.close()
    line = {
        "commands": args.commands,
        "actors": args.actors,
        "seconds": round(seconds, 3),
        "per_second": round(args.commands / seconds, 1) if seconds else None,
        "failed": failed,
        "verified": verified,
    }
    print(json.dumps(line))
    return 0 if verified and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
