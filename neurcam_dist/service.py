"""The front door: every thing the service does, as one function each.

The ``neurcam`` command parses its arguments and calls these; the Ray Job entrypoints (``jobs/``)
go through the command; a Python user can call them directly. Each validates its input up front
and raises a class of ``neurcam_dist.errors`` (a ``ValueError`` for bad input, nothing done; a
``RuntimeError`` for a run that failed).

- ``fit``: fit in memory on a CSV or Parquet table; write the run folder
- ``explain``: shape graphs, importance and the HTML report of a model over a table
- ``predict``: score Parquet rows (in this process when small, else with Ray Data)
- ``train``: train on Ray over sharded Parquet as a job config says (MLflow with ``tracking:``)
- ``search``: the Ray Tune search of seeds and hyperparameters; lowest inertia wins
- ``recluster``: re-cluster the newest snapshot; promote only a better model, ids kept stable
- ``demo``: the whole service on the bundled digits
- ``validate``: check a job config without running it
- ``promote``: move a registry alias
- ``submit``: run a job on a Ray cluster and follow it
- ``featurize_text``: documents to term columns and sentence embeddings
- ``generate``: bundled or synthetic example data as Parquet shards
- ``sample``: a seeded (per-class) sample of a table as Parquet shards
"""
from __future__ import annotations

import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError, DataError, ModelFileError
from .redaction import redact
from .uris import Location, is_uri

__all__ = ["ExplainResult", "ExportResult", "FitResult", "PredictSettings", "demo", "demo_config", "demo_data", "explain", "export",
           "featurize_text", "fit",
           "generate", "load_config", "load_model", "predict", "predict_settings", "promote", "recluster",
           "sample", "search", "submit", "train", "validate"]


# ---------------------------------------------------------------- configs and models
def load_config(path, overrides: dict | None = None):
    """A job config from YAML with the environment's and ``overrides``' values applied.

    Parameters
    ----------
    path : str
        The YAML file.
    overrides : dict, optional
        ``{"model.epochs": 50, ...}`` (``--set``).

    Returns
    -------
    JobConfig
        Validated; its ``notes()`` say which environment variables applied.
    """
    from .config import load_config as _load
    return _load(path, overrides or {})


def load_model(ref: str):
    """A ``NeurCAM`` from a model directory or an MLflow model URI (``models:/NAME@alias``,
    ``runs:/ID/model``); for a URI, credentials in the tracking URI are taken out of it first."""
    if ref.startswith(("models:/", "runs:/", "mlflow-artifacts:/")):
        from . import tracking
        tracking.uri.point_at()
        return tracking.load_estimator(ref)
    from .estimator import NeurCAM
    return NeurCAM.load(ref)


def load_fitted(ref: str):
    """The fitted state (``model.FittedNet``) of a model directory or an MLflow model URI: what
    scoring reads. A directory is read without the estimator class, so ``neurcam predict``
    imports neither scikit-learn nor SciPy (``benchmarks/startup.py`` times it)."""
    if ref.startswith(("models:/", "runs:/", "mlflow-artifacts:/")):
        return load_model(ref).fitted_
    from .model import FittedNet
    from .params import refuse_unknown_params
    from .storage import read_model_dir
    config, state = read_model_dir(ref)
    refuse_unknown_params(config, ref)
    return FittedNet.from_dict(config, state, "cpu", where=str(ref))


# ---------------------------------------------------------------- in memory
@dataclass
class FitResult:
    """What ``fit`` measured (``metrics``, as written to ``metrics.json``) and wrote (``output``)."""

    estimator: object
    metrics: dict
    output: str
    report_error: str | None = None   # the report was asked for and failed (the model was written)


def fit(data: str, output: str, *, features: list[str] | None = None, label: str | None = None,
        params: dict | None = None, report: bool = False, encoding: str = "utf-8", delimiter: str | None = None,
        decimal: str | None = None, id_column: str | None = None, exclude: list[str] | None = None) -> FitResult:
    """Fit a ``NeurCAM`` in memory on a CSV or Parquet table and write the run folder.

    Parameters
    ----------
    data : str
        A CSV(.gz) or Parquet file, or a Parquet folder.
    output : str
        The run folder (``model/``, ``metrics.json``, ``config.json``, each row's assignment and
        ``report/``: docs/cli.md), a path or URI; checked before training, published atomically.
    features : list of str, optional
        The feature columns (default: every numeric column that is not id-like or the label).
    label : str, optional
        A ground-truth column, for evaluation only (ARI, NMI, ACC).
    params : dict, optional
        Hyperparameters (``neurcam_dist.params``); ``verbose`` shows the progress bar.
    report : bool
        Also write the explanation report.
    encoding, delimiter, decimal : str
        A CSV file's encoding, field separator and decimal mark (the last two told when None).
    id_column : str, optional
        The rows' id (never a feature): carried into the assignments and naming the report's
        typical, borderline and chosen rows (default: the one id-like column, when there is one).
    exclude : list of str, optional
        Columns automatic feature selection leaves out (a second id, a free-text note).

    Returns
    -------
    FitResult
        The fitted estimator, its metrics and where the run went.

    Examples
    --------
    >>> import tempfile; from pathlib import Path; from neurcam_dist import service
    >>> from neurcam_dist.data.synthetic import mixed_table
    >>> d = Path(tempfile.mkdtemp()); mixed_table(300, seed=0)[0].to_csv(d / "customers.csv", index=False)
    >>> run = service.fit(str(d / "customers.csv"), str(d / "run"),
    ...                   params={"n_clusters": 3, "epochs": 12, "warmup_epochs": 4, "verbose": False})
    >>> run.estimator.n_clusters_, (d / "run" / "model" / "config.json").is_file()
    (3, True)
    """
    from .data.tables import is_csv, read_table
    from .estimator import NeurCAM
    from .outputs import check_run_target
    from .params import check_params
    params = dict(params or {})
    check_params(params)                   # a bad value is refused before the data is read
    assignments = "assignments.csv" if is_csv(data) else "assignments.parquet"
    check_run_target(output, report=report, extra=(assignments,), inputs=[data])
    X, y, ids = _fit_table(read_table(data, encoding, delimiter=delimiter, decimal=decimal), features, label,
                           id_column, params, exclude)
    k = params.get("n_clusters", 10)
    _check_fit_outputs(output, ids, len(X), 12 if k == "auto" else k, assignments, report)
    t0 = time.perf_counter()
    est = NeurCAM(**params).fit(X)
    result = _fit_metrics(est, X, y, time.perf_counter() - t0)
    failed = _write_fit(output, est, result, data, (X, y, ids), label, assignments, report)
    return FitResult(estimator=est, metrics=result, output=output, report_error=failed)


def _write_fit(output, est, result: dict, data: str, table: tuple, label: str | None, assignments: str,
               report: bool) -> str | None:
    """``fit``'s run folder: the model, metrics, the config it ran as, each row's assignment and,
    asked for, the report; returns the report's error (the model is kept)."""
    import json

    from .outputs import write_run
    X, y, ids = table
    made = {"command": "fit", "data": redact(str(data)), "features": list(map(str, X.columns)), "label": label,
            "params": dict(est.get_params())}
    try:
        return write_run(output, est, result, json.dumps(made, indent=1, default=str),
                         extra={assignments: _assignments(est, X, ids, assignments)},
                         report=_explanation_or_error(est, X, y, label) if report else None, exclusive=True)
    except OSError as exc:
        raise _unwritten(exc, est, output) from None


