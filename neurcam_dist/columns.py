"""How a table's columns reach the network: numbers, categories and missing cells, natively.

A ``ColumnCoding`` is learned from the training table (``ColumnCoding.fit``) and kept with the
model (``to_dict``: plain JSON, no pickle). It turns any table with the same columns into the
model's *encoded matrix* (``encode``), float64 rows x features:

- a numeric column keeps its values; a missing cell (NaN, null, blank) is NaN;
- a categorical column (text, pandas ``category`` and boolean columns, as scikit-learn's
  ``categorical_features="from_dtype"``; a table's numeric column holding exactly two whole
  numbers, a 0/1 flag, by ``FLAG_RULE``; integer-coded ones when named) holds its level's code
  ``0 .. L-1``; levels seen in fewer than ``min_level_rows`` training rows, those beyond the
  ``max_levels`` most frequent, and levels never seen at training share the last code, ``other``;
  a missing cell is NaN.

The network maps every NaN to a learned input value of its feature and every level code to a
learned value of its level (``model.network.InputCoding``), so each term has its own contribution
for "missing" and for every level: once a gate is one-hot, a categorical term is exactly a lookup
table. Nothing is imputed before the network.

The clustering space of a table without an embedding (``clustering_space``): standardized numeric
columns, missing cells at the column mean (0) plus a 0/1 indicator column for each numeric
feature that had missing training cells; a categorical column as the one-hot of its levels (and
"missing" when training had it), scaled by ``1 / sqrt(1 - sum p^2)`` (``p``: the levels' training
shares) so its one-hot columns' variances sum to 1, as a standardized numeric's does (a two-level
column then reads exactly as the same 0/1 column standardized), times ``categorical_weight``
(``params.CATEGORICAL_WEIGHT`` by default: a categorical weighs less than a numeric). The
indicator of missing numeric cells is not scaled: a missing cell sits 1 from a present cell at
the column mean, so a few blank cells never make far rows of their own. A numeric table without
missing cells gets its standardized columns, as before.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from dataclasses import dataclass

import numpy as np

from .errors import ConfigError, DataError
from .params import CATEGORICAL_WEIGHT

OTHER = "(other levels)"   # the pooled level of rare and unseen levels (always the last code), named so that a
                           # level the data calls "other" keeps its own name beside it
MISSING = "missing"   # how explanations and reports name a missing cell


@dataclass(frozen=True)
class Column:
    """One feature column as the model reads it.

    Attributes
    ----------
    name : str
        The column's name.
    levels : tuple of str
        A categorical column's kept levels as text, ``OTHER`` (the pooled level) last; empty for a
        numeric column.
    dtype : str
        How the column's cells are written: ``number``, ``text`` or ``bool`` (the exported SQL
        compares a level as a number, as text, or as true/false), or ``date`` for a numeric
        column of dates and times, read as ``DATE_UNIT`` (``as_days``).
    rows : tuple of int
        Training rows per level (``OTHER`` included).
    missing_rows : int
        Training rows whose cell was missing.
    """

    name: str
    levels: tuple = ()
    dtype: str = "number"
    rows: tuple = ()
    missing_rows: int = 0

    @property
    def categorical(self) -> bool:
        """True for a categorical column."""
        return bool(self.levels)

    def level_names(self) -> list[str]:
        """Every value a term of this column takes: its levels (``other`` included) and ``missing``."""
        return [*self.levels, MISSING]


@dataclass(frozen=True)
class ColumnCoding:
    """The columns of a fitted model: their kinds, levels and training missing counts.

    Attributes
    ----------
    columns : tuple of Column
        In the network's feature order.
    n_rows : int
        Training rows the coding was learned on.
    missing : str
        ``learn`` (missing cells are a value of their own) or ``refuse`` (they are an error).
    missing_values : tuple of str
        Text cells read as missing besides blank ones and ``missing_tokens`` (``'?'``), outer
        spaces aside: the user's, kept with the model so every door reads them so.
    categorical_weight : float
        A categorical column's weight in the clustering space against a standardized numeric.
    """

    columns: tuple
    n_rows: int
    missing: str = "learn"
    missing_values: tuple = ()
    categorical_weight: float = 1.0   # a model saved before the weight existed: 1
    legacy: bool = False   # the coding of a model saved without one (format 2 or older): plain numbers

    # ------------------------------------------------------------------ learning
    @classmethod
    def fit(cls, X, categorical_features="from_dtype", *, min_level_rows: int = 5, max_levels: int = 64,
            missing: str = "learn", missing_values: tuple = (), categorical_weight: float = CATEGORICAL_WEIGHT,
            numeric_features=None, what: str = "X") -> tuple["ColumnCoding", np.ndarray]:
        """``(coding, encoded matrix)`` of a training table (a DataFrame or a 2-D array).

        Parameters
        ----------
        X : DataFrame or array-like
            The feature columns.
        categorical_features : "from_dtype", None or list of str / int
            "from_dtype": text, ``category`` and boolean columns are categorical, and a
            DataFrame's numeric columns of two whole-number values (``FLAG_RULE``); a list names
            integer-coded categorical columns as well (by name or position); None: none beyond
            the text, ``category`` and boolean columns (which cannot be numbers), so a 0/1
            column stays numeric. ``numeric_features`` (names) keeps those flags numeric only.
        min_level_rows, max_levels : int
            A level seen in fewer rows, or beyond the ``max_levels`` most frequent, joins ``other``.
        missing : str
            ``learn`` or ``refuse``.
        missing_values : tuple of str
            Text cells read as missing besides the blank ones and ``missing_tokens``.
        categorical_weight : float
            A categorical column's weight in the clustering space.

        Raises
        ------
        DataError
            Infinite cells, or missing ones under ``missing='refuse'`` (naming the columns).
        ConfigError
            A named categorical or numeric column that is not in ``X``.
        """
        names, cells = _columns_of(X, what)
        missing_values = tuple(missing_values)
        cells = [without_tokens(c, missing_values) for c in cells]
        named = _named_categoricals(categorical_features, names)
        numeric = _named_numerics(numeric_features, names, named, cells)
        from .validation import is_frame
        flags = categorical_features is not None and is_frame(X)   # FLAG_RULE: a table's columns, not an array's
        columns = []
        for name, col in zip(names, cells, strict=False):
            if name not in named and as_days(col) is not None:   # encoded as days below
                columns.append(Column(name=name, dtype="date"))
                continue
            numbers = name not in named and refuse_numbers_with_typos(col, name, what)
            if (is_category_dtype(col) and not numbers) or name in named:
                columns.append(_fit_levels(name, col, min_level_rows, max_levels))
            elif flags and name not in numeric and is_flag(col):
                columns.append(column_from_counts(name, level_counts(col)[0], "number", min_level_rows, max_levels))
            else:
                columns.append(Column(name=name))
        coding = cls(columns=tuple(columns), n_rows=len(cells[0]) if cells else 0, missing=missing,
                     missing_values=missing_values, categorical_weight=float(categorical_weight))
        arr, _ = coding._encode_cells(names, cells, what)
        counts = np.isnan(arr).sum(axis=0)
        refuse_empty_columns(names, counts, len(arr), what)
        coding = dataclasses.replace(coding, columns=tuple(dataclasses.replace(c, missing_rows=int(n))
                                                           for c, n in zip(columns, counts, strict=False)))
        return coding, arr

    # ------------------------------------------------------------------ reading
    @property
    def names(self) -> list[str]:
        """The feature names, in order."""
        return [c.name for c in self.columns]

    @property
    def n_levels(self) -> list[int]:
        """Level codes per feature (0 for a numeric one): what the network's input coding needs."""
        return [len(c.levels) for c in self.columns]

    @property
    def has_missing(self) -> bool:
        """True when some feature had missing training cells."""
        return any(c.missing_rows for c in self.columns)

    @property
    def has_categorical(self) -> bool:
        """True when some feature is categorical."""
        return any(c.categorical for c in self.columns)

    def categorical_mask(self) -> np.ndarray:
        """(features,) bool: which features are categorical."""
        return np.array([c.categorical for c in self.columns], dtype=bool)

    def dtypes(self) -> dict[str, str]:
        """Categorical feature -> how its cells are written (``text``, ``bool``, ``number``)."""
        return {c.name: c.dtype for c in self.columns if c.categorical}

    def missing_shares(self) -> dict[str, float]:
        """Each feature's share of missing training cells (every feature, in order)."""
        n = max(self.n_rows, 1)
        return {c.name: c.missing_rows / n for c in self.columns}

    def encode(self, X, what: str = "X") -> np.ndarray:
        """The encoded matrix of rows with this coding's columns (a DataFrame is realigned by
        name; a 2-D array is taken in this order); levels not seen at training are coded
        ``other`` (``encode_counted`` also says how many).

        Raises
        ------
        DataError
            Other columns than the model's, infinite cells, text in a numeric column, or missing
            cells under ``missing='refuse'``.
        """
        return self.encode_counted(X, what)[0]

    def encode_counted(self, X, what: str = "X") -> tuple[np.ndarray, dict[str, int]]:
        """``(encoded matrix, unseen)``: ``encode``'s matrix and, per categorical column with
        any, the cells whose level was not seen at training (coded ``other``)."""
        names, cells = _columns_of(X, what, expected=self.names)
        return self._encode_cells(names, [without_tokens(c, self.missing_values) for c in cells], what)

    def _encode_cells(self, names, cells, what: str) -> tuple[np.ndarray, dict[str, int]]:
        n = len(cells[0]) if cells else 0
        arr = np.empty((n, len(self.columns)), dtype=np.float64)
        unseen = {}
        for j, (column, col) in enumerate(zip(self.columns, cells, strict=False)):
            if column.categorical:
                arr[:, j], new = level_codes(col, column.levels)
                if new:
                    _refuse_changed_kind(column, col, new, int((~np.isnan(arr[:, j])).sum()), what)
                    unseen[column.name] = new
            else:
                arr[:, j] = _numbers(_dates_as_at_fit(col, column, what), column.name, what)
        refuse_infinite(arr, names, what)
        if self.missing == "refuse" and np.isnan(arr).any():
            counts = np.isnan(arr).sum(axis=0)
            shown = [f"{names[j]!r} ({int(counts[j])} rows)" for j in np.flatnonzero(counts)]
            fix = ("this model was saved before missing cells could be scored (format 2 or older): fill or drop "
                   "those rows, or fit the model again with this version, which learns a value for them"
                   if self.legacy else "fill or drop those rows, or set missing='learn' to give each term a value "
                   "for them")
            raise DataError(f"{what} has missing values in column(s) {', '.join(shown[:10])}"
                            f"{f' and {len(shown) - 10} more' if len(shown) > 10 else ''} (missing='refuse'): {fix}")
        return arr, unseen

    def level_of(self, j: int, code: float) -> str:
        """The level name of code ``code`` of feature ``j`` (NaN: ``missing``)."""
        if code != code:
            return MISSING
        return self.columns[j].levels[int(code)]

    # ------------------------------------------------------------------ the clustering space
    @property
    def space_is_features(self) -> bool:
        """True when the clustering space is the standardized features themselves (every feature
        numeric, no missing training cell)."""
        return not self.has_categorical and not any(c.missing_rows for c in self.columns)

    def space_width(self) -> int:
        """Columns of the clustering space (``clustering_space``)."""
        w = 0
        for c in self.columns:
            w += (len(c.levels) + (c.missing_rows > 0)) if c.categorical else 1 + (c.missing_rows > 0)
        return w

    def space_bytes(self, n_rows: int) -> int:
        """Bytes building the clustering space of ``n_rows`` rows takes at its peak: each column's
        part and their concatenation in float64, and the float32 result (``clustering_space``)."""
        return 20 * n_rows * self.space_width()

    def check_space(self, n_rows: int, available: int, say=None) -> None:
        """Before any work: refuse (``ConfigError``, with the estimate and what to lower) a
        clustering space of categorical levels that would take over half of ``available`` bytes
        (a column of 10,000 levels kept with ``min_level_rows=1``); ``say`` the estimate above 1 GiB."""
        if not self.has_categorical:
            return
        need = self.space_bytes(n_rows)
        widest = sorted((c for c in self.columns if c.categorical), key=lambda c: -len(c.levels))[:3]
        shown = ", ".join(f"{c.name!r} {len(c.levels):,}" for c in widest)
        if need > 0.5 * available:
            raise ConfigError(f"the clustering space of {n_rows:,} rows x {self.space_width():,} columns (one per "
                              f"categorical level; levels: {shown}) needs about {need / 2**30:.1f} GiB, over half of the "
                              f"{available / 2**30:.1f} GiB available: lower max_levels or raise min_level_rows so rare "
                              f"levels share {OTHER}, leave out a column that is no category (an id, free text), or "
                              f"pass X_repr (an embedding) as the clustering space")
        if say is not None and need > 2**30:
            say(f"the clustering space of {self.space_width():,} columns (levels: {shown}) takes about "
                f"{need / 2**30:.1f} GiB while it is built")

    def clustering_space(self, x_std: np.ndarray) -> np.ndarray:
        """The documented clustering space (module docstring) of standardized encoded rows, float32."""
        x_std = np.asarray(x_std)
        if not self.has_categorical and not any(c.missing_rows for c in self.columns):
            return np.nan_to_num(x_std, nan=0.0).astype(np.float32, copy=False)
        parts = []
        for j, c in enumerate(self.columns):
            v = x_std[:, j]
            nan = np.isnan(v)
            if not c.categorical:
                parts.append(np.where(nan, 0.0, v)[:, None])
                if c.missing_rows:
                    parts.append(nan[:, None].astype(np.float64))
                continue
            width = len(c.levels) + (c.missing_rows > 0)
            onehot = np.zeros((len(v), width))
            codes = np.where(nan, len(c.levels), np.nan_to_num(v, nan=0.0)).astype(np.int64)
            keep = codes < width
            onehot[np.flatnonzero(keep), codes[keep]] = 1.0
            parts.append(onehot * (self.level_weight(j) * self.categorical_weight))
        return np.concatenate(parts, axis=1).astype(np.float32)

    def level_weight(self, j: int) -> float:
        """The scale of feature ``j``'s one-hot columns: ``1 / sqrt(1 - sum p^2)`` over its
        training shares (levels and missing), so that its columns' variances sum to 1 as a
        standardized numeric's do (a two-level column then reads exactly as the same 0/1 column
        standardized); 0 for a column with one value."""
        c = self.columns[j]
        counts = np.array([*c.rows, c.missing_rows], dtype=np.float64)
        p = counts / max(counts.sum(), 1.0)
        spread = 1.0 - float((p ** 2).sum())
        return 1.0 / math.sqrt(spread) if spread > 1e-12 else 0.0

    # ------------------------------------------------------------------ storage
    def to_dict(self) -> dict:
        """Plain JSON values (what a model directory's ``config.json`` keeps)."""
        return {"missing": self.missing, "n_rows": int(self.n_rows), "missing_values": list(self.missing_values),
                "categorical_weight": float(self.categorical_weight),
                "columns": [{"name": c.name, "levels": list(c.levels), "dtype": c.dtype, "rows": list(c.rows),
                             "missing_rows": int(c.missing_rows)} for c in self.columns]}

    @classmethod
    def from_dict(cls, d: dict) -> "ColumnCoding":
        """The coding ``to_dict`` gave."""
        return cls(columns=tuple(Column(name=c["name"], levels=_pooled_last(c["levels"]), dtype=c.get("dtype", "number"),
                                        rows=tuple(int(r) for r in c.get("rows", ())),
                                        missing_rows=int(c.get("missing_rows", 0))) for c in d["columns"]),
                   n_rows=int(d["n_rows"]), missing=d.get("missing", "learn"),
                   missing_values=tuple(d.get("missing_values", ())),
                   categorical_weight=float(d.get("categorical_weight", 1.0)))

    @classmethod
    def numeric(cls, names: list[str], n_rows: int, missing: str = "learn", legacy: bool = False) -> "ColumnCoding":
        """Every column numeric, no missing training cells (a model trained on Ray; ``legacy``: a
        model saved without a coding, which refuses missing cells)."""
        return cls(columns=tuple(Column(name=n) for n in names), n_rows=n_rows, missing=missing, legacy=legacy)


