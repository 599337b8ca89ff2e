"""The interpretable clustering trees the paper compares with, in numpy: IMM and ExKMC.

IMM (Dasgupta, Frost, Moshkovitz, Rashtchian, "Explainable k-Means and k-Medians Clustering",
ICML 2020) builds a threshold tree with exactly K leaves that explains a given k-means
partition: at each node it cuts on the feature and threshold that separate the node's centres
while sending the fewest rows away from their own centre; those rows ("mistakes") leave the
node's bookkeeping. ExKMC (Frost, Moshkovitz, Rashtchian, "ExKMC: Expanding Explainable k-Means
Clustering", 2020) grows IMM's tree to more leaves, each new cut the one that lowers the
surrogate cost (every leaf sent to its best centre of the K) the most; its leaves still map onto
the K clusters.

Written here because ExKMC's PyPI package ships C from an old Cython that does not build on
Python 3.11; both are a page. ``imm`` and ``exkmc`` return a cluster label in 0..K-1 per row.
"""
from __future__ import annotations

import numpy as np


def _left_low(xs: np.ndarray, cs: np.ndarray) -> np.ndarray:
    """Rows sorted by ``xs``: at each position p, how many of rows 0..p have ``cs <= xs[p]``."""
    n = len(xs)
    start = np.maximum(np.arange(n), np.searchsorted(xs, cs, side="left"))  # from where row j counts
    return np.cumsum(np.bincount(start[start < n], minlength=n))


def _imm_cut(x: np.ndarray, cs: np.ndarray, lo: np.ndarray, hi: np.ndarray):
    """(mistakes, feature, threshold) of IMM's best cut: rows ``x`` whose own centres'
    coordinates are ``cs``; the node's centres span [lo, hi) per feature."""
    best = None
    for f in range(x.shape[1]):
        order = np.argsort(x[:, f], kind="stable")
        xs, c = x[order, f], cs[order, f]
        low = _left_low(xs, c)  # rows at or left of p whose centre is <= theta = xs[p]
        mistakes = (np.arange(1, len(xs) + 1) - low) + (np.searchsorted(np.sort(c), xs, side="right") - low)
        ok = (xs >= lo[f]) & (xs < hi[f]) & np.r_[xs[1:] != xs[:-1], False]
        if ok.any():
            i = int(np.flatnonzero(ok)[np.argmin(mistakes[ok])])
            if best is None or mistakes[i] < best[0]:
                best = (int(mistakes[i]), f, float(xs[i]))
    if best is None:  # no row lies between the centres on any feature: cut between the centres
        f = int(np.argmax(hi - lo))
        best = (len(x), f, float(lo[f]))
    return best


def _imm_tree(x: np.ndarray, own: np.ndarray, centers: np.ndarray, node: np.ndarray, ids: np.ndarray):
    """The subtree for rows ``node`` (indices) and centres ``ids``: a centre id (leaf) or
    ``(feature, threshold, left, right)``."""
    if len(ids) == 1:
        return int(ids[0])
    keep = node[np.isin(own[node], ids)]
    _, f, t = _imm_cut(x[keep], centers[own[keep]], centers[ids].min(0), centers[ids].max(0))
    go_left = centers[ids, f] <= t
    rows_left = x[node, f] <= t
    return (f, t, _imm_tree(x, own, centers, node[rows_left], ids[go_left]),
            _imm_tree(x, own, centers, node[~rows_left], ids[~go_left]))


def imm(x: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """IMM's labels for rows ``x`` explaining the k-means ``centers`` (K leaves)."""
    x = np.asarray(x, np.float64)
    centers = np.asarray(centers, np.float64)
    return predict(imm_tree(x, centers), x)


def predict(tree, x: np.ndarray) -> np.ndarray:
    """The leaf label of each row of ``x`` under ``tree``."""
    labels = np.empty(len(x), np.int64)
    stack = [(tree, np.arange(len(x)))]
    while stack:
        node, rows = stack.pop()
        if not isinstance(node, tuple):
            labels[rows] = node
            continue
        f, t, left, right = node
        mask = x[rows, f] <= t
        stack += [(left, rows[mask]), (right, rows[~mask])]
    return labels


def _best_split(x: np.ndarray, d: np.ndarray):
    """(cost after, feature, threshold) of the cut of rows ``x`` (squared distances ``d`` to the
    K centres) that most lowers the surrogate cost; ``None`` when no cut is possible."""
    best = None
    total = d.sum(0)
    for f in range(x.shape[1]):
        order = np.argsort(x[:, f], kind="stable")
        xs = x[order, f]
        cum = np.cumsum(d[order], 0)
        cost = cum.min(1) + (total - cum).min(1)
        ok = np.r_[xs[1:] != xs[:-1], False]
        if ok.any():
            i = int(np.flatnonzero(ok)[np.argmin(cost[ok])])
            if best is None or cost[i] < best[0]:
                best = (float(cost[i]), f, float(xs[i]))
    return best


def exkmc(x: np.ndarray, centers: np.ndarray, leaves: int | None = None) -> np.ndarray:
    """ExKMC's labels: IMM's tree grown to ``leaves`` leaves (2K by default), each leaf sent to
    the centre of the K nearest its rows."""
    x = np.asarray(x, np.float64)
    centers = np.asarray(centers, np.float64)
    d = ((x[:, None, :] - centers[None]) ** 2).sum(2)
    parts = _leaf_rows(imm_tree(x, centers), x)
    splits = [_best_split(x[r], d[r]) if len(r) > 1 else None for r in parts]
    for _ in range((leaves or 2 * len(centers)) - len(parts)):
        gains = [d[r].sum(0).min() - s[0] if s else -np.inf for r, s in zip(parts, splits, strict=False)]
        j = int(np.argmax(gains))
        if gains[j] <= 0:
            break
        _, f, t = splits.pop(j)
        rows = parts.pop(j)
        for half in (rows[x[rows, f] <= t], rows[x[rows, f] > t]):
            parts.append(half)
            splits.append(_best_split(x[half], d[half]) if len(half) > 1 else None)
    labels = np.empty(len(x), np.int64)
    for rows in parts:
        labels[rows] = int(d[rows].sum(0).argmin())
    return labels


def imm_tree(x: np.ndarray, centers: np.ndarray):
    """IMM's tree (nested tuples, leaves the centre ids) for rows ``x`` and ``centers``."""
    own = ((x[:, None, :] - centers[None]) ** 2).sum(2).argmin(1)
    return _imm_tree(x, own, centers, np.arange(len(x)), np.arange(len(centers)))


def _leaf_rows(tree, x: np.ndarray) -> list[np.ndarray]:
    """The row indices reaching each leaf of ``tree``."""
    out = []
    stack = [(tree, np.arange(len(x)))]
    while stack:
        node, rows = stack.pop()
        if not isinstance(node, tuple):
            out.append(rows)
            continue
        f, t, left, right = node
        mask = x[rows, f] <= t
        stack += [(left, rows[mask]), (right, rows[~mask])]
    return out
