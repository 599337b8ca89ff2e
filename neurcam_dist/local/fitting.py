"""``fit`` and ``choose_k`` in memory: a CSV or Parquet table in, a run folder (or K's choice) out."""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from ..redaction import redact
from .common import check_output, warn_ids
from ..uris import Location, Where


@dataclass
class FitResult:
    """What ``fit`` measured (``metrics``, as written to ``metrics.json``) and wrote (``output``)."""

    estimator: object
    metrics: dict
    output: Location
    report_error: str | None = None   # the report was asked for and failed (the model was written)


def fit(input: Where, output: Where, *, features: list[str] | None = None, label: str | None = None,
        params: dict | None = None, report: bool = False, encoding: str = "utf-8", delimiter: str | None = None,
        decimal: str | None = None, id_column: str | None = None, exclude: list[str] | None = None) -> FitResult:
    """Fit a ``NeurCAM`` in memory on a CSV or Parquet table and write the run folder.

    Parameters
    ----------
    input : str
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
    from ..data.tables import read_table
    from ..estimator import NeurCAM
    from ..params import check_params
    params = dict(params or {})
    check_params(params)                   # a bad value is refused before the data is read
    output = Location(output)              # resolved once: the checks, the run folder and the result
    assignments = _check_fit_target(input, output, report)
    X, y, ids = _fit_table(read_table(input, encoding, delimiter=delimiter, decimal=decimal), features, label,
                           id_column, params, exclude)
    _check_fit_outputs(output, list(ids.columns), len(X), params.get("n_clusters", 10), assignments, report)
    t0 = time.perf_counter()
    est = NeurCAM(**params).fit(X)
    seconds = time.perf_counter() - t0
    encoded = est.fitted_.encode(X)   # once: the metrics, the assignments and the report share it
    result = _fit_metrics(est, encoded, y, seconds)
    failed = _write_fit(output, est, result, input, (X, encoded, y, ids), label, assignments, report)
    return FitResult(estimator=est, metrics=result, output=output, report_error=failed)


def _check_fit_target(data: str, output: Location, report: bool) -> str:
    """Before the table is read: ``output`` may take a run (``outputs.check_run_target``); returns
    the assignments' file name (CSV for a CSV table, else Parquet)."""
    from ..data.tables import is_csv
    from ..outputs import check_run_target
    assignments = "assignments.csv" if is_csv(data) else "assignments.parquet"
    check_run_target(output, report=report, extra=(assignments,), inputs=[data])
    return assignments


def _write_fit(output: Location, est, result: dict, data: str, table: tuple, label: str | None, assignments: str,
               report: bool) -> str | None:
    """``fit``'s run folder: the model, metrics, the config it ran as, each row's assignment and,
    asked for, the report; returns the report's error (the model is kept)."""
    import json

    from ..outputs import write_run
    X, encoded, y, ids = table
    made = {"command": "fit", "data": redact(str(data)), "features": list(map(str, X.columns)), "label": label,
            "params": dict(est.get_params())}
    try:
        return write_run(output, est, result, json.dumps(made, indent=1, default=str),
                         extra={assignments: _assignments(est, encoded, ids, assignments)},
                         report=_explanation_or_error(est, X, encoded, y, label) if report else None, exclusive=True)
    except OSError as exc:
        raise _unwritten(exc, est, output) from None


def _fit_metrics(est, encoded, y, seconds: float) -> dict:
    """``metrics.json`` of a fit: its size, time and end, the clusters used (and chosen, with
    ``n_clusters='auto'``), the selected terms and the scores (with a label, against it), over
    the ``encoded`` training rows and the labels the fit's last pass stored (``labels_``)."""
    from .. import metrics as metrics_mod
    from ..validation import empty_clusters_record
    chosen = {"k_choice": {key: est.k_choice_[key] for key in ("k", "sure", "runner_up", "rule")}} \
        if est.k_choice_ else {}
    return {"n_rows": int(len(encoded)), "n_features": int(encoded.shape[1]), "fit_seconds": round(seconds, 2),
            "epochs": est.n_iter_, "stop_reason": est.history_["stop_reason"],
            "n_clusters": est.n_clusters_, "n_clusters_used": est.history_["n_clusters_used"],
            **empty_clusters_record(est.history_), **chosen,
            "selected_features": est.selected_features_, "selected_pairs": [list(p) for p in est.selected_pairs_],
            **metrics_mod.scores(est.fitted_.clustering_space(encoded), est.labels_, y)}


