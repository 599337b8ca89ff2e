"""Numbers that must not overflow: standardization moments and the standardized features in
float64 (a change of unit never changes the clustering), constant columns, float32's range."""
from __future__ import annotations

import numpy as np

from .errors import DataError


FLOAT32_MAX = float(np.finfo(np.float32).max)


def pow2_above(top: np.ndarray) -> np.ndarray:
    """A power of two >= each magnitude (1 for zeros): dividing by it is exact."""
    return np.where(top > 0, np.exp2(np.ceil(np.log2(np.where(top > 0, top, 1.0)))), 1.0)


def scaled_moments(arr: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per column ``(s, mean, M2 / s**2)`` in float64, finite for any finite input (Chan's
    parallel combination takes these; see ``data.profiling``).

    Each column is divided by a power of two ``s`` near its largest magnitude first (exact, no
    rounding), so values near float64's limit cannot overflow the squares; a change of unit
    (x * 1e20) changes the moments by the same factor and nothing else.
    """
    arr = np.asarray(arr, np.float64)
    s = pow2_above(np.abs(arr).max(axis=0))
    z = arr / s
    zm = z.mean(axis=0)
    return s, zm * s, ((z - zm) ** 2).sum(axis=0)


def column_moments(arr: np.ndarray, skip: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-column mean and (population) standard deviation, from ``scaled_moments``, over each
    column's cells that are not NaN (missing); columns in ``skip`` (categorical codes) and those
    with no value get mean 0 and deviation 1, which leaves them as they are."""
    arr = np.asarray(arr, np.float64)
    skip = np.zeros(arr.shape[1], bool) if skip is None else np.asarray(skip, bool)
    nan = np.isnan(arr)
    if not skip.any() and not nan.any():
        s, mean, m2s = scaled_moments(arr)
        return mean, s * np.sqrt(m2s / len(arr))
    mean, std = np.zeros(arr.shape[1]), np.ones(arr.shape[1])
    for j in np.flatnonzero(~skip):
        col = arr[~nan[:, j], j]
        if len(col):
            s, m, m2s = scaled_moments(col[:, None])
            mean[j], std[j] = m[0], (s * np.sqrt(m2s / len(col)))[0]
    return mean, std


def standardize(arr: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``(x - mean) / scale`` computed in float64, returned as float32 (what the network sees).
    A difference beyond float64's range (values of opposite sign near 1e308) is taken as
    ``x / scale - mean / scale`` instead."""
    x = np.asarray(arr, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        z = (x - mean) / scale
        if not np.isfinite(z).all():
            z = np.where(np.isfinite(z), z, x / scale - mean / scale)
    return z.astype(np.float32)


def constant_columns(arr: np.ndarray) -> np.ndarray:
    """Boolean mask of columns whose every cell is the same (no shape function can use them): one
    value everywhere, or missing everywhere; one value and some missing cells varies."""
    arr = np.asarray(arr)
    nan = np.isnan(arr)
    if not nan.any():
        return arr.max(axis=0) == arr.min(axis=0)
    filled = np.where(nan, np.inf, arr)
    lo = filled.min(axis=0)
    hi = np.where(nan, -np.inf, arr).max(axis=0)
    some = nan.any(axis=0)
    every = nan.all(axis=0)
    return every | ((lo == hi) & ~some)


def check_float32_range(arr: np.ndarray, names: list[str], what: str) -> None:
    """A representation is used as given (not standardized) and held in float32: refuse values
    beyond float32's range by column instead of letting them turn into inf."""
    big = np.abs(arr).max(axis=0) > FLOAT32_MAX
    if big.any():
        cols = [names[j] for j in np.flatnonzero(big)]
        raise DataError(f"{what} has values beyond float32's range (|x| > {FLOAT32_MAX:.3g}) in column(s) "
                         f"{cols[:10]}: the representation is used as given (it is not standardized); "
                         f"divide it by a constant first (k-means is unchanged by a common scale)")


def standardized_zero(mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Each feature's 0 after standardization, bit for bit what ``standardize`` makes of a 0 (the
    baseline of sparse inputs)."""
    return standardize(np.zeros((1, len(mean))), np.asarray(mean, np.float64), np.asarray(scale, np.float64))[0]


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax in float64 (the largest logit subtracted first): the cluster
    probabilities every scorer reports (the estimator, batch scoring, the registry model)."""
    z = np.asarray(logits, np.float64)
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)
