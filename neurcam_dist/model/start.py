"""Where a fit starts and how it ends: one start and one finish around the loop, for both drivers.

``begin`` makes the ``Start``: everything the initialisation decides (standardization, the
features a gate may select, the input coding and its starting values, the k-means centroids with
their record: the cluster sizes that weigh the distillation and the variance that scales the
plateaus). ``NeurCAM.fit`` makes it from its rows; the Ray driver from its bounded sample, and
hands it whole to every worker (``WorkerConfig.start``). Each builds its ``Trainer`` from it
(``Start.trainer``), and ``finish`` turns the trained ``Trainer`` into the ``FittedNet``, so a
value the initialisation adds reaches the in-memory fit and every Ray worker alike.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import torch

from ..columns import ColumnCoding, level_init
from ..numerics import standardized_zero
from .build import TrainingSpec, build_trainer
from .fitted import FittedNet
from .initial import initial_centroids
from .loop import ALONE


@dataclass(frozen=True, eq=False)
class Start:
    """Everything the initialisation decides, built complete by ``begin``.

    Attributes
    ----------
    mean, scale : ndarray
        Standardization of the encoded features (the network sees ``(x - mean) / scale``).
    allowed : ndarray of bool or None
        The features a gate may select (constant ones are left out; None: all).
    centroids : ndarray
        (K, repr_dim) k-means centroids in the clustering space: the distillation's target and the
        loss's starting centroids.
    kmeans : dict
        The k-means record (``initial.initial_centroids``' info): method, inertia, ``sizes`` (the
        distillation's cluster weights) and ``explained`` (the plateau tolerance's scale).
    coding : ColumnCoding or None
        How the columns reach the network (categorical levels, missing cells).
    level_init : ndarray or None
        The input coding's starting values (``columns.level_init``).
    """

    mean: np.ndarray
    scale: np.ndarray
    allowed: np.ndarray | None
    centroids: np.ndarray
    kmeans: dict = field(default_factory=dict)
    coding: ColumnCoding | None = None
    level_init: np.ndarray | None = None

    @property
    def baseline(self) -> np.ndarray:
        """The standardized value of a raw zero: what a missing or ignored feature reads as."""
        return standardized_zero(self.mean, self.scale)

    def trainer(self, spec: TrainingSpec, *, precision: str, device: torch.device | str = "cpu", group=ALONE,
                cuda_graphs: bool = False):
        """The ``Trainer`` this start gives (``build_trainer`` with every value of the start), on
        ``device`` in ``group`` (a Ray worker's, or ``loop.ALONE``)."""
        return build_trainer(spec, self.centroids, precision=precision, device=device, group=group,
                             cuda_graphs=cuda_graphs, allowed=self.allowed, baseline=self.baseline,
                             loss_scale=float(self.kmeans.get("explained", 0.0)),
                             cluster_sizes=self.kmeans.get("sizes"), coding=self.coding, level_init=self.level_init)


def begin(spec: TrainingSpec, x: np.ndarray, xr: np.ndarray, raw: np.ndarray, *, mean: np.ndarray,
          scale: np.ndarray, allowed: np.ndarray | None, coding: ColumnCoding | None, method: str = "auto",
          n_init: int = 10) -> Start:
    """The ``Start`` of a fit on rows ``raw`` (encoded), ``x`` (standardized with ``mean`` /
    ``scale``) and ``xr`` (their clustering space), aligned: the rows of the whole table in
    memory, or of the Ray driver's sample. ``method`` / ``n_init``: the k-means, as
    ``initial.initial_centroids``; seeded by ``spec.random_state``."""
    levels = level_init(coding, xr, raw, spec.random_state)
    centroids, info = initial_centroids(spec, x, xr, method=method, n_init=n_init, allowed=allowed,
                                        baseline=standardized_zero(mean, scale), coding=coding, level_init=levels)
    return Start(mean=mean, scale=scale, allowed=allowed, centroids=centroids, kmeans=info, coding=coding,
                 level_init=levels)


def finish(trainer, start: Start, records: list, seconds: float, *, feature_names: list[str], repr_dim: int,
           uses_features_as_repr: bool, precision: str, text: dict | None = None, rows: np.ndarray | None = None,
           **history) -> FittedNet:
    """The fitted state at the end of training, complete: the trainer's network, locked, with the
    start's standardization, coding and k-means record (``FittedNet.from_trainer``). ``history``:
    what the driver adds to the record (resumes, world size, threads, ...). ``rows``: the training
    rows (encoded), when they are in memory: one pass over them gives their labels and each
    channel's mean (the reference that centres per-row explanations); a Ray run's scoring pass
    gives the means instead (``with_scores``)."""
    fitted = FittedNet.from_trainer(trainer, records, seconds, feature_names=feature_names, mean=start.mean,
                                    scale=start.scale, repr_dim=repr_dim, uses_features_as_repr=uses_features_as_repr,
                                    precision=precision, init_info=start.kmeans, text=text, coding=start.coding,
                                    **history)
    if rows is None:
        return fitted
    labels, sums = [], 0.0
    for c in fitted.contribution_chunks(rows):
        labels.append(c.sum(1).argmax(1))
        sums = sums + c.astype(np.float64).sum(0)
    return dataclasses.replace(fitted, channel_means=sums / rows.shape[0],
                               labels=np.concatenate(labels).astype(np.int64))


def with_scores(fitted: FittedNet, channel_means: np.ndarray, **history) -> FittedNet:
    """``fitted`` completed by a scoring pass over its training rows (a Ray run's): each channel's
    mean and what the pass found (``history``: the clusters used, the empty ones), as a new value."""
    return dataclasses.replace(fitted, channel_means=channel_means, history={**fitted.history, **history})
