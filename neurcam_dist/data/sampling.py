"""A bounded uniform random sample of a dataset (the k-means init and the reference rows)."""
from __future__ import annotations

import numpy as np
import pyarrow as pa

from ..errors import DataError
from .planning import Plan
from .reading import local_pass
from .sources import ROW_KEY


def draw(p: Plan, n: int, seed: int) -> dict[str, np.ndarray]:
    """Which rows a sample of ``min(n, rows)`` takes: a uniform draw without replacement of row
    numbers over the plan's files in order (``ROW_KEY``), as sorted row numbers per file."""
    n = min(n, p.n_rows)
    keys = np.sort(np.random.default_rng(seed).choice(p.n_rows, n, replace=False)) if n < p.n_rows else \
        np.arange(p.n_rows)
    picks, first = {}, 0
    for f in p.source.files:
        rows = p.rows_per_file[f]
        lo, hi = np.searchsorted(keys, [first, first + rows])
        if hi > lo:
            picks[f] = keys[lo:hi] - first
        first += rows
    return picks


def sample(p: Plan, n: int, seed: int, columns: list[str]) -> pa.Table:
    """A uniform random sample of ``min(n, rows)`` rows, without replacement, in file order, as an
    Arrow table of ``columns``.

    The rows are drawn by number before anything is read, so the sample depends on the seed and
    the files alone, not on how Ray Data cuts them into blocks. Each file's read task returns only
    its drawn rows (row groups without one are not decoded), so about ``n`` rows reach the object
    store and this process: a Ray Data sample of the whole data would pass every row through the
    store (on 4M rows x 1 KiB it filled a 1 GiB store, spilled, and was the run's memory peak)."""
    from .parquet_files import per_file_tables
    columns = list(dict.fromkeys(columns))
    tables = per_file_tables(p.source, columns, p.rows_per_file, here=local_pass(p, columns), picks=draw(p, n, seed))
    if not tables:
        raise DataError(f"the sample of {p.n_rows} rows came back empty")
    return pa.concat_tables(tables).drop_columns([ROW_KEY])