def _fit_table(df, features, label, id_column, params: dict, exclude: list[str] | None = None):
    """``(X, y, ids)`` of the table ``fit`` read: the features (always said on stderr: what was
    used and why the rest was not), the label's values and the id columns set aside. The id
    (``id_column``, else the one id-like column) is never a feature and names ``X``'s rows, so
    the report's rows read as in the assignments."""
    import pandas as pd

    from ..data.tables import id_columns, split_columns
    from ..validation import missing_columns_note
    if id_column is not None and id_column not in df.columns:
        raise ConfigError(f"--id column {id_column!r} is not in the data"
                          f"{missing_columns_note([id_column], list(df.columns))}")
    table = df if id_column is None else df.drop(columns=[id_column])
    tokens = tuple(params.get("missing_values") or ())
    if tokens:   # before the features are chosen: '?' in a numbers column is a missing cell, not a typo
        from ..columns import without_tokens
        table = table.apply(lambda col: without_tokens(col, tokens))
    named = params.get("categorical_features")
    X, y = split_columns(table, features, label, categorical=named if isinstance(named, list) else None,
                         numeric=params.get("numeric_features"),
                         max_levels=params.get("max_levels", 64), exclude=exclude)
    ids = df[([id_column] if id_column else []) + id_columns(table.columns, X.columns, label)]
    name = id_column or (ids.columns[0] if len(ids.columns) == 1 else None)
    if name is not None:
        print(f"id: {name} (carried into the assignments; names the report's rows)", file=sys.stderr)
        warn_ids(name, df[name], lambda line: print(f"neurcam: {line}", file=sys.stderr))
        X = X.set_axis(pd.Index(df[name].to_numpy(), name=name), axis=0)   # the model records it (id_column_)
    return X, y, ids


