"""The profile pass: one streaming pass that counts NaN / inf / null per file and column and
computes the standardization moments, without holding the data."""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import pyarrow.compute as pc

from ..numerics import FLOAT32_MAX, scaled_moments
from .planning import Plan
from .reading import local_pass, matrix
from .sources import DataError, listing


@dataclass
class Profile:
    """What the profile pass found: rows, each feature's mean and standard deviation, the
    non-finite cells per file and column, and the constant features."""
    n_rows: int
    mean: np.ndarray                               # float64, like the standard deviation
    std: np.ndarray
    bad: dict = field(default_factory=dict)        # (file, column) -> [nan, inf, null]
    lengths: dict = field(default_factory=dict)    # file -> [min, max] list length
    lo: np.ndarray | None = None                   # per-feature minimum and maximum
    hi: np.ndarray | None = None

    def scale(self) -> np.ndarray:
        """The standard deviations with 1 for a constant feature (standardizing never divides by 0)."""
        return np.where(self.std > 0, self.std, 1.0)

    @property
    def constant(self) -> np.ndarray:
        """Features with one value in every row."""
        return self.lo == self.hi


class _Tally:
    """A file's tallies: Chan's (count, mean, M2) of every feature and bad-value counts per
    column. Computed inside the file's read task, so only a few numbers per file travel (a Ray
    Data ``aggregate`` over the rows spilled 2.8 GiB of a 4.3 GiB dataset from a 1 GiB store)."""

    def __init__(self, p: Plan):
        self.p, self.d = p, len(p.features)
        self.checked = list(dict.fromkeys(p.features + ([] if p.repr_kind == "features" else p.repr_columns)
                                          + [c for c in (p.label, p.id) if c]))

    def __call__(self, tables, path: str) -> dict:
        acc = self.zero()
        for t in tables:
            acc = self.combine(acc, self._one_file(t, path))
        return acc

    # Per-file tallies are kept as JSON text (they are merged as dicts of lists). Moments are
    # Chan's (n, mean, M2) with M2 kept divided by s^2 (s: a power of two above the largest
    # magnitude), so that values near float64's limit cannot overflow the sums of squares.
    def zero(self):
        d = self.d
        return {"n": 0, "mean": [0.0] * d, "m2s": [0.0] * d, "s": [1.0] * d, "lo": [0.0] * d,
                "hi": [0.0] * d, "bad": "{}", "len": "{}"}

    def _one_file(self, t, path):
        p = self.p
        bad = {}
        lens = {}
        for c in self.checked:
            col = t[c]
            as_repr = p.repr_kind != "features" and c in p.repr_columns
            if p.repr_kind == "list" and c == p.repr_columns[0]:
                arr = col.combine_chunks()
                lengths = pc.list_value_length(arr).drop_null()
                if len(lengths):
                    lens = {path: [int(pc.min(lengths).as_py()), int(pc.max(lengths).as_py())]}
                flat = pc.list_flatten(arr)
                vals = flat.to_numpy(zero_copy_only=False)
                if vals.dtype != np.float32:  # float32 is checked as it is: no float64 copy of the embedding
                    vals = vals.astype(np.float64)
                inner = flat.null_count  # null elements read back as NaN: count them as nulls
                nan, nulls = int(np.isnan(vals).sum()) - inner, arr.null_count + inner
            else:
                vals = col.to_numpy(zero_copy_only=False)
                nulls = col.null_count
                if not np.issubdtype(vals.dtype, np.number):
                    if nulls:
                        bad[f"{path}\0{c}"] = [0, 0, nulls, 0]
                    continue
                vals = vals.astype(np.float64)
                nan = int(np.isnan(vals).sum()) - nulls
            inf = int(np.isinf(vals).sum())
            # a representation is held in float32 as given (features are standardized first)
            big = (int((np.abs(vals[np.isfinite(vals)]) > FLOAT32_MAX).sum())
                   if as_repr and vals.dtype != np.float32 else 0)
            if nan or inf or nulls or big:
                bad[f"{path}\0{c}"] = [nan, inf, nulls, big]
        x = matrix(t, p.features, np.float64)
        x = x[np.isfinite(x).all(1)]
        n = len(x)
        if not n:
            return {**self.zero(), "bad": json.dumps(bad), "len": json.dumps(lens)}
        scale, mean, m2s = scaled_moments(x)
        return {"n": n, "mean": mean.tolist(), "m2s": m2s.tolist(), "s": scale.tolist(),
                "lo": x.min(0).tolist(), "hi": x.max(0).tolist(), "bad": json.dumps(bad),
                "len": json.dumps(lens)}

    def combine(self, a, b):
        na, nb = a["n"], b["n"]
        n = na + nb
        if not na or not nb:
            moments = {k: (b if nb else a)[k] for k in ("mean", "m2s", "s", "lo", "hi")}
        else:
            ma, mb = np.asarray(a["mean"]), np.asarray(b["mean"])
            sa, sb = np.asarray(a["s"]), np.asarray(b["s"])
            s = np.maximum(sa, sb)
            delta = mb / s - ma / s
            m2s = (np.asarray(a["m2s"]) * (sa / s) ** 2 + np.asarray(b["m2s"]) * (sb / s) ** 2
                   + delta ** 2 * na * nb / n)
            moments = {"mean": (ma * (na / n) + mb * (nb / n)).tolist(), "m2s": m2s.tolist(), "s": s.tolist(),
                       "lo": np.minimum(a["lo"], b["lo"]).tolist(), "hi": np.maximum(a["hi"], b["hi"]).tolist()}
        bad = json.loads(a["bad"])
        for k, v in json.loads(b["bad"]).items():
            bad[k] = [x + y for x, y in zip(bad.get(k, [0, 0, 0, 0]), v)]
        lens = json.loads(a["len"])
        for k, (lo, hi) in json.loads(b["len"]).items():
            old = lens.get(k)
            lens[k] = [lo, hi] if old is None else [min(old[0], lo), max(old[1], hi)]
        return {"n": n, **moments, "bad": json.dumps(bad), "len": json.dumps(lens)}


