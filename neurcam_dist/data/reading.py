"""The passes over a plan's files, all on the same per-file read tasks (``parquet_files``): a Ray
Data dataset (``dataset``: the training stream, the scoring and text passes, a join's inputs) or
Arrow tables read in this process (``tables_here``: a pass over small data, the held rows);
and Arrow batches as numpy matrices."""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import find_cause
from .planning import Plan
from .sources import BATCH_ROWS, DataError, Source


def read(p: Plan, columns: list[str] | None = None, *, with_paths: bool = False, ordered: bool = False):
    """The plan's files as a Ray Data dataset of ``columns`` (default: the plan's), with the
    file path as a column (``with_paths``) and in file order (``ordered``)."""
    return read_source(p.source, columns if columns is not None else p.columns, with_paths=with_paths,
                       ordered=ordered)


def read_source(src: Source, columns: list[str] | None, *, with_paths: bool = False, ordered: bool = False):
    """A Ray Data dataset over exactly the resolved files and the named columns (None: every
    column), without row keys: ``dataset`` sized from the footers. ``ordered``: blocks come out
    in file order, not completion order, so a seeded sample or a one-worker training stream is
    the same from run to run."""
    from .sources import column_bytes
    schema = src.schema
    names = list(dict.fromkeys(schema.names if columns is None else columns))
    n_rows = sum(src.rows_per_file.values())
    width = column_bytes(src, schema, n_rows, names) / max(1, n_rows)
    ds = dataset(src, names, bytes_per_row=width, keys=False, paths=with_paths)
    if ordered:
        ds.context.execution_options.preserve_order = True
    return ds


def map_with_actors(ds, cls, batch_size: int, concurrency: int, *, num_gpus: float = 0, **kwargs):
    """``ds.map_batches`` over a pool of ``concurrency`` actors of ``cls(**kwargs)`` (one CPU each),
    leaving at least one CPU for the read tasks that feed them (an object-store read starts with a
    listing task: with every CPU held by an actor it would wait forever). An error the actors
    raise comes back as itself (Ray's wrapper is an instance of its class), not as Ray Data's
    ``UserCodeException``, so a ``DataError`` crosses the boundary typed (``errors.find_cause``)."""
    from ray.data import ActorPoolStrategy
    ds.context.raise_original_map_exception = True
    return ds.map_batches(cls, fn_constructor_kwargs=kwargs, batch_size=batch_size, batch_format="pyarrow",
                          compute=ActorPoolStrategy(size=pool_size(concurrency)), num_cpus=1,
                          num_gpus=num_gpus or None)


def run_pass(run, *args, **kwargs):
    """``run(*args, **kwargs)``: a Ray Data pass over ``map_with_actors``' actors. A ``DataError`` its tasks
    or actors raise comes out as a fresh ``DataError`` with the same message, chained to nothing.
    Ray hands the error back wrapped, and the wrapper holds the failed execution's frames and,
    through them, the pass's actors: Ray Data releases a failed pass's actors by dropping its
    references, not by ``ray.kill``, so each actor would keep its CPU for as long as the caller
    keeps the error (a notebook, a test, a service), and the next pass would wait for CPUs to
    read with. Any other error passes as it is."""
    try:
        return run(*args, **kwargs)
    except Exception as exc:
        message = _refusal_in(exc)
        if message is None:
            raise
    import gc
    gc.collect()   # and Ray Data's own reference cycles around the failed execution
    raise DataError(message)


def _refusal_in(exc: BaseException) -> str | None:
    """The message of the ``DataError`` in ``exc``'s chain, as text only (nothing that refers
    to the failed execution), or None."""
    found = find_cause(exc, DataError)
    return None if found is None else found.message


def pool_size(concurrency: int) -> int:
    """``concurrency`` actors, fewer where the cluster has no more CPUs than that (see ``map_with_actors``)."""
    import ray
    return max(1, min(concurrency, int(ray.cluster_resources().get("CPU", 2)) - 1))


