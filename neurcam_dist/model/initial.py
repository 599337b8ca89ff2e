"""The initial centroids (and distillation target), chosen for the data: one rule for both drivers.

Lloyd's k-means reaches the lower k-means inertia; on heavy-tailed data it does so by spending
clusters on a few far rows, which carry much of the squared distance. The distillation weighs
each k-means cluster alike (``loss.balanced_weights`` over the init's ``sizes``), so a cluster of
one far row pulls the network as hard as one of thousands and the network learns the one steep
shape function that isolates it; unweighted, such clusters ended empty (2-5 of 12 on the tables
of ``benchmarks/peers.py``). With ``kmeans='auto'``, when Lloyd is affordable both it and
MiniBatchKMeans are run; if MiniBatchKMeans' inertia is within ``CLOSE`` of Lloyd's the Lloyd
centroids are taken, otherwise each is tried: ``TRIAL_STEPS`` optimiser steps of distillation on at most
``TRIAL_ROWS`` rows of the sample plus every row of a cluster smaller than ``TRIAL_ROWS / K`` (a
far row must not be left out of its own trial), and the target whose distilled network's own
partition has the lower inertia (in the clustering space, over at most ``EVAL_ROWS`` rows of the
sample) is kept. The trial networks are discarded: the run distils again from the start, on all
its rows, so a trial costs ``2 x TRIAL_STEPS`` steps (about 60 epochs of 5,000 rows). Fewer
steps mislead: after 10 epochs of 5,000 rows a network distilled toward Lloyd's far-row clusters
was still at 2.1-3.1x Lloyd's inertia (MiniBatchKMeans' at 1.3-1.8x), after 30 at 1.00-1.02x. ``info`` records both
inertias and why. Seeded: the same data and seed choose the same.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from ..metrics import inertia
from .build import TrainingSpec, build_trainer
from .kmeans import kmeans_centroids, kmeans_method
from . import loop
from .loss import squared_distances

# MiniBatchKMeans' inertia within 5% of Lloyd's: no trial, Lloyd's centroids. Measured: clean
# tables 1.00-1.042x (digits the highest), heavy-tailed ones 1.099-1.385x.
CLOSE = 1.05
TRIAL_ROWS = 5_000    # rows of the sample a trial distils on
TRIAL_STEPS = 300     # distillation steps per trial (30 epochs of TRIAL_ROWS rows at batch 512)
EVAL_ROWS = 100_000   # rows of the sample a trial network's inertia is measured on


def _tensor(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a, np.float32))


def _distilled_inertia(spec: TrainingSpec, centroids: np.ndarray, x: np.ndarray, xr: np.ndarray,
                       rows: tuple[np.ndarray, np.ndarray], allowed, baseline, coding: dict) -> float:
    """The inertia of the partition a network distilled toward ``centroids`` on the rows
    ``rows[0]`` of (x, xr) (weighted as the run weighs them: by cluster) reaches on ``rows[1]``."""
    x_t, xr_t = _tensor(x[rows[0]]), _tensor(xr[rows[0]])
    target = torch.from_numpy(centroids)
    d2 = squared_distances(xr_t, target)
    trial = dataclasses.replace(spec, precision="fp32", max_seconds=None)
    trainer = build_trainer(trial, centroids, precision="fp32", device="cpu", allowed=allowed, baseline=baseline,
                            cuda_graphs=False, cluster_sizes=torch.bincount(d2.argmin(1), minlength=len(centroids)).tolist(),
                            **coding)
    feed = loop.Rows(x_t, xr_t, spec.batch_size, torch.Generator().manual_seed(spec.random_state),
                     loop.Targets(target, spec.m))
    loop.steps_only(trainer, feed, math.ceil(TRIAL_STEPS / math.ceil(len(x_t) / spec.batch_size)))
    with torch.no_grad():
        labels = torch.cat([trainer.net(chunk).argmax(1) for chunk in _tensor(x[rows[1]]).split(65_536)]).numpy()
    return inertia(xr[rows[1]], labels)


def _trial_rows(n: int, own: np.ndarray, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows a trial distils on, rows it is measured on) of a sample of ``n`` rows whose Lloyd
    clusters are ``own``: seeded draws of ``TRIAL_ROWS`` and ``EVAL_ROWS`` rows, each with every
    row of a cluster under ``TRIAL_ROWS / k`` rows added."""
    order = np.random.default_rng(seed).permutation(n)
    sizes = np.bincount(own, minlength=k)
    small = np.flatnonzero(sizes[own] < TRIAL_ROWS / k)
    return tuple(np.union1d(order[:limit], small) for limit in (TRIAL_ROWS, EVAL_ROWS))


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
    own = squared_distances(_tensor(xr), torch.from_numpy(lloyd)).argmin(1).numpy()
    rows = _trial_rows(len(xr), own, k, seed)
    reached = {name: _distilled_inertia(spec, c, x, xr, rows, allowed, baseline, coding)
               for name, c in (("lloyd", lloyd), ("minibatch", mini))}
    chosen = min(reached, key=reached.get)
    picked = {**(info if chosen == "lloyd" else {**mini_info, "seconds": info["seconds"]}),
              "candidates": info["candidates"], "chosen_by": "distillation trial", "trial_inertia": reached}
    return (lloyd if chosen == "lloyd" else mini), picked