def level_init(coding: ColumnCoding, xr: np.ndarray, arr: np.ndarray, seed: int) -> np.ndarray:
    """The learned input values' starting point (``InputCoding.values``): each level, and each
    feature's missing cell, at the mean over its training rows of the first principal component
    of the clustering space ``xr`` (standardized, on a seeded sample of at most 20,000 rows),
    plus for levels a small spread by frequency so that no two start equal; a slot without
    training rows (``other`` when no level was folded, "missing" of a feature with no missing
    cell) at 0, a numeric feature's mean. The rows of a cluster defined by a level or by
    missingness then start apart on the backbone's input, where the distillation can find them."""
    from sklearn.decomposition import PCA
    rng = np.random.default_rng(seed)
    keep = np.sort(rng.permutation(len(xr))[:20_000])
    sample = np.asarray(xr[keep], np.float64)
    try:   # scikit-learn picks the solver: randomized on a wide space of levels (seconds, where a full SVD took minutes)
        score = PCA(n_components=1, random_state=seed).fit_transform(sample)[:, 0]
    except (np.linalg.LinAlgError, ValueError):
        score = np.zeros(len(sample))
    sd = score.std()
    score = score / sd if sd > 0 else score
    total = sum(coding.n_levels)
    values = np.zeros(total + len(coding.columns))
    offset = 0
    for j, c in enumerate(coding.columns):
        codes = arr[keep, j]
        nan = np.isnan(codes)
        values[total + j] = score[nan].mean() if nan.any() else 0.0
        if not c.categorical:
            continue
        L = len(c.levels)
        order = np.argsort(-np.asarray(c.rows), kind="stable")
        spread = np.zeros(L)
        spread[order] = 0.25 * (np.linspace(-0.5, 0.5, L) if L > 1 else 0.0)
        held = codes[~nan].astype(np.int64)
        n = np.bincount(held, minlength=L)[:L]
        sums = np.bincount(held, weights=score[~nan], minlength=L)[:L]
        values[offset:offset + L] = np.divide(sums, n, out=np.zeros(L), where=n > 0) + spread
        offset += L
    return values


