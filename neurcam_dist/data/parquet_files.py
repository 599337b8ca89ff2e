"""The service's one way to read Parquet rows: a plan's resolved files, one read task per file,
run by Ray Data (``ParquetFiles``, a datasource) or in this process (``ParquetFiles.here``: a pass
over data small enough that starting tasks would cost most of it). Both run the same task code,
so they give the same tables; ``reading`` builds every pass on them (the training stream, the
held rows, the scoring and profile passes, a sample, a text or join step's input).

Ray 2.60's ``read_parquet`` lists the files and reads every footer again on each execution, on a
pool of 32 footer-reader actors by default, and each streamed epoch is a new execution. On the
project's 2-core machine that cost 5.4 s per epoch on pendigits' 11,000 rows (2 workers: 6.6 s
per streamed epoch against 1.1 s from the object store). The plan already holds the file list and
each file's row count, so these read tasks start reading at once. One task per file: a dataset
of a few very large files is read with that few tasks at a time (Ray's reader splits files by row
group). With ``keys`` every row carries ``ROW_KEY``, its place in the plan's files, so that a
worker can cache a value per row (the frozen teacher's assignment) across epochs in which the
rows reach it in another order. With ``picks`` (row numbers per file) the tasks return only those
rows, so a sample of a large dataset never puts the whole data into the object store; with
``fold`` each task reduces its file to one value (the profile pass's tallies). Every column named
in the source's ``casts`` is read as that type (files whose number types differ). Imports Ray
when it is installed: load it lazily.
"""
from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
try:   # Ray Data runs these read tasks on a cluster; without Ray they run in this process (``readers``)
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask
except ImportError:
    Datasource, BlockMetadata, ReadTask = object, None, None

from .sources import BATCH_ROWS, PATH_COLUMN, ROW_KEY, DataError, Source


class ParquetFiles(Datasource):
    """The named columns of ``src.files`` (None: every column of the footers), each file read in
    batches of ``batch_rows`` rows; with ``keys``, ``ROW_KEY`` (the file's first row in the plan,
    counted over the files in order, + the row in the file), and with ``paths`` the file's path
    (``PATH_COLUMN``, for errors that name it). ``rows_per_file``: each file's rows when the run
    was planned (default: the footers'); a file that has more when it is read is refused by name.
    ``picks``: only these rows of each file (sorted row numbers in the file; a file not named is
    not read). ``fold``: each task yields one row, column ``fold``: ``fold(the file's tables,
    path)`` as JSON text."""

    def __init__(self, src: Source, columns: list[str] | None, rows_per_file: dict[str, int] | None = None,
                 batch_rows: int = BATCH_ROWS, picks: dict[str, np.ndarray] | None = None,
                 fold: Callable | None = None, paths: bool = False, keys: bool = True):
        super().__init__()
        if columns is None:
            columns = src.schema.names
        self.src, self.columns, self.batch_rows = src, list(dict.fromkeys(columns)), batch_rows
        self.rows_per_file = rows_per_file if rows_per_file is not None else src.rows_per_file
        self.picks, self.fold, self.paths, self.keys = picks, fold, paths, keys

    def estimate_inmemory_data_size(self):
        """Unknown before reading (Ray Data then sizes the blocks as it reads)."""
        return None

    def readers(self, per_task_row_limit: int | None = None) -> list[tuple["_Reader", int]]:
        """Each file's read task as a plain callable, with the rows it yields, in file order: what
        Ray Data runs (``get_read_tasks``), and what a pass in this process runs without Ray."""
        out, first = [], 0
        for path in self.src.files:
            planned = self.rows_per_file[path]
            picks = None if self.picks is None else self.picks.get(path)
            if self.picks is None or picks is not None and len(picks):
                out.append((_Reader(path, self.src.filesystem, self.columns, self.batch_rows, per_task_row_limit,
                                    first, planned, picks, self.fold, self.paths, self.src.casts, self.keys),
                            1 if self.fold else planned if picks is None else len(picks)))
            first += planned
        return out

    def here(self):
        """Every read task run in this process, in file order: the same tables Ray Data's pass
        over this datasource yields, without starting a task."""
        for reader, _ in self.readers():
            yield from (t for t in reader() if t.num_rows)

    def get_read_tasks(self, parallelism: int, per_task_row_limit: int | None = None, data_context=None):
        """One read task per file (its planned rows, its picked rows), batches of about
        the configured block size; ``parallelism`` is ignored (a file is the unit)."""
        return [ReadTask(reader, BlockMetadata(num_rows=rows, size_bytes=None, exec_stats=None,
                                               input_files=[reader.path]))
                for reader, rows in self.readers(per_task_row_limit)]


def per_file_tables(src: Source, columns: list[str], rows_per_file: dict[str, int], *, here: bool,
                    picks: dict[str, np.ndarray] | None = None, fold: Callable | None = None) -> list[pa.Table]:
    """What every file's read task yields (``ParquetFiles``), in file order: run as Ray Data read
    tasks, or ``here``, in this process (a pass small enough that starting tasks would cost
    most of it). Both run the same task code, so they give the same tables."""
    source = ParquetFiles(src, columns, rows_per_file, picks=picks, fold=fold)
    if here:
        return list(source.here())
    import ray.data
    ds = ray.data.read_datasource(source, override_num_blocks=max(1, len(source.readers())))
    ds.context.execution_options.preserve_order = True
    return [t for t in ds.iter_batches(batch_format="pyarrow", batch_size=None) if t.num_rows]