def _fit_metrics(est, X, y, seconds: float) -> dict:
    """``metrics.json`` of a fit: its size, time and end, the clusters used (and chosen, with
    ``n_clusters='auto'``), the selected terms and the scores (with a label, against it)."""
    from . import metrics as metrics_mod
    from .validation import empty_clusters_record
    chosen = {"k_choice": {key: est.k_choice_[key] for key in ("k", "sure", "runner_up", "rule")}} \
        if est.k_choice_ else {}
    return {"n_rows": int(len(X)), "n_features": int(X.shape[1]), "fit_seconds": round(seconds, 2),
            "epochs": est.n_iter_, "stop_reason": est.history_["stop_reason"],
            "n_clusters": est.n_clusters_, "n_clusters_used": est.history_["n_clusters_used"],
            **empty_clusters_record(est.history_), **chosen,
            "selected_features": est.selected_features_, "selected_pairs": [list(p) for p in est.selected_pairs_],
            **metrics_mod.scores(est.clustering_space(X), est.predict(X), y)}


def _fit_table(df, features, label, id_column, params: dict, exclude: list[str] | None = None):
    """``(X, y, ids)`` of the table ``fit`` read: the features (always said on stderr: what was
    used and why the rest was not), the label's values and the id columns set aside. The id
    (``id_column``, else the one id-like column) is never a feature and names ``X``'s rows, so
    the report's rows read as in the assignments."""
    import pandas as pd

    from .data.tables import id_columns, split_columns
    from .validation import missing_columns_note
    if id_column is not None and id_column not in df.columns:
        raise ConfigError(f"--id column {id_column!r} is not in the data"
                          f"{missing_columns_note([id_column], list(df.columns))}")
    table = df if id_column is None else df.drop(columns=[id_column])
    tokens = tuple(params.get("missing_values") or ())
    if tokens:   # before the features are chosen: '?' in a numbers column is a missing cell, not a typo
        from .columns import without_tokens
        table = table.apply(lambda col: without_tokens(col, tokens))
    named = params.get("categorical_features")
    X, y = split_columns(table, features, label, categorical=named if isinstance(named, list) else None,
                         numeric=params.get("numeric_features"),
                         max_levels=params.get("max_levels", 64), exclude=exclude)
    ids = df[([id_column] if id_column else []) + id_columns(table, X.columns, label)]
    name = id_column or (ids.columns[0] if len(ids.columns) == 1 else None)
    if name is not None:
        print(f"id: {name} (carried into the assignments; names the report's rows)", file=sys.stderr)
        _warn_ids(name, df[name], lambda line: print(f"neurcam: {line}", file=sys.stderr))
        X = X.set_axis(pd.Index(df[name].to_numpy(), name=name), axis=0)   # the model records it (id_column_)
    return X, y, ids


def _check_fit_outputs(output, ids, n_rows: int, n_clusters: int, assignments: str, report: bool) -> None:
    """Before training, once the table is read: no id column named like a score column, and room
    on the output's disk for what the run writes."""
    from .explain.assignments import file_layout, refuse_collisions, scored_columns
    from .storage import check_room
    refuse_collisions(ids.columns, scored_columns(range(n_clusters), 3, **file_layout(range(n_clusters))),
                      f"{assignments} as id columns")
    check_room(output, _fit_output_bytes(n_rows, n_clusters, report))


def _fit_output_bytes(n_rows: int, n_clusters: int, report: bool) -> int:
    """What ``fit`` writes, about: the assignments (a row's ids, cluster, probability and three
    terms), the model, the report (its page, tables and plots)."""
    return n_rows * 160 + n_clusters * 64 * 1024 + 8 * 2**20 + (32 * 2**20 if report else 0)


def _unwritten(exc: OSError, est, output):
    """The error for outputs that could not be written after training: the model is saved in a
    temporary folder when it can be (so the training is not lost), and the message says where."""
    import tempfile
    why = unreachable(exc, output)
    try:
        kept = Path(tempfile.mkdtemp(prefix="neurcam-unsaved-")) / "model"
        est.save(kept)
        where = f"the fitted model is kept at {kept} (NeurCAM.load it, or free space and run the same command again)"
    except OSError as again:
        where = (f"the fitted model could not be kept either ({again.strerror or again}): free space and run the "
                 f"same command again (it is seeded: the same model)")
    from .errors import OutputError
    return OutputError(f"{why}; {where}")


def _explanation_or_error(est, X, y=None, label: str | None = None):
    """``est``'s explanation of ``X`` (with the clusters against ``y`` when there is a label
    column), or the exception it raised: a report is never worth the model (``outputs.write_run``
    writes the error as ``report/error.txt``)."""
    from .explain import build_explanation
    try:
        return build_explanation(est, X, labels=y, label_name=label)
    except Exception as exc:   # noqa: BLE001
        return exc


def _assignments(est, X, ids, name: str) -> bytes:
    """Each row's ids (the columns set aside), ``cluster``, its ``probability`` and the three
    terms that pushed it hardest toward its cluster, as CSV or Parquet bytes."""
    import io

    from .explain.assignments import assignments, file_layout
    scored = assignments(est.fitted_, est.fitted_.encode(X), top_terms=3, **file_layout(est.cluster_ids_))   # chunked
    frame = ids.reset_index(drop=True).assign(**scored)
    buf = io.BytesIO()
    if name.endswith(".csv"):
        frame.to_csv(buf, index=False)
    else:
        frame.to_parquet(buf, index=False)
    return buf.getvalue()


def choose_k(data: str, output: str, *, k="2-12", seeds: int = 3, features: list[str] | None = None,
             label: str | None = None, id_column: str | None = None, params: dict | None = None, terms: bool = False,
             encoding: str = "utf-8", delimiter: str | None = None, decimal: str | None = None, say=print,
             exclude: list[str] | None = None):
    """Propose a number of clusters for a CSV or Parquet table (``neurcam_dist.choosing``), read
    as ``fit`` reads it, and write ``OUTPUT/choice.json`` and ``OUTPUT/choice.html`` in one swap.

    Parameters
    ----------
    data, output : str
        The table (as ``fit`` takes it) and the folder to write (replaced whole when an earlier
        ``choose-k`` wrote it; refused when it holds anything else).
    k : str or iterable of int
        The values of K: ``"2-12"``, ``"3,5,8"`` or a list.
    seeds : int
        Seeds per K (2 at least: stability is their agreement).
    features, label, id_column, encoding, delimiter, decimal, exclude
        As for ``fit``; the label is for evaluation only (each K's ARI with it).
    params : dict, optional
        Other hyperparameters of every fit (``n_clusters`` is what is chosen).
    terms : bool
        Also fit the proposed K with fewer terms (the smallest within 1.02x of the full model).
    say : callable
        Where the progress goes, K by K.

    Returns
    -------
    choosing.KChoice
    """
    import json

    from .choosing import check_request, choice_html, k_range
    from .data.tables import read_table
    from .estimator import choose_k as fit_each
    from .params import check_params
    from .storage import atomic_directory
    params = {key: v for key, v in (params or {}).items() if key != "verbose"}
    check_params(params)
    if "n_clusters" in params:
        raise ConfigError("--n-clusters is what choose-k chooses: give the values to compare as --k (2-12)")
    ks = k_range(k)
    check_request(ks, seeds)          # seeds, before the data is read
    _check_output(output, [data], 16 * 2**20)
    df = read_table(data, encoding, delimiter=delimiter, decimal=decimal)
    X, y, _ = _fit_table(df, features, label, id_column, params, exclude)
    check_request(ks, seeds, len(X))
    say(f"choosing K among {ks[0]}..{ks[-1]} on {min(len(X), 5000):,} rows, {seeds} seeds per K")
    choice = fit_each(X, y, ks, seeds=seeds, terms=terms, describe=True, say=say, **params)
    record = {"data": redact(str(data)), "features": list(map(str, X.columns)), "label": label, **choice.to_dict()}
    text = json.dumps(record, indent=1, default=float)

    def write(tmp: Path) -> None:
        (tmp / "choice.json").write_text(text + "\n")
        (tmp / "choice.html").write_text(choice_html(choice, title=f"Choosing K: {Path(str(data)).name}"))
    atomic_directory(output, write, marker="choice.json")
    return choice


