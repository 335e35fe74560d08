"""Checks that tests/bench/torch_models.py computes what our CpuModel computes.

For each model_bench family, `model_bench --dump=FAMILY` prints our model's initial parameters,
a batch of 8 inputs, and the loss, probabilities and gradients (of every parameter and every
embedding input) of one ForwardBackward. This loads the same parameters into the PyTorch model
(in LayoutOf's order, FamilyModel.layout_parameters), runs the same batch through it with
autograd, and compares. Prints one JSON line per family:

  {"bench":"torch_models_check","family":"dlrm","params":31761,"loss":...,"torch_loss":...,
   "max_rel_diff":...,"ok":true}

max_rel_diff is the largest of, for the probabilities, the parameter gradient and the input
gradient, max |torch - ours| / max |ours|; a family fails above --tolerance (default 1e-5: both
compute in float, in different orders). Exits 1 when any family fails.

  /usr/bin/python3 tests/bench/torch_models_check.py \\
      [--model_bench=bazel-out/k8-opt/bin/tests/bench/model_bench] [--families=dlrm,...]
"""

import argparse
import json
import os
import subprocess
import sys

import torch
import torch.nn.functional as F

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_models  # noqa: E402  (beside this file)


def relative_difference(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    return float((theirs - ours).abs().max() / ours.abs().max().clamp_min(1e-30))


def check(model_bench: str, family: str) -> dict:
    """Our model's dump of `family` against the PyTorch model with the same parameters."""
    dump = json.loads(subprocess.check_output([model_bench, f"--dump={family}"]))

    def as_tensor(name: str) -> torch.Tensor:
        return torch.tensor(dump[name], dtype=torch.float32)

    spec = torch_models.bench_spec(family)
    model = torch_models.FamilyModel(spec)
    flat = as_tensor("params")
    params = model.layout_parameters()
    if sum(p.numel() for p in params) != flat.numel():
        raise SystemExit(f"{family}: our model has {flat.numel()} parameters, torch's "
                         f"{sum(p.numel() for p in params)}")
    offset = 0
    with torch.no_grad():
        for p in params:
            p.copy_(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
    labels = as_tensor("labels")
    batch = labels.numel()
    dense = as_tensor("dense").view(batch, spec.num_dense)
    emb = as_tensor("emb").view(batch, spec.emb_width).requires_grad_()
    logits = model(dense, emb)
    loss = F.binary_cross_entropy_with_logits(logits, labels)
    grads = torch.autograd.grad(loss, params + [emb])
    dense_grad = torch.cat([g.reshape(-1) for g in grads[:-1]])
    diff = max(relative_difference(as_tensor("probs"), torch.sigmoid(logits.detach())),
               relative_difference(as_tensor("dense_grad"), dense_grad),
               relative_difference(as_tensor("emb_grad"), grads[-1].reshape(-1)))
    return {"bench": "torch_models_check", "family": family, "params": flat.numel(),
            "loss": dump["loss"], "torch_loss": round(float(loss), 9),
            "max_rel_diff": float(f"{diff:.3g}")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model_bench", default="bazel-out/k8-opt/bin/tests/bench/model_bench",
                        help="the model_bench binary (bazel build -c opt "
                        "//tests/bench:model_bench)")
    parser.add_argument("--families", default=",".join(torch_models.BENCH_FAMILIES),
                        help="comma-separated families to check")
    parser.add_argument("--tolerance", type=float, default=1e-5,
                        help="the largest relative difference that passes")
    args = parser.parse_args()
    failed = 0
    for family in (f for f in args.families.split(",") if f):
        result = check(args.model_bench, family)
        result["ok"] = result["max_rel_diff"] <= args.tolerance
        failed += not result["ok"]
        print(json.dumps(result, separators=(",", ":")), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