class _Reader:
    """One file's read task (a plain picklable callable)."""

    def __init__(self, path: str, filesystem, columns: list[str], batch_rows: int, limit: int | None,
                 first_row: int, planned_rows: int, picks: np.ndarray | None = None, fold: Callable | None = None,
                 paths: bool = False, casts: dict | None = None, keys: bool = True):
        self.casts, self.keys = casts, keys
        self.path, self.filesystem, self.columns, self.batch_rows, self.limit = (path, filesystem, columns,
                                                                                 batch_rows, limit)
        self.first_row, self.planned_rows, self.picks, self.fold = first_row, planned_rows, picks, fold
        self.paths = paths

    def __call__(self):
        try:
            if self.fold is not None:
                tables = file_tables(self.path, self.filesystem, self.columns, self.batch_rows, self.limit, self.casts)
                yield pa.table({"fold": [json.dumps(self.fold(tables, self.path))]})
            else:
                yield from (self._all() if self.picks is None else self._picked())
        finally:
            # Arrow's allocator (mimalloc) keeps what a task freed; the next task in this worker
            # process may be another operator's, so an idle read worker would hold a file's worth
            pa.default_memory_pool().release_unused()

    def _picked(self):
        for table, picks in picked_tables(self.path, self.filesystem, self.columns, self.picks, self.planned_rows,
                                          self.batch_rows, self.casts):
            yield table.append_column(ROW_KEY, pa.array(self.first_row + picks.astype(np.int64))) if self.keys else table

    def _all(self):
        done = 0
        for table in file_tables(self.path, self.filesystem, self.columns, self.batch_rows, self.limit, self.casts):
            n = table.num_rows
            if done + n > self.planned_rows:  # keys would run into the next file's: a wrong teacher, silently
                raise DataError(f"{self.path} has more rows than the {self.planned_rows:,} it had when the run was "
                                f"planned: it changed during the run (rewrite data into new files, not in place)")
            if self.keys:
                table = with_row_keys(table, self.first_row + done)
            yield table.append_column(PATH_COLUMN, pa.array([self.path] * n, pa.string())) if self.paths else table
            done += n


def parquet_file(path: str, filesystem) -> pq.ParquetFile:
    """A file opened for reading in batches: column chunks are read through a 1 MiB buffer, not
    whole (a 64 MiB embedding chunk would be held beside its decoded batches)."""
    return pq.ParquetFile(path, filesystem=filesystem, buffer_size=1 << 20)


def file_tables(path: str, filesystem, columns: list[str], batch_rows: int = BATCH_ROWS, limit: int | None = None,
                casts: dict | None = None):
    """One Parquet file's columns as Arrow tables of ``batch_rows`` rows, at most ``limit`` rows in
    all (a read task of ``ParquetFiles``),
    columns named in ``casts`` read as that type (``unified_types``)."""
    left = limit
    for batch in parquet_file(path, filesystem).iter_batches(batch_size=batch_rows, columns=list(columns)):
        if left is not None:
            if left <= 0:
                return
            batch = batch.slice(0, left)
            left -= batch.num_rows
        yield cast_columns(pa.Table.from_batches([batch]), casts)


def cast_columns(table: pa.Table, casts: dict | None) -> pa.Table:
    """``table`` with the columns named in ``casts`` cast to their types."""
    for name, to in (casts or {}).items():
        j = table.schema.get_field_index(name)
        if j >= 0 and table.schema.field(j).type != to:
            table = table.set_column(j, pa.field(name, to), table.column(j).cast(to))
    return table


def picked_tables(path: str, filesystem, columns: list[str], picks: np.ndarray, planned: int,
                  batch_rows: int = BATCH_ROWS, casts: dict | None = None):
    """Only the rows numbered ``picks`` (sorted, within the file) of one Parquet file, as
    ``(table, picks of it)`` pairs in file order. Row groups without a pick are not read, so a
    small sample of a large file decodes only the groups its rows are in."""
    f = parquet_file(path, filesystem)
    meta = f.metadata
    if meta.num_rows != planned:   # picks are row numbers of the planned file: another file, another sample
        raise DataError(f"{path} no longer has the {planned:,} rows it had when the run was planned: it changed "
                        f"during the run (rewrite data into new files, not in place)")
    starts = np.cumsum([0] + [meta.row_group(g).num_rows for g in range(meta.num_row_groups)])
    for g in np.unique(np.searchsorted(starts, picks, side="right") - 1):
        done = int(starts[g])
        for batch in f.iter_batches(batch_size=batch_rows, row_groups=[int(g)], columns=list(columns)):
            lo, hi = np.searchsorted(picks, [done, done + batch.num_rows])
            if hi > lo:
                yield cast_columns(pa.Table.from_batches([batch]).take(pa.array(picks[lo:hi] - done)), casts), picks[lo:hi]
            done += batch.num_rows


def with_row_keys(table: pa.Table, first: int) -> pa.Table:
    """``table`` with ``ROW_KEY`` = first, first + 1, ... (a training row's key, see ``ROW_KEY``)."""
    return table.append_column(ROW_KEY, pa.array(np.arange(first, first + table.num_rows, dtype=np.int64)))
