"""Trains a job's model family in PyTorch as our cluster trains it, and evaluates its held-out AUC.

The PyTorch half of tests/bench/family_auc.sh: the same job file (deploy/jobs/<family>.pbtxt),
the same data files, the same hyperparameters and the same semantics as our workers and servers,
so that the two held-out AUCs can be compared. What it reproduces, and where ours is defined:

- Data (worker/data/criteo_reader.cc, worker/README.md#data-schemas): the schema's columns by
  header name or number; the label 0 or 1; a dense column's empty value is 0 before its transform
  (LOG1P: log(1 + x) for x > 0, else 0; STANDARDIZE: (x - mean) / stddev); a single-valued field's
  value (empty included) is one id; a multi-valued field's values split at its separator, empty
  ones dropped, the first max_values kept (TRUNCATE) or the line skipped (SKIP); lines that do not
  parse are skipped but still count in their block. The CRITEO preset (no schema) is label,
  num_dense integers (LOG1P) and num_sparse ids.
- Ids to rows: our servers key a row by (table, XXH3 of the value seeded with its field), so
  fields never share rows even in one table; here each (table, field) has a dict from value to a
  row of the table's tensor. A wide cross has one row per combination of its fields' values.
  Held-out ids never seen in training get rows from the initializer, as our pulls create them.
- Model (worker/model/README.md): tests/bench/torch_models.py over the pooled slots in our
  layout: each field's embedding pooled by its pooling (SUM, or MEAN with the gradient divided
  by the count; no value pools to zeros), then the dim-1 slots of model.linear_table (DEEPFM: one
  per field, pooled as the field; WIDE_DEEP: its wide features).
- Initial values: tables by their initializer (UNIFORM low..high, ZEROS, NORMAL, TRUNCATED_NORMAL),
  dense layers Glorot with zero biases; drawn from torch's generator seeded with training.seed
  (the same distributions as ours, not the same numbers).
- Steps (worker/batch_reader.h, worker/step_compute.h, worker/README.md#consistency-modes): SYNC
  with W workers of batch B: step t reads lines [t W B, (t + 1) W B) of the training files in
  order (no shuffling; the last block may be short), worker w the B lines at w B; each worker's
  loss is its mean cross-entropy times 1 / W, and the servers apply the sum of the workers'
  gradients once. So one step here is one backward pass of sum_w mean_w / W over the block, then
  one optimizer update. `epochs` passes over the data, or `steps` steps.
- Optimizers (common/optimizer.h): each table's own on the rows a step touched, the dense
  optimizer on the model's parameters. adagrad (acc starts at initial_accumulator;
  acc += g^2; w -= lr g / (sqrt(acc) + epsilon)) is exactly torch.optim.Adagrad with
  initial_accumulator_value and lr_decay 0, which is used (sparse gradients) for the tables.
  adam differs from torch.optim.Adam in where epsilon goes: ours is
  w -= lr sqrt(1 - beta2^t) / (1 - beta1^t) m / (sqrt(v) + epsilon), torch's
  w -= lr / (1 - beta1^t) m / (sqrt(v) / sqrt(1 - beta2^t) + epsilon), so ours is written out here
  (--dense_adam=torch runs torch's instead). sgd and adagrad also serve as dense optimizers.
- Evaluation (worker/heldout_eval.cc, worker/data/classifier_metrics.cc): every line of the
  eval_paths; exact AUC (ties count one half) and log loss with probabilities clamped to
  [1e-7, 1 - 1e-7].

Prints one JSON line:
  {"bench":"torch_train","job":...,"family":...,"heldout_auc":...,"heldout_logloss":...,
   "heldout_samples":...,"train_samples":...,"steps":...,"seconds":...}

Usage (tests/bench/family_auc.sh runs it after our cluster's run, on the same files):
  PYTHONPATH=bazel-out/k8-opt/bin/client/python /usr/bin/python3 tests/bench/torch_train.py \\
      --job=deploy/jobs/deepfm.pbtxt [--threads=2] [--train=...] [--heldout=...]
job_pb2 comes from `bazel build -c opt //client/python:py_proto_gen`.
"""

import argparse
import dataclasses
import glob
import json
import math
import os
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models  # noqa: E402  (beside this file)

EVAL_BATCH = 4096     # heldout_eval.cc's batches (the figures do not depend on it)
LOGLOSS_EPSILON = 1e-7
FAMILIES = {0: "DLRM", 1: "WIDE_DEEP", 2: "DEEPFM", 3: "DCN_V2"}  # config.Model.Type