def choose_k_on_ray(config, *, k="2-12", seeds: int = 3, name: str | None = None):
    """``choose_k`` for data on Ray, as a job config (a ``JobConfig``, a dict or a YAML path) says:
    a Ray Tune search with one trial per (K, seed) on every row, then the same measurements and
    rule (``distributed.tuner.choose_k``); writes ``OUTPUT/choice/`` and returns the ``KChoice``."""
    from .choosing import k_range
    from .distributed import tuner
    k_range(k)                     # a bad range is refused before Ray starts
    return tuner.choose_k(config, k, seeds, name=name)


@dataclass
class ExplainResult:
    """An explanation written to ``output`` (``report`` is its HTML file) over ``n_rows`` rows."""

    explanation: object
    report: str
    output: str
    n_rows: int

    def top_terms(self, n: int = 3) -> str:
        """``"term (importance), ..."`` for the ``n`` most important terms."""
        from .explain.explanation import fmt
        top = self.explanation.importance[:n]
        return ", ".join(f"{r['term']} ({fmt(r['importance'], top[0]['importance'])})" for r in top)


def explain(model: str, data: str, output: str, *, sample: int = 1_000_000, grid_size: int = 128,
            pair_grid_size: int = 32, encoding: str = "utf-8", delimiter: str | None = None,
            decimal: str | None = None, label: str | None = None, rows: list | None = None,
            id_column: str | None = None, no_id: bool = False, compare: str | None = None,
            say=print) -> ExplainResult:
    """Shape graphs, purified pair heat maps, importance and the HTML report of ``model`` over the
    rows of ``data``, written to ``output``.

    Parameters
    ----------
    model : str
        A model directory or an MLflow model URI.
    data : str
        A CSV or Parquet table with the model's feature columns (only those are read).
    output : str
        The folder for ``explanation.json``, ``tables/``, ``plots/`` and ``report.html``.
    sample : int
        Explain a seeded sample of this many rows when the data has more (0: every row).
    grid_size, pair_grid_size : int
        Points along each feature's axis for the shape graphs and the pair heat maps.
    encoding, delimiter, decimal : str
        A CSV file's format (as ``fit``'s).
    label : str, optional
        A column the clusters are compared with (never used to cluster): label table, ARI, NMI.
    rows : list, optional
        Rows to show one by one (terms as bars, values, what would move them): values of
        ``id_column``, else 0-based positions; looked up before any sampling.
    id_column, no_id : str, optional; bool
        The column that names rows (``rows`` and the report's): by default the model's
        (``NeurCAM.id_column_``) when ``data`` has it; ``no_id``: 0-based positions, whatever.
    compare : str, optional
        An earlier version (directory or MLflow URI): the report shows how the rows moved between
        its cluster ids and the model's, and which terms now drive each cluster.
    say : callable
        Where the lines about a sample, the chosen rows and the comparison go.
    """
    from .explain.build import Compared
    from .explain.report import write_report
    where = Location(output)   # resolved once here: the checks and the report go there
    _check_explain(data, where, model, compare, sample, grid_size, pair_grid_size, id_column, rows, no_id)
    est = load_model(model)
    old = load_model(compare) if compare else None
    csv = {"delimiter": delimiter, "decimal": decimal}
    id_column = id_column or (None if no_id else _model_id(est, data, encoding, csv))
    features = [str(c) for c in est.feature_names_in_]
    df = _explained_table(data, encoding, csv,
                          {"the model's feature columns": features,
                           f"the feature columns of {compare}": [str(c) for c in old.feature_names_in_] if old else []},
                          {"label": label, "--id": id_column})
    _warn_ids(id_column, df.get(id_column) if id_column else None, say)
    chosen = _chosen_rows(df, rows, id_column, data) if rows else None
    df = _sampled(df, sample, say)
    if id_column:
        df = df.set_index(id_column, drop=False)
    compared = None if old is None else Compared(old, df[[str(c) for c in old.feature_names_in_]],
                                                 old_name=redact(compare), new_name=redact(model))
    expl = _explained(est, df, label, None if chosen is None else chosen[features], compared, say,
                      grid_size=grid_size, pair_grid_size=pair_grid_size)
    return ExplainResult(explanation=expl, report=str(write_report(expl, where)), output=output, n_rows=len(df))


def monitor(model: str, data: str, output: str, *, reference: str | None = None, encoding: str = "utf-8",
            delimiter: str | None = None, decimal: str | None = None, tracking_uri: str | None = None,
            pushgateway: str | None = None, say=print):
    """Compare a snapshot of new rows with ``model``'s training data (``NeurCAM.monitor``) and
    write ``OUTPUT/drift.json``, ``OUTPUT/monitor.html`` and ``OUTPUT/monitor.prom`` (Prometheus'
    text format) in one swap; then, for a model from MLflow or with ``tracking_uri``, log the
    verdict as a run of the experiment ``neurcam-monitor``, and push the gauges to ``pushgateway``.

    Parameters
    ----------
    model : str
        A model directory or an MLflow model URI (``models:/NAME@ALIAS``).
    data : str
        The snapshot: a CSV or Parquet file, a Parquet folder or an object-store prefix, with the
        model's feature columns (only those are read).
    output : str
        The folder to write (replaced whole when an earlier ``monitor`` wrote it).
    reference : str, optional
        A table of the model's training rows, for a model saved without a drift reference (a
        seeded sample of at most 20,000 of its rows is taken).
    encoding, delimiter, decimal : str
        A CSV file's format (as ``fit``'s).
    tracking_uri : str, optional
        The MLflow tracking store to log the verdict to (default: the model's, for a model URI).
    pushgateway : str, optional
        A Prometheus Pushgateway (``host:9091``) to push the gauges to.
    say : callable
        Where the lines about the reference and the tracking run go.

    Returns
    -------
    monitor.Drift

    Examples
    --------
    >>> import tempfile; from pathlib import Path; from neurcam_dist import NeurCAM, service
    >>> from neurcam_dist.data.synthetic import mixed_table
    >>> d = Path(tempfile.mkdtemp()); table = mixed_table(600, seed=0)[0].drop(columns="customer_id")
    >>> NeurCAM(n_clusters=3, epochs=12, warmup_epochs=4, verbose=False).fit(table).save(d / "model")
    >>> table.assign(usage=table["usage"] + 3).to_csv(d / "new.csv", index=False)
    >>> drift = service.monitor(str(d / "model"), str(d / "new.csv"), str(d / "drift"))
    >>> drift.alert, drift.drifted_features()[0]
    (True, 'usage')
    >>> sorted(p.name for p in (d / "drift").iterdir())
    ['drift.json', 'monitor.html', 'monitor.prom']
    """
    _check_output(output, [data, model, reference], 16 * 2**20)
    est = load_model(model)
    csv = {"delimiter": delimiter, "decimal": decimal}
    needed = {"the model's feature columns": [str(c) for c in est.feature_names_in_]}
    rows = _reference_table(est, model, reference, encoding, csv, needed, say)
    drift = _drift(est, data, rows, encoding, csv, needed)
    record = {"model": redact(model), "snapshot": redact(str(data)), **drift.to_dict()}
    _publish_drift(record, drift, output, f"Drift: {Path(str(data)).name}", pushgateway, say)
    if tracking_uri or model.startswith(("models:/", "runs:/")):
        _track_drift(record, output, tracking_uri, say)
    return drift


def _check_output(output, inputs: list, room: int) -> None:
    """An output folder, before any work: it replaces nothing of another's (nor an input), it can
    be written, and its disk has ``room`` bytes."""
    from .storage import check_room, check_writable, refuse_overwrite
    refuse_overwrite(output, inputs=inputs)
    check_writable(output, "--output")
    check_room(output, room)


