"""The NeurCAM network: gated Neural Basis Model shape functions plus free centroids.

Pure math: no I/O, no device moves, no Python loop over channels or clusters. All channels of a
kind go through their shared backbone as one batched matmul over (rows x channels), and the
per-channel reconstruction weights are contracted in one matmul over (channels x bases).

Sparse inputs (term frequencies are mostly zero): once a kind's gates are locked, each channel
reads one feature (a pair: two), so at the feature's baseline (the standardized zero, set with
``set_baseline``) a channel's output is one constant per channel. The backbone then runs once per
channel at the baseline and once per (row, channel) whose input differs from it, instead of on
every (row, channel): the same logits to float tolerance, at a cost that follows the non-zeros.
Used on CPU when at most ``SPARSE_MAX_DENSITY`` of the selected inputs differ from the baseline;
on a GPU the dense path stays (its cost is launches, not arithmetic, and the sparse one syncs).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from .gates import SelectionGates

SPARSE_MAX_DENSITY = 0.25   # share of (row, channel) inputs off the baseline above which dense is faster
# The coding's values and the missing offsets are parameters times a gain: Adam moves a parameter by
# about lr a step whatever its gradient's scale, so a gain moves them that many times faster than the
# backbone's weights. A table of a few thousand rows trains a few hundred steps (0.3-1 at lr 2e-3):
# too little for an input value or a logit offset to travel. Measured (benchmarks/mixed.py): with
# gains 1 the missingness-defined tables ended at 1.0012x Lloyd's inertia and ARI 0.893 against its
# 0.917; with 10 and 100, 1.0001x and 0.930, and the level-defined ones at ARI 0.992 against 0.988.
# The saved parameters are the raw ones; a model file records the gains (``FittedNet.to_dict``).
CODING_GAIN = 10.0
MISSING_GAIN = 100.0


def step_work(n_features: int, n_clusters: int, n_single: int, n_pairs: int, hidden: tuple[int, ...],
              n_bases: int, rows: int, backward: bool) -> float:
    """Multiply-adds of one step over ``rows`` rows: every channel's gate mix, backbone and head
    per row, about 3x that for a training step's forward and backward (``backward``). What the
    torch threads of a step are sized by (``settings.sized_threads``)."""
    widths = (*hidden, n_bases)
    backbone = sum(a * b for a, b in zip(widths, widths[1:], strict=False)) + n_bases * n_clusters
    per_row = sum(n * (backbone + arity * (widths[0] + n_features)) for n, arity in ((n_single, 1), (n_pairs, 2)))
    return float(rows * per_row * (3 if backward else 1))


class Backbone(nn.Module):
    """Shared MLP ``arity -> hidden... -> n_bases`` (ReLU between layers), applied on the last axis."""

    def __init__(self, arity: int, hidden: tuple[int, ...], n_bases: int):
        super().__init__()
        dims = (arity, *hidden, n_bases)
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:], strict=False))

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        """The shared MLP over every channel's input at once: (n, channels, in) -> bases."""
        h = s
        for i, layer in enumerate(self.layers):
            h = layer(h)
            if i < len(self.layers) - 1:
                h = torch.relu(h)
        return h


class InputCoding(nn.Module):
    """Missing cells and categorical levels as learned input values, in one tensor op.

    The encoded matrix (``columns.ColumnCoding``) holds NaN for a missing cell and a level code
    ``0 .. L-1`` in a categorical column. Every feature has one learned value for "missing" and
    every level of a categorical one its own learned value, all in one parameter ``values``
    (levels of feature 0, of feature 1, ..., then one missing slot per feature); the gates and
    the backbone then read the coded matrix as they read numbers. A numeric cell passes as it is.
    """

    def __init__(self, n_levels: list[int], init: torch.Tensor | None = None):
        super().__init__()
        levels = torch.as_tensor(list(n_levels), dtype=torch.long)
        offsets = torch.cumsum(levels, 0) - levels
        total = int(levels.sum())
        self.register_buffer("level_offset", torch.where(levels > 0, offsets, -1))
        self.register_buffer("missing_slot", total + torch.arange(len(levels)))
        self.has_levels = bool((levels > 0).any())
        values = torch.zeros(total + len(levels)) if init is None else torch.as_tensor(init, dtype=torch.float32)
        self.values = nn.Parameter(values.clone().float() / CODING_GAIN)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(N, D) coded rows -> (N, D) inputs: NaN -> the feature's missing value, a level code ->
        its level's value, numbers unchanged."""
        nan = torch.isnan(x)
        values = self.values * CODING_GAIN
        if not self.has_levels:
            return torch.where(nan, values[self.missing_slot].to(x.dtype), x)
        cat = self.level_offset >= 0
        code = torch.where(nan | ~cat, torch.zeros((), dtype=x.dtype, device=x.device), x).long()
        idx = torch.where(nan, self.missing_slot, torch.where(cat, self.level_offset + code, -1))
        return torch.where(idx >= 0, values[idx.clamp_min(0)].to(x.dtype), x)


