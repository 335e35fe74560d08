"""Forward+backward throughput of the model families in PyTorch, model_bench's counterpart.

Measures what tests/bench/model_bench measures, on the same sizes (13 dense features, 26 fields
of dim 16; tests/bench/torch_models.py has the networks): per family, batch and pooling, one
step is the forward pass, the mean binary cross-entropy with logits, and the gradients of the
loss with respect to every parameter and to the embedding input (torch.autograd.grad, so nothing
accumulates between steps), plus the probabilities. With --pooled true the embedding input is
pooled from the rows of the batch's distinct keys, as model_bench's Pooling does with the
worker's code: per sample 21 single-valued fields and 5 fields of 20 values (the last 5), each
value a Zipf(1.1) rank over 1M ids of its field, the keys deduplicated per table (torch.unique),
each field's bag summed by F.embedding_bag over the distinct rows (and, for WIDE_DEEP and DEEPFM,
the linear inputs likewise over dim-1 rows), and the backward sums each distinct row's gradient
(embedding_bag's, as SpreadGrads does).
Inputs: dense |N(0, 1)|, embeddings and rows 0.1 N(0, 1), labels 0 or 1, drawn once.

Times are medians of --reps repetitions, each running enough steps for about 0.2 s, as
model_bench times them; before them, warm-up steps for at least 0.2 s (model_bench: 2 steps).
Prints one JSON line per measurement:

  {"bench":"torch_model","family":"dlrm","batch":4096,"pooled":false,"threads":1,
   "samples_per_s":...,"cores_busy":...,"torch":"1.13.0a0"}

(cores_busy: the process's CPU time over the wall time while measuring, --threads at most: the
libraries under torch are held to --threads through the environment, which torch.set_num_threads
alone does not do.)

With --ours=FILE (model_bench's JSON lines from the same machine and threads) it then prints,
for each measurement both have,

  {"bench":"model_vs_torch","family":"dlrm","batch":4096,"pooled":false,"threads":1,
   "samples_per_s":OURS,"torch_samples_per_s":TORCH,"ratio_vs_torch":OURS/TORCH}

Usage (tests/bench/model_vs_torch.sh runs it after model_bench):
  /usr/bin/python3 tests/bench/torch_bench.py [--threads=1] [--reps=5] [--families=dlrm,...]
      [--batches=512,4096] [--pooled=false,true] [--ours=model_bench.jsonl]
"""

import argparse
import itertools
import json
import os
import statistics
import sys
import time


def _pin_library_threads() -> None:
    """Holds every library under torch to --threads before torch loads them.

    torch.set_num_threads alone does not: Debian's torch does its matrix products in the system
    BLAS (OpenBLAS, whose own thread pool takes every core) and oneDNN (OpenMP), which read their
    thread counts from the environment when they load. Measured here with --threads=1 before this:
    1.99 cores busy for one F.linear call.
    """
    threads = "1"
    for i, arg in enumerate(sys.argv):
        if arg.startswith("--threads="):
            threads = arg.split("=", 1)[1]
        elif arg == "--threads" and i + 1 < len(sys.argv):
            threads = sys.argv[i + 1]
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = threads


_pin_library_threads()
import torch  # noqa: E402  (after the thread counts are pinned)
import torch.nn.functional as F  # noqa: E402

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models  # noqa: E402  (beside this file)

MULTI_FIELDS = 5  # the last 5 fields are multi-valued
VALUES = 20       # values of each multi-valued field
WARMUP_STEPS = 2
WARMUP_SECONDS = 0.2
REP_SECONDS = 0.2


class Inputs:
    """One batch's inputs for a spec: dense features, labels, and the embedding input or rows."""

    def __init__(self, spec: torch_models.Spec, batch: int, pooled: bool,
                 generator: torch.Generator):
        self.spec = spec
        self.pooled = pooled
        self.dense = torch.randn(batch, spec.num_dense, generator=generator).abs()
        self.labels = torch.randint(0, 2, (batch,), generator=generator).float()
        dim = spec.field_dims[0]
        self.single = spec.num_fields - MULTI_FIELDS
        if pooled:
            # Per (sample, field) bag, sample by sample: 1 value, or VALUES for the last fields.
            counts = torch.tensor([1] * self.single + [VALUES] * MULTI_FIELDS).repeat(batch)
            fields = torch.arange(spec.num_fields).repeat(batch).repeat_interleave(counts)
            ranks = zipf_ranks(fields.numel(), generator)
            keys = fields * (1 << 21) + ranks
            distinct, self.index = torch.unique(keys, return_inverse=True)
            self.offsets = torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)[:-1]])
            self.rows = (0.1 * torch.randn(distinct.numel(), dim, generator=generator)
                         ).requires_grad_()
            self.leaves = [self.rows]
            if spec.num_linear:
                self.linear_rows = (0.1 * torch.randn(distinct.numel(), 1, generator=generator)
                                    ).requires_grad_()
                self.leaves.append(self.linear_rows)
        else:
            self.emb = (0.1 * torch.randn(batch, spec.emb_width, generator=generator)
                        ).requires_grad_()
            self.leaves = [self.emb]

    def emb_input(self) -> torch.Tensor:
        """The model's embedding input; pooled: each field's bag summed from the distinct rows."""
        if not self.pooled:
            return self.emb
        batch = self.dense.shape[0]
        parts = [F.embedding_bag(self.index, self.rows, self.offsets, mode="sum")
                 .reshape(batch, -1)]
        if self.spec.num_linear:
            parts.append(F.embedding_bag(self.index, self.linear_rows, self.offsets, mode="sum")
                         .reshape(batch, -1))
        return torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]