def load_job(path: str):
    """The job file parsed with the project's generated job_pb2 (PYTHONPATH)."""
    try:
        from google.protobuf import text_format
        from proto import job_pb2
    except ImportError as e:
        sys.exit(f"torch_train: cannot import proto.job_pb2 ({e}); build it with `bazel build -c "
                 "opt //client/python:py_proto_gen` and put bazel-out/k8-opt/bin/client/python "
                 "on PYTHONPATH")
    job = job_pb2.Job()
    with open(path) as f:
        text_format.Parse(f.read(), job)
    return job


# ------------------------------------------------------------------------------------------------
# The schema and the reader


@dataclasses.dataclass
class DenseColumn:
    column: object       # int index, or a header name
    transform: str       # NONE, LOG1P, STANDARDIZE
    mean: float = 0.0
    stddev: float = 1.0
    integer: bool = False  # the CRITEO preset parses integers


@dataclasses.dataclass
class SparseField:
    name: str
    column: object
    table: str
    separator: Optional[str]  # None: single-valued
    max_values: int = 64
    skip_overflow: bool = False
    mean: bool = False        # MEAN pooling, else SUM


@dataclasses.dataclass
class Schema:
    delimiter: str
    header: bool
    label: object
    dense: List[DenseColumn]
    sparse: List[SparseField]


def column_ref(text: str, header: bool):
    """A column as the job writes it: a number from 1 (index from 0), else a header name."""
    if text.isdigit():
        return int(text) - 1
    if not header:
        raise ValueError(f"column {text!r} is a name, but the schema has no header")
    return text


def schema_of(job) -> Schema:
    """The job's data.schema, or the CRITEO preset (model.num_dense/num_sparse_features)."""
    pooling_mean = job.model.pooling == 1  # Model.MEAN
    if not job.data.HasField("schema"):
        nd, ns = job.model.num_dense_features, job.model.num_sparse_features
        tables = [t.name for t in job.tables]
        dense = [DenseColumn(1 + d, "LOG1P", integer=True) for d in range(nd)]
        sparse = []
        for f in range(ns):
            table = job.model.shared_table if job.model.HasField("shared_table") else tables[f]
            sparse.append(SparseField(f"C{f + 1}", 1 + nd + f, table, None, mean=pooling_mean))
        return Schema("\t", False, 0, dense, sparse)
    s = job.data.schema
    header = s.header
    transforms = {0: "NONE", 1: "LOG1P", 2: "STANDARDIZE"}
    dense = [DenseColumn(column_ref(d.column, header), transforms[d.transform], d.mean, d.stddev)
             for d in s.dense]
    sparse = []
    for f in s.sparse:
        table = f.table if f.HasField("table") else job.model.shared_table
        mean = (f.pooling == 1) if f.HasField("pooling") else pooling_mean
        sparse.append(SparseField(f.name if f.HasField("name") else f.column,
                                  column_ref(f.column, header), table,
                                  f.separator if f.HasField("separator") else None,
                                  f.max_values, f.overflow == 1, mean))
    return Schema("," if s.delimiter == 1 else "\t", header, column_ref(s.label, header), dense,
                  sparse)


@dataclasses.dataclass
class Slot:
    """One pooled input of the model (embedding_io.h's EmbeddingSlot)."""
    table: str
    dim: int
    mean: bool
    fields: Tuple[int, ...]  # one: the field's values; several: their cross


def slots_of(job, schema: Schema, dims: Dict[str, int]) -> List[Slot]:
    """The model's slots in our layout: one per field, then the linear table's dim-1 slots."""
    slots = [Slot(f.table, dims[f.table], f.mean, (i,)) for i, f in enumerate(schema.sparse)]
    family = FAMILIES[job.model.type]
    linear = job.model.linear_table
    names = [f.name for f in schema.sparse]
    if family == "DEEPFM":
        slots += [Slot(linear, 1, f.mean, (i,)) for i, f in enumerate(schema.sparse)]
    elif family == "WIDE_DEEP":
        for w in job.model.wide:
            fields = tuple(names.index(n) for n in w.fields)
            mean = schema.sparse[fields[0]].mean if len(fields) == 1 else False
            slots.append(Slot(linear, 1, mean, fields))
    return slots


