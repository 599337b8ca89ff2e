"""The one builder of network + schedule + trainer, shared by the estimator and the Ray worker.

``TrainingSpec`` is the typed form of the hyperparameters once the data's width is known; both
drivers make one (``TrainingSpec.for_data``) and hand it to ``build_trainer``, so the two can
never build a different model from the same settings.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass

import numpy as np
import torch

from ..errors import ConfigError
from ..params import DEFAULTS, check_params_for_data, resolved_n_single
from .loop import ALONE, Group
from .loss import balanced_weights
from .network import NeurCAMNet, step_work
from .schedule import Schedule
from .trainer import Trainer


# Where the k-means target has a far-row cluster, distillation lasts at least this many optimiser
# steps (``distill_epochs`` epochs, or more on a small table): a cluster of one far row needs about
# 100 steps to be learnt. Measured on 1,500 rows (3 steps an epoch) with one far row, 5 seeds: 10
# epochs lost a cluster on 1 seed (3.2x Lloyd's inertia), 30 and 100 epochs lost none
# (1.000-1.002x). The raise takes at most a tenth of the run's epoch budget, so a short run set by
# hand keeps the phases it was given. A target without a far-row cluster (``far_row_clusters``)
# distils ``distill_epochs`` epochs: wine and breast_cancer reach the same inertia in 10 epochs as
# in 100 and 50 (benchmarks/results/defaults.md).
DISTILL_MIN_STEPS = 100
# A k-means cluster holding fewer rows than this share of an even split (rows / K) is a far-row
# cluster: Lloyd's clusters on a few far rows hold 1-3 rows of thousands; the smallest cluster of
# every table of benchmarks/defaults.py without far rows holds over a sixth of an even split.
FAR_SHARE = 0.1


def far_row_clusters(sizes) -> bool:
    """True when the k-means target's cluster ``sizes`` (rows each, on the init's sample) hold a
    far-row cluster: one under ``FAR_SHARE`` of an even split (an empty one counts); None (no
    sizes known) counts as True, so distillation keeps its floor."""
    if sizes is None or len(sizes) == 0:
        return True
    sizes = np.asarray(sizes, dtype=np.float64)
    return bool(sizes.min() < FAR_SHARE * sizes.sum() / len(sizes))


def epoch_steps(n_rows: int, batch_size: int, epoch_rows: int) -> int | None:
    """Optimiser steps of an epoch over ``n_rows`` rows: None (a whole pass, however many steps
    that is) when ``epoch_rows`` is 0 or the table has at most that many rows, else the steps of
    ``epoch_rows`` rows at ``batch_size`` (global: every Ray worker takes that many of its part)."""
    if epoch_rows <= 0 or n_rows <= epoch_rows:
        return None
    return math.ceil(epoch_rows / batch_size)


def distill_epochs_for(epochs: int, n_rows: int, batch_size: int, budget: int, epoch_rows: int = 0) -> int:
    """``epochs`` of distillation, raised to last ``DISTILL_MIN_STEPS`` steps (epochs of ``n_rows``
    rows, or of ``epoch_rows`` on a larger table) but not past a tenth of the run's ``budget`` of
    epochs (0 stays 0: no distillation)."""
    if epochs <= 0:
        return 0
    steps = epoch_steps(n_rows, batch_size, epoch_rows) or math.ceil(max(n_rows, 1) / batch_size)
    needed = math.ceil(DISTILL_MIN_STEPS / steps)
    return max(epochs, min(needed, budget // 10))


@dataclass(frozen=True)
class TrainingSpec:
    """The hyperparameters as the training step uses them, once the data's width is known:
    immutable, checked, one name each as in the hyperparameter table (``params``)."""
    n_features: int
    n_clusters: int
    n_single: int
    n_pairs: int
    hidden: tuple[int, ...]
    n_bases: int
    random_state: int
    m: float
    gamma: float
    epsilon: float
    lr: float
    lr_patience: int
    epochs: int
    warmup_epochs: int
    distill_epochs: int           # 0 unless init='distill'
    distill_far_epochs: int       # with a far-row cluster in the target: raised to DISTILL_MIN_STEPS steps
    early_stopping: bool
    n_iter_no_change: int
    tol: float
    batch_size: int
    precision: str                # fp32, bf16 or auto (resolved per device by the driver)
    anneal_epochs: int = DEFAULTS["anneal_epochs"]
    epoch_rows: int = DEFAULTS["epoch_rows"]   # an epoch's rows on a larger table (``epoch_steps``)
    max_seconds: float | None = None
    deterministic: bool = False   # the driver trains under ``settings.deterministic_algorithms``

    def step_bytes(self, rows: int) -> int:
        """Estimated peak memory of one training step over ``rows`` rows at most a batch: every
        channel's backbone activations for the batch (kept for the backward pass, and their
        gradients: about 3 copies) and the selection gates with their gradients and optimizer
        state (about 6). Measured against it: 4.1 GB peak RSS for 3,000 channels over 3,000
        features at batch 512 (estimate 3.8 GB, plus the process and the data)."""
        batch = min(self.batch_size, rows)
        channels = self.n_single + self.n_pairs
        acts = batch * channels * (sum(self.hidden) + self.n_bases + 2) * 4 * 3
        gates = (self.n_single + 2 * self.n_pairs) * self.n_features * 4 * 6
        return int(acts + gates)

    def step_work(self, rows: int) -> float:
        """Multiply-adds of one training step over ``rows`` rows at most a batch
        (``network.step_work``): what its torch threads are sized by."""
        return step_work(self.n_features, self.n_clusters, self.n_single, self.n_pairs, self.hidden, self.n_bases,
                         min(self.batch_size, rows), backward=True)

    def check_memory(self, rows: int, available: int, say=None, where: str = "this process") -> None:
        """Refuse (``ConfigError``, with the estimate, the limit and what to lower) a model whose
        training step (``step_bytes``) would not fit in ``available`` bytes (the driver's
        ``settings.available_memory()``); ``say`` a line with the estimate when it is over 1 GiB,
        so a very wide table's long first epoch is expected."""
        need = self.step_bytes(rows)
        fix = (f"lower batch_size ({self.batch_size}), n_single ({self.n_single}: one channel per feature "
               f"by default), n_pairs ({self.n_pairs}) or hidden ({'x'.join(map(str, self.hidden))}), or "
               f"choose fewer features")
        if need > 0.8 * available:
            raise ConfigError(f"a training step needs about {need / 2**30:.1f} GiB ({self.n_single + self.n_pairs:,} "
                              f"shape functions over {self.n_features:,} features), {available / 2**30:.1f} GiB "
                              f"is available to {where}: {fix}")
        if say is not None and need > 2**30:
            say(f"a wide model: {self.n_single + self.n_pairs:,} shape functions over {self.n_features:,} features "
                f"need about {need / 2**30:.1f} GiB a training step and take long epochs (the progress bar shows "
                f"the rate); to go faster, {fix}")

    @classmethod
    def for_data(cls, params: dict, n_rows: int, n_features: int) -> "TrainingSpec":
        """From estimator-style hyperparameters, checked against the table and the data's size
        (``params.check_params_for_data``): the one check a fit or a Ray job makes. Where the
        k-means target has a far-row cluster, distillation lasts at least ``DISTILL_MIN_STEPS``
        steps over ``n_rows`` rows, within a tenth of ``epochs`` (``distill_far_epochs``:
        ``distill_epochs_for``; which of the two a run distils: ``distill_epochs_given``). A
        ``deterministic`` run with a ``max_seconds`` budget gets a warning: the clock decides its
        last epoch, so two runs may still differ."""
        check_params_for_data(params, n_rows, n_features)
        spec = cls._build({**DEFAULTS, **params}, n_features, n_rows)
        if spec.deterministic and spec.max_seconds is not None:
            warnings.warn(f"deterministic=True with max_seconds={spec.max_seconds:g}: the clock sets the epoch "
                          f"budget, so two runs can stop at different epochs and differ; bound the run with "
                          f"epochs instead for runs that repeat", UserWarning, stacklevel=3)
        return spec

    @classmethod
    def _build(cls, p: dict, n_features: int, n_rows: int) -> "TrainingSpec":
        distill = int(p["distill_epochs"]) if p["init"] == "distill" else 0
        return cls(n_features=int(n_features), n_clusters=int(p["n_clusters"]),
                   n_single=resolved_n_single(p, n_features), n_pairs=int(p["n_pairs"]),
                   hidden=tuple(int(h) for h in p["hidden"]), n_bases=int(p["n_bases"]),
                   random_state=int(p["random_state"]), m=float(p["m"]), gamma=float(p["gamma"]),
                   epsilon=float(p["epsilon"]), lr=float(p["lr"]), lr_patience=int(p["lr_patience"]),
                   epochs=int(p["epochs"]), warmup_epochs=int(p["warmup_epochs"]),
                   distill_epochs=distill,
                   distill_far_epochs=distill_epochs_for(distill, n_rows, int(p["batch_size"]), int(p["epochs"]),
                                                         int(p["epoch_rows"])),
                   early_stopping=bool(p["early_stopping"]), n_iter_no_change=int(p["n_iter_no_change"]),
                   tol=float(p["tol"]), batch_size=int(p["batch_size"]), precision=str(p["precision"]),
                   anneal_epochs=int(p["anneal_epochs"]), epoch_rows=int(p["epoch_rows"]),
                   max_seconds=None if p["max_seconds"] is None else float(p["max_seconds"]),
                   deterministic=bool(p["deterministic"]))

    def to_dict(self) -> dict:
        """The spec as a dict (for records and checkpoints)."""
        return asdict(self)

    def distill_epochs_given(self, cluster_sizes) -> int:
        """Epochs of distillation toward a k-means target of ``cluster_sizes``: the floor of
        ``DISTILL_MIN_STEPS`` steps (``distill_far_epochs``) where it has a far-row cluster
        (``far_row_clusters``), else ``distill_epochs`` as asked."""
        return self.distill_far_epochs if far_row_clusters(cluster_sizes) else self.distill_epochs

    def epoch_steps(self, n_rows: int) -> int | None:
        """Optimiser steps of an epoch over ``n_rows`` rows (None: a whole pass): ``epoch_steps``."""
        return epoch_steps(n_rows, self.batch_size, self.epoch_rows)


