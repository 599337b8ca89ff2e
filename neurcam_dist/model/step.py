"""One training epoch: the single implementation of the math that every driver calls.

The epoch loop (``model.loop``) feeds it the batches of rows held in memory or of a worker's
shard, each with the KL term's target when the phase has one (cached per row where the rows are
kept, so the KL term costs no second forward pass), and a DDP wrapper when data-parallel.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from ..errors import TrainingError
from .loss import fuzzy_loss, kl_to_target, squared_distances
from .schedule import Phase

DISTILL_WEIGHT = 1.0  # weight of the KL toward the k-means assignment during ``init='distill'``
# Logit-gradient entries smaller than this are dropped on CPU (``drop_tiny_gradients``).
TINY_GRADIENT = 1e-20


@dataclass
class Batch:
    """One optimizer step's rows: standardized features, embedding and, when the phase uses
    one, the frozen model's log-assignment."""
    x: torch.Tensor            # (n, D) interpretable features (standardized)
    xr: torch.Tensor           # (n, R) representation used by the clustering loss
    target: torch.Tensor | None = None  # (n, K) teacher log-assignment, when the phase uses one


class EpochStats:
    """Row-weighted sums of (loss, clustering loss, KL), kept on the device until read
    (no host sync per batch); ``sums()`` is what a data-parallel driver all-reduces."""

    def __init__(self) -> None:
        self._sums: torch.Tensor | None = None
        self.rows = 0

    def add(self, loss: torch.Tensor, clust: torch.Tensor, kl: torch.Tensor, n: int) -> None:
        """Add one step's loss, clustering loss and KL over ``n`` rows."""
        self.merge(weighted_sums(loss, clust, kl, n), n)

    def merge(self, sums: torch.Tensor, rows: int) -> None:
        """Add row-weighted sums over ``rows`` rows (a captured step's sums over the epoch)."""
        self._sums = sums.clone() if self._sums is None else self._sums + sums
        self.rows += rows

    def sums(self) -> torch.Tensor:
        """(loss, clust, kl, rows) as one float64 tensor."""
        s = self._sums.cpu() if self._sums is not None else torch.zeros(3, dtype=torch.float64)
        return torch.cat([s, torch.tensor([float(self.rows)], dtype=torch.float64)])

    @staticmethod
    def means_of(sums: torch.Tensor) -> dict:
        """Per-row means from (all-reduced) sums: loss, clust_loss, kl, rows."""
        loss, clust, kl, rows = (float(v) for v in sums)
        r = max(rows, 1.0)
        return {"loss": loss / r, "clust_loss": clust / r, "kl": kl / r, "rows": int(rows)}

    def means(self) -> dict:
        """This worker's per-row means."""
        return self.means_of(self.sums())


def weighted_sums(loss: torch.Tensor, clust: torch.Tensor, kl: torch.Tensor, n: int) -> torch.Tensor:
    """(loss, clust, kl) x rows, in float64: what an epoch adds up per batch."""
    return torch.stack([loss, clust, kl]).detach().double() * n


def batch_indices(n: int, batch_size: int, gen: torch.Generator | None, device=None) -> tuple[torch.Tensor, ...]:
    """The row indices of one epoch's batches over ``n`` rows: a permutation drawn from ``gen``, or
    in order without one."""
    order = torch.randperm(n, generator=gen) if gen is not None else torch.arange(n)
    return order.to(device).split(batch_size)


def shuffled_batches(x: torch.Tensor, xr: torch.Tensor, targets: torch.Tensor | None, batch_size: int,
                     gen: torch.Generator):
    """One epoch of rows held in memory, reshuffled by ``gen``: the in-memory estimator's epochs
    and a worker's device-resident shard. The teacher's cached log-assignment travels with its rows."""
    for idx in batch_indices(x.shape[0], batch_size, gen, x.device):
        yield Batch(x[idx], xr[idx], None if targets is None else targets[idx])


def autocast_context(precision: str, device: torch.device):
    """bf16 autocast for the network's matmuls; the loss and softmax stay in fp32. Without the
    cast cache: a captured step (``graphs``) may not keep casts across replays, and each weight is
    cast once per step anyway."""
    if precision == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16, cache_enabled=False)
    return contextlib.nullcontext()


