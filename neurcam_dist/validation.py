"""Input checks that run before any work, with errors that name the column, count or value."""
from __future__ import annotations

import re
import sys

import numpy as np

from .errors import DataError

# Columns never chosen as features automatically (name them in ``features`` to use them anyway):
# pandas' index written out (``Unnamed: 0``, ``__index_level_0__``, ``index``, ``level_0``), row ids
# (``id``, ``ID``, ``customer_id``, ``customerId``, ``row-id``, ``uuid``) and ground truth (``label``).
_NOT_A_FEATURE = re.compile(
    r"^(unnamed: ?\d+|__index_level_\d+__|index|level_\d+|id|uuid|guid|label|embedding)$"
    r"|[_\-\s.](id|uuid|key)$", re.IGNORECASE)
_CAMEL_ID = re.compile(r"[a-z0-9](Id|ID|Uuid|UUID|Key)$")


def is_id_like(name) -> bool:
    """True for index, id, key and label columns, which automatic feature selection skips."""
    name = str(name)
    return bool(_NOT_A_FEATURE.search(name) or _CAMEL_ID.search(name))


def auto_features(columns, reserved) -> list:
    """The feature columns when none are named: every numeric column that is not reserved (the
    label, the id, a join key, the embedding) and not index-, id- or key-like by name
    (``is_id_like``). The one selector for Parquet schemas (``data.sources``) and in-memory
    tables (``data.tables``).

    Parameters
    ----------
    columns : iterable of (name, bool)
        Each column's name and whether it holds numbers.
    reserved : set
        Names that are never features.

    Returns
    -------
    list
        The selected names, in column order.
    """
    return [name for name, numeric in columns if numeric and name not in reserved and not is_id_like(name)]


def first_names(names, shown: int = 20) -> str:
    """``"a, b, c and 5 more"``: the first ``shown`` names for a console line."""
    names = [str(n) for n in names]
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def nearest_name(name, names) -> str | None:
    """The existing name a wrong one most likely meant (a typo, a case slip), or None."""
    import difflib
    folded = {str(n).lower(): str(n) for n in reversed(list(names))}   # the first of names that fold alike
    match = difflib.get_close_matches(str(name).lower(), list(folded), n=1)
    return folded[match[0]] if match else None


def missing_columns_note(missing: list, names: list, shown: int = 40) -> str:
    """What to say after "no column X": the nearest existing name for each missing one and the
    columns there are, the first ``shown`` of them."""
    names = [str(n) for n in names]
    near = {col: n for col in missing if (n := nearest_name(col, names)) is not None}
    hint = "; did you mean " + ", ".join(f"{v!r}" + (f" for {k!r}" if len(missing) > 1 else "")
                                         for k, v in near.items()) + "?" if near else ""
    return f"{hint}; columns: {names[:shown]}" + (f" and {len(names) - shown} more" if len(names) > shown else "")


def non_finite_counts(values: np.ndarray, names: list[str]) -> dict[str, int]:
    """The one finite check of a feature matrix: the count of NaN or infinite cells of each column
    that has any (in column order; empty when every cell is finite). The estimator's input check
    and batch scoring both report from it; a Parquet file's cells are counted by kind (NaN, inf,
    null) in the profile pass instead (``data.profiling``)."""
    counts = (~np.isfinite(values)).sum(axis=0)
    return {names[j]: int(counts[j]) for j in np.flatnonzero(counts)}


def _describe_bad(values: np.ndarray, names: list[str]) -> str:
    cols = [f"{name!r} ({n} rows)" for name, n in non_finite_counts(values, names).items()]
    return ", ".join(cols[:10]) + (f" and {len(cols) - 10} more columns" if len(cols) > 10 else "")


ID_CHECK_ROWS = 10_000_000   # the most rows whose ids a command reads again to check them