class ShapeFunctions(nn.Module):
    """``n`` gated channels of one arity sharing one backbone; each has its own (B x K) weights."""

    def __init__(self, n: int, arity: int, n_features: int, n_clusters: int,
                 hidden: tuple[int, ...], n_bases: int, generator: torch.Generator | None = None,
                 allowed: torch.Tensor | None = None):
        super().__init__()
        self.n, self.arity = n, arity
        self.gates = SelectionGates(n, arity, n_features, generator, allowed)
        self.backbone = Backbone(arity, hidden, n_bases)
        bound = 1.0 / math.sqrt(max(1, n_bases))
        self.weight = nn.Parameter(torch.empty(n, n_bases, n_clusters).uniform_(-bound, bound, generator=generator))
        self.bias = nn.Parameter(torch.zeros(n, n_clusters))

    def _sparse_inputs(self, x: torch.Tensor, baseline: torch.Tensor | None):
        """(inputs (N, n, arity), baseline inputs (n, arity), active (N, n)) when the sparse path
        applies (locked gates, a baseline, CPU, few active inputs), else None."""
        if baseline is None or x.device.type != "cpu" or self.n == 0 or not self.gates.is_locked:
            return None
        idx = self.gates.index                                   # (n, arity)
        s = x[:, idx]                                            # (N, n, arity): exactly x @ one-hot
        b = baseline[idx].to(s.dtype)
        active = (s != b).any(-1)
        if active.sum() > SPARSE_MAX_DENSITY * active.numel():
            return None
        return s, b, active

    def bases(self, x: torch.Tensor, temperature: float) -> torch.Tensor:
        """(N, n, B) basis activations of every channel at its selected input(s)."""
        s = torch.einsum("nd,cad->nca", x, self.matrix(temperature))  # (N, n, arity)
        return self.backbone(s)

    def matrix(self, temperature: float) -> torch.Tensor:
        """The gates' (relaxed or one-hot) selection matrix at ``temperature``."""
        return self.gates.matrix(temperature)

    def logits(self, x: torch.Tensor, temperature: float, baseline: torch.Tensor | None = None) -> torch.Tensor:
        """(N, K) summed contribution of all channels: one matmul over (channels x bases)."""
        sparse = self._sparse_inputs(x, baseline)
        if sparse is not None:
            s, b, active = sparse
            rows, chans = active.nonzero(as_tuple=True)
            b0 = self.backbone(b)                                                  # (n, B)
            w = self.weight.to(b0.dtype)
            const = torch.einsum("cb,cbk->k", b0, w).float() + self.bias.sum(0)
            delta = self.backbone(s[rows, chans]) - b0[chans]                      # (M, B)
            moved = torch.einsum("mb,mbk->mk", delta, w[chans]).float()          # summed in fp32 under bf16
            return const + moved.new_zeros((x.shape[0], moved.shape[1])).index_add(0, rows, moved)
        b = self.bases(x, temperature)
        flat = b.reshape(b.shape[0], -1)
        return flat @ self.weight.reshape(-1, self.weight.shape[-1]).to(flat.dtype) + self.bias.sum(0)

    def contributions(self, x: torch.Tensor, temperature: float, baseline: torch.Tensor | None = None) -> torch.Tensor:
        """(N, n, K) contribution of each channel; sums over channels to ``logits``."""
        sparse = self._sparse_inputs(x, baseline)
        if sparse is not None:
            s, b, active = sparse
            rows, chans = active.nonzero(as_tuple=True)
            w = self.weight.to(s.dtype)
            at_base = torch.einsum("cb,cbk->ck", self.backbone(b), w) + self.bias   # (n, K)
            out = at_base.expand(x.shape[0], -1, -1).clone()
            moved = torch.einsum("mb,mbk->mk", self.backbone(s[rows, chans]), w[chans]) + self.bias[chans]
            out[rows, chans] = moved.to(out.dtype)
            return out
        return torch.einsum("ncb,cbk->nck", self.bases(x, temperature), self.weight) + self.bias


