#!/usr/bin/env python3
"""Pull and push rates of the Python client, in the setting of tests/bench/ps_bench.cc: a local
cluster (--servers servers, one table of --dim floats with Adagrad, 64 shards), one client
making one blocking call at a time on --keys distinct random keys, cycling through --key_sets
key sets (each pulled and pushed once untimed first). Also the rate of the key hash (NumPy
and python3-xxhash) and of planning a call.

One JSON line per measurement: the median over --runs runs, and every run.

    bazel build -c opt //server:ps_server //server/coordinator:ps_coordinator \\
        //client/python:ps_client
    PYTHONPATH=client/python:bazel-bin/client/python /usr/bin/python3 \\
        client/python/bench/pull_push_bench.py --bin_dir=bazel-out/k8-opt/bin
"""

import argparse
import json
import statistics
import time

import numpy as np

import ps_client
from ps_client import routing
from ps_client.local_cluster import LocalCluster

JOB = """
name: "python_bench"
tables {
  name: "bench"
  dim: %(dim)d
  initializer { kind: UNIFORM low: -0.01 high: 0.01 }
  optimizer { type: "adagrad" learning_rate: 0.01 }
  capacity_hint: %(rows)d
}
training { mode: ASYNC }
cluster { num_shards: 64 num_servers: %(servers)d max_message_bytes: 268435456 }
"""


def report(what, runs, **fields):
    line = dict(what=what, **fields)
    line["median"] = round(statistics.median(runs), 3)
    line["runs"] = [round(r, 3) for r in runs]
    print(json.dumps(line, separators=(",", ":")), flush=True)


def rate(fn, n, repeat):
    """Millions of keys a second of ``fn()`` handling ``n`` keys, over ``repeat`` calls."""
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    return n * repeat / (time.perf_counter() - start) / 1e6


def bench_hash(args):
    rng = np.random.default_rng(1)
    keys = rng.integers(0, 2**64, size=1_000_000, dtype=np.uint64)
    h = routing.name_hash("bench")
    shard_to_server = np.arange(64) % args.servers
    for what, fn, repeat in [
            ("key_hash_numpy", lambda: routing.key_hashes(h, keys), 10),
            ("key_hash_xxhash_per_key", lambda: routing.key_hashes_reference(h, keys), 1),
            ("plan_distinct", lambda: routing.plan_keys(keys[:args.keys], h, shard_to_server,
                                                        32768), 10)]:
        n = args.keys if what == "plan_distinct" else len(keys)
        report(what, [rate(fn, n, repeat) for _ in range(args.runs)], unit="M keys/s",
               keys=n)


def bench_cluster(args):
    rng = np.random.default_rng(2)
    key_sets = [rng.integers(0, 2**64, size=args.keys, dtype=np.uint64)
                for _ in range(args.key_sets)]
    grads = rng.uniform(-1, 1, size=(args.keys, args.dim)).astype(np.float32)
    job = JOB % dict(dim=args.dim, servers=args.servers, rows=args.keys * args.key_sets)
    with LocalCluster(job, args.bin_dir) as cluster:
        with ps_client.connect(cluster.address) as client:
            for keys in key_sets:
                client.pull("bench", keys)
                client.push("bench", keys, grads)
            turn = iter(range(1 << 62))
            pull = lambda: client.pull("bench", key_sets[next(turn) % args.key_sets])
            push = lambda: client.push("bench", key_sets[next(turn) % args.key_sets], grads)
            pulls, pushes = [], []
            for _ in range(args.runs):
                pulls.append(rate(pull, args.keys, args.iters))
                pushes.append(rate(push, args.keys, args.iters))
    for what, runs in (("pull", pulls), ("push", pushes)):
        report(what, runs, unit="M keys/s", keys=args.keys, dim=args.dim, servers=args.servers,
               iters=args.iters)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin_dir", default="bazel-out/k8-opt/bin")
    parser.add_argument("--servers", type=int, default=1)
    parser.add_argument("--keys", type=int, default=100000)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--key_sets", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no_hash", action="store_true", help="skip the hash and plan rates")
    args = parser.parse_args()
    if not args.no_hash:
        bench_hash(args)
    bench_cluster(args)


if __name__ == "__main__":
    main()