def id_note(name: str, values) -> str | None:
    """The console's word on id column ``name``'s ``values``: how many rows share an id (with an
    example) and how many have none (missing or blank); None when every id is present and unique.
    Such rows are kept and written with the ids as given; ``--show ID`` shows every row that holds
    it (the documented rule, ``docs/cli.md``)."""
    import pandas as pd
    s = pd.Series(values).reset_index(drop=True)
    empty = s.isna() | (s.astype("string").str.strip() == "").fillna(False)
    counts = s[~empty].value_counts()
    repeated = counts[counts > 1]
    parts = []
    if len(repeated):
        parts.append(f"{int(repeated.sum()):,} rows share {len(repeated):,} id(s) (e.g. {repeated.index[0]!r} in "
                     f"{int(repeated.iloc[0])} rows)")
    if empty.any():
        parts.append(f"{int(empty.sum()):,} row(s) have no id (the first at row {int(empty.to_numpy().argmax())})")
    if not parts:
        return None
    return (f"id column {name!r}: {' and '.join(parts)}; the rows are kept with their ids as given "
            f"(--show ID shows every row that holds it)")


def is_frame(X) -> bool:
    """True for a pandas DataFrame, without importing pandas (no object is one unless it is loaded)."""
    pd = sys.modules.get("pandas")
    return pd is not None and isinstance(X, pd.DataFrame)


def frame_columns(X, what: str = "X") -> list[str]:
    """A DataFrame's column names, after refusing duplicate and non-numeric columns by name."""
    import pandas as pd
    names = [str(c) for c in X.columns]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise DataError(f"{what} has duplicate column names {dupes}")
    refuse_lookalike_names(names, what)
    non_numeric = [c for c, dt in X.dtypes.items() if not pd.api.types.is_numeric_dtype(dt)]
    if non_numeric:
        raise DataError(f"{what} has non-numeric columns {[str(c) for c in non_numeric]}"
                        f"{first_text_cell(X[non_numeric[0]])}: encode them as numbers first")
    return names


def refuse_lookalike_names(names: list[str], what: str = "X") -> None:
    """Two column names that are one name after Unicode normalization (NFC: ``"é"`` typed as one
    character or as ``e`` + an accent) print alike in every report, rule and SQL query: refuse
    them (``DataError`` naming both, with their code points)."""
    import unicodedata
    seen: dict[str, str] = {}
    for n in names:
        key = unicodedata.normalize("NFC", n)
        if key in seen and seen[key] != n:
            codes = [" ".join(f"U+{ord(ch):04X}" for ch in v) for v in (seen[key], n)]
            raise DataError(f"{what} has columns {seen[key]!r} ({codes[0]}) and {n!r} ({codes[1]}), one name after "
                            f"Unicode normalization (NFC): rename one")
        seen.setdefault(key, n)


def first_text_cell(column) -> str:
    """``": column 'f1', row 5 holds '1,5' (and N more such cells)"`` for a pandas column's first
    non-blank cell that is not a number (row: the frame's index), or ``""``."""
    import pandas as pd
    values = column.dropna()
    bad = pd.to_numeric(values, errors="coerce").isna().to_numpy()
    if not bad.any():
        return ""
    row = values.index[bad][0]
    more = int(bad.sum()) - 1
    return (f": column {str(column.name)!r}, row {row} holds {values[row]!r}"
            + (f" (and {more} more such cell(s))" if more else ""))


