"""The profile pass: one streaming pass that counts NaN / inf / null per file and column,
computes the standardization moments of each numeric feature over its cells that are not missing,
and counts every categorical feature's levels and missing cells, without holding the data (a
column's level counts are capped at ``LEVEL_CAP`` distinct values per file)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow.compute as pc

from ..columns import (ColumnCoding, Column, column_from_counts, level_counts, refuse_empty_columns,
                       whole_value_counts, without_tokens)
from ..numerics import FLOAT32_MAX, scale_problem, scaled_moments
from ..params import CATEGORICAL_WEIGHT
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
    missing: dict = field(default_factory=dict)    # feature -> missing cells (NaN, null, blank)
    levels: dict = field(default_factory=dict)     # categorical feature -> {level text: rows}
    dtypes: dict = field(default_factory=dict)     # categorical feature -> text | bool | number
    names: tuple = ()                              # the features, in order
    min_level_rows: int = 1                        # a level in fewer rows is in (other levels) to the model
    pairs: dict = field(default_factory=dict)      # numeric feature -> {value text: rows} of two whole numbers

    def scale(self) -> np.ndarray:
        """The standard deviations with 1 for a constant feature (standardizing never divides by 0)."""
        return np.where(self.std > 0, self.std, 1.0)

    @property
    def constant(self) -> np.ndarray:
        """Features with one value in every row as the model reads them (a categorical one: one
        level and no missing cell, or no value at all; its levels in fewer than ``min_level_rows``
        rows count as one, (other levels), as the estimator codes them in memory)."""
        out = self.lo == self.hi
        names = list(self.names)
        for j, name in enumerate(names):
            miss = self.missing.get(name, 0)
            if name in self.levels:
                rows = self.levels[name].values()
                frequent = sum(n >= self.min_level_rows for n in rows)
                out[j] = frequent + any(n < self.min_level_rows for n in rows) + (miss > 0) <= 1
            elif miss:
                out[j] = miss == self.n_rows   # one value and some missing cells vary
        return out

    def without(self, names) -> "Profile":
        """This profile without the features ``names`` (``Plan.without``)."""
        drop = set(names)
        keep = [j for j, c in enumerate(self.names) if c not in drop]
        return replace(self, mean=self.mean[keep], std=self.std[keep], names=tuple(self.names[j] for j in keep),
                       lo=None if self.lo is None else self.lo[keep], hi=None if self.hi is None else self.hi[keep],
                       **{k: {c: v for c, v in getattr(self, k).items() if c not in drop}
                          for k in ("missing", "levels", "dtypes", "pairs")})

    @property
    def flags(self) -> list[str]:
        """The numeric features whose cells are exactly two whole numbers (``columns.FLAG_RULE``):
        categorical by default, as ``fit`` reads a table's 0/1 columns."""
        return [c for c in self.names if len(self.pairs.get(c) or ()) == 2]

    def as_categorical(self, names) -> "Profile":
        """This profile with the two-valued numeric features ``names`` read as categorical: their
        value counts become level counts (written as numbers), their codes pass as they are."""
        names = set(names)
        mean, std = self.mean.copy(), self.std.copy()
        for j, c in enumerate(self.names):
            if c in names:
                mean[j], std[j] = 0.0, 1.0
        return replace(self, mean=mean, std=std, levels={**self.levels, **{c: dict(self.pairs[c]) for c in names}},
                       dtypes={**self.dtypes, **{c: "number" for c in names}},
                       pairs={c: v for c, v in self.pairs.items() if c not in names})

    def coding(self, plan: Plan, *, min_level_rows: int, max_levels: int, missing: str,
               missing_values: tuple = (), categorical_weight: float = CATEGORICAL_WEIGHT) -> ColumnCoding:
        """The model's ``ColumnCoding`` from this profile: the categorical features' levels (as
        ``fit`` would choose them from the same counts) and every feature's missing cells."""
        columns = []
        for name in plan.features:
            miss = int(self.missing.get(name, 0))
            if name in plan.categorical:
                columns.append(column_from_counts(name, self.levels.get(name, {}), self.dtypes.get(name, "text"),
                                                  min_level_rows, max_levels, missing_rows=miss))
            else:
                columns.append(Column(name=name, missing_rows=miss))
        return ColumnCoding(columns=tuple(columns), n_rows=self.n_rows, missing=missing,
                            missing_values=tuple(missing_values), categorical_weight=float(categorical_weight))


