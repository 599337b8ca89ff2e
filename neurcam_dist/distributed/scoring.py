"""Scoring with Ray Data: ``map_batches`` over an actor pool, each actor holding the fitted model.

Actors receive a ``model.FittedNet`` (network, standardization, temperatures, names): what
scoring needs, not the estimator with its reference rows and warm-up network. ``evaluate``
reduces the whole dataset to sums (per-cluster moments for the inertia, a contingency table for
ARI/NMI/ACC, channel sums for the explanation's centring), so the driver never holds per-row
results. ``predict_parquet`` writes one row per input row, with the id,
the cluster, the probabilities and the three terms that pushed the row hardest toward its
cluster, into Parquet shards that appear in the output directory only when all are written.
"""
from __future__ import annotations

import json
import os
import pickle
import time
from contextlib import contextmanager, nullcontext

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow.fs import FileSelector

from ..errors import TrainingError
from .. import data as data_mod
from .. import metrics
from ..explain.assignments import (ROW_NUMBER, ROW_TERMS, assignments, file_layout, met_line, refuse_collisions,
                                   scored_columns)
from ..model import FittedNet
from ..redaction import redact
from ..storage import write_dataset
from ..storage.atomic import PREDICTIONS_MARKER
from ..uris import Location, Where
from ..validation import missing_columns_note, non_finite_counts
from .console import stderr_to_log
from .events import beside_driver
from .session import ray_for

PROGRESS_SECONDS = 30.0   # a Ray Data pass's progress line at most this often (NEURCAM_PREDICT_PROGRESS_S)


class _Evaluator:
    def __init__(self, fitted: FittedNet, plan: data_mod.Plan):
        import torch
        torch.set_num_threads(1)
        self.fitted, self.plan = fitted, plan

    def __call__(self, table: pa.Table) -> dict:
        fitted, plan = self.fitted, self.plan
        x = data_mod.reading.feature_matrix(table, plan.features, fitted.coding)
        contrib = fitted.contributions(x)                                     # (n, channels, K)
        labels = contrib.sum(1).argmax(1)
        xr = data_mod.reading.representation(table, plan, x, fitted).astype(np.float64)
        k = fitted.n_clusters
        acc = {"n": len(labels), "counts": np.bincount(labels, minlength=k),
               "sums": np.zeros((k, xr.shape[1])), "sumsq": np.bincount(labels, (xr ** 2).sum(1), minlength=k),
               "channels": contrib.astype(np.float64).sum(0), "pairs": {}}
        np.add.at(acc["sums"], labels, xr)
        if plan.label:
            truth = table[plan.label].to_numpy(zero_copy_only=False)
            values, inv = np.unique(truth, return_inverse=True)
            cells = np.zeros((len(values), k), np.int64)
            np.add.at(cells, (inv.ravel(), labels), 1)
            acc["pairs"] = {(v.item() if hasattr(v, "item") else v, c): int(cells[i, c])
                            for i, v in enumerate(values) for c in range(k) if cells[i, c]}
        return {"acc": np.array([pickle.dumps(acc)], dtype=object)}


@contextmanager
def in_process(cls, **kwargs):
    """``cls(**kwargs)``, the callable a Ray Data actor holds, built in this process for a pass
    over small data. An actor pins torch to one thread (an actor per CPU); here the pass runs on
    the threads its chunks are worth (``settings.threads_for``: a forward pass over at most
    ``fitted.CHUNK`` rows of each model in ``kwargs``), and this process's own setting is restored after."""
    import torch

    from ..model.fitted import CHUNK
    from ..settings import threads_for
    threads = torch.get_num_threads()
    try:
        fn = cls(**kwargs)
        work = sum(m.net.step_work(CHUNK, backward=False) for m in kwargs.values() if isinstance(m, FittedNet))
        torch.set_num_threads(threads_for(work, threads))
        yield fn
    finally:
        torch.set_num_threads(threads)


