#!/usr/bin/env python3
"""Trains a tiny click model in NumPy against the parameter servers, printing the loss falling.

The data is synthetic: each sample has one id in each of FIELDS fields (power-law ids), and its
label is drawn from a known teacher (a logistic model with one weight per id). The model: each
id has an 8-float embedding on the servers (table "emb", Adagrad applied there); a dense head
(8 weights and a bias, "head", the job's dense optimizer) maps the sum of a sample's embeddings
to a logit. Each step pulls the batch's rows, computes the loss and gradients in NumPy, pushes
them (repeated ids summed by the client) and ends the step (sync mode).

    # a running cluster of examples/train_tiny.pbtxt:
    PYTHONPATH=client/python:bazel-bin/client/python /usr/bin/python3 \\
        client/python/examples/train_tiny.py --coordinator=HOST:PORT
    # or a local cluster of its own (binaries as in bazel-bin):
    PYTHONPATH=client/python:bazel-bin/client/python /usr/bin/python3 \\
        client/python/examples/train_tiny.py --bin_dir=bazel-bin

The last line is ``RESULT {json}`` with the mean loss of the first and last `--log_every` steps.
"""

import argparse
import json
import os
import time

import numpy as np

import ps_client
from ps_client.local_cluster import LocalCluster

FIELDS = 6
IDS_PER_FIELD = 2000
DIM = 8
JOB_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train_tiny.pbtxt")


class Teacher:
    """The synthetic data: a known logistic model over power-law ids."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.weights = self.rng.normal(0.0, 1.0, size=(FIELDS, IDS_PER_FIELD))
        self.bias = -0.5

    def batch(self, size):
        """(keys (size, FIELDS) uint64, labels (size,) float32, teacher probabilities)."""
        ids = (self.rng.zipf(1.3, size=(size, FIELDS)) - 1) % IDS_PER_FIELD
        logits = self.weights[np.arange(FIELDS), ids].sum(axis=1) + self.bias
        p = 1.0 / (1.0 + np.exp(-logits))
        labels = (self.rng.random(size) < p).astype(np.float32)
        keys = (np.arange(FIELDS, dtype=np.uint64) << np.uint64(32)) + ids.astype(np.uint64)
        return keys, labels, p


def log_loss(p, labels):
    p = np.clip(p, 1e-7, 1 - 1e-7)
    return float(-np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p)))


def train(client, steps, batch_size, log_every, seed):
    teacher = Teacher(seed)
    rng = np.random.default_rng(seed + 1)
    head = np.concatenate([rng.normal(0.0, 0.5, DIM), [0.0]]).astype(np.float32)
    client.push_dense("head", head)  # the dense master copy: this worker sets it first
    losses, teacher_losses, windows = [], [], []
    start = time.perf_counter()
    for step in range(steps):
        client.set_clock(step)
        keys, labels, p_true = teacher.batch(batch_size)
        flat = keys.ravel()
        emb = client.pull("emb", flat).reshape(batch_size, FIELDS, DIM)
        head = client.pull_dense("head", DIM + 1)
        u, b = head[:DIM], head[DIM]
        pooled = emb.sum(axis=1)  # (batch, DIM)
        logits = pooled @ u + b
        p = 1.0 / (1.0 + np.exp(-logits))
        losses.append(log_loss(p, labels))
        teacher_losses.append(log_loss(p_true, labels))
        # d(mean loss)/d(logit), then back to the rows and the head.
        dlogit = ((p - labels) / batch_size).astype(np.float32)
        row_grads = np.broadcast_to(dlogit[:, None, None] * u, emb.shape).reshape(-1, DIM)
        client.push("emb", flat, row_grads)
        client.push_dense("head", np.append(pooled.T @ dlogit, dlogit.sum()), kind="gradient")
        client.end_step(step)
        if (step + 1) % log_every == 0:
            window = (float(np.mean(losses[-log_every:])),
                      float(np.mean(teacher_losses[-log_every:])))
            windows.append(window)
            rate = (step + 1) * batch_size / (time.perf_counter() - start)
            print("step %5d  loss %.4f  (teacher %.4f)  %8.0f samples/s" %
                  (step + 1, window[0], window[1], rate), flush=True)
    elapsed = time.perf_counter() - start
    return {
        "initial_loss": round(windows[0][0], 4),
        "final_loss": round(windows[-1][0], 4),
        "teacher_loss": round(windows[-1][1], 4),
        "steps": steps,
        "batch": batch_size,
        "samples_per_s": round(steps * batch_size / elapsed, 1),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--coordinator",
                       help="host:port, or several comma-separated: the coordinators of a "
                       "cluster running train_tiny.pbtxt")
    where.add_argument("--bin_dir", help="start a local cluster from the binaries here "
                       "(server/ps_server, server/coordinator/ps_coordinator, as in bazel-bin)")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--log_every", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.steps < args.log_every or args.log_every < 1:
        parser.error("--steps must be at least --log_every (>= 1)")

    cluster = None
    if args.bin_dir:
        with open(JOB_FILE) as f:
            cluster = LocalCluster(f.read(), args.bin_dir)
    try:
        coordinator = args.coordinator or cluster.address
        with ps_client.connect(coordinator, role="worker", rank=0) as client:
            result = train(client, args.steps, args.batch, args.log_every, args.seed)
    finally:
        if cluster is not None:
            cluster.stop()
    print("RESULT " + json.dumps(result, separators=(",", ":")), flush=True)


if __name__ == "__main__":
    main()