def build_network(spec: TrainingSpec, centroids, allowed=None, baseline=None, coding=None,
                  level_init=None) -> NeurCAMNet:
    """``allowed``: which features the gates may select (constant columns are left out);
    ``baseline``: the standardized zero of each feature (``numerics.standardized_zero``), where
    locked channels skip rows (sparse inputs); ``coding`` / ``level_init``: how missing cells and
    categorical levels reach the network (``columns.ColumnCoding``, ``columns.level_init``; None:
    plain numbers)."""
    net = NeurCAMNet(spec.n_features, spec.n_clusters, spec.n_single, spec.n_pairs, spec.hidden, spec.n_bases,
                     torch.tensor(np.array(centroids, np.float32)), seed=spec.random_state,
                     allowed=None if allowed is None else torch.tensor(np.array(allowed, bool)),
                     n_levels=None if coding is None else list(coding.n_levels),
                     level_init=None if level_init is None else torch.tensor(np.asarray(level_init, np.float32)),
                     missing_terms=coding is not None and coding.has_missing)
    if baseline is not None:
        net.set_baseline(torch.tensor(np.asarray(baseline, np.float32)))
    return net


def build_schedule(spec: TrainingSpec, loss_scale: float = 0.0, cluster_sizes=None) -> Schedule:
    """Algorithm 1's schedule for ``spec`` (distill, warm-up, annealing, final); ``loss_scale``:
    what the plateau tolerance is relative to where smaller than the loss (``Schedule.loss_scale``);
    ``cluster_sizes``: the k-means target's, which set how long distillation lasts
    (``TrainingSpec.distill_epochs_given``)."""
    return Schedule(epochs=spec.epochs, warmup_epochs=spec.warmup_epochs,
                    distill_epochs=spec.distill_epochs_given(cluster_sizes),
                    epsilon=spec.epsilon, has_pairs=spec.n_pairs > 0, early_stopping=spec.early_stopping,
                    n_iter_no_change=spec.n_iter_no_change, tol=spec.tol, anneal_epochs=spec.anneal_epochs,
                    loss_scale=float(loss_scale))