class RowIndex:
    """Per table, the row of each key, in key spaces that never share a row: a field's values
    (our keys hash the value with the field), or a cross's tuples of its fields' values."""

    def __init__(self, tables: Sequence[str]):
        self.tables = list(tables)
        self._counters = {t: [0] for t in tables}  # rows given out, in a list the parser updates
        self._spaces = {}

    def space(self, table: str, fields: Tuple[int, ...]):
        """The dict from value (a cross: tuple of values) to row of `fields` in `table`, and the
        table's counter: a new value's row is counter[0], then counter[0] += 1."""
        space = self._spaces.setdefault((table, fields), {})
        return space, self._counters[table]

    def size(self, table: str) -> int:
        return self._counters[table][0]


@dataclasses.dataclass
class Data:
    """Parsed samples: labels, dense features, each slot's rows in CSR form, each sample's line."""
    labels: np.ndarray                 # float32 [n]
    dense: np.ndarray                  # float32 [n, num_dense]
    slot_offsets: List[np.ndarray]     # int64 [n + 1] per slot
    slot_rows: List[np.ndarray]        # int64 [offsets[n]] per slot
    lines: np.ndarray                  # int64 [n]: each sample's line number (headers excluded)
    total_lines: int
    skipped: int


def expand_paths(patterns: Sequence[str]) -> List[str]:
    paths = []
    for p in patterns:
        found = sorted(glob.glob(p))
        if not found:
            raise FileNotFoundError(f"no file matches {p!r}")
        paths += found
    return paths


def read_data(paths: Sequence[str], schema: Schema, slots: Sequence[Slot],
              index: RowIndex) -> Data:
    """Parses every line of `paths` (in order) as our reader does; new keys get new rows."""
    nd = len(schema.dense)
    labels, dense, lines = [], [], []
    slot_rows = [[] for _ in slots]
    slot_offsets = [[0] for _ in slots]
    line_number = skipped = 0
    # Per slot: its table's dict, its fields, where its rows and offsets go (the loop below runs
    # for every key of every line, so it looks nothing up by name).
    plan = [index.space(slot.table, slot.fields) + (slot.fields, slot_rows[s], slot_offsets[s])
            for s, slot in enumerate(slots)]
    for path in paths:
        opener = open
        if path.endswith(".gz"):
            import gzip
            opener = gzip.open
        with opener(path, "rt", newline="") as f:
            names = None
            if schema.header:
                names = f.readline().rstrip("\r\n").split(schema.delimiter)
            cols_of = resolve_columns(schema, names, path)
            label_col, dense_cols, sparse_cols = cols_of
            need = len(names) if names is not None else 1 + max(
                [label_col] + dense_cols + sparse_cols)
            for text in f:
                line = line_number
                line_number += 1
                sample = parse_line(text, schema, names is not None, need, label_col, dense_cols,
                                    sparse_cols)
                if sample is None:
                    skipped += 1
                    continue
                label, values, field_values = sample
                labels.append(label)
                dense.extend(values)
                lines.append(line)
                for space, counter, fields, rows, offsets in plan:
                    if len(fields) == 1:
                        for value in field_values[fields[0]]:
                            r = space.get(value)
                            if r is None:
                                r = space[value] = counter[0]
                                counter[0] += 1
                            rows.append(r)
                    else:
                        value = tuple(field_values[f][0] for f in fields)
                        r = space.get(value)
                        if r is None:
                            r = space[value] = counter[0]
                            counter[0] += 1
                        rows.append(r)
                    offsets.append(len(rows))
    n = len(labels)
    return Data(np.asarray(labels, dtype=np.float32),
                np.asarray(dense, dtype=np.float32).reshape(n, nd),
                [np.asarray(o, dtype=np.int64) for o in slot_offsets],
                [np.asarray(r, dtype=np.int64) for r in slot_rows],
                np.asarray(lines, dtype=np.int64), line_number, skipped)


def resolve_columns(schema: Schema, names: Optional[List[str]], path: str):
    """Column indexes of the label, the dense columns and the sparse fields."""
    def index_of(col):
        if isinstance(col, int):
            return col
        if names is None or col not in names:
            raise ValueError(f"{path}:1: the header has no column {col!r}")
        return names.index(col)
    return (index_of(schema.label), [index_of(d.column) for d in schema.dense],
            [index_of(f.column) for f in schema.sparse])