def _track_drift(record: dict, output: str, tracking_uri: str | None, say) -> None:
    """The monitor's verdict as a run of the experiment ``neurcam-monitor`` (``tracking.log_drift``)."""
    from . import tracking
    tracking.use(tracking_uri, experiment=tracking.monitoring.EXPERIMENT)
    run_id = tracking.log_drift(record, Location(output).path, record["model"])
    say(f"MLflow: run {run_id} of the experiment {tracking.monitoring.EXPERIMENT!r}")


def _reference_table(est, model: str, reference: str | None, encoding: str, csv: dict, needed: dict, say):
    """The training rows ``monitor --reference`` names (a seeded sample of ``REFERENCE_ROWS`` at
    most), or None when the model carries its reference; refused when it carries none."""
    from .estimator import REFERENCE_ROWS
    if reference is None:
        if est.fitted_.drift_reference is None:
            raise ModelFileError(f"{redact(model)} carries no drift reference (it was saved by a release before "
                                 f"monitoring): give a table of its training rows, 'neurcam monitor --reference "
                                 f"TABLE'")
        return None
    rows = _explained_table(reference, encoding, csv, needed, {})
    if len(rows) > REFERENCE_ROWS:
        rows = rows.sample(REFERENCE_ROWS, random_state=0).sort_index()
    say(f"reference: {len(rows):,} rows of {redact(reference)}")
    return rows


def _publish_drift(record: dict, drift, output: str, title: str, pushgateway: str | None, say) -> None:
    """``drift.json``, the page and ``monitor.prom`` into ``output`` in one swap; the gauges pushed
    to ``pushgateway`` when given (which needs prometheus-client: without it, refused)."""
    from .monitor.page import write_monitor
    gauges = _drift_gauges(record, None if pushgateway else say)
    extra = {}
    if gauges is not None:
        from prometheus_client import generate_latest
        extra["monitor.prom"] = generate_latest(gauges)
    write_monitor(output, record, drift, title, extra)
    if pushgateway:
        from .ops.history import push_drift
        push_drift(gauges, pushgateway, record["model"])


def _drift_gauges(record: dict, say):
    """The monitor's Prometheus gauges (``ops.history.drift_gauges``), or None, said, without
    prometheus-client (the ``ray`` extra); ``say`` None: its absence is an error."""
    try:
        from .ops.history import drift_gauges
        return drift_gauges(record, record["model"])
    except ModuleNotFoundError as exc:
        if exc.name != "prometheus_client" or say is None:
            raise
        say("monitor.prom not written: prometheus-client is not installed (pip install 'neurcam-dist[ray]')")
        return None


def _drift(est, data: str, reference, encoding: str, csv: dict, needed: dict):
    """``est``'s drift on snapshot ``data``: a CSV file read here, Parquet (a file, a folder, an
    object-store prefix) in one streamed pass (``distributed.monitoring``: Ray Data when large)."""
    from .data.tables import is_csv
    if is_csv(data):
        df = _explained_table(data, encoding, csv, needed, {})
        return est.monitor(df[needed["the model's feature columns"]], reference=reference)
    from .distributed.monitoring import monitor_parquet
    est.drift_reference(reference)
    return monitor_parquet(est, data, log=lambda m: print(f"[neurcam] {m}", file=sys.stderr, flush=True))


def _warn_ids(name: str | None, values, say) -> None:
    """A warning through ``say`` when id column ``name``'s ``values`` repeat or are missing
    (``validation.id_note``); nothing without an id column."""
    from .validation import id_note
    note = id_note(name, values) if name else None
    if note:
        say(f"warning: {note}")


def _sampled(df, sample: int, say):
    """``df``, or a seeded sample of ``sample`` of its rows (in their order) when it has more, said."""
    if sample and len(df) > sample:
        say(f"explaining a seeded sample of {sample:,} of the {len(df):,} rows (--sample; 0: all of them)")
        return df.sample(sample, random_state=0).sort_index()
    return df


def _model_id(est, data: str, encoding: str, csv: dict) -> str | None:
    """The model's id column (``NeurCAM.id_column_``) when ``data`` has it, else None."""
    if est.id_column_ is None:
        return None
    from .data.tables import table_columns
    return est.id_column_ if est.id_column_ in map(str, table_columns(data, encoding, **csv)) else None


def _explained(est, df, label: str | None, chosen, compared, say, **grids):
    """``est``'s explanation of ``df``'s rows, complete (labels, the chosen rows' views, the
    comparison), with the chosen rows and the comparison said."""
    from .explain.build import build_explanation
    from .explain.compare import comparison_text
    from .explain.examples import row_text
    features = [str(c) for c in est.feature_names_in_]
    expl = build_explanation(est, df[features], labels=df[label] if label else None, label_name=label, rows=chosen,
                             compared=compared, **grids)
    for record in (expl.examples or {}).get("rows", []):
        say(row_text(record))
    if expl.comparison is not None:
        say(comparison_text(expl.comparison))
    return expl


def _check_explain(data, output, model, compare, sample: int, grid_size: int, pair_grid_size: int,
                   id_column, rows, no_id: bool = False) -> None:
    """``explain``'s arguments and output, before any model or data is read: the grids, the
    sample, ``--id`` with ``--show``, an output that replaces nothing of another's and has room."""
    from .storage import check_room, check_writable, refuse_overwrite
    _check_grids(grid_size, pair_grid_size)
    _one_id(id_column, no_id)
    if sample < 0:
        raise ConfigError(f"--sample must be 0 (every row) or more, got {sample}")
    if id_column and not rows:
        raise ConfigError("--id names the column --show looks rows up in: give --show as well")
    refuse_overwrite(output, inputs=[data, model, compare])
    check_writable(output, "--output")
    check_room(output, 64 * 2**20)   # the page, its plots and tables: a few MB; room to spare


def _check_grids(grid_size: int, pair_grid_size: int) -> None:
    """``--grid-size`` and ``--pair-grid-size`` of ``explain`` and ``export``: 2 points at least."""
    for flag, value in (("--grid-size", grid_size), ("--pair-grid-size", pair_grid_size)):
        if value < 2:
            raise ConfigError(f"{flag} must be at least 2 (points along each feature's axis), got {value}")


def _explained_table(data: str, encoding: str, csv: dict, needed: dict[str, list[str]], named: dict):
    """The columns of ``data`` an explanation reads: each list of ``needed`` (what it is -> its
    columns) and each column of ``named`` (flag -> column or None); ``DataError`` naming any missing."""
    from .data.tables import read_table, table_columns
    from .validation import missing_columns_note
    wanted = [c for cols in needed.values() for c in cols] + [c for c in named.values() if c]
    df = read_table(data, encoding, columns=list(dict.fromkeys(wanted)), **csv)
    for what, cols in needed.items():
        missing = [c for c in cols if c not in df.columns]
        if missing:
            names = [str(c) for c in table_columns(data, encoding, **csv)]
            raise DataError(f"{data} lacks {what} {missing}{missing_columns_note(missing, names)}")
    for flag, col in named.items():
        if col and col not in df.columns:
            names = [str(c) for c in table_columns(data, encoding, **csv)]
            raise DataError(f"{data} has no {flag} column {col!r}{missing_columns_note([col], names)}")
    return df