def drop_tiny_gradients(logits: torch.Tensor) -> None:
    """Keep subnormal floats out of the CPU backward pass.

    A far cluster's weight ``exp(log w)`` falls below 1e-38 once the clusters separate. The
    logits' gradient then carries subnormal floats, and every backward matmul of the backbone
    multiplies them into more. x86 handles subnormals on a slow path, so late in training a CPU
    step ran 3-8x slower (250,000 rows of the scale benchmark, 1 thread: 84 ms for each of the
    first 100 batches of 512, 470 ms by batch 800). Zeroing the logit-gradient entries under
    ``TINY_GRADIENT`` stops that at the source, on every intra-op thread (flush-to-zero,
    ``torch.set_flush_denormal``, reaches only the calling thread). Adam (eps 1e-8) would move a
    parameter by at most lr * 1e-12 for such an entry, so the training is unchanged in every digit
    that matters. GPUs handle subnormals at full speed: CPU only."""
    if logits.requires_grad and logits.device.type == "cpu":
        logits.register_hook(lambda g: g.masked_fill(g.abs() < TINY_GRADIENT, 0.0))


def batch_loss(model, centroids: torch.Tensor, batch: Batch, t, t2, m: float,
               kl_weight: float, precision: str = "fp32", cluster_weight: torch.Tensor | None = None):
    """(total, clustering, kl) for one batch. ``model`` may be a DDP wrapper of ``NeurCAMNet``;
    ``t``, ``t2``: floats, or 0-dim device tensors in a captured step; ``cluster_weight``: the
    KL's weight per target cluster (``kl_to_target``; distillation only)."""
    with autocast_context(precision, batch.x.device):
        logits = model(batch.x, t, t2)
    drop_tiny_gradients(logits)
    log_w = torch.log_softmax(logits.float(), dim=1)
    clust = fuzzy_loss(log_w, squared_distances(batch.xr, centroids), m)
    if batch.target is not None and kl_weight > 0:
        kl = kl_to_target(batch.target, log_w, cluster_weight)
    else:
        kl = torch.zeros((), device=log_w.device)
    return clust + kl_weight * kl, clust, kl


def kl_weight_for(phase: Phase | str, gamma: float) -> float:
    """The KL term's weight in ``phase``: the distillation weight, ``gamma`` while annealing,
    0 in warm-up."""
    phase = Phase(phase)
    if phase == Phase.DISTILL:
        return DISTILL_WEIGHT
    return gamma if phase.annealing else 0.0


def optimizer_step(model, centroids: torch.Tensor, optimizer: torch.optim.Optimizer, batch: Batch, t, t2,
                   m: float, kl_weight: float, precision: str, cluster_weight: torch.Tensor | None = None):
    """One optimiser step on one batch; the body of both the eager and the captured step."""
    loss, clust, kl = batch_loss(model, centroids, batch, t, t2, m, kl_weight, precision, cluster_weight)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss, clust, kl


def train_epoch(model, centroids: torch.Tensor, optimizer: torch.optim.Optimizer, batches: Iterable[Batch],
                *, phase: Phase, t: float, t2: float, m: float, gamma: float, precision: str = "fp32",
                graphs=None, distill_weight: torch.Tensor | None = None) -> EpochStats:
    """Run the optimiser over ``batches`` once. Returns this process's (un-reduced) sums.
    ``graphs`` (a ``graphs.StepGraphs``; ``model`` then the bare ``NeurCAMNet``): replay the
    step from CUDA graphs. ``distill_weight``: (K,) the distillation KL's weight per k-means
    cluster (``loss.balanced_weights``), used in the ``distill`` phase only."""
    stats, phase = EpochStats(), Phase(phase)
    kl_weight = kl_weight_for(phase, gamma)
    cw = distill_weight if phase == Phase.DISTILL else None
    model.train()
    if graphs is not None:
        graphs.begin_epoch(t, t2)
    for batch in batches:
        if kl_weight > 0 and batch.target is None:
            raise TrainingError(f"phase {phase.value!r}: a batch came without the KL term's target (the feed "
                                f"gives it: model.loop.Targets)")
        if graphs is not None:
            graphs.step(model, centroids, optimizer, batch, stats, m=m, kl_weight=kl_weight, precision=precision,
                        cluster_weight=cw)
            continue
        loss, clust, kl = optimizer_step(model, centroids, optimizer, batch, t, t2, m, kl_weight, precision, cw)
        stats.add(loss, clust, kl, batch.x.shape[0])
    if graphs is not None:
        graphs.end_epoch(stats)
    return stats