def _check_fit_outputs(output: Location, id_names: list, n_rows: int, n_clusters, assignments: str, report: bool) -> None:
    """Before training, once the table is read: no id column (``id_names``) named like a score
    column, and room on the output's disk for what the run writes (``n_clusters='auto'``: as for
    the most K tried)."""
    n_clusters = 12 if n_clusters == "auto" else n_clusters
    from ..explain.assignments import file_layout, refuse_collisions, scored_columns
    from ..storage import check_room
    refuse_collisions(id_names, scored_columns(range(n_clusters), 3, **file_layout(range(n_clusters))),
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

    from ..errors import OutputError
    from ..ops.validate import unreachable
    why = unreachable(exc, output)
    try:
        kept = Path(tempfile.mkdtemp(prefix="neurcam-unsaved-")) / "model"
        est.save(kept)
        where = f"the fitted model is kept at {kept} (NeurCAM.load it, or free space and run the same command again)"
    except OSError as again:
        where = (f"the fitted model could not be kept either ({again.strerror or again}): free space and run the "
                 f"same command again (it is seeded: the same model)")
    return OutputError(f"{why}; {where}")


def _explanation_or_error(est, X, encoded, y=None, label: str | None = None):
    """``est``'s explanation of ``X`` (``encoded``: as the model encodes it; with the clusters
    against ``y`` when there is a label column), or the exception it raised: a report is never
    worth the model (``outputs.write_run`` writes the error as ``report/error.txt``)."""
    from ..explain import build_explanation
    try:
        return build_explanation(est, X, labels=y, label_name=label, encoded=encoded)
    except Exception as exc:   # noqa: BLE001
        return exc


def _assignments(est, encoded, ids, name: str) -> bytes:
    """Each row's ids (the columns set aside), ``cluster``, its ``probability`` and the three
    terms that pushed it hardest toward its cluster, as CSV or Parquet bytes, from the
    ``encoded`` training rows."""
    import io

    from ..explain.assignments import assignments, file_layout
    scored = assignments(est.fitted_, encoded, top_terms=3, **file_layout(est.cluster_ids_))   # chunked
    frame = ids.reset_index(drop=True).assign(**scored)
    buf = io.BytesIO()
    if name.endswith(".csv"):
        frame.to_csv(buf, index=False)
    else:
        frame.to_parquet(buf, index=False)
    return buf.getvalue()


def choose_k(input: Where, output: Where, *, k="2-12", seeds: int = 3, features: list[str] | None = None,
             label: str | None = None, id_column: str | None = None, params: dict | None = None, terms: bool = False,
             encoding: str = "utf-8", delimiter: str | None = None, decimal: str | None = None, say=print,
             exclude: list[str] | None = None):
    """Propose a number of clusters for a CSV or Parquet table (``neurcam_dist.choosing``), read
    as ``fit`` reads it, and write ``OUTPUT/choice.json`` and ``OUTPUT/choice.html`` in one swap.

    Parameters
    ----------
    input, output : str
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

    Examples
    --------
    >>> import tempfile; from pathlib import Path; from neurcam_dist import service
    >>> from neurcam_dist.data.synthetic import mixed_table
    >>> d = Path(tempfile.mkdtemp()); mixed_table(600, seed=0)[0].to_csv(d / "rows.csv", index=False)
    >>> choice = service.choose_k(str(d / "rows.csv"), str(d / "k"), k="2-4", seeds=2, say=lambda line: None,
    ...                           params={"epochs": 12, "warmup_epochs": 4})
    >>> choice.k in (2, 3, 4), sorted(p.name for p in (d / "k").iterdir())
    (True, ['choice.html', 'choice.json'])
    """
    from ..choosing import check_request, k_range
    from ..data.tables import read_table
    from ..estimator import choose_k as fit_each
    from ..params import check_params
    params = {key: v for key, v in (params or {}).items() if key != "verbose"}
    check_params(params)
    if "n_clusters" in params:
        raise ConfigError("--n-clusters is what choose-k chooses: give the values to compare as --k (2-12)")
    ks = k_range(k)
    check_request(ks, seeds)          # seeds, before the data is read
    output = Location(output)   # resolved once: the checks and the folder
    check_output(output, [input], 16 * 2**20)
    df = read_table(input, encoding, delimiter=delimiter, decimal=decimal)
    X, y, _ = _fit_table(df, features, label, id_column, params, exclude)
    check_request(ks, seeds, len(X))
    say(f"choosing K among {ks[0]}..{ks[-1]} on {min(len(X), 5000):,} rows, {seeds} seeds per K")
    choice = fit_each(X, y, ks, seeds=seeds, terms=terms, describe=True, say=say, **params)
    _write_choice(output, choice, input, list(map(str, X.columns)), label)
    return choice


def _write_choice(output: Location, choice, data: str, features: list[str], label: str | None) -> None:
    """``choose_k``'s folder, in one swap: ``choice.json`` (the request and every K's evidence) and
    ``choice.html``."""
    import json

    from ..choosing import choice_html
    from ..storage import atomic_directory
    record = {"data": redact(str(data)), "features": features, "label": label, **choice.to_dict()}
    text = json.dumps(record, indent=1, default=float)

    def write(tmp: Path) -> None:
        (tmp / "choice.json").write_text(text + "\n")
        (tmp / "choice.html").write_text(choice_html(choice, title=f"Choosing K: {Path(str(data)).name}"))
    atomic_directory(output, write, marker="choice.json")