def _chosen_rows(df, rows: list, id_column: str | None, data: str):
    """The rows of ``df`` that ``rows`` names (values of ``id_column``, else 0-based positions),
    in the order given, indexed by what named them; ``DataError`` naming any not found. An id
    that several rows hold names every one of them, each shown as ``ID (row N)`` (N: its 0-based
    position in the input)."""
    if id_column:
        import numpy as np
        keys = df[id_column].astype(str)
        found = {str(r): np.flatnonzero((keys == str(r)).to_numpy()) for r in rows}
        missing = [r for r, at in found.items() if not len(at)]
        if missing:
            raise DataError(f"--show {missing} not found in column {id_column!r} of {data} "
                            f"(e.g. {', '.join(keys.head(3))})")
        at = [(str(r), int(i), len(found[str(r)]) > 1) for r in dict.fromkeys(map(str, rows)) for i in found[r]]
        picked = df.iloc[[i for _, i, _ in at]]
        return picked.set_axis([f"{r} (row {i})" if shared else r for r, i, shared in at])
    positions = []
    for r in rows:
        try:
            positions.append(int(r))
        except ValueError:
            raise DataError(f"--show {r!r} is not a row position (0-based): name an id column with --id "
                            f"to look rows up by their ids") from None
    bad = [p for p in positions if not 0 <= p < len(df)]
    if bad:
        raise DataError(f"--show {bad} out of range: {data} has {len(df):,} rows (positions 0 to {len(df) - 1:,})")
    return df.iloc[positions].set_axis(positions)


@dataclass(frozen=True)
class ExportResult:
    """What ``export`` made: the text, where it went, and how often it agrees with ``predict``."""
    text: str
    output: str | None
    n_rows: int
    agreement: float
    engines: dict | None = None    # SQL: the agreement measured by running the query in each engine
    note: str | None = None        # what the agreement cannot tell (measured on too few rows)


# The least share of rows on which an exported query must agree with predict to be written
# (``export --min-agreement``): the shape tables interpolated on a 128-point grid agree on 99.5%
# and more of the rows they are built on; a query below this reads cells differently.
EXPORT_MIN_AGREEMENT = 0.99

# The fewest rows an export's agreement is measured on before it says nothing about the rest: 100%
# agreement on 1,000 rows bounds the query's disagreement with predict at 0.3% (95%, the rule of
# three); on a handful of rows it bounds nothing, and the shape tables span only their range.
EXPORT_MIN_ROWS = 1_000


def _few_rows_note(n_rows: int, data: str) -> str | None:
    """The warning of an export measured on fewer than ``EXPORT_MIN_ROWS`` rows."""
    if n_rows >= EXPORT_MIN_ROWS:
        return None
    return (f"the agreement was measured on {n_rows:,} row{'s' if n_rows != 1 else ''} of {redact(data)}, fewer "
            f"than {EXPORT_MIN_ROWS:,}: it proves little about other rows, and the query's shape tables span only "
            f"these rows' values; pass a larger --input (the rows the query will score, or a sample of "
            f"{EXPORT_MIN_ROWS:,} or more)")


def export(model: str, data: str, *, table: str | None = None, fmt: str = "sql", keep: list[str] | None = None,
           output: str | None = None, sample: int = 100_000, grid_size: int = 128, pair_grid_size: int = 32,
           encoding: str = "utf-8", delimiter: str | None = None, decimal: str | None = None,
           min_agreement: float = EXPORT_MIN_AGREEMENT) -> ExportResult:
    """``model`` as one standard SQL query over the warehouse table ``table``
    (``explain.sql.to_sql``: the table-only scorer, so no Python is needed to assign clusters),
    built on the rows of ``data`` (the shape tables span their range; a seeded sample of ``sample``
    when it has more); written atomically to ``output`` when given. The result says on what share
    of those rows the query's cluster equals ``predict``'s, and ``note`` warns when they are fewer
    than ``EXPORT_MIN_ROWS``. ``fmt="rules"``: a short readable rule
    per cluster with its coverage and precision on those rows (``explain.rules``; ``agreement``
    is then the rules' mean precision). The SQL's agreement is measured by running the query itself in
    SQLite (and DuckDB when installed) on those rows (``explain.sql.engine_clusters``): the lowest;
    below ``min_agreement`` nothing is written and ``DataError`` shows rows that disagree."""
    if fmt not in ("sql", "rules"):
        raise ConfigError(f"--format {fmt!r}: the formats are: sql, rules")
    if fmt == "sql" and not table:
        raise ConfigError("--format sql needs --table NAME: the table the query reads")
    _check_grids(grid_size, pair_grid_size)
    if output is not None:
        from .storage import check_writable, refuse_overwrite
        refuse_overwrite(output, inputs=[data, model], ours=_written_by_export)
        target = Location(output)
        room = target if target.is_uri else target.path.parent   # one file: the folder that takes it
        check_writable(str(room), "--output")
        from .storage import check_room
        check_room(str(room), 16 * 2**20)   # a query: ~1 MB
    est = load_model(model)
    _refuse_dates_in_sql(est, fmt)
    features = [str(c) for c in est.feature_names_in_]
    df = _explained_table(data, encoding, {"delimiter": delimiter, "decimal": decimal},
                          {"the model's feature columns": features}, {})
    if sample and len(df) > sample:
        df = df.sample(sample, random_state=0).sort_index()
    import numpy as np
    engines = {}
    if fmt == "rules":
        from .explain.rules import cluster_rules, rules_text
        rules = cluster_rules(df[features], est.predict(df[features]), est.cluster_ids_)
        text = rules_text(rules)
        agreement = float(np.mean([r.precision for r in rules]))
    else:
        found = _model_id(est, data, encoding, {"delimiter": delimiter, "decimal": decimal}) if keep is None else None
        text, engines = _agreed_query(est, df[features], table, [found, *features] if found else keep,
                                      (grid_size, pair_grid_size), min_agreement, data)
        agreement = min(engines.values())
    if output is not None:
        from .storage.published import put_text
        from .storage import write_text_atomic
        if target.is_uri:
            put_text(text, str(target))
        else:
            write_text_atomic(target.path, text)
    return ExportResult(text=text, output=output, n_rows=len(df), agreement=agreement,
                        engines=engines if fmt == "sql" else None, note=_few_rows_note(len(df), data))


def _agreed_query(est, X, table: str, keep: list[str] | None, grids: tuple[int, int], min_agreement: float,
                  data: str) -> tuple[str, dict[str, float]]:
    """``(query, engine -> agreement)``: ``est`` as SQL over ``table`` returning ``keep`` (the
    model's id beside the features, as predict writes it), built on the rows ``X`` with shape
    tables of ``grids`` points, run in each engine on those rows; refused below ``min_agreement``."""
    import numpy as np

    from .explain.sql import engine_clusters, to_sql
    expl = est.explain(X, grid_size=grids[0], pair_grid_size=grids[1])
    coding = est.fitted_.coding
    dtypes, tokens = (coding.dtypes(), coding.missing_values) if coding is not None else ({}, ())
    text = to_sql(expl, table, keep, dtypes=dtypes, missing_values=tokens)
    expected, clusters = est.predict(X), engine_clusters(expl, X, dtypes, tokens)
    _refuse_disagreement(X, expected, clusters, min_agreement, data)
    return text, {engine: float(np.mean(got == expected)) for engine, got in clusters.items()}


def _refuse_disagreement(df, expected, clusters: dict, min_agreement: float, data: str) -> None:
    """A query whose cluster equals ``predict``'s (``expected``) on fewer than ``min_agreement``
    of ``df``'s rows in some engine is not written: ``DataError`` with the share, the first rows
    that disagree (their row in the input, both clusters, their cells) and what to do."""
    import numpy as np
    for engine, got in clusters.items():
        same = got == expected
        if same.mean() >= min_agreement:
            continue
        shown = []
        for i in np.flatnonzero(~same)[:5]:
            cells = ", ".join(f"{c}={v!r}" for c, v in df.iloc[i].items())
            query = "NULL" if got[i] is None or got[i] != got[i] else int(got[i])
            shown.append(f"row {df.index[i]} (predict {int(expected[i])}, query {query}: {cells[:200]})")
        raise DataError(f"the query's cluster equals predict's on {same.mean():.2%} of the {len(df):,} rows of "
                        f"{redact(data)} in {engine}, below --min-agreement {min_agreement:.0%}, so nothing was "
                        f"written; {int((~same).sum()):,} rows disagree, e.g. {'; '.join(shown)}. A finer "
                        f"--grid-size brings the query closer to the model; --min-agreement 0 writes it anyway")


