"""Data that ships with the product: scikit-learn's bundled 8x8 digits, and DataFrames written as
Parquet shards (the demo, ``neurcam generate``, the benchmarks)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import ConfigError, DataError
from ..storage import atomic_directory
from ..uris import Location, Where

DATASET_MARKER = "_neurcam_dataset.json"


def digits_frame() -> pd.DataFrame:
    """scikit-learn's bundled 8x8 digits (1,797 rows, 64 pixel features), with its label column."""
    from sklearn.datasets import load_digits
    d = load_digits()
    df = pd.DataFrame(d.data, columns=[f"px{i // 8}_{i % 8}" for i in range(64)])
    df["label"] = d.target
    return df


def check_sample_size(per_class: int | None, rows: int | None) -> None:
    """A sample's one size: ``per_class`` or ``rows``, not both, not neither (``ConfigError``);
    checked before anything is read."""
    if (per_class is None) == (rows is None):
        raise ConfigError(f"sample takes one size: per_class (--per-class) or rows (--rows; 0 or --all: every "
                          f"row), got {'both' if rows is not None else 'neither'}")


def stratified_sample(df: pd.DataFrame, *, per_class: int | None, rows: int | None, by: str = "label",
                      id_column: str = "id", seed: int = 0) -> pd.DataFrame:
    """``per_class`` rows of each value of ``by`` (all of a smaller class), or ``rows`` in all,
    drawn with ``seed`` (``rows=0``: every row, no sampling: a CSV turned into Parquet shards);
    the id column is kept, or made from the input's row numbers, so every sampled row can be
    traced back. Rows keep the input's order."""
    check_sample_size(per_class, rows)
    if id_column not in df.columns:
        df = df.assign(**{id_column: np.arange(len(df))})
    elif df[id_column].duplicated().any():
        raise DataError(f"id column {id_column!r} repeats values (e.g. {df[id_column][df[id_column].duplicated()].iloc[0]!r})")
    rng = np.random.default_rng(seed)
    if rows is not None:
        if rows < 0:
            raise DataError(f"--rows must be >= 1 (or 0: every row), got {rows}")
        keep = np.arange(len(df)) if rows == 0 else rng.choice(len(df), min(rows, len(df)), replace=False)
    else:
        if per_class < 1:
            raise DataError(f"--per-class must be >= 1, got {per_class}")
        if by not in df.columns:
            raise DataError(f"class column {by!r} is not in the data (columns: {list(df.columns)})")
        keep = []
        for _, idx in sorted(df.groupby(by, dropna=False).indices.items(), key=lambda kv: str(kv[0])):
            keep.extend(rng.choice(idx, min(per_class, len(idx)), replace=False))
    return df.iloc[np.sort(np.asarray(keep, dtype=np.int64))].reset_index(drop=True)


def write_frame_shards(df: pd.DataFrame, out: Where, n_files: int, id_column: str = "id") -> list[str]:
    """A DataFrame as ``n_files`` Parquet shards with an id column (made from the row numbers
    when absent), written atomically."""
    if n_files < 1:
        raise DataError(f"--files must be >= 1, got {n_files}")

    def write(tmp: Path) -> None:
        frame = df if id_column in df.columns else df.assign(**{id_column: np.arange(len(df))})
        for i, part in enumerate(np.array_split(np.arange(len(frame)), n_files)):
            frame.iloc[part].to_parquet(tmp / f"part-{i:05d}.parquet", index=False)
        (tmp / DATASET_MARKER).write_text(json.dumps({"rows": len(frame), "files": n_files}))

    where = Location(out)   # a local folder (text or a path): resolved once here
    atomic_directory(where, write, marker=DATASET_MARKER)
    return sorted(str(p) for p in where.path.glob("*.parquet"))