def zipf_ranks(n: int, generator: torch.Generator, ids: int = 1000000,
               exponent: float = 1.1) -> torch.Tensor:
    """n independent Zipf(exponent) ranks in [0, ids), by the inverse of the distribution."""
    weights = torch.arange(1, ids + 1, dtype=torch.float64).pow(-exponent)
    cdf = weights.cumsum(0)
    cdf /= cdf[-1].clone()
    uniforms = torch.rand(n, generator=generator, dtype=torch.float64)
    return torch.searchsorted(cdf, uniforms).clamp(max=ids - 1)


def measure(family: str, batch: int, pooled: bool, reps: int) -> tuple:
    """Samples a second of one family's forward+backward step (the median over `reps`), and the
    cores the process kept busy meanwhile (its CPU time over the wall time: --threads at most)."""
    generator = torch.Generator().manual_seed(7)
    spec = torch_models.bench_spec(family)
    model = torch_models.FamilyModel(spec, generator)
    inputs = Inputs(spec, batch, pooled, generator)
    wrt = list(model.parameters()) + inputs.leaves

    def step():
        logits = model(inputs.dense, inputs.emb_input())
        loss = F.binary_cross_entropy_with_logits(logits, inputs.labels)
        grads = torch.autograd.grad(loss, wrt)
        probs = torch.sigmoid(logits.detach())
        return grads, probs

    # At least WARMUP_STEPS steps and WARMUP_SECONDS: torch's first steps in a process also pay
    # for its lazy set-up (thread pool, allocator caches).
    start = time.perf_counter()
    for i in itertools.count():
        step()
        if i + 1 >= WARMUP_STEPS and time.perf_counter() - start >= WARMUP_SECONDS:
            break
    start = time.perf_counter()
    step()
    once = time.perf_counter() - start
    calls = max(1, int(REP_SECONDS / max(once, 1e-6)))
    seconds = []
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(calls):
            step()
        seconds.append((time.perf_counter() - start) / calls)
    cores_busy = (time.process_time() - cpu_start) / (time.perf_counter() - wall_start)
    return batch / statistics.median(seconds), cores_busy


def read_ours(path: str) -> dict:
    """model_bench's samples/s by (family, batch, pooled), from its JSON lines in `path`."""
    ours = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            record = json.loads(line)
            if record.get("bench") == "model":
                key = (record["family"], record["batch"], record["pooled"])
                ours[key] = record["samples_per_s"]
    return ours


def parse_bools(text: str) -> list:
    values = []
    for word in text.split(","):
        if word not in ("false", "true"):
            raise argparse.ArgumentTypeError(f"expected false or true, got {word!r}")
        values.append(word == "true")
    return values


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1,
                        help="torch.set_num_threads (default 1, as model_bench)")
    parser.add_argument("--reps", type=int, default=5,
                        help="repetitions of each measurement; the median counts")
    parser.add_argument("--families", default=",".join(torch_models.BENCH_FAMILIES),
                        help="comma-separated families to measure")
    parser.add_argument("--batches", default="512,4096", help="comma-separated batch sizes")
    parser.add_argument("--pooled", type=parse_bools, default=[False, True],
                        help="comma-separated: false (pooled inputs), true (5 x 20 rows pooled)")
    parser.add_argument("--ours", help="model_bench's JSON lines, to print the ratios against")
    args = parser.parse_args()
    if args.threads < 1 or args.reps < 1:
        parser.error("--threads and --reps must be >= 1")

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    families = [f for f in args.families.split(",") if f]
    for family in families:
        torch_models.bench_spec(family)  # refuses an unknown family before anything runs
    batches = [int(b) for b in args.batches.split(",") if b]

    results = []
    for family in families:
        for batch in batches:
            for pooled in args.pooled:
                samples_per_s, cores_busy = measure(family, batch, pooled, args.reps)
                record = {"bench": "torch_model", "family": family, "batch": batch,
                          "pooled": pooled, "threads": args.threads,
                          "samples_per_s": round(samples_per_s),
                          "cores_busy": round(cores_busy, 2), "torch": torch.__version__}
                print(json.dumps(record, separators=(",", ":")), flush=True)
                results.append(record)

    if args.ours:
        ours = read_ours(args.ours)
        missing = 0
        for r in results:
            key = (r["family"], r["batch"], r["pooled"])
            if key not in ours:
                print(f"torch_bench: model_bench has no figure for {key}", file=sys.stderr)
                missing += 1
                continue
            record = {"bench": "model_vs_torch", "family": r["family"], "batch": r["batch"],
                      "pooled": r["pooled"], "threads": r["threads"],
                      "samples_per_s": ours[key], "torch_samples_per_s": r["samples_per_s"],
                      "ratio_vs_torch": round(ours[key] / r["samples_per_s"], 3)}
            print(json.dumps(record, separators=(",", ":")), flush=True)
        if missing:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