def _refuse_dates_in_sql(est, fmt: str) -> None:
    """A model that reads dates and times (as ``columns.DATE_UNIT``) has no SQL form: every engine
    writes that conversion its own way, and a query comparing a date column with numbers fails
    (DuckDB) or answers wrongly (SQLite). Refused, naming the columns and what to do."""
    coding = est.fitted_.coding
    dates = [c.name for c in coding.columns if c.dtype == "date"] if coding is not None else []
    if fmt != "sql" or not dates:
        return
    from .columns import DATE_UNIT
    c = dates[0]
    raise ConfigError(f"this model reads {', '.join(map(repr, dates))} as {DATE_UNIT}, which SQL engines write "
                      f"each their own way, so export cannot write one query for them: add a column of those days "
                      f"to the table (DuckDB: epoch({c}) / 86400.0; SQLite: julianday({c}) - 2440587.5; PostgreSQL: "
                      f"extract(epoch from {c}) / 86400.0), fit on it instead of {c!r}, and export that model; "
                      f"--format rules reads dates as they are")


def _written_by_export(head: bytes) -> bool:
    """An existing ``--output`` that an earlier ``export`` wrote (a query, or rules), which a new
    export may replace."""
    return head.startswith(b"-- NeurCAM") or head.startswith(b"cluster ")


# ---------------------------------------------------------------- scoring
@dataclass(frozen=True)
class PredictSettings:
    """Where ``predict`` reads and writes, resolved once (from flags, or a job config's defaults)."""

    model: str
    input: object
    output: str
    id_column: str | None            # None: no id (the rows are numbered), or, with ``id_given`` False, not yet chosen
    log_dir: str
    tracking_uri: str | None = None
    id_given: bool = True            # False: ``predict`` chooses the id by the model (``rows_id``)


def predict_settings(*, config: str | None = None, overrides: dict | None = None, model: str | None = None,
                     input=None, output: str | None = None, id_column: str | None = None, no_id: bool = False,
                     log_dir: str | None = None) -> PredictSettings:
    """``predict``'s model, input, output, id column and log folder: as given, else from the job
    config ``config`` (the model ``models:/NAME@champion`` with ``tracking.model_name``, else
    ``OUTPUT/model``; the input ``data.path``, its latest snapshot with ``recluster:``; the output
    ``OUTPUT/predictions``; the id ``data.id``; Ray's lines in ``OUTPUT/logs``). With no id given
    (``--id``, ``--no-id``, ``data.id``), ``predict`` follows the model (``rows_id``).

    Raises
    ------
    ConfigError
        Without a config, when the model, input or output is missing.
    """
    _one_id(id_column, no_id)
    if config is None:
        missing = [f"--{k}" for k, v in (("model", model), ("input", input), ("output", output)) if v is None]
        if missing:
            raise ConfigError(f"predict needs {', '.join(missing)} (or --config to take them from a job config)")
        return PredictSettings(model=model, input=input, output=output, id_column=None if no_id else id_column,
                               log_dir=log_dir or _temp_logs(), id_given=no_id or id_column is not None)
    cfg = load_config(config, overrides)
    tracking_uri = None
    if model is None:
        named = cfg.tracking is not None and cfg.tracking.model_name
        model = f"models:/{cfg.tracking.model_name}@champion" if named else str(Location(cfg.output) / "model")
        tracking_uri = cfg.tracking.uri if cfg.tracking is not None else None
    if input is None:
        input = cfg.data.path
        if cfg.recluster is not None:
            from .data.snapshots import pick_snapshot
            input, _ = pick_snapshot(cfg.data.path, cfg.recluster.snapshot)
    out = Location(cfg.output)
    return PredictSettings(model=model, input=input, output=output or str(out / "predictions"),
                           id_column=None if no_id else id_column or cfg.data.id,
                           log_dir=log_dir or str(out / "logs"), tracking_uri=tracking_uri,
                           id_given=no_id or id_column is not None or cfg.data.id is not None)


def predict(settings: PredictSettings, *, carry: list[str] | None = None, batch_size: int = 4096,
            concurrency: int = 2, log=None, csv: dict | None = None) -> dict:
    """Score ``settings.input`` with ``settings.model`` into Parquet shards at ``settings.output``:
    each row's id, cluster, probabilities and top terms. A CSV file is read like ``fit`` reads it
    and scored in this process; Parquet goes through ``distributed.predict_parquet`` (in this
    process when small, else Ray Data). Without ``--id``, the id is the model's own when the
    input has it, else a column named ``id``, else the input's one id-like column that is not a
    feature (``customer_id``, say; a line says so); with none, each row's 0-based number in the
    input goes to column ``row`` (``rows_id``).

    ``csv``: a CSV input's ``encoding``, ``delimiter`` and ``decimal`` (``data.tables.read_table``).

    Returns
    -------
    dict
        ``n_rows``, ``files`` and ``seconds``.
    """
    import dataclasses

    from .data.tables import is_csv
    if settings.tracking_uri:
        os.environ["MLFLOW_TRACKING_URI"] = settings.tracking_uri
    from .storage import check_writable, refuse_overwrite
    to_csv = not is_uri(settings.output) and is_csv(settings.output)
    if to_csv:   # one file: its folder must take it, and an existing file must be scores neurcam wrote
        refuse_overwrite(settings.output, inputs=[settings.input] if isinstance(settings.input, str) else [],
                         ours=lambda head: b"cluster,probability" in head.split(b"\n")[0])
    check_writable(str(Path(settings.output).parent) if to_csv else settings.output, "--output")
    log = log or _say
    fitted = load_fitted(settings.model)
    table = isinstance(settings.input, (str, os.PathLike)) and is_csv(settings.input)
    if to_csv and not table:   # a Parquet input small enough: read whole and scored here, like a CSV file
        _refuse_csv_output_for_large(settings.input)
    if table:   # told once: the header and the rows are read with the same format, said once
        from .data.tables import csv_format
        csv = dict(csv or {})
        csv["delimiter"], csv["decimal"] = csv_format(settings.input, csv.get("encoding", "utf-8"),
                                                      csv.get("delimiter"), csv.get("decimal"))
    if not settings.id_given:
        columns = _input_columns(settings.input, table, csv or {})
        settings = dataclasses.replace(settings, id_column=rows_id(fitted, columns, log))
    if table or to_csv:
        return _predict_table(fitted, settings, carry or [], log, csv or {} if table else {})
    if settings.id_column:
        _check_parquet_ids(settings.input, settings.id_column, log)
    from .distributed import predict_parquet
    return predict_parquet(fitted, settings.input, settings.output, id_column=settings.id_column, carry=carry or [],
                           batch_size=batch_size, concurrency=concurrency, log_dir=settings.log_dir, log=log)


def _check_parquet_ids(data, id_column: str, log) -> None:
    """A Parquet input's ids, read once at the door (just that column): a warning with the count
    of rows that share an id or have none (``validation.id_note``). An input of more than
    ``validation.ID_CHECK_ROWS`` rows is not read again for it, and a line says so; an input
    without the column is left to the scoring pass's refusal, which names the nearest column."""
    import pyarrow as pa

    from .data import footers, reading, resolve
    from .validation import ID_CHECK_ROWS
    src = resolve(data)
    if id_column not in src.schema.names:
        return
    n_rows = sum(n for _, _, n in footers(src))
    if n_rows > ID_CHECK_ROWS:
        log(f"the ids of {n_rows:,} rows are not checked for duplicates here (over {ID_CHECK_ROWS:,})")
        return
    _warn_ids(id_column, pa.concat_tables(list(reading.tables_here(src, [id_column])))[id_column].to_pandas(), log)