def _pooled_last(levels) -> tuple:
    """A stored column's levels with the last, the pooled level, named ``OTHER`` (a model saved
    before it was "(other levels)" named it "other", as a level of the data may be named)."""
    return (*levels[:-1], OTHER) if levels else ()


# ---------------------------------------------------------------------- cells
def _columns_of(X, what: str, expected: list[str] | None = None) -> tuple[list[str], list]:
    """``(names, columns)``: a DataFrame's columns (duplicates and look-alike names refused; with
    ``expected``, realigned by name and other columns refused) or a 2-D array's."""
    from .validation import is_frame
    if X is None:
        raise DataError(f"{what} is None: expected a 2-D array or a DataFrame")
    if is_frame(X):
        names = [str(c) for c in X.columns]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise DataError(f"{what} has duplicate column names {dupes}")
        if expected is not None:
            missing = [c for c in expected if c not in names]
            extra = [c for c in names if c not in expected]
            if missing or extra:
                raise DataError(f"{what} has other columns than the data the model was fitted on: "
                                f"missing {missing}, unexpected {extra}")
            by_name = {str(c): c for c in X.columns}
            X = X[[by_name[c] for c in expected]]
            names = list(expected)
        if len(X) == 0 or len(names) == 0:
            raise DataError(f"{what} is empty: shape {tuple(X.shape)}")
        return names, [_decimals_as_numbers(X.iloc[:, j]) for j in range(len(names))]
    try:
        arr = np.asarray(X)
    except Exception as exc:   # ragged lists and the like
        raise DataError(f"{what} could not be read as a 2-D array: {exc}") from exc
    if arr.ndim != 2:
        raise DataError(f"{what} must be 2-D (rows x columns), got shape {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise DataError(f"{what} is empty: shape {arr.shape}")
    names = [f"x{j}" for j in range(arr.shape[1])] if expected is None else list(expected)
    if expected is not None and arr.shape[1] != len(expected):
        raise DataError(f"{what} has {arr.shape[1]} columns, the model was fitted on {len(expected)}")
    return names, [arr[:, j] for j in range(arr.shape[1])]


def _named_numerics(numeric_features, names: list[str], categorical: set[str], cells: list) -> set[str]:
    """The columns ``numeric_features`` names (a flag read as a number): each a column, none also
    named categorical, none of text or a category type (``ConfigError`` naming it)."""
    out = set()
    for c in numeric_features or ():
        if str(c) not in names:
            from .validation import missing_columns_note
            raise ConfigError(f"numeric_features names {c!r}, which is not a column of X{missing_columns_note([str(c)], names)}")
        col = cells[names.index(str(c))]
        if str(c) in categorical or (is_category_dtype(col) and not numbers_in_text(col)):
            why = "categorical_features names it too" if str(c) in categorical else "its cells are text or levels"
            raise ConfigError(f"numeric_features names {c!r}, which cannot be read as numbers: {why}")
        out.add(str(c))
    return out


def _named_categoricals(categorical_features, names: list[str]) -> set[str]:
    if categorical_features is None or isinstance(categorical_features, str):
        if categorical_features not in (None, "from_dtype"):
            raise ConfigError(f"categorical_features must be 'from_dtype', None or a list of column names or "
                              f"positions, got {categorical_features!r}")
        return set()
    out = set()
    for c in categorical_features:
        if isinstance(c, (int, np.integer)) and not isinstance(c, bool):
            if not 0 <= int(c) < len(names):
                raise ConfigError(f"categorical_features names position {c}, X has {len(names)} columns")
            out.add(names[int(c)])
        elif str(c) in names:
            out.add(str(c))
        else:
            from .validation import missing_columns_note
            raise ConfigError(f"categorical_features names {c!r}, which is not a column of X"
                              f"{missing_columns_note([str(c)], names)}")
    return out


DATE_UNIT = "days since 1970-01-01 00:00 UTC"


def as_days(col):
    """A column of dates and times as ``DATE_UNIT`` (float64, NaN where missing), whatever its
    stored unit (``datetime64[ns]`` or ``[us]``, a Parquet ``timestamp`` or ``date32``) and time
    zone (converted to UTC; a time without a zone is taken as UTC; a date is its midnight); None
    for any other column. The one reading of a date at fit and at predict, in memory and through
    the registry model."""
    import datetime

    import pandas as pd
    dtype = getattr(col, "dtype", None)
    if dtype is None or not isinstance(col, pd.Series):
        return None
    if not pd.api.types.is_datetime64_any_dtype(dtype):
        if not pd.api.types.is_object_dtype(dtype):
            return None
        values = col.dropna()
        if values.empty or not all(isinstance(v, (datetime.date, datetime.datetime)) for v in values):
            return None
    stamps = pd.to_datetime(col, utc=True)
    return (stamps - pd.Timestamp(0, tz="UTC")) / pd.Timedelta(days=1)


def _dates_as_at_fit(col, column: Column, what: str):
    """``col`` read as ``column`` was at fit: dates as ``DATE_UNIT``; a date column that now holds
    something else, or dates where numbers were, refused naming the column and both kinds."""
    days = as_days(col)
    if (days is not None) == (column.dtype == "date"):
        return col if days is None else days
    import pandas as pd
    numbers = pd.api.types.is_numeric_dtype(getattr(col, "dtype", None))
    was, now = ("dates and times", "numbers" if numbers else "other values") if days is None else \
        ("numbers", "dates and times")
    raise DataError(f"{what} column {column.name!r} held {was} at fit"
                    f"{f' (read as {DATE_UNIT})' if column.dtype == 'date' else ''} but holds {now} here "
                    f"(dtype {getattr(col, 'dtype', '?')}): pass the column as it was at fit")


def _decimals_as_numbers(col):
    """An object column of ``decimal.Decimal`` cells (with missing ones, or plain ints and floats
    among them), as Python's database drivers return SQL NUMERIC: the numbers as float64, as a
    Parquet decimal column is read. Any other column as it is."""
    import decimal

    import pandas as pd
    if not pd.api.types.is_object_dtype(col.dtype):
        return col
    values = col.dropna()
    kinds = {type(v) for v in values}
    if decimal.Decimal not in kinds or not kinds <= {decimal.Decimal, int, float}:
        return col
    return col.astype("float64")


def is_category_dtype(col) -> bool:
    """Text, ``category`` and boolean columns: categorical whatever the configuration."""
    dtype = getattr(col, "dtype", None)
    if dtype is None:
        return False
    import pandas as pd
    return bool(isinstance(dtype, pd.CategoricalDtype) or pd.api.types.is_bool_dtype(dtype)
                or pd.api.types.is_object_dtype(dtype) or pd.api.types.is_string_dtype(dtype))


FLAG_RULE = "two whole-number values"   # the console's and docs' words for is_flag


def is_flag(col) -> bool:
    """A numeric column (not boolean, not dates) whose present cells hold exactly two values,
    both whole numbers: a 0/1 flag, a 1/2 code. Categorical by default at every door (a
    DataFrame's column, a CSV's, a Parquet column on Ray: ``data.profiling``'s ``pairs``), so
    its term reads ``senior = 1``, not "low senior (mean 0 against 0.16)". In the clustering space
    it is the 0/1 column standardized times ``categorical_weight``, as every categorical is."""
    import pandas as pd
    dtype = getattr(col, "dtype", None)
    if (dtype is None or isinstance(dtype, pd.CategoricalDtype) or pd.api.types.is_bool_dtype(dtype)
            or not pd.api.types.is_numeric_dtype(dtype)):
        return False
    v = pd.Series(col).to_numpy(dtype=np.float64, na_value=np.nan)
    return len(whole_value_counts(v[~np.isnan(v)]) or ()) == 2


def whole_value_counts(v: np.ndarray, lo: float | None = None, hi: float | None = None) -> dict[str, int] | None:
    """Numbers ``v`` (no NaN) as ``{value as level text: rows}`` while they are at most two whole
    numbers float64 holds exactly (below 2**53 in magnitude: ``1e308`` is a scale, not a code;
    ``FLAG_RULE``), else None; ``{}`` for no numbers. ``lo``, ``hi``: ``v``'s minimum and maximum
    when the caller has them (the Ray profile pass), so a column that is no flag costs no pass."""
    if not len(v):
        return {}
    lo = float(v.min()) if lo is None else float(lo)
    hi = float(v.max()) if hi is None else float(hi)
    if not (_exact_whole(lo) and _exact_whole(hi)):
        return None
    if lo == hi:
        return {_text_of(lo): len(v)}
    at_lo, at_hi = int(np.count_nonzero(v == lo)), int(np.count_nonzero(v == hi))
    return {_text_of(lo): at_lo, _text_of(hi): at_hi} if at_lo + at_hi == len(v) else None


def _exact_whole(x: float) -> bool:
    """A whole number float64 holds exactly (magnitude below 2**53)."""
    return math.isfinite(x) and x.is_integer() and abs(x) < 2**53


def column_dtype(col) -> str:
    """``bool``, ``number`` or ``text``: how a categorical column's cells are written."""
    import pandas as pd
    dtype = getattr(col, "dtype", np.asarray(col).dtype)
    if isinstance(dtype, pd.CategoricalDtype):
        dtype = dtype.categories.dtype
    if pd.api.types.is_bool_dtype(dtype):
        return "bool"
    if pd.api.types.is_numeric_dtype(dtype):
        return "number"
    return "text"


@functools.cache
def missing_tokens() -> frozenset:
    """The text cells read as missing from every source: the tokens pandas' CSV reader takes as
    NaN (``NA``, ``N/A``, ``NULL``, ``None``, ``NaN``, ``nan``, ``null``, ``#N/A``, ``<NA>``, ...,
    exactly as written), so a cell reads the same from a CSV, a Parquet file, a DataFrame, the
    registry model and the exported SQL. A model whose levels include one (learned before this
    rule) keeps reading it as that level."""
    from pandas._libs.parsers import STR_NA_VALUES   # the CSV door's own list, whatever pandas' version
    return frozenset(STR_NA_VALUES) - {""}


def without_tokens(col, tokens: tuple):
    """A text column (object, string or ``category``) with its cells that are one of ``tokens``
    (outer spaces aside: ``' ?'``) as missing; any other column, or no tokens, as it is."""
    if not tokens or not is_category_dtype(col):
        return col
    import pandas as pd
    s = col if isinstance(col, pd.Series) else pd.Series(col)
    hit = s.astype("string").str.strip(" ").isin(set(tokens)).fillna(False).to_numpy(dtype=bool)
    if not hit.any():
        return col
    out = s.mask(hit)
    return out if isinstance(col, pd.Series) else out.to_numpy()


def is_missing_text(values):
    """Which cells of a pandas column are text that reads as missing: blank (``is_blank``) or one
    of ``missing_tokens``."""
    blank = values.astype("string").str.strip(" ").eq("").fillna(False).astype(bool)
    return blank | values.isin(missing_tokens())


def _text_of(v, levels: frozenset = frozenset()) -> str | None:
    """A cell as level text (None: missing): ``True``/``False``, an integral number without its
    ``.0``, text as written (blank text and ``missing_tokens`` are missing, unless ``levels``, a
    model's, holds the token)."""
    if v is None:
        return None
    if isinstance(v, (bool, np.bool_)):
        return "True" if v else "False"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        if v != v:
            return None
        return str(int(v)) if float(v).is_integer() and abs(v) < 2**53 else repr(float(v))
    try:
        import pandas as pd
        if v is pd.NA or v is pd.NaT:
            return None
    except ImportError:   # pragma: no cover - pandas is a dependency
        pass
    s = str(v)
    return None if is_blank(s) or (s in missing_tokens() and s not in levels) else s


def is_blank(text: str) -> bool:
    """Blank text, read as a missing cell: empty or spaces only (what SQL's ``TRIM(col) = ''``
    finds, so an exported query reads the same cells as missing)."""
    return not text.strip(" ")


def _factorized(col, levels: frozenset = frozenset()) -> tuple[np.ndarray, list]:
    """``(each cell's distinct value, -1 for a missing one; the distinct values as level text)``:
    pandas' ``factorize`` does the per-cell work, so only the distinct values meet Python.
    ``levels``: a model's levels, which a missing token among them stays (``_text_of``)."""
    import pandas as pd
    if not isinstance(col, (pd.Series, pd.Categorical, pd.Index, np.ndarray)):
        col = np.asarray(list(col), dtype=object)
    codes, uniques = pd.factorize(col, use_na_sentinel=True)
    return np.asarray(codes), [_text_of(v, levels) for v in uniques]


def level_texts(col) -> list:
    """Every cell of a column as level text (None: missing)."""
    codes, texts = _factorized(col)
    return np.array([*texts, None], dtype=object)[codes].tolist()


def level_counts(col) -> tuple[dict[str, int], int]:
    """``(level text -> cells, missing cells)`` of a column."""
    codes, texts = _factorized(col)
    rows = np.bincount(codes[codes >= 0], minlength=len(texts))
    counts: dict[str, int] = {}
    missing = int((codes < 0).sum())
    for t, n in zip(texts, rows.tolist(), strict=False):
        if t is None:
            missing += n
        elif n:
            counts[t] = counts.get(t, 0) + n
    return counts, missing


def level_codes(col, levels) -> tuple[np.ndarray, int]:
    """``(codes, unseen)``: a categorical column's cells as the codes of ``levels`` (the kept
    levels then ``other``; NaN for a missing cell; a level not among them is ``other``'s code)
    and how many cells were such unseen levels."""
    codes, texts = _factorized(col, frozenset(levels[:-1]))
    kept = {v: i for i, v in enumerate(levels[:-1])}
    lut = np.array([np.nan if t is None else kept.get(t, -1) for t in texts] + [np.nan], dtype=np.float64)
    out = lut[codes]
    new = out == -1
    out[new] = len(levels) - 1
    return out, int(new.sum())


def _fit_levels(name: str, col, min_level_rows: int, max_levels: int) -> Column:
    import pandas as pd
    counts, _ = level_counts(col)
    categories = None
    if isinstance(getattr(col, "dtype", None), pd.CategoricalDtype):
        categories = [_text_of(v) for v in col.dtype.categories.tolist()]
    return column_from_counts(name, counts, column_dtype(col), min_level_rows, max_levels, categories)


def column_from_counts(name: str, counts: dict[str, int], dtype: str, min_level_rows: int, max_levels: int,
                       categories: list | None = None, missing_rows: int = 0) -> Column:
    """A categorical ``Column`` from its training level counts (level text -> rows): the levels
    with at least ``min_level_rows`` rows, at most the ``max_levels`` most frequent, in the
    column's order (``categories`` of a pandas ``category``; ascending for booleans and numbers;
    by frequency for text), then ``other`` for the rest. Warns when levels beyond ``max_levels``
    were folded (an id or free text is no category). The Ray profile pass and ``fit`` share it."""
    if categories is not None:
        order = [t for t in categories if t in counts]
    elif dtype == "bool":
        order = sorted(counts, key=lambda t: (t != "False", t))
    elif dtype == "number":
        order = sorted(counts, key=lambda t: (_as_number(t), t))
    else:
        order = sorted(counts, key=lambda t: (-counts[t], t))
    frequent = sorted((t for t in counts if counts[t] >= min_level_rows), key=lambda t: (-counts[t], t))
    kept = set(frequent[:max_levels])
    if len(frequent) > max_levels:
        warnings.warn(f"column {name!r} has {len(counts):,} distinct values: its max_levels={max_levels} most "
                      f"frequent are levels, the other {len(counts) - max_levels:,} share {OTHER} (an id or free "
                      f"text is no category: leave it out, or featurize it with `neurcam featurize-text`)",
                      UserWarning, stacklevel=4)
    if counts and not kept:
        warnings.warn(f"column {name!r}: none of its {len(counts):,} distinct values is in min_level_rows="
                      f"{min_level_rows} rows or more, so every one is in {OTHER} and the column carries nothing "
                      f"(an id or free text is no category: leave it out)", UserWarning, stacklevel=4)
    if dtype == "text":
        _warn_lookalikes(name, counts)
    levels = [t for t in order if t in kept]
    other = sum(n for t, n in counts.items() if t not in kept)
    return Column(name=name, levels=(*levels, OTHER), dtype=dtype, rows=(*(counts[t] for t in levels), other),
                  missing_rows=int(missing_rows))


KIND_WORDS = {"text": "text levels", "number": "numbers", "bool": "True/False"}


def lookalike_key(text: str) -> str:
    """The form two look-alike levels share: Unicode NFKC (``café`` composed or not), case
    folded, outer spaces stripped. Levels are kept apart by it (cells are read exactly as
    written), and named at fit so a user can merge them in the table."""
    import unicodedata
    return unicodedata.normalize("NFKC", text).strip().casefold()


def _warn_lookalikes(name: str, counts: dict[str, int]) -> None:
    """A warning naming the levels of text column ``name`` that differ only in case, outer spaces
    or Unicode form (``monthly``, ``Monthly``, ``monthly ``): kept as distinct levels."""
    groups: dict[str, list[str]] = {}
    for t in counts:
        groups.setdefault(lookalike_key(t), []).append(t)
    alike = [g for g in groups.values() if len(g) > 1]
    if not alike:
        return
    shown = "; ".join(", ".join(f"{t!r} ({counts[t]:,} rows)" for t in g) for g in alike[:5])
    warnings.warn(f"column {name!r}: {len(alike):,} group(s) of levels differ only in case, outer spaces or Unicode "
                  f"form, and are kept as distinct levels (cells are read exactly as written): {shown}"
                  f"{' ...' if len(alike) > 5 else ''}; make them one value in the table if they mean one thing",
                  UserWarning, stacklevel=5)


def _refuse_changed_kind(column: Column, col, unseen: int, present: int, what: str) -> None:
    """A categorical column whose cells are of another kind than at fit (numbers where text
    levels were, 0/1 where True/False were) and none of them a level the model knows: refused,
    naming the column and both kinds, rather than every cell scored as ``other``. Cells of
    another kind that still match levels (the numbers 1, 2 of levels written "1", "2") are read."""
    now = column_dtype(col)
    if now == column.dtype or unseen < present:
        return
    known = ", ".join(repr(v) for v in column.levels[:3])
    raise DataError(f"{what} column {column.name!r} held {KIND_WORDS.get(column.dtype, column.dtype)} at fit "
                    f"({known}, ...) but holds {KIND_WORDS.get(now, now)} here (dtype {getattr(col, 'dtype', '?')}), "
                    f"none of them a level the model knows: pass the column as it was at fit")


def refuse_empty_columns(names: list[str], missing: np.ndarray, n_rows: int, what: str) -> None:
    """A feature missing in every training row has no shape to learn (its term would be one
    constant, and an exported query's cluster NULL): refused, naming the columns."""
    empty = [names[j] for j in np.flatnonzero(missing == n_rows)] if n_rows else []
    if empty:
        raise DataError(f"{what} column(s) {', '.join(map(repr, empty[:10]))}"
                        f"{f' and {len(empty) - 10} more' if len(empty) > 10 else ''} are missing in every one of "
                        f"the {n_rows:,} rows: leave them out of the features (a column with no values "
                        f"says nothing about a row)")


def _number_cells(col):
    """``(cells that hold a value, which of them are numbers)`` of a text column (object or
    string dtype; missing cells, blank text and ``missing_tokens`` left out, booleans no
    numbers), or None for any other column."""
    import pandas as pd
    if not isinstance(col, pd.Series) or not (pd.api.types.is_object_dtype(col.dtype)
                                                or pd.api.types.is_string_dtype(col.dtype)):
        return None
    values = col.dropna()
    values = values[~is_missing_text(values)]
    return values, pd.to_numeric(values, errors="coerce").notna() & ~_booleans(values)


def numbers_in_text(col) -> bool:
    """A text column whose every cell is a number or missing (an amount exported as text, with
    ``' '`` or ``NA`` in its blank cells): a numeric feature at every door, its blank cells
    missing, unless named in ``categorical_features``. Digits with a leading zero (``'02134'``)
    are codes (a zip, an account), not numbers: such a column stays text."""
    return _all_numbers(_number_cells(col))


def _all_numbers(found) -> bool:
    if found is None or not len(found[0]) or not bool(found[1].all()):
        return False
    return not found[0].astype(str).str.match(r"\s*[+-]?0\d").any()


def refuse_numbers_with_typos(col, name: str, what: str) -> bool:
    """A text column whose cells are numbers but for a few is a typo, not a category: name the
    first cell that is not a number (``categorical_features`` reads it as levels on purpose).
    Returns ``numbers_in_text(col)``, from the same one pass over the cells."""
    found = _number_cells(col)
    if found is None or found[0].empty:
        return False
    values, ok = found
    if ok.mean() >= 0.5 and not ok.all():
        row = values.index[~ok.to_numpy()][0]
        raise DataError(f"{what} column {name!r} holds numbers except {int((~ok).sum())} cell(s), the first at row "
                        f"{row} ({values[row]!r}): fix those cells; if such a cell means missing, say so with "
                        f"missing_values (--missing-values {str(values[row]).strip()!r}); or name the column in "
                        f"categorical_features (--categorical) to read its values as levels")
    return _all_numbers(found)


def _booleans(values):
    """Which cells are booleans (Python's or numpy's ``True``/``False``): pandas reads them as 1
    and 0, but a column of ``True``/``'yes'``/``False`` is a category, not numbers with typos."""
    import pandas as pd
    return pd.Series([isinstance(v, (bool, np.bool_)) for v in values], index=values.index, dtype=bool)


def _as_number(t: str) -> float:
    try:
        return float(t)
    except ValueError:
        return math.inf


def _numbers(col, name: str, what: str) -> np.ndarray:
    """A numeric column as float64 (missing: NaN); text in it is refused naming the cell."""
    import pandas as pd
    if isinstance(col, np.ndarray):
        if col.dtype.kind not in "biuf":
            try:
                return col.astype(np.float64)
            except (TypeError, ValueError):
                raise DataError(f"{what} column {name!r} holds values that are not numbers (dtype {col.dtype}): "
                                f"name it in categorical_features, or encode it as numbers") from None
        return col.astype(np.float64)
    if pd.api.types.is_numeric_dtype(col.dtype) or pd.api.types.is_bool_dtype(col.dtype):
        return col.to_numpy(dtype=np.float64, na_value=np.nan)
    from .validation import first_text_cell
    col = col.mask(is_missing_text(col))   # blank text and missing tokens, as a CSV reads them
    parsed = pd.to_numeric(col, errors="coerce")
    bad = parsed.isna() & col.notna() & (col.astype(str).str.strip() != "")
    if bad.any():
        raise DataError(f"{what} column {name!r} was numeric at fit but holds text{first_text_cell(col)}")
    return parsed.to_numpy(dtype=np.float64, na_value=np.nan)


def refuse_infinite(arr: np.ndarray, names: list[str], what: str) -> None:
    """Infinite cells are refused by column (a missing cell is a value; an infinite one is not)."""
    inf = np.isinf(arr)
    if inf.any():
        counts = inf.sum(axis=0)
        shown = [f"{names[j]!r} ({int(counts[j])} rows)" for j in np.flatnonzero(counts)]
        raise DataError(f"{what} has infinite values in column(s) {', '.join(shown[:10])}"
                        f"{f' and {len(shown) - 10} more' if len(shown) > 10 else ''}: replace them (a missing "
                        f"cell is fine; an infinite one has no place on a shape function's axis)")
