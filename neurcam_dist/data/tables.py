"""One table in memory: a CSV or Parquet file (or a Parquet folder) read as a DataFrame, for the
commands that work in one process (``fit``, ``explain``, ``sample``), and its feature columns
chosen by the same rule as the Ray path's (``validation.auto_features``).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from ..errors import ConfigError, DataError
from ..validation import auto_features, missing_columns_note

CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.zst")


def is_parquet(path) -> bool:
    """A ``.parquet`` / ``.pq`` file, or a folder (of Parquet files)."""
    p = Path(path)
    return p.name.lower().endswith((".parquet", ".pq")) or p.is_dir()


def read_table(path: str, encoding: str = "utf-8", columns: list[str] | None = None) -> pd.DataFrame:
    """A CSV or Parquet file (or a Parquet directory) as a DataFrame.

    Parameters
    ----------
    path : str
        The file or folder.
    encoding : str
        A CSV file's text encoding.
    columns : list of str, optional
        Read only those of them the file has (a wide table's other columns, embeddings say,
        are not read).

    Raises
    ------
    DataError
        No such file, an unknown suffix, or text that is not in ``encoding``.
    """
    p = Path(path)
    if not p.exists():
        raise DataError(f"no such file: {path}")
    if is_parquet(p):
        if columns is None:
            return pd.read_parquet(p)
        have = set(table_columns(path))
        return pd.read_parquet(p, columns=[c for c in columns if c in have])
    if p.name.lower().endswith(CSV_SUFFIXES):
        try:
            if columns is not None:
                wanted = set(columns)
                return pd.read_csv(p, encoding=encoding, usecols=lambda c: c in wanted)
            return pd.read_csv(p, encoding=encoding)
        except UnicodeDecodeError as exc:
            raise DataError(f"{path} is not valid {encoding} text (byte {exc.object[exc.start:exc.start + 1]!r} "
                            f"at offset {exc.start}): pass its encoding, e.g. --encoding latin-1") from None
    raise DataError(f"{path}: expected a .csv(.gz) or .parquet file")


def table_columns(path: str, encoding: str = "utf-8") -> list:
    """The column names of what ``read_table`` reads, without reading the rows."""
    p = Path(path)
    if is_parquet(p):
        import pyarrow.dataset as pads
        return pads.dataset(p, format="parquet").schema.names
    return list(pd.read_csv(p, encoding=encoding, nrows=0).columns)


def _numeric_or_error(df: pd.DataFrame, col) -> None:
    """A text column whose values are numbers but for a few cells is a typo, not a category:
    name the column and the first cell that is not a number instead of dropping it silently."""
    values = df[col].dropna()
    if values.empty:
        return
    parsed = pd.to_numeric(values, errors="coerce")
    ok = parsed.notna()
    if ok.mean() >= 0.5 and not ok.all():
        row = values.index[~ok.to_numpy()][0]
        raise DataError(f"column {col!r} holds numbers except {int((~ok).sum())} cell(s), the first at row "
                        f"{row} ({values[row]!r}): fix those cells, or name the features with --features")


def id_columns(df: pd.DataFrame, features, label: str | None) -> list:
    """The columns automatic feature selection sets aside as ids (index-, id- or key-like names):
    what ``fit``'s assignments carry beside each row's cluster."""
    from ..validation import is_id_like
    return [c for c in df.columns if c not in set(features) and c != label and is_id_like(c)]


def is_csv(path) -> bool:
    """A CSV file (``.csv``, compressed or not) rather than Parquet."""
    return Path(path).name.lower().endswith(CSV_SUFFIXES)


def split_columns(df: pd.DataFrame, features: list[str] | None, label: str | None, *, quiet: bool = False):
    """``(X, y)``: the feature columns (named, or chosen by ``validation.auto_features``) and the
    label's values (None without a label). Says on stderr which columns were chosen and which
    were not used, unless ``quiet``.

    Raises
    ------
    ConfigError
        A named feature or label column that is not in the table (with the nearest names).
    DataError
        No numeric column, a mostly numeric column with a few text cells, or blank labels.
    """
    if label is not None and label not in df.columns:
        raise ConfigError(f"label column {label!r} is not in the data{missing_columns_note([label], list(df.columns))}")
    if features:
        missing = [f for f in features if f not in df.columns]
        if missing:
            raise ConfigError(f"feature columns {missing} are not in the data"
                              f"{missing_columns_note(missing, list(df.columns))}")
        cols = list(features)
    else:
        for c in df.columns:
            if c != label and not pd.api.types.is_numeric_dtype(df[c]):
                if auto_features([(c, True)], {label}):   # a name that would be a feature, were it numbers
                    _numeric_or_error(df, c)
        cols = auto_features([(c, pd.api.types.is_numeric_dtype(df[c])) for c in df.columns], {label})
        if not cols:
            raise DataError("no numeric feature columns found: name them with --features")
        skipped = [str(c) for c in df.columns if c not in cols and c != label]
        if not quiet:
            print(f"features ({len(cols)}): {', '.join(map(str, cols[:20]))}"
                  + (f" and {len(cols) - 20} more" if len(cols) > 20 else "")
                  + (f"; not used: {', '.join(skipped[:20])}" if skipped else ""), file=sys.stderr)
    y = None
    if label is not None:
        blank = df[label].isna()
        if blank.any():
            raise DataError(f"label column {label!r} has {int(blank.sum())} blank cell(s), the first at row "
                            f"{df.index[blank.to_numpy()][0]}: fill or drop those rows (the label is used for "
                            f"evaluation only)")
        y = df[label].to_numpy()
    return df[cols], y