def _refuse_csv_output_for_large(path) -> None:
    """A CSV output is one file written by this process: Parquet input too large to score here
    (``data.reading.small_enough``) is refused, naming the Parquet output to use instead."""
    from .data import footers, reading, resolve
    from .data.sources import column_bytes
    src = resolve(path)
    found = footers(src)
    n_bytes = column_bytes(src, found[0][1], sum(n for _, _, n in found), list(found[0][1].names))
    if not reading.small_enough(n_bytes):
        raise ConfigError(f"--output ends in .csv, but {path} ({n_bytes / 2**20:,.0f} MiB of columns) is too large to "
                          f"score in this process: write Parquet shards (an --output folder) instead")


def _input_columns(path, table: bool, csv: dict) -> list[str]:
    """The input's column names, from a CSV header or the first Parquet footer."""
    if table:
        from .data.tables import table_columns
        return [str(c) for c in table_columns(str(path), **csv)]
    from .data import footers, resolve
    return list(footers(resolve(path))[0][1].names)


def _one_id(id_column: str | None, no_id: bool) -> None:
    """``--id COLUMN`` and ``--no-id`` together contradict each other: refused."""
    if id_column is not None and no_id:
        raise ConfigError(f"--id {id_column} and --no-id contradict each other: give one of them")


def rows_id(fitted, columns: list[str], say) -> str | None:
    """The id column of rows scored or explained with the fitted state ``fitted`` when no ``--id``
    (or ``--no-id``) says: the model's (``id_column_``, what the training rows' ids went by) when ``columns`` has it;
    else a column named ``id``; else the one id-like column of ``columns`` that is not a feature
    (``fit``'s rule); else None: ``predict`` then numbers the rows (``row``). Every choice but the
    model's own and ``id`` is said through ``say``."""
    from .validation import is_id_like
    # a model saved before the id was recorded: 'id', which predict looked for then
    model_id = fitted.history.get("id_column", "id")
    if model_id is not None and model_id in columns:
        return model_id
    features = set(map(str, fitted.feature_names))
    found = ["id"] if "id" in columns and "id" not in features else \
        [c for c in columns if is_id_like(c) and c not in features]
    why = "the model was fitted without an id" if model_id is None else f"the input has no {model_id!r}, the model's id"
    if len(found) == 1:
        if found[0] != "id":   # the conventional name needs no word
            say(f"id column: {found[0]!r} ({why}; --id names another, --no-id none)")
        return found[0]
    say(f"no id column ({why}{'' if not found else f'; several id-like columns: {found[:5]}'}): rows go by their "
        f"number in the input (--id COLUMN names one)")
    return None


def _predict_table(fitted, settings: PredictSettings, carry: list[str], log, csv: dict) -> dict:
    """A CSV file scored in this process, written like a Parquet input's scores (one shard and
    the summary marker, atomically)."""
    import json

    import numpy as np
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from .data.tables import read_table
    from .storage import write_dataset
    from .storage.atomic import PREDICTIONS_MARKER
    from .validation import missing_columns_note
    t0 = time.perf_counter()
    df = read_table(str(settings.input), **csv)
    ids = [settings.id_column] if settings.id_column else []
    features = list(map(str, fitted.feature_names))
    wanted = features + ids + carry
    missing = [c for c in dict.fromkeys(wanted) if c not in df.columns]
    if missing:
        hint = " (pass --id COLUMN, or --no-id)" if settings.id_column in missing else ""
        raise DataError(f"{settings.input}: no column(s) {missing}{hint}{missing_columns_note(missing, list(df.columns))}")
    _warn_ids(settings.id_column, df.get(settings.id_column) if ids else None, log)
    from .explain.assignments import (ROW_NUMBER, ROW_TERMS, file_layout, met_line, refuse_collisions, scored_columns,
                                      scored_frame)
    layout = file_layout(fitted.cluster_ids)   # the columns fit's assignments have
    refuse_collisions(ids + carry, ([] if ids else [ROW_NUMBER]) + scored_columns(fitted.cluster_ids, ROW_TERMS, **layout))
    from .storage import check_room
    check_room(settings.output, len(df) * 8 * (len(fitted.cluster_ids) + 2 * ROW_TERMS + 2))
    log(f"scoring {len(df):,} rows from {settings.input} in this process")
    arr, unseen = fitted.encode_counted(df[features], redact(str(settings.input)))
    scored, met = scored_frame(fitted, arr, unseen, df.index, top_terms=ROW_TERMS, **layout)
    scored = scored.reset_index(drop=True)
    scored["cluster"] = scored["cluster"].astype("int32")
    if met_line(met):
        log(met_line(met))
    kept = df[list(dict.fromkeys(ids + carry))].reset_index(drop=True)
    if not ids:   # no id: each row's number in the input, as the Parquet pass writes it
        kept.insert(0, ROW_NUMBER, np.arange(len(df), dtype=np.int64))
    out = pa.Table.from_pandas(pd.concat([kept, scored], axis=1), preserve_index=False)
    summary = {"n_rows": len(df), "files": 1, "input": redact(str(settings.input)), "where": "here",
               "unseen_levels": met["unseen"], "missing_cells": met["missing"]}

    from .data.tables import is_csv
    if is_csv(settings.output) and not is_uri(settings.output):   # one CSV file, written atomically
        from .storage import write_text_atomic
        write_text_atomic(Path(settings.output), out.to_pandas().to_csv(index=False))
        summary["seconds"], summary["format"] = round(time.perf_counter() - t0, 2), "csv"
        return summary

    def write(root: str, fs) -> None:
        with fs.open_output_stream(f"{root}/part-00000.parquet") as f:
            pq.write_table(out, f)
        summary["seconds"] = round(time.perf_counter() - t0, 2)
        with fs.open_output_stream(f"{root}/{PREDICTIONS_MARKER}") as f:
            f.write(json.dumps(summary, indent=1).encode())

    write_dataset(settings.output, write, marker=PREDICTIONS_MARKER)
    return summary


# ---------------------------------------------------------------- on Ray
def train(config, *, name: str | None = None):
    """Train on Ray as ``config`` says (a ``JobConfig``, a dict or a YAML path), then log to
    MLflow with ``tracking:`` (``ops.runs.train``). Returns a ``TrainResult``."""
    from .ops import runs
    return runs.train(config, name=name)


def search(config, *, name: str | None = None):
    """The Ray Tune search ``config`` describes, the winner written and (with ``tracking:``)
    logged and registered (``ops.runs.search``). Returns a ``SearchResult``."""
    from .ops import runs
    return runs.search(config, name=name)


def recluster(config) -> dict:
    """One re-clustering (``ops.recluster``); returns the ``recluster.json`` record."""
    from .ops.recluster import recluster as _recluster
    return _recluster(config)


def history(output: str, say=None) -> list[dict]:
    """The re-clustering decisions recorded in ``output`` (``recluster-history.jsonl``), oldest
    first; each line that cannot be read is left out and named through ``say`` (else a warning)."""
    from .ops.history import read_history
    return read_history(output, say)


def history_table(records: list[dict]):
    """Decisions as a DataFrame: finished, snapshot, champion, challenger, inertia ratio,
    agreement, promoted, outcome, reason."""
    from .ops.history import history_table as _table
    return _table(records)


def demo_data(out: str) -> str:
    """Where ``neurcam demo`` writes the bundled digits: beside its output (``runs/demo-data`` for
    ``runs/demo``), never inside it, since no output may hold its own input
    (``storage.refuse_overwrite``) and a demo run again replaces its output whole."""
    path = Path(out)
    path = path if path.name else path.absolute()
    return str(path.with_name(f"{path.name}-data"))


