"""Clustering scores as the paper reports them; every method in the benchmarks uses these.

ARI, NMI and ACC are computed from a contingency table (true label x cluster counts), and the
inertia from per-cluster moments (count, sum, sum of squares). Both are sums over rows, so the
distributed scorer adds them up batch by batch and gets the same numbers as the in-memory path
without ever holding the labels of the whole dataset.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment
from scipy.special import comb


def contingency(labels_true, labels_pred) -> np.ndarray:
    """(true classes, clusters) count matrix over the values that occur."""
    t = np.unique(np.asarray(labels_true), return_inverse=True)[1].ravel()
    p = np.unique(np.asarray(labels_pred), return_inverse=True)[1].ravel()
    table = np.zeros((t.max() + 1 if len(t) else 0, p.max() + 1 if len(p) else 0), dtype=np.int64)
    np.add.at(table, (t, p), 1)
    return table


def ari_from_table(table: np.ndarray) -> float:
    """Adjusted Rand index from a contingency table (truth x predicted)."""
    n = table.sum()
    sum_cells = comb(table, 2).sum()
    sum_rows, sum_cols = comb(table.sum(1), 2).sum(), comb(table.sum(0), 2).sum()
    expected = sum_rows * sum_cols / comb(n, 2) if n > 1 else 0.0
    max_index = (sum_rows + sum_cols) / 2
    if max_index == expected:  # both partitions trivial (one cluster, or all singletons): identical
        return 1.0
    return float((sum_cells - expected) / (max_index - expected))


def _entropy(counts: np.ndarray) -> float:
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def nmi_from_table(table: np.ndarray) -> float:
    """NMI normalised by the arithmetic mean of the two entropies (the paper's definition)."""
    n = table.sum()
    rows, cols = table.sum(1), table.sum(0)
    h_true, h_pred = _entropy(rows), _entropy(cols)
    if h_true == 0 and h_pred == 0:
        return 1.0
    nz = table > 0
    outer = np.outer(rows, cols)[nz]
    pij = table[nz] / n
    mi = float((pij * (np.log(table[nz]) - np.log(outer) + np.log(n))).sum())
    denom = (h_true + h_pred) / 2
    return float(max(mi, 0.0) / denom) if denom > 0 else 0.0


def acc_from_table(table: np.ndarray) -> float:
    """Unsupervised accuracy: the best one-to-one map of clusters to labels (Hungarian matching)."""
    rows, cols = linear_sum_assignment(table, maximize=True)
    return float(table[rows, cols].sum() / table.sum())


def ari(labels_true, labels_pred) -> float:
    """Adjusted Rand index of two labelings."""
    return ari_from_table(contingency(labels_true, labels_pred))


def nmi(labels_true, labels_pred) -> float:
    """Normalized mutual information (arithmetic mean) of two labelings."""
    return nmi_from_table(contingency(labels_true, labels_pred))


def acc(labels_true, labels_pred) -> float:
    """Clustering accuracy: the share of rows labeled right under the best one-to-one matching."""
    return acc_from_table(contingency(labels_true, labels_pred))


def inertia_from_moments(counts: np.ndarray, sums: np.ndarray, sumsq: np.ndarray) -> float:
    """``(1/N) sum_k (sum ||x||^2 - ||sum x||^2 / n_k)`` over the non-empty clusters."""
    counts = np.asarray(counts, np.float64)
    used = counts > 0
    within = np.asarray(sumsq, np.float64)[used] - (np.asarray(sums, np.float64)[used] ** 2).sum(1) / counts[used]
    return float(within.sum() / counts.sum())


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
        out.update(table_scores(contingency(labels_true, labels_pred)))
    return out


def table_scores(table: np.ndarray) -> dict:
    """ARI, NMI and ACC from one contingency table."""
    return {"ari": ari_from_table(table), "nmi": nmi_from_table(table), "acc": acc_from_table(table)}
