"""``monitor``: drift of a snapshot against the model's reference, as a page, a record and gauges."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from ..errors import ModelFileError
from ..redaction import redact
from ..uris import Location, Where
from .common import check_output, explained_table, load_model


def monitor(model: Where, input: Where, output: Where, *, reference: str | None = None, encoding: str = "utf-8",
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
    input : str
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
    model = os.fspath(model)   # a folder, or an MLflow model URI (``models:/NAME@alias``)
    output = Location(output)   # resolved once here: the checks, the page and the run's record
    check_output(output, [input, model, reference], 16 * 2**20)
    est = load_model(model)
    csv = {"delimiter": delimiter, "decimal": decimal}
    needed = {"the model's feature columns": [str(c) for c in est.feature_names_in_]}
    rows = _reference_table(est, model, reference, encoding, csv, needed, say)
    drift = _drift(est, input, rows, encoding, csv, needed)
    record = {"model": redact(model), "snapshot": redact(str(input)), **drift.to_dict()}
    _publish_drift(record, drift, output, f"Drift: {Path(str(input)).name}", pushgateway, say)
    if tracking_uri or model.startswith(("models:/", "runs:/")):
        _track_drift(record, output, tracking_uri, say)
    return drift


def _track_drift(record: dict, output: Location, tracking_uri: str | None, say) -> None:
    """The monitor's verdict as a run of the experiment ``neurcam-monitor`` (``tracking.log_drift``)."""
    from .. import tracking
    tracking.use(tracking_uri, experiment=tracking.monitoring.EXPERIMENT)
    run_id = tracking.log_drift(record, output.path, record["model"])
    say(f"MLflow: run {run_id} of the experiment {tracking.monitoring.EXPERIMENT!r}")


def _reference_table(est, model: str, reference: str | None, encoding: str, csv: dict, needed: dict, say):
    """The training rows ``monitor --reference`` names (a seeded sample of ``REFERENCE_ROWS`` at
    most), or None when the model carries its reference; refused when it carries none."""
    from ..estimator import REFERENCE_ROWS
    if reference is None:
        if est.fitted_.drift_reference is None:
            raise ModelFileError(f"{redact(model)} carries no drift reference (it was saved by a release before "
                                 f"monitoring): give a table of its training rows, 'neurcam monitor --reference "
                                 f"TABLE'")
        return None
    rows = explained_table(reference, encoding, csv, needed, {})
    if len(rows) > REFERENCE_ROWS:
        rows = rows.sample(REFERENCE_ROWS, random_state=0).sort_index()
    say(f"reference: {len(rows):,} rows of {redact(reference)}")
    return rows


def _publish_drift(record: dict, drift, output: Location, title: str, pushgateway: str | None, say) -> None:
    """``drift.json``, the page and ``monitor.prom`` into ``output`` in one swap; the gauges pushed
    to ``pushgateway`` when given (which needs prometheus-client: without it, refused)."""
    from ..monitor.page import write_monitor
    gauges = _drift_gauges(record, None if pushgateway else say)
    extra = {}
    if gauges is not None:
        from prometheus_client import generate_latest
        extra["monitor.prom"] = generate_latest(gauges)
    write_monitor(output, record, drift, title, extra)
    if pushgateway:
        from ..ops.history import push_drift
        push_drift(gauges, pushgateway, record["model"])


def _drift_gauges(record: dict, say):
    """The monitor's Prometheus gauges (``ops.history.drift_gauges``), or None, said, without
    prometheus-client (the ``ray`` extra); ``say`` None: its absence is an error."""
    try:
        from ..ops.history import drift_gauges
        return drift_gauges(record, record["model"])
    except ModuleNotFoundError as exc:
        if exc.name != "prometheus_client" or say is None:
            raise
        say("monitor.prom not written: prometheus-client is not installed (pip install 'neurcam-dist[ray]')")
        return None


def _drift(est, data: str, reference, encoding: str, csv: dict, needed: dict):
    """``est``'s drift on snapshot ``data``: a CSV file read here, Parquet (a file, a folder, an
    object-store prefix) in one streamed pass (``distributed.monitoring``: Ray Data when large)."""
    from ..data.tables import is_csv
    if is_csv(data):
        df = explained_table(data, encoding, csv, needed, {})
        return est.monitor(df[needed["the model's feature columns"]], reference=reference)
    from ..distributed.monitoring import monitor_parquet
    est.drift_reference(reference)
    return monitor_parquet(est, data, log=lambda m: print(f"[neurcam] {m}", file=sys.stderr, flush=True))