# A whole-data pass (profile, scoring, comparison) over at most this many bytes of the columns it
# reads runs in the calling process: a Ray Data pass costs seconds to start its tasks and actors,
# which on small data is most of the pass. NEURCAM_LOCAL_PASS_BYTES changes it (0: always Ray Data).
LOCAL_PASS_BYTES = 64 * 2**20


def small_enough(n_bytes: int) -> bool:
    """Whether a pass over ``n_bytes`` of column data runs in this process (``LOCAL_PASS_BYTES``)."""
    return n_bytes <= int(os.environ.get("NEURCAM_LOCAL_PASS_BYTES", LOCAL_PASS_BYTES))


def pass_bytes(p: Plan, columns: list[str]) -> int:
    """Bytes of ``columns`` of the plan's rows as a pass holds them (8 a value)."""
    width = sum(p.repr_dim if (p.repr_kind == "list" and c == p.repr_columns[0]) else 1 for c in set(columns))
    return p.n_rows * width * 8


def local_pass(p: Plan, columns: list[str]) -> bool:
    """Whether a pass over ``columns`` of the plan is small enough to run in this process."""
    return small_enough(pass_bytes(p, columns))


def tables_here(src: Source, columns: list[str], *, rows_per_file: dict[str, int] | None = None,
                batch_rows: int = BATCH_ROWS, keys: bool = False):
    """The rows and columns ``dataset`` reads, as Arrow tables read in this process by the same
    read tasks, file after file in order (what an ordered Ray Data pass yields); with ``keys``,
    each row's ``ROW_KEY``."""
    from .parquet_files import ParquetFiles   # imports Ray Data where it is installed: only when read
    return ParquetFiles(src, columns, rows_per_file, batch_rows, keys=keys).here()


# Bytes per block of the training stream. A read task's output is cut into blocks of about
# ``DataContext.target_max_block_size`` (tables smaller than it are merged): at Ray's 128 MiB, a
# whole 62,500-row file of 1 KiB rows was one 65 MiB block, and the stream held 500-700 MiB of
# them in the object store (4M rows, 2 workers); in 8 MiB blocks, under 420 MiB.
FEED_BLOCK_BYTES = 8 * 2**20