def reduce_pass(plan: data_mod.Plan, columns: list[str], cls, combine, batch_size: int, concurrency: int, /,
                log=None, **kwargs):
    """``cls(**kwargs)`` applied to every batch of ``columns``, each batch's pickled partial
    result combined with ``combine``: over an actor pool with Ray Data, or in this process when
    the data is small (``data.reading.local_pass``). ``log``: where a Ray Data pass says how
    many rows it has read, at most every ``PROGRESS_SECONDS``."""
    total = None
    if data_mod.reading.local_pass(plan, columns):
        with in_process(cls, **kwargs) as fn:
            for table in data_mod.reading.tables_here(plan.source, columns, rows_per_file=plan.rows_per_file,
                                                          batch_rows=batch_size):
                for blob in fn(table)["acc"]:
                    total = combine(total, pickle.loads(blob))
        return total
    ds = data_mod.reading.dataset(plan.source, columns, rows_per_file=plan.rows_per_file,
                                  bytes_per_row=data_mod.reading.pass_bytes(plan, columns) / max(1, plan.n_rows))
    ds = data_mod.reading.map_with_actors(ds, cls, batch_size, concurrency, **kwargs)
    from ..data.progress import watched

    def run():
        result = None
        for batch in ds.iter_batches(batch_format="numpy", batch_size=None):
            for blob in batch["acc"]:
                result = combine(result, pickle.loads(blob))
        return result

    # the pass's output is one row a batch: count the rows read
    with watched(ds, "ReadParquetFiles", plan.n_rows, log, every=PROGRESS_SECONDS, what="read"):
        return data_mod.reading.run_pass(run)


def _combine(a: dict | None, b: dict) -> dict:
    if a is None:
        return b
    out = {key: a[key] + b[key] for key in ("n", "counts", "sums", "sumsq", "channels")}
    pairs = dict(a["pairs"])
    for key, v in b["pairs"].items():
        pairs[key] = pairs.get(key, 0) + v
    out["pairs"] = pairs
    return out


def evaluate(fitted: FittedNet, plan: data_mod.Plan, *, batch_size: int = 4096, concurrency: int = 2,
             log=None) -> dict:
    """Hard inertia over every row (and ARI/NMI/ACC with a label column), plus the channel means."""
    cols = list(dict.fromkeys(plan.columns + ([plan.label] if plan.label else [])))
    total = reduce_pass(plan, cols, _Evaluator, _combine, batch_size, concurrency, log, fitted=fitted, plan=plan)
    if total is None or total["n"] != plan.n_rows:
        seen = 0 if total is None else total["n"]
        raise TrainingError(f"the scoring pass saw {seen} rows, the data has {plan.n_rows}")
    out = {"inertia": metrics.inertia_from_moments(total["counts"], total["sums"], total["sumsq"]),
           "cluster_sizes": total["counts"].astype(int).tolist(),
           "n_clusters_used": int((total["counts"] > 0).sum()),
           "channel_means": total["channels"] / total["n"]}
    if plan.label:
        truths = sorted({t for t, _ in total["pairs"]}, key=str)
        index = {t: i for i, t in enumerate(truths)}
        table = np.zeros((len(truths), fitted.n_clusters), np.int64)
        for (t, c), v in total["pairs"].items():
            table[index[t], c] = v
        out.update(metrics.table_scores(table))
    return out


def _refuse_non_finite(x: np.ndarray, table: pa.Table, names: list[str]) -> None:
    """A row that cannot be scored names its file and column (nulls read back as NaN)."""
    counts = non_finite_counts(x, names)
    if counts:
        row, col = (int(v[0]) for v in np.nonzero(~np.isfinite(x)))
        where = table[data_mod.PATH_COLUMN][row].as_py() if data_mod.PATH_COLUMN in table.column_names else "input"
        raise data_mod.DataError(f"{where}: column {names[col]!r} has a null, NaN or infinite value "
                                 f"(value {float(x[row, col])!r}); missing or non-finite values per column in "
                                 f"this batch: {counts}. Nothing was written")


def _add_met(into: dict, met: dict) -> dict:
    """Add one batch's unseen levels and missing cells (column -> cells) to ``into``."""
    for key in ("unseen", "missing"):
        for c, n in met.get(key, {}).items():
            into[key][c] = into[key].get(c, 0) + n
    return into


class _Met:
    """A Ray pass's tally of what its scoring actors met (a Ray actor of no CPU)."""

    def __init__(self):
        self.met = {"unseen": {}, "missing": {}}

    def add(self, met: dict) -> None:
        """One batch's counts."""
        _add_met(self.met, met)

    def totals(self) -> dict:
        """Every batch's counts."""
        return self.met


