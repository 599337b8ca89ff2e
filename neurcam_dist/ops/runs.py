"""Tracked runs: train or search on Ray, then log the result to MLflow when the config has a
``tracking:`` section. The front door (``neurcam_dist.service``) and the re-clustering call these;
training itself (``distributed``) knows nothing of MLflow, and tracking nothing of Ray.

When MLflow is unreachable the run still finishes and its model is saved in ``output/``; a server
that is back within ``NEURCAM_TRACKING_WAIT_S`` (300 s) gets the run late, with a warning; after
that ``tracking.TrackingError`` says what was not logged (and that nothing was registered).
"""
from __future__ import annotations

import dataclasses
import time

from ..config import JobConfig, coerce_config
from ..distributed import SearchResult, TrainResult
from ..distributed import search as _search
from ..distributed import train as _train
from ..distributed.console import library_logs
from ..distributed.events import say
from ..redaction import redact
from ..signals import sigterm_as_exit


def train(config, *, name: str | None = None) -> TrainResult:
    """Train on Ray as ``config`` says (``distributed.train``), then log one MLflow run and register
    the model as ``candidate`` when the config has ``tracking:``. Returns a ``TrainResult``.

    Parameters
    ----------
    config : JobConfig, dict or str
        The job (``docs/reference/config.md``): ``data``, ``model``, ``train``, ``output``, ``tracking``.
    name : str, optional
        The run's name (default: ``neurcam-``, the time and six hex digits).

    Examples
    --------
    >>> import tempfile; from pathlib import Path; from neurcam_dist import service
    >>> from neurcam_dist.data.synthetic import write_shards
    >>> d = Path(tempfile.mkdtemp()); _ = write_shards(d / "data", 600, n_features=4, repr_dim=0, n_clusters=3)
    >>> run = service.train({"data": {"path": str(d / "data"), "label": "label", "id": "id"}, "output": str(d / "run"),
    ...                      "model": {"n_clusters": 3, "epochs": 8, "warmup_epochs": 3, "hidden": [16, 16]},
    ...                      "train": {"num_workers": 1}})  # doctest: +ELLIPSIS
    [neurcam] ...
    >>> run.metrics["n_rows"], (d / "run" / "model" / "config.json").is_file()
    (600, True)
    """
    cfg = coerce_config(config)
    with sigterm_as_exit():
        result = _train(cfg, name=name)
        if cfg.tracking is not None:
            logged = _log(cfg, result, "run", "the run", lambda t: t.log_training(result, result.config))
            result = dataclasses.replace(result, tracking=logged)
        return result


def search(config, *, name: str | None = None, incumbent=None) -> SearchResult:
    """``distributed.search`` (``incumbent``: the model the winner takes its cluster ids from and
    is compared with), then a parent run, a nested run per trial and the winner registered as
    ``candidate`` with ``tracking:``. An http tracking server that is down is reported at the
    start (the search still runs: its winner is saved locally). Returns a ``SearchResult``.

    Examples
    --------
    Two seeds; the lowest inertia wins and is written to ``OUTPUT/model``, each trial under
    ``OUTPUT/trials``:

    >>> import tempfile; from pathlib import Path; from neurcam_dist import service
    >>> from neurcam_dist.data.synthetic import write_shards
    >>> d = Path(tempfile.mkdtemp()); _ = write_shards(d / "data", 400, n_features=4, repr_dim=0, n_clusters=3)
    >>> found = service.search({"data": {"path": str(d / "data"), "label": "label", "id": "id"},
    ...                         "output": str(d / "search"), "search": {"seeds": 2, "max_concurrent_trials": 2},
    ...                         "train": {"num_workers": 1},
    ...                         "model": {"n_clusters": 3, "epochs": 4, "warmup_epochs": 2, "hidden": [8]}})  # doctest: +ELLIPSIS
    [neurcam] ...
    >>> len(found.trials), found.best.metrics["inertia"] == min(t.metrics["inertia"] for t in found.trials)
    (2, True)
    """
    cfg = coerce_config(config)
    with sigterm_as_exit():
        if cfg.tracking is not None:
            _warn_if_unreachable(cfg)
        result = _search(cfg, name=name, incumbent=incumbent)
        if cfg.tracking is not None:
            logged = _log(cfg, result, "parent run", "the search's parent run, its trial runs",
                          lambda t: t.log_search(result, result.search_config))
            result = dataclasses.replace(result, tracking=logged)
        return result