def demo_config(out: str, seeds: int, workers: int) -> dict:
    """``neurcam demo``: Neur2CAM (10 clusters, 8 pairs) on the digits shards (``demo_data``), a
    search over ``seeds`` seeds on a local Ray, tracked in the embedded MLflow store (./mlflow.db).
    ``epsilon`` 0.8 (not 0.9) anneals the gates in about half the epochs, so 3 trials fit in a
    few minutes on 2 cores."""
    return {"data": {"path": demo_data(out), "label": "label", "id": "id"},
            "model": {"n_clusters": 10, "n_pairs": 8, "precision": "auto", "epsilon": 0.8},
            "train": {"num_workers": workers, "checkpoint_every": 25},
            "search": {"seeds": seeds},
            "tracking": {"experiment": "neurcam-demo", "model_name": "digits-demo"},
            "output": out}


def demo(out: str = "runs/demo", seeds: int = 3, workers: int = 2, overrides: dict | None = None):
    """The whole service on embedded defaults: the bundled digits as Parquet shards in
    ``demo_data(out)``, a search of ``seeds`` seeds into ``out``, MLflow in ``./mlflow.db``. The
    config is checked before anything is written; run again, the demo replaces its data and its
    output, each whole. Returns the ``SearchResult``."""
    from .config import apply_overrides, parse_config
    from .data.bundled import digits_frame, write_frame_shards
    cfg = parse_config(apply_overrides(demo_config(out, seeds, workers), overrides or {}), "the demo config")
    if cfg.data.path == demo_data(out):   # not when --set data.path=... points the demo at other data
        frame = digits_frame()
        write_frame_shards(frame, cfg.data.path, 4)
        _say(f"demo data: the bundled digits ({len(frame):,} rows, {frame.shape[1] - 1} pixel features and a "
             f"label) as 4 Parquet shards in {cfg.data.path}")
    return search(cfg)


# ---------------------------------------------------------------- operations
def validate(config, *, check_tracking: bool = False, address: str | None = None) -> list[str]:
    """Check a job config without running it (``ops.validate``); the lines say what was checked.
    With ``address`` (a Ray job server), also whether the job's workers fit that cluster."""
    from .ops.validate import validate as _validate
    return _validate(config, check_tracking=check_tracking, address=address)


def parse_overrides(pairs: list[str]) -> dict:
    """``--set KEY=VALUE`` strings as the dotted overrides every command takes (``config``)."""
    from .config import parse_overrides as _parse
    return _parse(pairs)


def unreachable(exc: BaseException, output=None) -> str:
    """One line for an object store or server that did not answer (an ``OSError`` from pyarrow's
    file systems), or a full or read-only disk (naming the file or ``output``), saying what to check."""
    from .ops.validate import unreachable as _unreachable
    return _unreachable(exc, output)


def validate_manifests(folder: str) -> list[str]:
    """Build a kustomize folder (``kubectl kustomize``) and check what neurcam can check of it
    (``ops.manifests``); the lines say what was checked."""
    from .ops.manifests import check_manifests
    return check_manifests(folder)


def promote(name: str, version: str, alias: str = "champion", tracking_uri: str | None = None) -> None:
    """Move ``alias`` of registered model ``name`` to ``version`` (the name, alias and version
    checked before the registry is called: ``config.check_alias``)."""
    from . import tracking
    from .config import check_alias, check_model_name
    check_model_name(name)
    check_alias(alias)
    if not str(version).isdigit() or int(version) < 1:
        raise ConfigError(f"version {version!r}: a registered model's version is a whole number from 1")
    tracking.uri.point_at(tracking_uri)
    tracking.promote(name, version, alias)


def submit(address: str | None, job: str, config: str, overrides: list[str], *, working_dir: str | None = ".",
           wait: bool = True, timeout: float | None = None, log=None) -> int:
    """Run ``job`` (train, tune, predict, recluster) on the Ray cluster at ``address`` and follow
    it (``ops.submit``); returns the exit status: 0 the job succeeded, 1 it failed, 143 this
    command got SIGTERM and stopped the job, 124 ``timeout`` seconds passed and it stopped the job,
    130 Ctrl-C (the job goes on)."""
    from .ops.submit import submit as _submit
    if not address:
        raise ConfigError("submit needs --address (the Ray job server, e.g. http://127.0.0.1:8265) or RAY_JOB_ADDRESS")
    return _submit(address, job, config, overrides, working_dir=working_dir, wait=wait, timeout=timeout,
                   log=log or _say)


# ---------------------------------------------------------------- data
def featurize_text(*, log_dir: str | None = None, log=None, **job) -> None:
    """Documents to term-frequency columns over a fitted vocabulary (and sentence embeddings with
    ``embed``) on Ray Data (``text.TextJob`` takes ``job``'s fields). Ray's lines go to
    ``log_dir``."""
    from .distributed.console import stderr_to_log
    from .distributed.session import ray_for
    from .text import TextJob
    from .text import featurize_text as _featurize
    from .storage import check_writable
    text_job = TextJob(**job)
    check_writable(text_job.out, "--output")
    log = log or _say
    with stderr_to_log(log_dir or _temp_logs(), "featurize-text", "Ray's", log):
        with ray_for(min_cpus=text_job.concurrency + 1):
            _featurize(text_job, log=log)


def generate(kind: str, output: str, *, files: int = 4, rows: int = 100_000, features: int = 8, dim: int = 32,
             clusters: int = 4, seed: int = 0) -> list[str]:
    """``digits`` (scikit-learn's bundled 8x8 digits) or ``synthetic`` (clustered blobs plus an
    embedding) as Parquet shards in ``output``; returns the files written."""
    from .data.bundled import digits_frame, write_frame_shards
    from .storage import check_room, check_writable
    check_writable(output, "--output")
    check_room(output, (rows if kind == "synthetic" else 1797) * 4 * (features + dim + 2 if kind == "synthetic" else 66))
    if kind == "synthetic":
        from .data.synthetic import write_shards
        return write_shards(output, rows, n_features=features, repr_dim=dim, n_clusters=clusters, n_files=files,
                            seed=seed)
    return write_frame_shards(digits_frame(), output, files)


def sample(input: str, output: str, *, per_class: int | None = None, rows: int | None = None, by: str = "label",
           id_column: str = "id", files: int = 4, seed: int = 0, encoding: str = "utf-8", delimiter: str | None = None,
           decimal: str | None = None) -> tuple[int, list[str]]:
    """A seeded sample of a CSV or Parquet table (``per_class`` rows of each value of ``by``, or
    ``rows`` in all; a CSV file's format as ``fit`` reads it) as Parquet shards with an id
    column; returns ``(rows, files)``."""
    from .data.bundled import stratified_sample, write_frame_shards
    from .data.tables import read_table
    from .storage import check_writable, refuse_overwrite
    refuse_overwrite(output, inputs=[input])
    check_writable(output, "--output")
    from .storage import check_room   # shards of at most the input's rows: about its size, twice for safety
    check_room(output, 2 * sum(f.stat().st_size for f in ([Path(input)] if Path(input).is_file()
                                                          else Path(input).rglob("*")) if f.is_file()))
    df = stratified_sample(read_table(input, encoding, delimiter=delimiter, decimal=decimal), per_class=per_class,
                           rows=rows, by=by, id_column=id_column, seed=seed)
    return len(df), write_frame_shards(df, output, files, id_column=id_column)


def _say(msg: str) -> None:
    print(f"[neurcam] {redact(msg)}", flush=True)


def _temp_logs() -> str:
    """Where a command whose output is a dataset puts Ray's lines when given no log folder: a
    folder inside the dataset would be read as data."""
    return os.path.join(tempfile.gettempdir(), "neurcam-logs")