class _Scorer:
    def __init__(self, fitted: FittedNet, id_column: str | None, carry: list[str], text: dict | None = None,
                 counter=None):
        import torch
        torch.set_num_threads(1)
        self.fitted, self.id_column, self.carry = fitted, id_column, carry
        self.met = {"unseen": {}, "missing": {}}   # what reading met (this process's pass reports it)
        self.counter = counter                       # a Ray pass: the ``_Met`` actor that sums it
        self.text = None
        if text is not None:    # raw documents: featurized here with the model's vocabulary
            from ..text import Vocabulary
            from ..text.vocabulary import join_text
            self.text, self._join = Vocabulary.from_json(text), join_text
            index = {c: j for j, c in enumerate(self.text.columns)}
            self._order = [index[c] for c in fitted.feature_names]   # the model's columns among the terms

    def _features(self, table: pa.Table) -> np.ndarray:
        if self.text is None and self.fitted.coding is not None:
            where = (table[data_mod.PATH_COLUMN][0].as_py() if data_mod.PATH_COLUMN in table.column_names
                     and table.num_rows else "input")
            names = self.fitted.feature_names
            x, unseen = data_mod.reading.feature_matrix_counted(table, names, self.fitted.coding,
                                                                f"{redact(str(where))}:")
            counts = np.isnan(x).sum(axis=0)
            met = {"unseen": unseen, "missing": {names[j]: int(counts[j]) for j in np.flatnonzero(counts)}}
            _add_met(self.met, met)
            if self.counter is not None and (met["unseen"] or met["missing"]):
                import ray
                ray.get(self.counter.add.remote(met))
            return x
        if self.text is None:
            return data_mod.matrix(table, self.fitted.feature_names, np.float64)
        v = self.text
        x, _ = v.transform(self._join([table[c].to_pylist() for c in v.text_columns], table.num_rows))
        return x[:, self._order].astype(np.float64)

    def __call__(self, table: pa.Table) -> pa.Table:
        fitted = self.fitted
        x = self._features(table)
        if fitted.coding is None or fitted.coding.missing == "refuse":
            _refuse_non_finite(x, table, fitted.feature_names)
        scored = assignments(fitted, x, top_terms=ROW_TERMS, **file_layout(fitted.cluster_ids))   # as fit writes them
        cols = {}
        if self.id_column:
            cols[self.id_column] = table[self.id_column]
        else:   # no id: the row's number in the input (its key over the files in order), so it joins back
            cols[ROW_NUMBER] = table[data_mod.sources.ROW_KEY]
        for c in self.carry:
            cols[c] = table[c]
        for name, values in scored.items():
            if name == "cluster":
                cols[name] = pa.array(values.astype(np.int32))   # stable ids (``cluster_ids_``)
            elif values.dtype == object:
                cols[name] = pa.array(values.tolist(), pa.string())
            else:
                cols[name] = pa.array(values, pa.float64(), mask=np.isnan(values))
        return pa.table(cols)


def _raw_text(fitted: FittedNet, schema: pa.Schema) -> dict | None:
    """The model's vocabulary when the input holds documents (its text columns) instead of the
    term columns the model was trained on; None for feature input."""
    text = fitted.text
    if text is None or all(schema.get_field_index(c) >= 0 for c in fitted.feature_names):
        return None
    return text if all(schema.get_field_index(c) >= 0 for c in text["text_columns"]) else None


def _score_here(scorer: _Scorer, src, columns: list[str], rows_per_file: dict[str, int], batch_size: int,
                root: str, fs) -> None:
    """The scoring pass over small input in this process: the Ray pass's read tasks
    (``parquet_files.ParquetFiles``, one a file) run here, one output file per non-empty input
    file, rows in input order (a Ray Data pass costs seconds to start its actors)."""
    from ..data.parquet_files import ParquetFiles
    n = 0
    for reader, _ in ParquetFiles(src, columns, rows_per_file, batch_size, paths=True).readers():
        writer = None
        try:
            for table in reader():
                out = scorer(table)
                if writer is None:
                    writer = pq.ParquetWriter(fs.open_output_stream(f"{root}/part-{n:05d}.parquet"), out.schema)
                    n += 1
                writer.write_table(out)
        finally:
            if writer is not None:
                writer.close()


