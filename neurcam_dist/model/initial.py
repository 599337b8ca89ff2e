"""The initial centroids (and distillation target), chosen for the data: one rule for both drivers.

Lloyd's k-means reaches the lower k-means inertia, but on heavy-tailed data it spends clusters on
a few far rows, which an additive model cannot follow: distilled toward that partition, the
network ends well above what it reaches from MiniBatchKMeans' (up to 1.14x on the heavy-tailed
tables of ``benchmarks/defaults.py``). With ``kmeans='auto'``, when Lloyd is affordable both
are run; if MiniBatchKMeans' inertia is within ``CLOSE`` of Lloyd's the Lloyd centroids are taken,
otherwise each is tried: ``TRIAL_EPOCHS`` epochs of distillation on at most ``TRIAL_ROWS`` rows of
the sample, and the target whose distilled network's own partition has the lower inertia (in the
clustering space) is kept. The trial networks are discarded: the run distils again from the
start, on all its rows, so a trial costs ``2 x TRIAL_EPOCHS`` epochs on the sample. ``info`` records both inertias and why. Seeded: the same data and seed choose the same.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import torch

from ..metrics import inertia
from .build import TrainingSpec, build_trainer
from .kmeans import kmeans_centroids, kmeans_method
from .loss import fcm_log_membership, squared_distances
from .step import shuffled_batches

# MiniBatchKMeans' inertia within 5% of Lloyd's: no trial, Lloyd's centroids. Measured: clean
# tables 1.00-1.042x (digits the highest), heavy-tailed ones 1.099-1.385x.
CLOSE = 1.05
TRIAL_ROWS = 5_000    # rows of the sample a trial distils on
TRIAL_EPOCHS = 10     # distillation epochs per trial


def _distilled_inertia(spec: TrainingSpec, centroids: np.ndarray, x: np.ndarray, xr: np.ndarray,
                       allowed, baseline, coding: dict) -> float:
    """The inertia of the partition a network distilled toward ``centroids`` reaches on (x, xr)."""
    trial = dataclasses.replace(spec, precision="fp32", max_seconds=None)
    trainer = build_trainer(trial, centroids, precision="fp32", device="cpu", allowed=allowed, baseline=baseline,
                            cuda_graphs=False, **coding)
    x_t, xr_t = torch.from_numpy(np.ascontiguousarray(x, np.float32)), torch.from_numpy(
        np.ascontiguousarray(xr, np.float32))
    targets = fcm_log_membership(squared_distances(xr_t, torch.from_numpy(centroids)), spec.m)
    gen = torch.Generator().manual_seed(spec.random_state)
    for _ in range(TRIAL_EPOCHS):  # the schedule stays in distillation: no end_epoch
        trainer.run_epoch(shuffled_batches(x_t, xr_t, targets, spec.batch_size, gen))
    with torch.no_grad():
        labels = trainer.net(x_t).argmax(1).numpy()
    return inertia(xr, labels)


def initial_centroids(spec: TrainingSpec, x: np.ndarray, xr: np.ndarray, *, method: str = "auto",
                      n_init: int = 10, allowed=None, baseline=None, coding=None,
                      level_init=None) -> tuple[np.ndarray, dict]:
    """``(centroids, info)`` for standardized features ``x`` and clustering space ``xr`` (the rows
    of a sample, aligned): ``method`` as ``kmeans_centroids``, ``auto`` choosing as the module
    docstring says. ``allowed`` / ``baseline`` as ``build_trainer``. ``info["explained"]``: the
    clustering space's variance less the chosen k-means inertia, per row (``Schedule.loss_scale``).
    ``coding`` / ``level_init``: the input coding, as ``build_trainer``."""
    coding = {"coding": coding, "level_init": level_init}
    centroids, info = _chosen(spec, x, xr, method=method, n_init=n_init, allowed=allowed, baseline=baseline,
                              coding=coding)
    rows = xr[:: max(1, len(xr) // 100_000)]  # at most ~100,000 rows: an estimate
    variance = inertia(rows, np.zeros(len(rows), np.int64))  # one cluster: the variance per row
    return centroids, {**info, "explained": max(variance - info["inertia"], 0.0)}


def _chosen(spec: TrainingSpec, x: np.ndarray, xr: np.ndarray, *, method: str, n_init: int, allowed,
            baseline, coding: dict) -> tuple[np.ndarray, dict]:
    seed, k = spec.random_state, spec.n_clusters
    if method != "auto" or kmeans_method(len(xr), xr.shape[1], k) != "lloyd":
        return kmeans_centroids(xr, k, seed, method=method, n_init=n_init, batch_size=spec.batch_size)
    lloyd, info = kmeans_centroids(xr, k, seed, method="lloyd", n_init=n_init, batch_size=spec.batch_size)
    mini, mini_info = kmeans_centroids(xr, k, seed, method="minibatch", n_init=n_init, batch_size=spec.batch_size)
    info = {**info, "seconds": round(info["seconds"] + mini_info["seconds"], 3),
            "candidates": {"lloyd": info["inertia"], "minibatch": mini_info["inertia"]}}
    if mini_info["inertia"] <= CLOSE * info["inertia"] or spec.distill_epochs == 0:
        return lloyd, {**info, "chosen_by": "k-means inertia" if spec.distill_epochs else "no distillation"}
    keep = np.sort(np.random.default_rng(seed).permutation(len(xr))[:TRIAL_ROWS])
    reached = {name: _distilled_inertia(spec, c, x[keep], xr[keep], allowed, baseline, coding)
               for name, c in (("lloyd", lloyd), ("minibatch", mini))}
    chosen = min(reached, key=reached.get)
    picked = {**(info if chosen == "lloyd" else {**mini_info, "seconds": info["seconds"]}),
              "candidates": info["candidates"], "chosen_by": "distillation trial", "trial_inertia": reached}
    return (lloyd if chosen == "lloyd" else mini), picked