def check_matrix(X, what: str = "X", expected_columns: list[str] | None = None) -> tuple[np.ndarray, list[str], bool]:
    """Return ``(float64 array, column names, came_from_dataframe)`` or raise ``ValueError``.

    ``expected_columns`` (the columns seen at fit) makes a DataFrame with other columns fail, and
    reorders one with the same columns in another order.
    """
    if X is None:
        raise DataError(f"{what} is None: expected a 2-D array or a DataFrame")
    if expected_columns is not None:
        expected_columns = [str(c) for c in expected_columns]
    frame = is_frame(X)
    if frame:
        names = frame_columns(X, what)
        if expected_columns is not None:
            missing = [c for c in expected_columns if c not in names]
            extra = [c for c in names if c not in expected_columns]
            if missing or extra:
                raise DataError(
                    f"{what} has other columns than the data the model was fitted on: "
                    f"missing {missing}, unexpected {extra}")
            by_name = {str(c): c for c in X.columns}
            X = X[[by_name[c] for c in expected_columns]]
            names = list(expected_columns)
        arr = X.to_numpy(dtype=np.float64, na_value=np.nan)
    else:
        try:
            arr = np.asarray(X)
        except Exception as exc:  # ragged lists and the like
            raise DataError(f"{what} could not be read as a 2-D array: {exc}") from exc
        if arr.dtype.kind not in "biuf":
            raise DataError(f"{what} has dtype {arr.dtype}, expected numbers: encode non-numeric columns first")
        if arr.ndim != 2:
            raise DataError(f"{what} must be 2-D (rows x columns), got shape {arr.shape}")
        names = [f"x{j}" for j in range(arr.shape[1])]
        if expected_columns is not None and arr.shape[1] != len(expected_columns):
            raise DataError(f"{what} has {arr.shape[1]} columns, the model was fitted on {len(expected_columns)}")
        if expected_columns is not None:
            names = list(expected_columns)
        arr = arr.astype(np.float64, copy=False)
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise DataError(f"{what} is empty: shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise DataError(f"{what} has NaN or infinite values in column(s) {_describe_bad(arr, names)}")
    return np.ascontiguousarray(arr, dtype=np.float64), names, frame



def constant_features_note(const: np.ndarray, names: list[str], mode: str, n_pairs: int) -> str | None:
    """The one rule for constant features (in memory and on Ray): all constant, or any under
    ``constant_features='error'``, is a ``ValueError``; else a note naming those left out, or None."""
    const = np.asarray(const, bool)
    if not const.any():
        return None
    cols = [names[j] for j in np.flatnonzero(const)]
    shown = f"{cols[:20]}" + (f" and {len(cols) - 20} more" if len(cols) > 20 else "")
    if const.all():
        raise DataError(f"every feature is constant ({shown}): there is nothing to cluster on")
    if mode == "error":
        raise DataError(f"{len(cols)} constant feature(s) {shown} (constant_features='error'): drop them, "
                         f"or set constant_features='drop'")
    if n_pairs > 0 and (~const).sum() < 2:
        raise DataError(f"n_pairs={n_pairs} needs 2 non-constant features; only "
                         f"{[n for n, c in zip(names, const, strict=False) if not c]} vary")
    return f"{len(cols)} constant feature(s) left out (no gate may select them): {shown}"


def empty_clusters_note(used: int, n_clusters: int, distinct_rows: int | None = None, empty=(),
                        kmeans: str | None = None) -> str | None:
    """The one message (in memory, on Ray, in the report) for a model that fills fewer clusters
    than asked: which ones (``empty``: their cluster ids) and what to do, given the k-means init
    the model used (``kmeans``: its method)."""
    if used >= n_clusters:
        return None
    which = f" (cluster{'s' if len(empty) > 1 else ''} {', '.join(map(str, empty))} empty)" if len(empty) else ""
    head = f"only {used} of n_clusters={n_clusters} clusters hold training rows"
    if distinct_rows is not None and distinct_rows < n_clusters:
        return f"{head}; X has only {distinct_rows} distinct row(s){which}: fit n_clusters={distinct_rows} at most"
    other = {"lloyd": "minibatch", "minibatch": "lloyd"}.get(kmeans)
    init = f", or the other k-means init (kmeans='{other}')" if other else ""
    return f"{head}{which}: fit fewer clusters (n_clusters={used}){init}"


def empty_clusters_record(history: dict) -> dict:
    """What a run's metrics say of its empty clusters (from the fitted model's ``history``):
    their count and ids, and the note in ``warnings`` when there are some."""
    empty = list(history.get("empty_clusters") or [])
    note = history.get("empty_clusters_note")
    return {"n_clusters_empty": len(empty), "empty_clusters": empty, **({"warnings": [note]} if note else {})}


def empty_cluster_ids(sizes, ids) -> list[int]:
    """The cluster ids (``ids``: one per logit column) whose cluster holds none of the rows
    counted in ``sizes``."""
    return [int(i) for i, s in zip(ids, sizes, strict=False) if s == 0]
