"""Clustering scores as the paper reports them; every method in the benchmarks uses these."""
from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score


def ari(labels_true, labels_pred) -> float:
    return float(adjusted_rand_score(labels_true, labels_pred))


def nmi(labels_true, labels_pred) -> float:
    """NMI normalised by the arithmetic mean of the two entropies (the paper's definition)."""
    return float(normalized_mutual_info_score(labels_true, labels_pred, average_method="arithmetic"))


def acc(labels_true, labels_pred) -> float:
    """Unsupervised accuracy: the best one-to-one map of clusters to labels (Hungarian matching)."""
    t = np.unique(np.asarray(labels_true), return_inverse=True)[1]
    p = np.unique(np.asarray(labels_pred), return_inverse=True)[1]
    counts = np.zeros((p.max() + 1, t.max() + 1), dtype=np.int64)
    np.add.at(counts, (p, t), 1)
    rows, cols = linear_sum_assignment(counts, maximize=True)
    return float(counts[rows, cols].sum() / len(t))


def inertia(xr, labels) -> float:
    """``(1/N) sum_n ||xr_n - mu_{c(n)}||^2`` with ``mu`` the mean of ``xr`` over each cluster's points."""
    xr = np.asarray(xr, dtype=np.float64)
    labels = np.asarray(labels)
    _, inv = np.unique(labels, return_inverse=True)
    k = inv.max() + 1
    sums = np.zeros((k, xr.shape[1]))
    np.add.at(sums, inv, xr)
    counts = np.bincount(inv, minlength=k)[:, None]
    mu = sums / counts
    return float(((xr - mu[inv]) ** 2).sum() / len(xr))


def scores(xr, labels_pred, labels_true=None) -> dict:
    """Inertia, plus ARI / NMI / ACC when ground truth is given."""
    out = {"inertia": inertia(xr, labels_pred), "n_clusters_used": int(len(np.unique(labels_pred)))}
    if labels_true is not None:
        out.update(ari=ari(labels_true, labels_pred), nmi=nmi(labels_true, labels_pred),
                   acc=acc(labels_true, labels_pred))
    return out