class NeurCAMNet(nn.Module):
    """Logits ``g(x) = sum_c f_c(x) + sum_p f_p(x)`` and centroids ``z`` in the representation space."""

    def __init__(self, n_features: int, n_clusters: int, n_single: int, n_pairs: int,
                 hidden: tuple[int, ...], n_bases: int, centroids: torch.Tensor, seed: int = 0,
                 allowed: torch.Tensor | None = None, n_levels: list[int] | None = None,
                 level_init: torch.Tensor | None = None, missing_terms: bool = False):
        """``allowed``: (n_features,) bool, the features a gate may select (default: all);
        ``n_levels``: level codes per feature (0: numeric) when the inputs are coded
        (``InputCoding``: missing cells and categorical levels), None for plain numbers;
        ``level_init``: the coding's starting values; ``missing_terms``: every single-feature
        channel also learns a free (K,) contribution for a missing cell of its feature (training
        had missing cells)."""
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.n_features, self.n_clusters = n_features, n_clusters
        # nn.Linear's default init draws from the global generator: seed it inside a fork, so that
        # building a network (NeurCAM.load included) leaves the caller's random state untouched.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.single = ShapeFunctions(n_single, 1, n_features, n_clusters, hidden, n_bases, g, allowed)
            self.pairs = ShapeFunctions(n_pairs, 2, n_features, n_clusters, hidden, n_bases, g, allowed)
        self.centroids = nn.Parameter(centroids.detach().clone().float())
        self.coding = None if n_levels is None else InputCoding(n_levels, level_init)
        # A missing cell's contribution, channel by channel: f_c(u_j) alone is a point on the
        # channel's curve, which a K-vector seldom is; this free offset makes it any K-vector.
        self.missing_delta = nn.Parameter(torch.zeros(n_single, n_clusters)) if missing_terms else None
        # the standardized zero of every feature (sparse inputs); derived data, never saved
        self.register_buffer("baseline", None, persistent=False)

    def step_work(self, rows: int, backward: bool) -> float:
        """Multiply-adds of one step over ``rows`` rows of this network (``step_work``)."""
        first = self.single if self.single.n else self.pairs
        widths = tuple(layer.out_features for layer in first.backbone.layers)
        return step_work(self.n_features, self.n_clusters, self.single.n, self.pairs.n, widths[:-1], widths[-1],
                         rows, backward)

    def set_baseline(self, baseline: torch.Tensor | None) -> None:
        """Where each feature's "nothing" lies after standardization (``-mean / scale`` as the
        standardization computes it), so locked channels skip the rows that sit there."""
        self.baseline = None if baseline is None else torch.as_tensor(baseline, dtype=torch.float32).to(
            self.centroids.device)

    def _coded(self, x: torch.Tensor, around: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The inputs the gates read and the baseline (``around``, else ``self.baseline``) in the
        same terms."""
        base = self.baseline if around is None else around.to(x.dtype)
        if self.coding is None:
            return x, base
        return self.coding(x), None if base is None else self.coding(base[None])[0]

    def _missing_share(self, x: torch.Tensor, t: float) -> torch.Tensor:
        """(N, C) how much of each single-feature channel's input is a missing cell: 0 or 1 once
        its gate is one-hot (a gather), the gate's weight on missing features while relaxed."""
        nan = torch.isnan(x)
        if self.single.gates.is_locked:
            return nan[:, self.single.gates.index[:, 0]].to(self.missing_delta.dtype)
        return torch.einsum("nd,cd->nc", nan.to(self.missing_delta.dtype), self.single.matrix(t)[:, 0, :])

    def forward(self, x: torch.Tensor, t: float = 1.0, t2: float = 1.0, around: torch.Tensor | None = None) -> torch.Tensor:
        """(n, K) logits: the sum of the single-feature and pair shape functions' outputs.
        ``around``: (n_features,) standardized inputs that locked channels measure from instead of
        the baseline (rows that differ from one row in a few features: only their channels run)."""
        share = self._missing_share(x, t) if self.missing_delta is not None and self.single.n else None
        x, base = self._coded(x, around)
        out = self.single.logits(x, t, base) if self.single.n else None
        if share is not None:
            out = out + (share @ (self.missing_delta * MISSING_GAIN)).to(out.dtype)
        if self.pairs.n:
            p = self.pairs.logits(x, t2, base)
            out = p if out is None else out + p
        return out

    def contributions(self, x: torch.Tensor, t: float = 1.0, t2: float = 1.0) -> torch.Tensor:
        """(N, C + P, K) per-channel contributions; their sum over channels equals ``forward``."""
        share = self._missing_share(x, t) if self.missing_delta is not None and self.single.n else None
        x, base = self._coded(x)
        parts = []
        if self.single.n:
            single = self.single.contributions(x, t, base)
            if share is not None:
                single = single + (share[:, :, None] * (self.missing_delta * MISSING_GAIN)[None]).to(single.dtype)
            parts.append(single)
        if self.pairs.n:
            parts.append(self.pairs.contributions(x, t2, base))
        return torch.cat(parts, dim=1)

    def all_one_hot(self, t: float, t2: float) -> bool:
        """Every gate exactly one-hot at these temperatures: the model is a valid GAM / GA2M."""
        return self.single.gates.one_hot_at(t) and self.pairs.gates.one_hot_at(t2)