def row_bytes(p: Plan) -> int:
    """Bytes of one row of the training columns and ``ROW_KEY`` in Arrow (from the first file's
    schema; the plan checked that every file has the same)."""
    import pyarrow.parquet as pq
    schema = pq.read_schema(p.source.files[0], filesystem=p.source.filesystem)
    width = 8                                                   # ROW_KEY
    for c in dict.fromkeys(p.columns):
        t = schema.field(c).type
        if pa.types.is_fixed_size_list(t) or pa.types.is_list(t) or pa.types.is_large_list(t):
            width += p.repr_dim * max(1, t.value_type.bit_width // 8) + (0 if pa.types.is_fixed_size_list(t) else 8)
        else:
            try:
                width += max(1, t.bit_width // 8)
            except ValueError:   # not fixed-width (the plan admits none here): count 8 bytes
                width += 8
    return width


def streamed_dataset(p: Plan, batch_rows: int | None = None):
    """The plan's training columns and ``ROW_KEY`` as a Ray Data dataset (``dataset``), in file
    order, in blocks of ``batch_rows`` rows (default: about ``FEED_BLOCK_BYTES``)."""
    ds = dataset(p.source, p.columns, rows_per_file=p.rows_per_file, bytes_per_row=row_bytes(p),
                 batch_rows=batch_rows)
    ds.context.execution_options.preserve_order = True
    return ds


def dataset(src: Source, columns: list[str], *, rows_per_file: dict[str, int] | None = None,
            bytes_per_row: float = 8.0, batch_rows: int | None = None, keys: bool = True, paths: bool = False):
    """The named columns (with ``keys``, ``ROW_KEY``; with ``paths``, ``PATH_COLUMN``) read by one
    task per file (``parquet_files.ParquetFiles``) in blocks of ``batch_rows`` rows (default:
    about ``FEED_BLOCK_BYTES``), the idle scheduling loop paced (``pacing``): the training stream,
    and the scoring passes over an actor pool, where every actor then has blocks to score (Ray
    2.60's ``read_parquet`` made 4 files of 700,000 rows one block, for one actor, after a 3 s
    listing task)."""
    import ray.data

    from .pacing import pace
    from .parquet_files import ParquetFiles
    bytes_per_row = max(1.0, bytes_per_row)
    batch_rows = batch_rows or int(min(65536, max(256, FEED_BLOCK_BYTES // bytes_per_row)))
    ds = ray.data.read_datasource(ParquetFiles(src, columns, rows_per_file, batch_rows, paths=paths, keys=keys),
                                  override_num_blocks=max(1, len(src.files)))
    # a little under one batch: each batch is a block of its own (neither merged with the next,
    # nor, below 1.5x the target, sliced)
    ds.context.target_max_block_size = max(1, int(0.9 * batch_rows * bytes_per_row))
    return pace(ds)


def local_tables(p: Plan) -> list[pa.Table]:
    """The plan's training columns and ``ROW_KEY`` read here (``tables_here``): what
    ``streamed_dataset`` yields, for data small enough for ``local_pass``."""
    return list(tables_here(p.source, p.columns, rows_per_file=p.rows_per_file, keys=True))


@dataclass(frozen=True)
class HeldRows:
    """Small training rows held in Ray's object store as one Arrow table, with ``ROW_KEY``: each
    worker takes its own slice of them. No Ray Data execution feeds such a run: starting one cost
    a trial 3.4 s on pendigits before its first batch, five epochs of its training, and Ray Data's
    iterator took 65 ms of a 79 ms GPU epoch over these rows."""

    table: object   # ray.ObjectRef of a pyarrow.Table


def held_rows(p: Plan) -> HeldRows:
    """Small training data read here once and put in Ray's object store for the workers to
    slice (``HeldRows``)."""
    import ray
    table = pa.concat_tables(local_tables(p)).combine_chunks()  # one chunk: workers' slices convert as one
    return HeldRows(ray.put(table))


def representation(table: pa.Table, p: Plan, x, space) -> np.ndarray:
    """The clustering space (the glossary's *representation*) of an Arrow batch whose features,
    as the model reads them, are ``x``: ``space.clustering_space(x)`` (a model or its
    ``columns.ColumnCoding``) when the representation is the features, else the batch's own
    embedding column(s) (``embedding``)."""
    return space.clustering_space(x) if p.repr_kind == "features" else embedding(table, p)


def embedding(table: pa.Table, p: Plan) -> np.ndarray:
    """(n, R) float32 embedding (the clustering space) of an Arrow batch (zero-copy for fixed-size lists)."""
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


def feature_matrix(table: pa.Table, features: list[str], coding=None, what: str = "input") -> np.ndarray:
    """An Arrow batch's features as the model's encoded float64 matrix (``columns.ColumnCoding``:
    level codes, NaN for missing cells); plain numbers (nulls as NaN) without categorical features."""
    return feature_matrix_counted(table, features, coding, what)[0]


def feature_matrix_counted(table: pa.Table, features: list[str], coding=None,
                           what: str = "input") -> tuple[np.ndarray, dict[str, int]]:
    """``feature_matrix`` and the cells whose level was not seen at training, per column."""
    if coding is None or not coding.has_categorical:
        x = matrix(table, features, np.float64)
        if coding is not None:
            from ..columns import refuse_infinite
            refuse_infinite(x, features, what)
        return x, {}
    return coding.encode_counted(table.select(features).to_pandas(), what)


def matrix(table: pa.Table, columns: list[str], dtype=np.float32) -> np.ndarray:
    """The named numeric columns as an (n, len(columns)) array; features are read as float64
    and standardized before anything becomes float32."""
    out = np.empty((table.num_rows, len(columns)), dtype=dtype)
    for j, c in enumerate(columns):
        out[:, j] = table[c].to_numpy(zero_copy_only=False)
    return out
