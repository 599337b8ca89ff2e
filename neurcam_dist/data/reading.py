"""Reading a plan's files with Ray Data, and Arrow batches as numpy matrices."""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .planning import Plan
from .sources import PATH_COLUMN, DataError, Source


def read(p: Plan, columns: list[str] | None = None, *, with_paths: bool = False, ordered: bool = False):
    return read_source(p.source, list(dict.fromkeys(columns if columns is not None else p.columns)),
                       with_paths=with_paths, ordered=ordered)


def read_source(src: Source, columns: list[str], *, with_paths: bool = False, ordered: bool = False):
    """A Ray Data dataset over exactly the resolved files and the named columns. ``ordered``:
    blocks come out in file order, not completion order, so a seeded sample or a one-worker
    training stream is the same from run to run."""
    import ray.data
    ds = ray.data.read_parquet(src.files, filesystem=src.filesystem, columns=columns,
                               include_paths=with_paths, file_extensions=None)
    if ordered:
        ds.context.execution_options.preserve_order = True
    if with_paths:
        ds = ds.rename_columns({"path": PATH_COLUMN})
    return ds


def representation(table: pa.Table, p: Plan) -> np.ndarray:
    """(n, R) float32 representation of an Arrow batch (zero-copy for fixed-size lists)."""
    if p.repr_kind == "list":
        col = table[p.repr_columns[0]].combine_chunks()
        if pa.types.is_fixed_size_list(col.type):
            values = col.flatten()
        else:
            lengths = pc.list_value_length(col).to_numpy(zero_copy_only=False)
            if (lengths != p.repr_dim).any():
                raise DataError(f"embedding column {p.repr_columns[0]!r}: a row has length "
                                f"{int(lengths[lengths != p.repr_dim][0])}, expected {p.repr_dim}")
            values = pc.list_flatten(col)
        return values.to_numpy(zero_copy_only=False).astype(np.float32, copy=False).reshape(-1, p.repr_dim)
    cols = p.features if p.repr_kind == "features" else p.repr_columns
    return matrix(table, cols)


def matrix(table: pa.Table, columns: list[str], dtype=np.float32) -> np.ndarray:
    """The named numeric columns as an (n, len(columns)) array; features are read as float64
    and standardized before anything becomes float32."""
    out = np.empty((table.num_rows, len(columns)), dtype=dtype)
    for j, c in enumerate(columns):
        out[:, j] = table[c].to_numpy(zero_copy_only=False)
    return out
