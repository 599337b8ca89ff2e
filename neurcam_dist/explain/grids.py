"""Grids, interpolation and purification: the numerics under shape graphs and the table scorer.

Grids: a feature with at most ``grid_size`` distinct values is evaluated at every value (exact
lookup); otherwise at quantiles. Main terms interpolate linearly, pair terms bilinearly, and both
are constant outside the observed range.
"""
from __future__ import annotations

import numpy as np


def feature_grid(values: np.ndarray, size: int) -> tuple[np.ndarray, bool]:
    """(sorted grid, discrete?) over the observed range of one feature (original units)."""
    uniq = np.unique(values)
    if len(uniq) <= size:
        return uniq.astype(np.float64), True
    return np.unique(np.quantile(values, np.linspace(0.0, 1.0, size))).astype(np.float64), False


def nearest_index(grid: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The index of the grid point nearest each value (ties to the left)."""
    pos = np.clip(np.searchsorted(grid, values), 1, len(grid) - 1)
    left = grid[pos - 1]
    return np.where(np.abs(values - left) <= np.abs(grid[pos] - values), pos - 1, pos)


def interp_main(grid: np.ndarray, table: np.ndarray, values: np.ndarray) -> np.ndarray:
    """(N, K) linear interpolation of a (G, K) table; constant outside the grid."""
    if len(grid) == 1:
        return np.repeat(table[:1], len(values), axis=0)
    pos = np.clip(np.searchsorted(grid, values, side="right") - 1, 0, len(grid) - 2)
    lo, hi = grid[pos], grid[pos + 1]
    frac = np.clip((values - lo) / np.where(hi > lo, hi - lo, 1.0), 0.0, 1.0)[:, None]
    return table[pos] * (1 - frac) + table[pos + 1] * frac


def _axis_weights(grid, values):
    if len(grid) == 1:
        z = np.zeros(len(values), dtype=np.int64)
        return z, z, np.zeros(len(values))
    pos = np.clip(np.searchsorted(grid, values, side="right") - 1, 0, len(grid) - 2)
    lo, hi = grid[pos], grid[pos + 1]
    frac = np.clip((values - lo) / np.where(hi > lo, hi - lo, 1.0), 0.0, 1.0)
    return pos, np.minimum(pos + 1, len(grid) - 1), frac


def interp_pair(ga: np.ndarray, gb: np.ndarray, table: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(N, K) bilinear interpolation of a (Ga, Gb, K) table; constant outside the grid."""
    a0, a1, fa = _axis_weights(ga, a)
    b0, b1, fb = _axis_weights(gb, b)
    fa, fb = fa[:, None], fb[:, None]
    return ((1 - fa) * (1 - fb) * table[a0, b0] + (1 - fa) * fb * table[a0, b1]
            + fa * (1 - fb) * table[a1, b0] + fa * fb * table[a1, b1])


def purify(pair: np.ndarray, weights: np.ndarray, tol: float = 1e-12, max_iter: int = 500):
    """Move a pair table's weighted row and column means into two main-effect tables.

    Returns ``(pure, main_a, main_b)`` with ``pure + main_a[:, None] + main_b[None, :] == pair``
    and every row and column of ``pure`` with zero mean under ``weights`` (rows/columns that
    carry no data weight are left as they are)."""
    pure = pair.astype(np.float64).copy()
    main_a = np.zeros((pure.shape[0], pure.shape[2]))
    main_b = np.zeros((pure.shape[1], pure.shape[2]))
    w = weights.astype(np.float64)
    wa, wb = w.sum(1), w.sum(0)
    scale = max(float(np.abs(pure).max()), 1.0)
    for _ in range(max_iter):
        ma = np.einsum("ab,abk->ak", w, pure) / np.where(wa > 0, wa, 1.0)[:, None]
        pure -= ma[:, None, :]
        main_a += ma
        mb = np.einsum("ab,abk->bk", w, pure) / np.where(wb > 0, wb, 1.0)[:, None]
        pure -= mb[None, :, :]
        main_b += mb
        if max(np.abs(ma).max(), np.abs(mb).max()) <= tol * scale:
            break
    return pure, main_a, main_b