LEVEL_CAP = 10_000   # distinct levels counted per categorical column and file (more: not a category)


class _Tally:
    """A file's tallies: Chan's (count, mean, M2) of every numeric feature over its cells that are
    not missing, bad-value counts per column, and every categorical feature's level counts.
    Computed inside the file's read task, so only a few numbers per file travel (a Ray Data
    ``aggregate`` over the rows spilled 2.8 GiB of a 4.3 GiB dataset from a 1 GiB store)."""

    def __init__(self, p: Plan, missing: str = "refuse", missing_values: tuple = ()):
        self.p, self.d, self.missing, self.missing_values = p, len(p.features), missing, tuple(missing_values)
        self.checked = list(dict.fromkeys(p.features + ([] if p.repr_kind == "features" else p.repr_columns)
                                          + [c for c in (p.label, p.id) if c]))
        self.numeric = [c for c in p.features if c not in set(p.categorical)]

    def __call__(self, tables, path: str) -> dict:
        acc = self.zero()
        for t in tables:
            acc = self.combine(acc, self._one_file(t, path))
        return acc

    # Per-file tallies are kept as JSON text (they are merged as dicts of lists). Moments are
    # Chan's (n, mean, M2) per column with M2 kept divided by s^2 (s: a power of two above the
    # largest magnitude), so that values near float64's limit cannot overflow the sums of squares.
    def zero(self):
        d = self.d
        return {"rows": 0, "n": [0] * d, "mean": [0.0] * d, "m2s": [0.0] * d, "s": [1.0] * d,
                "lo": [0.0] * d, "hi": [0.0] * d, "tiny": [float("inf")] * d, "bad": "{}", "len": "{}", "levels": "{}",
                "missing": "{}", "pairs": "{}"}

    def _levels(self, col) -> tuple[dict, int, str]:
        """A categorical column's level counts, missing cells and how its cells are written."""
        import pyarrow as pa
        t = col.type.value_type if pa.types.is_dictionary(col.type) else col.type
        dtype = "bool" if pa.types.is_boolean(t) else "number" if (pa.types.is_integer(t) or pa.types.is_floating(t)) \
            else "text"
        counts, miss = level_counts(without_tokens(col.to_pandas(), self.missing_values))
        if len(counts) > LEVEL_CAP:   # free text or ids: keep the most frequent (the rest cannot be levels)
            counts = dict(sorted(counts.items(), key=lambda kv: -kv[1])[:LEVEL_CAP])
        return counts, miss, dtype

    def _one_file(self, t, path):
        p = self.p
        bad, lens, levels, missing = {}, {}, {}, {}
        features = set(p.features)
        for c in self.checked:
            col = t[c]
            if c in p.categorical:
                counts, miss, dtype = self._levels(col)
                levels[c] = {"counts": counts, "dtype": dtype}
                if miss:
                    missing[c] = miss
                    if self.missing == "refuse":
                        bad[f"{path}\0{c}"] = [0, 0, miss, 0]
                continue
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
            if c in features and self.missing == "learn" and (nan or nulls):
                missing[c] = nan + nulls
                nan = nulls = 0
            if nan or inf or nulls or big:
                bad[f"{path}\0{c}"] = [nan, inf, nulls, big]
        out = {**self._moments(t), "rows": t.num_rows, "bad": json.dumps(bad), "len": json.dumps(lens),
               "levels": json.dumps(levels), "missing": json.dumps(missing)}
        return out

    def _moments(self, t) -> dict:
        """Per numeric feature: (n, mean, M2 / s^2, s, lo, hi) over its finite cells."""
        d = self.d
        n, mean, m2s, s, lo, hi = [0] * d, [0.0] * d, [0.0] * d, [1.0] * d, [0.0] * d, [0.0] * d
        tiny = [float("inf")] * d   # the smallest nonzero magnitude (a subnormal one is refused)
        x = matrix(t, self.numeric, np.float64) if self.numeric else np.empty((t.num_rows, 0))
        index = {c: j for j, c in enumerate(self.p.features)}
        if len(x) and np.isfinite(x).all():   # every cell a number: one pass over the matrix
            sc, m, m2 = scaled_moments(x)
            for k, c in enumerate(self.numeric):
                j = index[c]
                n[j], mean[j], m2s[j], s[j] = len(x), float(m[k]), float(m2[k]), float(sc[k])
                lo[j], hi[j], tiny[j] = float(x[:, k].min()), float(x[:, k].max()), _tiny(x[:, k])
            pairs = {c: whole_value_counts(x[:, k], lo[index[c]], hi[index[c]]) for k, c in enumerate(self.numeric)}
            return {"n": n, "mean": mean, "m2s": m2s, "s": s, "lo": lo, "hi": hi, "tiny": tiny,
                    "pairs": json.dumps(pairs)}
        pairs = {}
        for k, c in enumerate(self.numeric):
            v = x[:, k]
            v = v[np.isfinite(v)]
            if not len(v):
                continue
            j = index[c]
            sc, m, m2 = scaled_moments(v[:, None])
            n[j], mean[j], m2s[j], s[j], lo[j], hi[j] = len(v), float(m[0]), float(m2[0]), float(sc[0]), \
                float(v.min()), float(v.max())
            tiny[j] = _tiny(v)
            pairs[c] = whole_value_counts(v, lo[j], hi[j])
        return {"n": n, "mean": mean, "m2s": m2s, "s": s, "lo": lo, "hi": hi, "tiny": tiny, "pairs": json.dumps(pairs)}

    def combine(self, a, b):
        na, nb = np.asarray(a["n"], np.float64), np.asarray(b["n"], np.float64)
        n = na + nb
        ma, mb = np.asarray(a["mean"]), np.asarray(b["mean"])
        sa, sb = np.asarray(a["s"]), np.asarray(b["s"])
        s = np.maximum(sa, sb)
        safe = np.where(n > 0, n, 1.0)
        delta = mb / s - ma / s
        m2s = (np.asarray(a["m2s"]) * (sa / s) ** 2 + np.asarray(b["m2s"]) * (sb / s) ** 2
               + delta ** 2 * na * nb / safe)
        mean = ma * (na / safe) + mb * (nb / safe)
        lo = np.where(na == 0, b["lo"], np.where(nb == 0, a["lo"], np.minimum(a["lo"], b["lo"])))
        hi = np.where(na == 0, b["hi"], np.where(nb == 0, a["hi"], np.maximum(a["hi"], b["hi"])))
        s = np.where(na == 0, sb, np.where(nb == 0, sa, s))
        m2s = np.where(na == 0, b["m2s"], np.where(nb == 0, a["m2s"], m2s))
        bad = json.loads(a["bad"])
        for k, v in json.loads(b["bad"]).items():
            bad[k] = [x + y for x, y in zip(bad.get(k, [0, 0, 0, 0]), v, strict=False)]
        lens = json.loads(a["len"])
        for k, (lo_, hi_) in json.loads(b["len"]).items():
            old = lens.get(k)
            lens[k] = [lo_, hi_] if old is None else [min(old[0], lo_), max(old[1], hi_)]
        levels = json.loads(a["levels"])
        for c, v in json.loads(b["levels"]).items():
            mine = levels.setdefault(c, {"counts": {}, "dtype": v["dtype"]})
            for level, rows in v["counts"].items():
                if level in mine["counts"] or len(mine["counts"]) < LEVEL_CAP:
                    mine["counts"][level] = mine["counts"].get(level, 0) + rows
        missing = json.loads(a["missing"])
        for c, v in json.loads(b["missing"]).items():
            missing[c] = missing.get(c, 0) + v
        pairs = json.loads(a["pairs"])
        for c, v in json.loads(b["pairs"]).items():
            pairs[c] = _merged_values(pairs.get(c, {}), v)
        tiny = np.minimum(a.get("tiny", np.inf), b.get("tiny", np.inf))
        return {"rows": a["rows"] + b["rows"], "n": n.astype(int).tolist(), "mean": mean.tolist(),
                "tiny": np.broadcast_to(np.asarray(tiny, np.float64), n.shape).tolist(),
                "m2s": np.asarray(m2s, np.float64).tolist(), "s": np.asarray(s, np.float64).tolist(),
                "lo": np.asarray(lo, np.float64).tolist(), "hi": np.asarray(hi, np.float64).tolist(),
                "bad": json.dumps(bad), "len": json.dumps(lens), "levels": json.dumps(levels),
                "missing": json.dumps(missing), "pairs": json.dumps(pairs)}


