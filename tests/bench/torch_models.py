"""The model families of worker/model/ written in PyTorch (1.13 API, CPU).

The networks that tests/bench/torch_bench.py times against tests/bench/model_bench and that
tests/bench/torch_train.py trains against a real cluster. They compute exactly the formulas of
worker/model/README.md over the same inputs as our CpuModel:

  dense: batch x num_dense floats (the transformed dense features);
  emb:   batch x emb_width floats: the pooled embedding of every field in order (field f has
         field_dims[f] floats), then num_linear dim-1 inputs (WIDE_DEEP's wide features,
         DEEPFM's first-order weight of each field);

and give the logit of each sample. With x0 = [dense, e_1, ..., e_F] and MLP(x) dense layers with
ReLU ending in a layer of size 1 without (the sizes of `top`, then 1):

  DLRM       z = BottomMLP(dense) (ReLU on every layer); MLP([z, e_1..e_F]), or with
             dot_interaction MLP([z, e_i . e_j for every pair i > j of z, e_1..e_F]), the pairs
             packed (1,0), (2,0), (2,1), (3,0), ... with z as vector 0
  WIDE_DEEP  MLP(x0) + sum_j w_j
  DEEPFM     MLP(x0) + 0.5 sum_k [(sum_f e_fk)^2 - sum_f e_fk^2] + sum_f w_f
  DCN_V2     x_{l+1} = x0 * (W_l x_l + b_l) + x_l, W_l full (d0 x d0) or U_l V_l (rank r),
             then MLP(x_L)

A dense layer is y = x W^T + b; every weight matrix is drawn uniform in
+-sqrt(6 / (fan_in + fan_out)) (Glorot; a low-rank layer's V (r x d0) and U (d0 x r) each with
fan_in + fan_out = d0 + r, as LayoutOf draws them) and every bias is 0. The values come from
torch's generator, not from our splitmix64 stream: the same distribution, other numbers.
"""

import dataclasses
import math
from typing import Optional, Sequence, Tuple

import torch
from torch import nn

# The families' names in model_bench (tests/bench/model_bench.cc, SpecOf).
BENCH_FAMILIES = ("dlrm", "dlrm_dot", "wide_deep", "deepfm", "dcn_v2", "dcn_v2_r64")

# model_bench's sizes: 13 dense features, 26 fields of dim 16.
BENCH_DENSE = 13
BENCH_FIELDS = 26
BENCH_DIM = 16


@dataclasses.dataclass(frozen=True)
class Spec:
    """What a family computes on: worker/model/model_spec.h's ModelSpec, with its defaults."""

    family: str = "DLRM"  # DLRM, WIDE_DEEP, DEEPFM or DCN_V2
    num_dense: int = BENCH_DENSE
    field_dims: Tuple[int, ...] = (BENCH_DIM,) * BENCH_FIELDS
    num_linear: int = 0
    bottom: Tuple[int, ...] = (64, 16)
    top: Tuple[int, ...] = (64, 32)
    dot_interaction: bool = False
    cross_layers: int = 2
    cross_rank: int = 0

    @property
    def num_fields(self) -> int:
        return len(self.field_dims)

    @property
    def fields_width(self) -> int:
        return sum(self.field_dims)

    @property
    def emb_width(self) -> int:
        return self.fields_width + self.num_linear


def bench_spec(name: str) -> Spec:
    """The spec model_bench measures as `name` (one of BENCH_FAMILIES)."""
    if name in ("dlrm", "dlrm_dot"):
        return Spec(dot_interaction=name == "dlrm_dot")
    if name == "wide_deep":
        return Spec(family="WIDE_DEEP", bottom=(), num_linear=BENCH_FIELDS)
    if name == "deepfm":
        return Spec(family="DEEPFM", bottom=(), num_linear=BENCH_FIELDS)
    if name in ("dcn_v2", "dcn_v2_r64"):
        return Spec(family="DCN_V2", bottom=(), cross_layers=2,
                    cross_rank=64 if name == "dcn_v2_r64" else 0)
    raise ValueError(f"unknown family {name!r} (expected one of {', '.join(BENCH_FAMILIES)})")


def glorot_(weight: torch.Tensor, fan_in: int, fan_out: int,
            generator: Optional[torch.Generator]) -> None:
    """Fills `weight` uniform in +-sqrt(6 / (fan_in + fan_out))."""
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    with torch.no_grad():
        weight.uniform_(-limit, limit, generator=generator)


def dense_layer(n_in: int, n_out: int, generator: Optional[torch.Generator],
                bias: bool = True) -> nn.Linear:
    """A Linear layer (y = x W^T + b) with Glorot weights and a zero bias."""
    layer = nn.Linear(n_in, n_out, bias=bias)
    glorot_(layer.weight, n_in, n_out, generator)
    if bias:
        nn.init.zeros_(layer.bias)
    return layer