def _log(cfg: JobConfig, result, what: str, runs: str, log_with) -> dict:
    """What ``log_with(tracking)`` logged of ``result`` (its ``tracking``), MLflow's own lines in the
    run's log.
    An http server that does not answer when the run ends is waited for (``tracking.wait_reachable``:
    the run is logged late, with a warning saying so); one that stops answering part-way is
    waited for again and the logging tried once more, the cut-off attempt's runs ended FAILED and,
    when the server had registered the model already, not registered again. Any other failure
    raises ``TrackingError`` saying what was not logged (the model is safe on disk)."""
    from .. import tracking
    tc = cfg.tracking
    t_end, waited = time.monotonic(), 0.0
    for attempt in (1, 2):
        try:
            waited += tracking.wait_reachable(tc.uri, say)
            with mlflow_lines(cfg):
                tracking.use(tc.uri, tc.experiment, say=say)
                if attempt == 2:
                    ended, versions = tracking.abandon_partial_runs(tc.experiment, tc.model_name)
                    say(f"ended the cut-off attempt's {len(ended)} MLflow run(s) FAILED")
                    if versions:
                        raise tracking.TrackingError(
                            f"the model is saved in {result.output}/model; the tracking server registered "
                            f"{tc.model_name} version(s) {', '.join(versions)} before it stopped answering; not "
                            f"registered again: check them (and their runs) in MLflow")
                killed = tracking.mark_killed_runs(tc.experiment)
                logged = log_with(tracking)
            break
        except Exception as exc:
            if isinstance(exc, tracking.TrackingError):
                raise
            if attempt == 1 and tracking.is_connection_failure(exc):
                say(f"WARNING: MLflow stopped answering while {runs} were being logged "
                    f"({type(exc).__name__}: {redact(str(exc))[:300]}); trying once more")
                continue
            raise tracking.tracking_failed(cfg, result.output, exc, runs) from exc
    if killed:
        say(f"marked {len(killed)} MLflow run(s) of {tc.experiment} KILLED: left RUNNING by a process "
            f"that is gone ({', '.join(killed[:5])})")
    if waited or attempt == 2:
        say(f"WARNING: the MLflow {what} was logged late ({time.monotonic() - t_end:.0f} s after training ended"
            + (", on the second attempt" if attempt == 2 else "") + "): MLflow's start times are the logging's")
    _say_logged(cfg, logged, what)
    return logged


def mlflow_lines(cfg: JobConfig):
    """MLflow's own lines (database set-up, model validation, "Successfully registered model")
    go to the run's ``logs/`` beside Ray's; the console keeps the service's line that says what
    was logged."""
    from .. import tracking
    tracking.import_mlflow()   # its logger gets its handlers on import: route them after
    return library_logs(cfg.output_location(), ("mlflow",), "MLflow's", say)


def _say_logged(cfg: JobConfig, t: dict, what: str) -> None:
    say(f"MLflow {what} {t['run_id']} in {redact(t['tracking_uri'])}"
        + (f" ({redact(t['run_url'])})" if t.get("run_url") else "")
        + (f"; registered {cfg.tracking.model_name} version {t['version']} (alias candidate)"
           if cfg.tracking.model_name else ""))


def _warn_if_unreachable(cfg: JobConfig) -> None:
    from ..tracking import check_reachable, check_uri, tracking_uri
    from ..tracking.uri import WAIT_ENV, wait_budget
    uri = tracking_uri(cfg.tracking.uri)
    check_uri(uri)   # a URI MLflow cannot use is refused before the work, not after it
    if uri.startswith(("http://", "https://")):
        try:
            check_reachable(uri)
        except ConnectionError as exc:
            say(f"WARNING: {exc}; the run goes on and its model is saved locally; at the end it waits up to "
                f"{wait_budget():g} s ({WAIT_ENV}) for the server, then exits non-zero if it is still unreachable")