def profile(p: Plan) -> Profile:
    """One streaming pass over the data: refuse NaN / inf / null, wrong list lengths; return the
    standardization moments. Raises ``DataError`` naming each offending file and column.

    Each file is tallied where it is read (in its Ray Data read task, or here for small data)
    and the tallies are merged here in file order, so the numbers do not depend on which task
    finished first, nor on whether the pass ran here or on Ray."""
    cols = list(dict.fromkeys(p.columns + [c for c in (p.label, p.id) if c]))
    tally = _Tally(p)
    from .parquet_files import per_file_tables
    acc = tally.zero()
    for t in per_file_tables(p.source, cols, p.rows_per_file, here=local_pass(p, cols), fold=tally):
        for one in t["fold"].to_pylist():
            acc = tally.combine(acc, json.loads(one))
    bad = {tuple(k.split("\0", 1)): v for k, v in json.loads(acc["bad"]).items()}
    if bad:
        items = [f"{f}: column {c!r}: {nan} NaN, {inf} inf, {null} null"
                 + (f", {big} beyond float32's range (a representation is used as given: divide it by a "
                    f"constant)" if big else "") for (f, c), (nan, inf, null, big) in sorted(bad.items())]
        raise DataError(listing("file/column(s) with missing or non-finite values", items))
    if p.repr_kind == "list":
        lengths = json.loads(acc["len"])
        wrong = [f"{f}: embedding lengths {lo}..{hi}" for f, (lo, hi) in sorted(lengths.items())
                 if lo != p.repr_dim or hi != p.repr_dim]
        if wrong:
            raise DataError(listing(f"file(s) whose {p.repr_columns[0]!r} rows are not all of length "
                                     f"{p.repr_dim}", wrong))
    n = acc["n"]
    if n != p.n_rows:
        raise DataError(f"the profile pass saw {n} rows but the Parquet footers say {p.n_rows}")
    std = np.asarray(acc["s"]) * np.sqrt(np.asarray(acc["m2s"]) / max(n, 1))
    return Profile(n_rows=n, mean=np.asarray(acc["mean"], np.float64), std=std, bad=bad,
                   lengths=json.loads(acc["len"]), lo=np.asarray(acc["lo"]), hi=np.asarray(acc["hi"]))