def parse_line(text: str, schema: Schema, exact: bool, need: int, label_col: int,
               dense_cols: List[int], sparse_cols: List[int]):
    """(label, dense values, values per field), or None for a line our reader skips."""
    text = text.rstrip("\n")
    if text.endswith("\r"):
        text = text[:-1]
    if not text:
        return None
    cols = text.split(schema.delimiter)
    if (exact and len(cols) != need) or len(cols) < need:
        return None
    label_text = cols[label_col]
    if label_text not in ("0", "1"):
        return None
    values = []
    for spec, c in zip(schema.dense, dense_cols):
        t = cols[c]
        x = 0.0
        if t:
            try:
                x = float(int(t)) if spec.integer else float(t)
            except ValueError:
                return None
            if not math.isfinite(x):
                return None
        if spec.transform == "LOG1P":
            x = math.log1p(x) if x > 0 else 0.0
        elif spec.transform == "STANDARDIZE":
            x = (x - spec.mean) / spec.stddev
        values.append(x)
    field_values = []
    for spec, c in zip(schema.sparse, sparse_cols):
        t = cols[c]
        if spec.separator is None:
            field_values.append((t,))
            continue
        parts = [v for v in t.split(spec.separator) if v]
        if len(parts) > spec.max_values:
            if spec.skip_overflow:
                return None
            parts = parts[:spec.max_values]
        field_values.append(parts)
    return float(label_text), values, field_values


# ------------------------------------------------------------------------------------------------
# Tables, optimizers, the step


def initial_rows(init, rows: int, dim: int, generator: torch.Generator) -> torch.Tensor:
    """`rows` rows drawn by a job's Initializer (proto/job.proto)."""
    kind = init.kind
    if kind == 0:  # ZEROS
        return torch.zeros(rows, dim)
    if kind == 1:  # UNIFORM [low, high)
        return torch.empty(rows, dim).uniform_(init.low, init.high, generator=generator)
    w = torch.empty(rows, dim).normal_(init.mean, init.stddev, generator=generator)
    if kind == 3:  # TRUNCATED_NORMAL: redrawn outside mean +- 2 stddev
        while True:
            bad = (w - init.mean).abs() > 2 * init.stddev
            if not bool(bad.any()):
                break
            redraw = torch.empty(int(bad.sum())).normal_(init.mean, init.stddev,
                                                         generator=generator)
            w[bad] = redraw
    return w


def table_optimizer(name: str, o, weight: torch.nn.Parameter) -> torch.optim.Optimizer:
    """A table's optimizer over sparse gradients: torch's, whose formulas equal ours here."""
    if o.l2 != 0:
        raise ValueError(f"table {name}: l2 is not reproduced (torch's sparse optimizers refuse "
                         "weight decay)")
    if o.type == "adagrad":
        return torch.optim.Adagrad([weight], lr=o.learning_rate, lr_decay=0.0,
                                   initial_accumulator_value=o.initial_accumulator,
                                   eps=o.epsilon)
    if o.type == "sgd":
        return torch.optim.SGD([weight], lr=o.learning_rate)
    raise ValueError(f"table {name}: optimizer {o.type!r} is not reproduced here "
                     "(adagrad and sgd are)")


class DenseOptimizer:
    """The worker's dense optimizer with common/optimizer.h's formulas (sgd, adagrad, adam)."""

    def __init__(self, o, params: Sequence[torch.nn.Parameter]):
        if o.type not in ("sgd", "adagrad", "adam"):
            raise ValueError(f"dense optimizer {o.type!r} is not reproduced here")
        if o.l2 != 0:
            raise ValueError("dense optimizer: l2 is not reproduced here")
        self.o = o
        self.params = list(params)
        self.step_count = 0
        if o.type == "adagrad":
            self.acc = [torch.full_like(p, o.initial_accumulator) for p in self.params]
        if o.type == "adam":
            self.m = [torch.zeros_like(p) for p in self.params]
            self.v = [torch.zeros_like(p) for p in self.params]

    @torch.no_grad()
    def step(self) -> None:
        o = self.o
        self.step_count += 1
        if o.type == "adam":
            t = self.step_count
            # lr_t in double, then float, as AdamOptimizer::Apply computes it.
            lr_t = float(np.float32(o.learning_rate * math.sqrt(1.0 - float(o.beta2) ** t) /
                                    (1.0 - float(o.beta1) ** t)))
        for i, p in enumerate(self.params):
            g = p.grad
            if o.type == "sgd":
                p.add_(g, alpha=-o.learning_rate)
            elif o.type == "adagrad":
                self.acc[i].addcmul_(g, g)
                p.addcdiv_(g, self.acc[i].sqrt().add_(o.epsilon), value=-o.learning_rate)
            else:
                self.m[i].mul_(o.beta1).add_(g, alpha=1.0 - o.beta1)
                self.v[i].mul_(o.beta2).addcmul_(g, g, value=1.0 - o.beta2)
                p.addcdiv_(self.m[i], self.v[i].sqrt().add_(o.epsilon), value=-lr_t)