def _merged_values(a: dict | None, b: dict | None) -> dict | None:
    """Two files' ``whole_value_counts`` together: None once more than two values (or a fraction) show."""
    if a is None or b is None:
        return None
    out = dict(a)
    for k, n in b.items():
        out[k] = out.get(k, 0) + n
    return out if len(out) <= 2 else None


def _tiny(v: np.ndarray) -> float:
    """The smallest nonzero magnitude of ``v`` (inf when every cell is 0)."""
    a = np.abs(v[v != 0])
    return float(a.min()) if len(a) else float("inf")


def _refuse_out_of_scale(p: Plan, acc: dict) -> None:
    """A numeric feature the standardization cannot hold (``numerics.scale_problem``: a span
    beyond float64's range, a subnormal value) is refused by name, as the estimator refuses it."""
    for j, c in enumerate(p.features):
        if c in p.categorical or not acc["n"][j]:
            continue
        problem = scale_problem(c, acc["lo"][j], acc["hi"][j], acc["tiny"][j])
        if problem:
            raise DataError(problem)


def profile(p: Plan, missing: str = "refuse", min_level_rows: int = 1, missing_values: tuple = ()) -> Profile:
    """One streaming pass over the data: refuse inf, wrong list lengths and (``missing='refuse'``,
    or outside the features) NaN / null; return the standardization moments, the missing cells
    per feature and the categorical features' level counts (``min_level_rows``: the model's, for
    ``Profile.constant``; ``missing_values``: the model's extra missing tokens, read as missing in
    categorical columns). Raises ``DataError`` naming each offending file and column.

    Each file is tallied where it is read (in its Ray Data read task, or here for small data)
    and the tallies are merged here in file order, so the numbers do not depend on which task
    finished first, nor on whether the pass ran here or on Ray."""
    cols = list(dict.fromkeys(p.columns + [c for c in (p.label, p.id) if c]))
    tally = _Tally(p, missing, missing_values)
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
        hint = ("" if missing == "learn" or not any(c in p.features for _, c in bad) else
                "\n(model.missing: learn takes missing feature cells as a value of their own; inf is never taken)")
        raise DataError(listing("file/column(s) with missing or non-finite values", items) + hint)
    if p.repr_kind == "list":
        lengths = json.loads(acc["len"])
        wrong = [f"{f}: embedding lengths {lo}..{hi}" for f, (lo, hi) in sorted(lengths.items())
                 if lo != p.repr_dim or hi != p.repr_dim]
        if wrong:
            raise DataError(listing(f"file(s) whose {p.repr_columns[0]!r} rows are not all of length "
                                     f"{p.repr_dim}", wrong))
    _refuse_out_of_scale(p, acc)
    n = acc["rows"]
    if n != p.n_rows:
        raise DataError(f"the profile pass saw {n} rows but the Parquet footers say {p.n_rows}")
    gaps = json.loads(acc["missing"])
    refuse_empty_columns(list(p.features), np.array([gaps.get(c, 0) for c in p.features]), n, "the data's")
    counts = np.asarray(acc["n"], np.float64)
    std = np.asarray(acc["s"]) * np.sqrt(np.asarray(acc["m2s"]) / np.maximum(counts, 1))
    levels = json.loads(acc["levels"])
    mean = np.asarray(acc["mean"], np.float64)
    for j, c in enumerate(p.features):   # categorical codes pass as they are
        if c in p.categorical:
            mean[j], std[j] = 0.0, 1.0
    return Profile(n_rows=n, mean=mean, std=std, bad=bad, lengths=json.loads(acc["len"]),
                   lo=np.asarray(acc["lo"]), hi=np.asarray(acc["hi"]), missing=gaps,
                   levels={c: v["counts"] for c, v in levels.items()},
                   dtypes={c: v["dtype"] for c, v in levels.items()}, names=tuple(p.features),
                   min_level_rows=min_level_rows, pairs=json.loads(acc["pairs"]))
