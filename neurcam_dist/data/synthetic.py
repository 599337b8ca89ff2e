"""Synthetic clustered data written as Parquet shards, one shard in memory at a time.

Used by the tests, the scale benchmark and the demo: ``n_clusters`` Gaussian blobs whose centres
differ on the first few features (the rest is noise), with an embedding that is a fixed random
projection of the cluster centre plus noise, stored as a ``fixed_size_list<float32>`` column.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import ConfigError
from ..storage import atomic_directory
from ..uris import Location, Where
from .bundled import DATASET_MARKER


def _embedding_column(values: np.ndarray) -> pa.FixedSizeListArray:
    return pa.FixedSizeListArray.from_arrays(pa.array(values.astype(np.float32).ravel()), values.shape[1])


def write_shards(path: Where, n_rows: int, n_features: int = 8, repr_dim: int = 16, n_clusters: int = 4,
                 n_files: int = 4, seed: int = 0, informative: int = 3, rows_per_group: int = 65536,
                 label: bool = True, progress: bool = False) -> list[str]:
    """Write ``n_rows`` rows as ``n_files`` Parquet files under ``path`` (a new folder, or one
    neurcam wrote, replaced whole: the files are built beside it and swapped in); returns the file
    paths. A folder holding anything else is refused (``errors.ConfigError``)."""
    for flag, value, least in (("--rows", n_rows, 1), ("--features", n_features, 1), ("--dim", repr_dim, 0),
                               ("--clusters", n_clusters, 1), ("--files", n_files, 1)):
        if value < least:
            raise ConfigError(f"{flag} must be >= {least}, got {value}")
    if n_files > n_rows:
        raise ConfigError(f"--files ({n_files}) is more than --rows ({n_rows}): some files would hold no row")
    informative = min(informative, n_features)
    rng = np.random.default_rng(seed)
    centers = np.zeros((n_clusters, n_features))
    centers[:, :informative] = rng.normal(0, 4, size=(n_clusters, informative))
    proj = rng.normal(0, 1, size=(n_clusters, repr_dim)) * 3 if repr_dim else None
    out = Location(path)   # a local folder (text or a path): resolved once here
    sizes = np.full(n_files, n_rows // n_files)
    sizes[: n_rows % n_files] += 1

    def write(folder: Path) -> None:
        start = 0
        for i, size in enumerate(sizes):
            _write_part(folder / f"part-{i:05d}.parquet", int(size), start)
            start += int(size)
            if progress:
                print(f"  wrote part-{i:05d}.parquet ({int(size):,} rows; {start:,}/{n_rows:,})", flush=True)
        (folder / DATASET_MARKER).write_text(json.dumps({"rows": n_rows, "files": n_files}))

    def _write_part(f: Path, size: int, start: int) -> None:
        with pq.ParquetWriter(f, _schema(n_features, repr_dim, label)) as writer:
            for lo in range(0, int(size), rows_per_group):
                n = min(rows_per_group, int(size) - lo)
                y = rng.integers(0, n_clusters, size=n)
                cols = {"id": np.arange(start + lo, start + lo + n, dtype=np.int64)}
                x = centers[y] + rng.normal(size=(n, n_features))
                for j in range(n_features):
                    cols[f"f{j}"] = x[:, j].astype(np.float32)
                if repr_dim:
                    cols["embedding"] = _embedding_column(proj[y] + rng.normal(size=(n, repr_dim)))
                if label:
                    cols["label"] = y.astype(np.int64)
                writer.write_table(pa.table(cols, schema=_schema(n_features, repr_dim, label)))

    # one folder swapped in whole; a folder holding files neurcam did not write is refused
    atomic_directory(out, write, marker=DATASET_MARKER)
    return [str(out.path / f"part-{i:05d}.parquet") for i in range(n_files)]


def _schema(n_features: int, repr_dim: int, label: bool) -> pa.Schema:
    fields = [pa.field("id", pa.int64())] + [pa.field(f"f{j}", pa.float32()) for j in range(n_features)]
    if repr_dim:
        fields.append(pa.field("embedding", pa.list_(pa.float32(), repr_dim)))
    if label:
        fields.append(pa.field("label", pa.int64()))
    return pa.schema(fields)


def mixed_table(n_rows: int = 900, seed: int = 0, defined_by: str = "level", missing_share: float = 0.05,
                weights=None):
    """A generated customer-like table of mixed columns with missing cells, and its segment labels
    (``(DataFrame, labels)``), for tests, benchmarks and the docs. Three segments, defined by
    ``defined_by``:

    - ``level``: the ``plan`` column (monthly / yearly / two-year) sets the segment; ``usage``
      shifts with it, the other columns are noise;
    - ``numeric``: ``usage`` and ``tenure`` set it (well apart), the categorical columns are noise;
    - ``missing``: one segment has no ``income`` (missing cells) and lower ``usage``; the others
      differ in ``tenure``.

    Columns: ``customer_id`` (text codes), ``plan`` (text), ``region`` (pandas ``category``),
    ``paperless`` (bool, more often true in segment 0, less in 1), ``usage``, ``tenure``, ``income`` (numbers); ``missing_share`` of the
    ``usage`` and ``region`` cells are blank besides (never the defining ones under ``level``).
    ``weights``: the three segments' relative sizes (default: equal, drawn as before).
    """
    import pandas as pd
    rng = np.random.default_rng(seed)
    if weights is None:
        labels = rng.integers(0, 3, n_rows)
    else:
        w = np.asarray(weights, dtype=np.float64)
        labels = rng.choice(3, n_rows, p=w / w.sum())
    plans = np.array(["monthly", "yearly", "two-year"])
    regions = np.array(["north", "south", "east", "west"])
    usage = rng.normal(0.0, 1.0, n_rows)
    tenure = rng.normal(24.0, 8.0, n_rows)
    income = rng.lognormal(10.5, 0.4, n_rows)
    plan = plans[rng.integers(0, 3, n_rows)]
    if defined_by == "level":
        plan = plans[labels]
        usage = usage + np.array([3.0, 0.0, -3.0])[labels]
    elif defined_by == "numeric":
        usage = usage + np.array([-4.0, 0.0, 4.0])[labels]
        tenure = tenure + np.array([0.0, 40.0, 0.0])[labels]
    elif defined_by == "missing":
        income = np.where(labels == 0, np.nan, income)
        usage = usage + np.where(labels == 0, -3.0, 0.0)
        tenure = tenure + np.array([0.0, -20.0, 20.0])[labels]
    else:
        from ..errors import ConfigError
        raise ConfigError(f"defined_by must be level, numeric or missing, got {defined_by!r}")
    frame = pd.DataFrame({
        "customer_id": [f"C{i:06d}" for i in range(n_rows)],
        "plan": plan,
        "region": pd.Categorical(regions[rng.integers(0, 4, n_rows)], categories=list(regions)),
        "paperless": rng.random(n_rows) < np.array([0.8, 0.2, 0.5])[labels],
        "usage": usage, "tenure": tenure, "income": income,
    })
    blank = rng.random(n_rows) < missing_share
    frame.loc[blank, "usage"] = np.nan
    frame.loc[rng.random(n_rows) < missing_share, "region"] = np.nan
    return frame, labels