class Trainer:
    """The job's model, its tables and their optimizers; steps and evaluation."""

    def __init__(self, job, spec: torch_models.Spec, slots: Sequence[Slot], index: RowIndex,
                 generator: torch.Generator, torch_adam: bool):
        self.slots = list(slots)
        self.model = torch_models.FamilyModel(spec, generator)
        tables = {t.name: t for t in job.tables}
        self.tables = {}
        self.table_optimizers = []
        for name in index.tables:
            t = tables[name]
            weight = torch.nn.Parameter(initial_rows(t.initializer, index.size(name), t.dim,
                                                     generator))
            self.tables[name] = weight
            self.table_optimizers.append(table_optimizer(name, t.optimizer, weight))
        o = job.training.dense_optimizer
        if torch_adam:
            if o.type != "adam":
                raise ValueError("--dense_adam=torch needs an adam dense optimizer")
            self.dense_optimizer = torch.optim.Adam(self.model.parameters(), lr=o.learning_rate,
                                                    betas=(o.beta1, o.beta2), eps=o.epsilon)
        else:
            self.dense_optimizer = DenseOptimizer(o, self.model.parameters())

    def emb(self, data: Data, lo: int, hi: int) -> torch.Tensor:
        """Samples [lo, hi)'s pooled slots in our layout (batch x emb_width)."""
        parts = []
        for s, slot in enumerate(self.slots):
            offsets = data.slot_offsets[s]
            start, stop = int(offsets[lo]), int(offsets[hi])
            rows = torch.from_numpy(data.slot_rows[s][start:stop])
            bags = torch.from_numpy(offsets[lo:hi] - start)
            parts.append(F.embedding_bag(rows, self.tables[slot.table], bags,
                                         mode="mean" if slot.mean else "sum", sparse=True))
        return torch.cat(parts, dim=1)

    def step(self, data: Data, lo: int, hi: int, weights: torch.Tensor) -> float:
        """One SYNC step over samples [lo, hi): loss sum_i weights_i BCE_i, then the updates.
        A block without a sample that parsed still steps the dense optimizer, on zero gradients,
        as our workers do (StepCompute::ApplyDense); no row is pushed."""
        if hi == lo:
            for p in self.model.parameters():
                p.grad = torch.zeros_like(p)
            self.dense_optimizer.step()
            return 0.0
        dense = torch.from_numpy(data.dense[lo:hi])
        labels = torch.from_numpy(data.labels[lo:hi])
        logits = self.model(dense, self.emb(data, lo, hi))
        losses = F.binary_cross_entropy_with_logits(logits, labels, reduction="none")
        loss = (losses * weights).sum()
        self.model.zero_grad(set_to_none=False)
        for weight in self.tables.values():
            weight.grad = None
        loss.backward()
        self.dense_optimizer.step()
        for optimizer in self.table_optimizers:
            optimizer.step()
        return float(loss)

    @torch.no_grad()
    def predict(self, data: Data) -> np.ndarray:
        probs = []
        n = len(data.labels)
        for lo in range(0, n, EVAL_BATCH):
            hi = min(n, lo + EVAL_BATCH)
            logits = self.model(torch.from_numpy(data.dense[lo:hi]), self.emb(data, lo, hi))
            probs.append(torch.sigmoid(logits).numpy())
        return np.concatenate(probs) if probs else np.zeros(0, dtype=np.float32)


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """The probability that a positive scores above a negative, a tie counting one half."""
    positives = float(labels.sum())
    negatives = len(labels) - positives
    if positives == 0 or negatives == 0:
        return 0.5
    _, inverse, counts = np.unique(scores.astype(np.float64), return_inverse=True,
                                   return_counts=True)
    ends = np.cumsum(counts)
    mid_ranks = ends - (counts - 1) / 2.0  # ranks from 1, ties at their mean
    rank_sum = float(mid_ranks[inverse][labels > 0.5].sum())
    return (rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives)


def logloss(probs: np.ndarray, labels: np.ndarray) -> float:
    if len(probs) == 0:
        return 0.0
    p = np.clip(probs.astype(np.float64), LOGLOSS_EPSILON, 1.0 - LOGLOSS_EPSILON)
    y = labels.astype(np.float64)
    return float(-(y * np.log(p) + (1.0 - y) * np.log(1.0 - p)).mean())


