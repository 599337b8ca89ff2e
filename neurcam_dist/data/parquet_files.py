"""A Ray Data datasource over a plan's resolved Parquet files: one read task per file.

Ray 2.60's ``read_parquet`` lists the files and reads every footer again on each execution, on a
pool of 32 footer-reader actors by default, and each streamed epoch is a new execution. On the
project's 2-core machine that cost 5.4 s per epoch on pendigits' 11,000 rows (2 workers: 6.6 s
per streamed epoch against 1.1 s from the object store). The plan already holds the file list and
each file's row count, so these read tasks start reading at once. One task per file: a dataset
of a few very large files is read with that few tasks at a time (Ray's reader splits files by row
group). Every row carries ``ROW_KEY``, its place in the plan's files, so that a worker can cache
a value per row (the frozen teacher's assignment) across epochs in which the rows reach it in
another order. With ``picks`` (row numbers per file) the tasks return only those rows, so a
sample of a large dataset never puts the whole data into the object store; with ``fold`` each task
reduces its file to one value (the profile pass's tallies). Imports Ray: load it lazily.
"""
from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pyarrow as pa
try:   # Ray Data runs these read tasks on a cluster; without Ray they run in this process (``readers``)
    from ray.data.block import BlockMetadata
    from ray.data.datasource import Datasource, ReadTask
except ImportError:
    Datasource, BlockMetadata, ReadTask = object, None, None

from .sources import BATCH_ROWS, PATH_COLUMN, ROW_KEY, DataError, Source, file_tables, picked_tables, with_row_keys


class ParquetFiles(Datasource):
    """The named columns of ``src.files``, each file read in batches of ``batch_rows`` rows, plus
    ``ROW_KEY`` (the file's first row in the plan, counted over the files in order, + the row in
    the file), and with ``paths`` the file's path (``PATH_COLUMN``, for errors that name it).
    ``picks``: only these rows of each file (sorted row numbers in the file; a file not named is
    not read). ``fold``: each task yields one row, column ``fold``: ``fold(the file's tables,
    path)`` as JSON text."""

    def __init__(self, src: Source, columns: list[str], rows_per_file: dict[str, int], batch_rows: int = BATCH_ROWS,
                 picks: dict[str, np.ndarray] | None = None, fold: Callable | None = None, paths: bool = False):
        super().__init__()
        self.src, self.columns, self.rows_per_file, self.batch_rows = src, columns, rows_per_file, batch_rows
        self.picks, self.fold, self.paths = picks, fold, paths

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
                                    first, planned, picks, self.fold, self.paths, self.src.casts),
                            1 if self.fold else planned if picks is None else len(picks)))
            first += planned
        return out

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
        return [t for reader, _ in source.readers() for t in reader() if t.num_rows]
    import ray.data
    ds = ray.data.read_datasource(source, override_num_blocks=max(1, len(source.readers())))
    ds.context.execution_options.preserve_order = True
    return [t for t in ds.iter_batches(batch_format="pyarrow", batch_size=None) if t.num_rows]


class _Reader:
    """One file's read task (a plain picklable callable)."""

    def __init__(self, path: str, filesystem, columns: list[str], batch_rows: int, limit: int | None,
                 first_row: int, planned_rows: int, picks: np.ndarray | None = None, fold: Callable | None = None,
                 paths: bool = False, casts: dict | None = None):
        self.casts = casts
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
            yield table.append_column(ROW_KEY, pa.array(self.first_row + picks.astype(np.int64)))

    def _all(self):
        done = 0
        for table in file_tables(self.path, self.filesystem, self.columns, self.batch_rows, self.limit, self.casts):
            n = table.num_rows
            if done + n > self.planned_rows:  # keys would run into the next file's: a wrong teacher, silently
                raise DataError(f"{self.path} has more rows than the {self.planned_rows:,} it had when the run was "
                                f"planned: it changed during the run (rewrite data into new files, not in place)")
            table = with_row_keys(table, self.first_row + done)
            yield table.append_column(PATH_COLUMN, pa.array([self.path] * n, pa.string())) if self.paths else table
            done += n
