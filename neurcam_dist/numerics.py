"""Numbers that must not overflow: standardization moments and the standardized features in
float64 (a change of unit never changes the clustering), constant columns, float32's range, and
the range a numeric feature may hold (a finite span, no subnormal numbers)."""
from __future__ import annotations

import numpy as np

from .errors import DataError


FLOAT32_MAX = float(np.finfo(np.float32).max)
# A numeric feature's values must span a finite range in float64 (max - min below 1.8e308: a
# shape graph's grid and the moments stay finite; values of one sign may go to float64's limit).
# Subnormal numbers (nonzero, below float64's smallest normal, 2.2e-308) carry too few bits to be
# standardized. Both are refused by column, at every door (``check_scale_range``).
TINY = float(np.finfo(np.float64).tiny)


def pow2_above(top: np.ndarray) -> np.ndarray:
    """A power of two >= each magnitude (1 for zeros): dividing by it is exact."""
    return np.where(top > 0, np.exp2(np.minimum(np.ceil(np.log2(np.where(top > 0, top, 1.0))), 1023.0)), 1.0)


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


# A standardized value is held within this many standard deviations of the training mean. Far
# outside the training range every shape function is in its linear tail, so a row's cluster is
# the same at 1e15 deviations as at 1e300; without the bound a cell near float64's limit (1e308 in
# a column of amounts) became inf in float32, and its row's logits NaN: scored as cluster 0.
Z_LIMIT = 1e15


def standardize(arr: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``(x - mean) / scale`` computed in float64, held within ``Z_LIMIT``, returned as float32
    (what the network sees). A difference beyond float64's range (values of opposite sign near
    1e308) is taken as ``x / scale - mean / scale`` instead."""
    x = np.asarray(arr, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        z = (x - mean) / scale
        if not np.isfinite(z).all():
            z = np.where(np.isfinite(z), z, x / scale - mean / scale)
    return np.clip(z, -Z_LIMIT, Z_LIMIT).astype(np.float32)


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


def subnormal(values: np.ndarray) -> np.ndarray:
    """Which cells are subnormal numbers (nonzero, below ``TINY`` in magnitude)."""
    a = np.abs(np.asarray(values, np.float64))
    return (a > 0) & (a < TINY)


def scale_problem(name: str, lo: float, hi: float, tiny: float | None = None) -> str | None:
    """Why numeric column ``name`` (finite values from ``lo`` to ``hi``; ``tiny``: its smallest
    nonzero magnitude) cannot be standardized, and what to do; None when it can. One wording for
    every door."""
    lo, hi = float(lo), float(hi)
    with np.errstate(over="ignore"):
        span = hi - lo
    if not np.isfinite(span):
        why = f"values from {lo!r} to {hi!r}, a span beyond float64's range ({np.finfo(np.float64).max:.3g})"
    elif tiny is not None and 0 < tiny < TINY:
        why = f"{tiny!r}, a subnormal number (nonzero, below {TINY:.3g}) with too few bits to standardize"
    else:
        return None
    return (f"numeric column {name!r} holds {why}: change the column's unit (multiply or divide it by a power "
            f"of ten; a common scale leaves the clustering unchanged), or leave the column out")


def check_scale_range(arr: np.ndarray, names: list[str], what: str, skip: np.ndarray | None = None) -> None:
    """Refuse (``DataError``) a numeric column of ``arr`` that ``scale_problem`` cannot
    standardize, naming it, the values and where the first is; ``skip``: columns that are not
    numbers (categorical codes)."""
    arr = np.asarray(arr, np.float64)
    for j in range(arr.shape[1]):
        col = arr[:, j]
        finite = np.isfinite(col)
        if (skip is not None and skip[j]) or not finite.any():
            continue
        small = np.where(subnormal(col), np.abs(col), np.inf)
        tiny_row = int(np.argmin(small))
        problem = scale_problem(names[j], col[finite].min(), col[finite].max(), float(small[tiny_row]))
        if problem:
            row = tiny_row if np.isfinite(small[tiny_row]) else int(np.argmax(np.where(finite, np.abs(col), -1.0)))
            raise DataError(f"{what}: {problem} (row {row})")


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


def fmt(value: float, scale: float | None = None, digits: int = 3) -> str:
    """The one format of a measured number (importance, push, inertia, a mean, a threshold) on the
    console, in the report, its model card and choice.html: at most ``digits`` significant digits,
    never scientific notation (``5190``, ``0.000123``); 0 for a value that is zero to the model's
    precision (below 1e-6 of ``scale``, the largest value it is shown beside). A row's own value is
    shown as it is instead (``examples.value_text``)."""
    value = float(value)
    if not np.isfinite(value):
        return str(value)
    if value == 0.0 or (scale and abs(value) < 1e-6 * abs(scale)) or abs(value) < 1e-12:
        return "0"
    return np.format_float_positional(value, precision=digits, unique=True, fractional=False, trim="-")