def build_trainer(spec: TrainingSpec, centroids, *, precision: str, device: torch.device | str = "cpu",
                  group: Group = ALONE, allowed=None, baseline=None,
                  cuda_graphs: bool = True, loss_scale: float = 0.0, coding=None, level_init=None,
                  cluster_sizes=None) -> Trainer:
    """Network (on ``device``; unused kinds frozen) + schedule + optimiser, ready for epoch 1.
    ``precision`` is the resolved one (fp32 or bf16); ``group``: the processes training together
    (``loop.ALONE``, or a Ray worker's group: its all-reduce and DDP wrapper);
    ``cuda_graphs``: replay the step from CUDA graphs on a GPU (``settings.cuda_graphs_enabled``);
    ``loss_scale``: the init's ``explained`` (``model.initial``), the plateau tolerance's scale;
    ``coding`` / ``level_init``: as ``build_network``; ``cluster_sizes``: the k-means clusters'
    rows on the init's sample (its ``sizes``), which weight the distillation so that every
    cluster pulls alike (``loss.balanced_weights``; None: every row alike) and set its length
    (``build_schedule``)."""
    net = build_network(spec, centroids, allowed, baseline, coding, level_init).to(device)
    for kind in (net.single, net.pairs):
        if kind.n == 0:
            for p in kind.parameters():
                p.requires_grad_(False)
    return Trainer(net, build_schedule(spec, loss_scale, cluster_sizes), m=spec.m, gamma=spec.gamma, lr=spec.lr,
                   lr_patience=spec.lr_patience, precision=precision, group=group, cuda_graphs=cuda_graphs, max_seconds=spec.max_seconds,
                   distill_weight=None if cluster_sizes is None else balanced_weights(cluster_sizes))