def _check_input(fitted: FittedNet, src, footers: list, wanted: list[str], id_column: str | None,
                 text: dict | None) -> None:
    """Every input file has the columns scoring reads, and the model's numeric features hold
    numbers (naming the file, the column and its first cell that is not a number)."""
    for f, schema, _ in footers:
        missing = [c for c in wanted if schema.get_field_index(c) < 0]
        if missing:
            hint = " (pass --id COLUMN, or --no-id)" if id_column in missing else ""
            if fitted.text is not None and not text:
                hint += (f" (the model reads text: give it its term columns, or the document column(s) "
                         f"{fitted.text['text_columns']})")
            more = f" and {len(missing) - 20} more" if len(missing) > 20 else ""
            raise data_mod.DataError(f"{redact(f)}: no column(s) {missing[:20]}{more}{hint}"
                                     f"{missing_columns_note(missing[:20], schema.names)}")
        if not text:
            categorical = set(fitted.coding.dtypes()) if fitted.coding is not None else set()
            typed = [(c, schema.field(c).type) for c in fitted.feature_names if c not in categorical]
            wrong = [(c, t) for c, t in typed if not data_mod.sources.is_number(t)]
            if wrong:
                from ..validation import first_text_cell
                one = data_mod.sources.Source(f, [f], src.filesystem)
                column = pa.concat_tables(data_mod.reading.tables_here(one, [wrong[0][0]])).column(0).to_pandas()
                raise data_mod.DataError(f"{redact(f)}: feature column {wrong[0][0]!r} holds {wrong[0][1]}, not numbers"
                                         f"{f' (and {len(wrong) - 1} more such columns)' if len(wrong) > 1 else ''}"
                                         f"{first_text_cell(column.rename(wrong[0][0]))}: write it as numbers")


def predict_parquet(model, input_path, output: Where, *, id_column: str | None = "id",
                    carry: list[str] | None = None, batch_size: int = 4096, concurrency: int = 2,
                    log_dir: Location | None = None, log=lambda msg: None, progress_seconds: float | None = None) -> dict:
    """Score Parquet input into Parquet shards under ``output`` (atomically: the directory appears
    complete or not at all; a previous output is replaced only on success). On an object store
    (``output`` a URI) the shards go under a new version prefix and a manifest makes them the
    output (``storage.published``). ``model``: a fitted ``NeurCAM`` or its ``FittedNet`` (only
    the state scoring needs, ``for_scoring()``, goes to the actors). Input whose columns take at
    most ``reading.LOCAL_PASS_BYTES`` is scored in this process; larger input with Ray Data over
    ``concurrency`` actors (Ray started if it is not), with this process's stderr (Ray's lines) in
    ``log_dir`` when given, and a progress line through ``log`` at most every ``progress_seconds``
    (default ``NEURCAM_PREDICT_PROGRESS_S``, else ``PROGRESS_SECONDS``)."""
    fitted = model.for_scoring() if isinstance(model, FittedNet) else model.scoring_model()
    src = data_mod.resolve(input_path)
    output = Location(output)   # resolved once: the checks and the write
    data_mod.sources.refuse_output_inside(output, src, "prediction output")
    footers = data_mod.footers(src)
    n_rows = sum(n for _, _, n in footers)
    text, wanted = _checked_columns(fitted, src, footers, input_path, output, id_column, carry)
    n_bytes = data_mod.sources.column_bytes(src, footers[0][1], n_rows, wanted)
    here = data_mod.reading.small_enough(n_bytes)
    kwargs = dict(fitted=fitted, id_column=id_column, carry=list(carry or []), text=text)
    rows_per_file = {f: n for f, _, n in footers}
    t0, summary = time.perf_counter(), {}

    def write(root: str, fs) -> None:
        """Shards into ``root`` (a folder or prefix in the pyarrow file system ``fs``), checked, then
        the marker."""
        if here:
            with in_process(_Scorer, **kwargs) as scorer:
                _score_here(scorer, src, wanted, rows_per_file, batch_size, root, fs)
                met = scorer.met
        else:
            ds = data_mod.reading.dataset(src, wanted, rows_per_file=rows_per_file, bytes_per_row=n_bytes / n_rows,
                                          paths=True)
            met = _score_with_ray(ds, batch_size, concurrency, kwargs, root, fs,
                                  progress=(n_rows, log, _progress_every(progress_seconds)))
        summary.update(unseen_levels=met["unseen"], missing_cells=met["missing"])
        if met_line(met):
            log(met_line(met))
        files = sorted(i.path for i in fs.get_file_info(FileSelector(root)) if i.path.endswith(".parquet"))
        written = sum(pq.read_metadata(f, filesystem=fs).num_rows for f in files)
        if written != n_rows:
            raise TrainingError(f"scoring wrote {written} rows for {n_rows} input rows: output discarded")
        summary.update(n_rows=n_rows, files=len(files), seconds=round(time.perf_counter() - t0, 2),
                       input=redact(str(input_path)), where="here" if here else "ray")
        with fs.open_output_stream(f"{root}/{PREDICTIONS_MARKER}") as f:
            f.write(json.dumps(summary, indent=1).encode())

    if here:
        log(f"scoring {n_rows:,} rows from {len(footers)} file(s) in this process (small input: Ray not needed)")
        write_dataset(output, write, marker=PREDICTIONS_MARKER)
        return summary
    with stderr_to_log(log_dir, "predict", "Ray's", log) if log_dir is not None else nullcontext():
        with ray_for(min_cpus=concurrency + 1):   # the scoring actors, plus a CPU for the reads
            log(f"scoring {n_rows:,} rows from {len(footers)} file(s) with Ray Data, "
                f"{data_mod.reading.pool_size(concurrency)} scoring actor(s)")
            write_dataset(output, write, marker=PREDICTIONS_MARKER)
    return summary