class Mlp(nn.Module):
    """Dense layers of the given output sizes, ReLU after each, or after all but the last."""

    def __init__(self, n_in: int, sizes: Sequence[int], relu_last: bool,
                 generator: Optional[torch.Generator]):
        super().__init__()
        layers = []
        for i, n_out in enumerate(sizes):
            layers.append(dense_layer(n_in, n_out, generator))
            if relu_last or i + 1 < len(sizes):
                layers.append(nn.ReLU())
            n_in = n_out
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class CrossLayer(nn.Module):
    """One DCN-v2 cross layer: x0 * (W x + b) + x, W full or U V of rank `rank`."""

    def __init__(self, width: int, rank: int, generator: Optional[torch.Generator]):
        super().__init__()
        if rank == 0:
            self.v = None
            self.w = dense_layer(width, width, generator)
        else:
            # V x then U (V x) + b; both matrices Glorot over (width, rank), as LayoutOf draws
            # them (one span of 2 width rank floats).
            self.v = nn.Linear(width, rank, bias=False)
            glorot_(self.v.weight, width, rank, generator)
            self.w = nn.Linear(rank, width)
            glorot_(self.w.weight, width, rank, generator)
            nn.init.zeros_(self.w.bias)

    def forward(self, x0: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        u = self.w(x if self.v is None else self.v(x))
        return x0 * u + x


class FamilyModel(nn.Module):
    """One of the four families over (dense, emb); forward gives the logits (batch floats)."""

    def __init__(self, spec: Spec, generator: Optional[torch.Generator] = None):
        super().__init__()
        self.spec = spec
        nd, fw = spec.num_dense, spec.fields_width
        if spec.family == "DLRM":
            self.bottom = Mlp(nd, spec.bottom, True, generator) if spec.bottom else None
            dz = spec.bottom[-1] if spec.bottom else nd
            if spec.dot_interaction:
                if any(d != dz for d in spec.field_dims):
                    raise ValueError("dot_interaction needs every field of the bottom's dim")
                n = spec.num_fields + 1
                rows, cols = torch.tril_indices(n, n, offset=-1)  # (1,0), (2,0), (2,1), ...
                self.register_buffer("pair_rows", rows, persistent=False)
                self.register_buffer("pair_cols", cols, persistent=False)
                top_in = dz + n * (n - 1) // 2
            else:
                top_in = dz + fw
        elif spec.family in ("WIDE_DEEP", "DEEPFM", "DCN_V2"):
            top_in = nd + fw
            if spec.family == "DEEPFM" and len(set(spec.field_dims)) > 1:
                raise ValueError("DEEPFM needs every field of one dim")
            if spec.family == "DCN_V2":
                self.cross = nn.ModuleList(CrossLayer(top_in, spec.cross_rank, generator)
                                           for _ in range(spec.cross_layers))
        else:
            raise ValueError(f"unknown family {spec.family!r}")
        # Drawn after the bottom and the cross layers, as LayoutOf orders them.
        self.top = Mlp(top_in, tuple(spec.top) + (1,), False, generator)

    def forward(self, dense: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        spec = self.spec
        fields = emb[:, :spec.fields_width]
        if spec.family == "DLRM":
            z = self.bottom(dense) if self.bottom is not None else dense
            if spec.dot_interaction:
                vectors = torch.cat([z.unsqueeze(1),
                                     fields.reshape(-1, spec.num_fields, z.shape[1])], dim=1)
                gram = torch.bmm(vectors, vectors.transpose(1, 2))
                top_in = torch.cat([z, gram[:, self.pair_rows, self.pair_cols]], dim=1)
            else:
                top_in = torch.cat([z, fields], dim=1)
        elif spec.family == "DCN_V2":
            x0 = torch.cat([dense, fields], dim=1)
            x = x0
            for layer in self.cross:
                x = layer(x0, x)
            top_in = x
        else:
            top_in = torch.cat([dense, fields], dim=1)
        logits = self.top(top_in).squeeze(1)
        if spec.num_linear > 0:
            logits = logits + emb[:, spec.fields_width:].sum(dim=1)
        if spec.family == "DEEPFM" and spec.num_fields > 0:
            e = fields.reshape(-1, spec.num_fields, spec.field_dims[0])
            total = e.sum(dim=1)
            logits = logits + 0.5 * (total.pow(2).sum(dim=1) - e.pow(2).sum(dim=(1, 2)))
        return logits

    def layout_parameters(self) -> list:
        """The parameters in the order of our flat vector (worker/model/cpu_model.h, LayoutOf):
        the bottom MLP's, the cross layers', the top MLP's; a dense layer W (out x in) then b; a
        cross layer W then b, or V (r x d0), U (d0 x r), then b."""
        order = []
        if self.spec.family == "DLRM" and self.bottom is not None:
            order += [p for layer in self.bottom.layers if isinstance(layer, nn.Linear)
                      for p in (layer.weight, layer.bias)]
        if self.spec.family == "DCN_V2":
            for cross in self.cross:
                if cross.v is not None:
                    order.append(cross.v.weight)
                order += [cross.w.weight, cross.w.bias]
        order += [p for layer in self.top.layers if isinstance(layer, nn.Linear)
                  for p in (layer.weight, layer.bias)]
        return order