def spec_of(job, schema: Schema, slots: Sequence[Slot],
            dims: Dict[str, int]) -> torch_models.Spec:
    """ModelSpec::FromJob's spec: the family, its knobs, the fields' dims, the linear inputs."""
    m = job.model
    family = FAMILIES[m.type]
    field_dims = tuple(dims[f.table] for f in schema.sparse)
    return torch_models.Spec(
        family=family, num_dense=len(schema.dense), field_dims=field_dims,
        num_linear=len(slots) - len(schema.sparse),
        bottom=tuple(m.bottom_mlp) if family == "DLRM" else (), top=tuple(m.top_mlp),
        dot_interaction=m.dot_interaction, cross_layers=m.cross_layers,
        cross_rank=m.cross_rank)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", required=True, help="the job file (deploy/jobs/<family>.pbtxt)")
    parser.add_argument("--train", action="append",
                        help="training files (default: the job's data.train_paths)")
    parser.add_argument("--heldout", action="append",
                        help="held-out files (default: the job's data.eval_paths)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="torch.set_num_threads (default: one per core)")
    parser.add_argument("--workers", type=int, default=0,
                        help="workers whose SYNC steps to reproduce (default: cluster.num_workers)")
    parser.add_argument("--dense_adam", choices=("ours", "torch"), default="ours",
                        help="adam with our formula (default) or torch.optim.Adam's")
    parser.add_argument("--seed", type=int, default=None,
                        help="seeds the initial values (default: training.seed); other seeds "
                        "show how far the AUC moves by the draw alone")
    args = parser.parse_args()

    job = load_job(args.job)
    tr = job.training
    if tr.mode != 0:  # Training.SYNC
        print("torch_train: the job is not SYNC; reproducing its steps as SYNC", file=sys.stderr)
    if tr.dense_sync_every != 1:
        raise SystemExit("torch_train: dense_sync_every > 1 (local SGD) is not reproduced")
    world = args.workers or job.cluster.num_workers or 1
    batch = tr.batch_size
    torch.set_num_threads(max(1, args.threads))
    seed = int(tr.seed) if args.seed is None else args.seed
    generator = torch.Generator().manual_seed(seed)

    schema = schema_of(job)
    dims = {t.name: t.dim for t in job.tables}
    slots = slots_of(job, schema, dims)
    spec = spec_of(job, schema, slots, dims)
    index = RowIndex(sorted({s.table for s in slots}))
    started = time.time()
    train = read_data(expand_paths(args.train or list(job.data.train_paths)), schema, slots,
                      index)
    heldout = read_data(expand_paths(args.heldout or list(job.data.eval_paths)), schema, slots,
                        index)
    parsed = time.time()
    print(f"torch_train: {len(train.labels)} training samples ({train.skipped} lines skipped), "
          f"{len(heldout.labels)} held-out, rows per table "
          f"{ {t: index.size(t) for t in index.tables} } in {parsed - started:.1f} s",
          file=sys.stderr)

    trainer = Trainer(job, spec, slots, index, generator, args.dense_adam == "torch")
    block = world * batch
    blocks = max(1, -(-train.total_lines // block))
    steps = tr.steps if tr.steps > 0 else tr.epochs * blocks
    for t in range(steps):
        first = (t % blocks) * block
        # Each worker's part of the block: its mean loss, times 1 / world.
        bounds = np.searchsorted(train.lines, [first + w * batch for w in range(world + 1)])
        counts = np.diff(bounds)
        lo, hi = int(bounds[0]), int(bounds[-1])
        weights = np.repeat(np.where(counts > 0, 1.0 / (world * np.maximum(counts, 1)), 0.0),
                            counts).astype(np.float32)
        loss = trainer.step(train, lo, hi, torch.from_numpy(weights))
        if (t + 1) % 200 == 0 or t + 1 == steps:
            print(f"torch_train: step {t + 1}/{steps} loss {loss:.4f}", file=sys.stderr)
    probs = trainer.predict(heldout)
    result = {"bench": "torch_train", "job": args.job, "family": spec.family.lower(),
              "heldout_auc": round(auc(probs, heldout.labels), 6),
              "heldout_logloss": round(logloss(probs, heldout.labels), 6),
              "heldout_samples": int(len(heldout.labels)),
              "train_samples": int(len(train.labels)), "steps": int(steps), "workers": world,
              "seed": seed, "dense_adam": args.dense_adam,
              "seconds": round(time.time() - started, 1)}
    print(json.dumps(result, separators=(",", ":")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