def _progress_every(seconds: float | None) -> float:
    """Seconds between the Ray pass's progress lines: as given, else ``NEURCAM_PREDICT_PROGRESS_S``,
    else ``PROGRESS_SECONDS``."""
    return seconds if seconds is not None else float(os.environ.get("NEURCAM_PREDICT_PROGRESS_S", PROGRESS_SECONDS))


def _checked_columns(fitted: FittedNet, src, footers: list, input_path, output, id_column, carry):
    """``(text, wanted)``: the model's vocabulary when the input holds documents, and the columns
    the pass reads; before any pass, refused: empty input, missing or mistyped columns, kept
    columns named like a score, an output disk without room for the scores."""
    from ..storage import check_room
    n_rows = sum(n for _, _, n in footers)
    if n_rows == 0:
        raise data_mod.DataError(f"the input at {input_path!r} is empty: {len(footers)} file(s), 0 rows")
    text = _raw_text(fitted, footers[0][1])
    inputs = list(text["text_columns"]) if text else list(fitted.feature_names)
    wanted = list(dict.fromkeys(inputs + ([id_column] if id_column else []) + list(carry or [])))
    _check_input(fitted, src, footers, wanted, id_column, text)
    refuse_collisions(([id_column] if id_column else []) + list(carry or []),
                      ([] if id_column else [ROW_NUMBER])
                      + scored_columns(fitted.cluster_ids, ROW_TERMS, **file_layout(fitted.cluster_ids)))
    check_room(output, n_rows * 8 * (len(fitted.cluster_ids) + 2 * ROW_TERMS + 2))   # the scores, uncompressed
    return text, wanted


def _score_with_ray(ds, batch_size: int, concurrency: int, kwargs: dict, root: str, fs, progress: tuple) -> dict:
    """The Ray Data scoring pass; returns what its actors met (unseen levels, missing cells),
    summed by a ``_Met`` actor of no CPU."""
    import ray

    from ..data.progress import watched
    total, say, every = progress
    counter = beside_driver(_Met)   # a lost worker node must not take the counts with it
    ds = data_mod.reading.map_with_actors(ds, _Scorer, batch_size, concurrency, counter=counter, **kwargs)
    with watched(ds, _Scorer.__name__, total, say, every=every):
        data_mod.reading.run_pass(ds.write_parquet, root, filesystem=fs)
    return ray.get(counter.totals.remote())
