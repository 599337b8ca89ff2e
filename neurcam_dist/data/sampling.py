"""A bounded uniform random sample of a dataset (the k-means init and the reference rows)."""
from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from .planning import Plan
from .reading import local_pass, read, read_local


def oversampled_fraction(n: int, rows: int) -> float:
    """A keep-probability a little above ``n / rows``: a Bernoulli sample at it holds at least
    ``n`` rows except with negligible probability (6 standard deviations of margin)."""
    return min(1.0, (n + 6 * math.sqrt(n) + 10) / rows)


def sample(p: Plan, n: int, seed: int, columns: list[str]) -> pa.Table:
    """A uniform random sample of ``min(n, rows)`` rows, without replacement, as an Arrow table.

    Every row is kept with the same probability (Ray Data ``random_sample``, block by block), so
    only about ``n`` rows ever reach the driver, drawn from every file alike; the excess is then
    cut uniformly at random. In the rare case that too few rows came back, the draw is repeated
    with a doubled fraction (at most every row). Each step treats all rows alike, so every subset
    of ``n`` rows is equally likely."""
    n = min(n, p.n_rows)
    frac = oversampled_fraction(n, p.n_rows)
    attempt = 0
    while True:
        if frac >= 1.0 and local_pass(p, columns):   # every row, and few: read them here, in file order
            batches = [b for b in read_local(p.source, columns) if b.num_rows]
            table = pa.concat_tables(batches) if batches else None
            break
        ds = read(p, columns, ordered=True)
        if frac < 1.0:
            ds = ds.random_sample(frac, seed=seed + attempt)
        batches = [b for b in ds.iter_batches(batch_format="pyarrow", batch_size=65536) if b.num_rows]
        table = pa.concat_tables(batches) if batches else None
        rows = 0 if table is None else table.num_rows
        if rows >= n or frac >= 1.0:
            break
        frac, attempt = min(1.0, 2 * frac), attempt + 1
    if table is None:
        raise ValueError(f"the sample of {p.n_rows} rows came back empty")
    if table.num_rows > n:
        keep = np.sort(np.random.default_rng(seed).choice(table.num_rows, n, replace=False))
        table = table.take(pa.array(keep))
    return table
