"""MLflow runs for a finished training or search: params, per-epoch metric histories, final
metrics, tags, artifacts (the explanation report and the run's JSON files) and the registered
model. They take the results ``distributed.train`` / ``distributed.search`` return (duck-typed:
``estimator``, ``metrics``, ``plan``, ...) and know nothing of Ray.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time
from importlib import metadata
from pathlib import Path

from ..errors import TrackingError
from ..estimator import NeurCAM
from ..explain.report import write_report
from ..redaction import redact
from ..signals import process_gone
from ..storage.published import local_copy
from ..uris import Location
from ..version import __version__
from .registry import log_model
from .uri import run_url, use


def data_fingerprint(plan) -> dict:
    """The data's identity as MLflow params: path, rows, files, schema hash, features, embedding."""
    return {"data.path": redact(plan.source.given), "data.n_rows": plan.n_rows, "data.n_files": len(plan.source.files),
            "data.schema_hash": plan.schema_hash, "data.features": ",".join(plan.features)[:6000],
            "data.repr": f"{plan.repr_kind}:{plan.repr_dim}"}


def _tags() -> dict:
    import subprocess

    tags = {"neurcam_version": __version__, HOST_TAG: socket.gethostname(), PID_TAG: str(os.getpid())}
    try:
        tags["ray_version"] = metadata.version("ray")
    except metadata.PackageNotFoundError:
        pass
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        if rev.returncode == 0:
            tags["git_revision"] = rev.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return tags


HOST_TAG, PID_TAG = "neurcam.host", "neurcam.pid"   # who writes a run: a run RUNNING without them alive was killed
STALE_S = 86400   # a run RUNNING this long from another host is taken for a killed one


def _end_running(experiment: str, extra_filter: str, keep_running, reason: str, status: str) -> list[str]:
    """The one way runs left RUNNING are ended: runs of ``experiment`` that neurcam started (they
    carry ``PID_TAG``), RUNNING, matching ``extra_filter`` and not ``keep_running(run)``, get the tag
    ``neurcam.ended_by`` = ``reason`` and ``status``. Returns their ids."""
    import mlflow
    client = mlflow.MlflowClient()
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    ended = []
    for run in client.search_runs([exp.experiment_id], filter_string="attributes.status = 'RUNNING'" + extra_filter,
                                  max_results=1000):
        if PID_TAG not in run.data.tags or keep_running(run):
            continue
        client.set_tag(run.info.run_id, "neurcam.ended_by", reason)
        client.set_terminated(run.info.run_id, status)
        ended.append(run.info.run_id)
    return ended


def mark_killed_runs(experiment: str) -> list[str]:
    """Runs of ``experiment`` that neurcam started and that are still RUNNING although their process
    is gone (killed by SIGKILL, an evicted pod: nothing could end them): set KILLED. A run from this
    host is checked by its process id; one from another host counts as gone after ``STALE_S``.
    Returns their ids."""
    def alive(run) -> bool:
        tags = run.data.tags
        return not process_gone(tags.get(HOST_TAG), tags[PID_TAG], run.info.start_time / 1000, STALE_S)
    return _end_running(experiment, "", alive, f"a later run found its process gone ({socket.gethostname()})",
                        "KILLED")


def abandon_partial_runs(experiment: str, model_name: str | None) -> tuple[list[str], list[str]]:
    """After a logging attempt the server cut off (``ops.runs`` tries once more): this process's
    runs still RUNNING in ``experiment`` end FAILED, tagged as superseded. Returns their ids and
    the versions of ``model_name`` registered from them (a registration the server finished
    although its answer was lost): the caller then must not register again."""
    import mlflow
    mine = f" and tags.`{PID_TAG}` = '{os.getpid()}' and tags.`{HOST_TAG}` = '{socket.gethostname()}'"
    ended = _end_running(experiment, mine, lambda run: False,
                         "a logging attempt the tracking server cut off; logged again in a later run", "FAILED")
    versions = []
    if model_name and ended:
        versions = [mv.version for mv in mlflow.MlflowClient().search_model_versions(f"name = '{model_name}'")
                    if mv.run_id in ended]
    return ended, versions


def _params(model: dict, cfg, plan) -> dict:
    return {**{f"model.{k}": v for k, v in model.items()},
            **{f"train.{k}": v for k, v in cfg.train.model_dump().items()}, **data_fingerprint(plan)}


HISTORY_KEYS = ("loss", "clust_loss", "kl", "T", "T2", "lr")
FINAL_KEYS = ("inertia", "ari", "nmi", "acc", "train_seconds", "n_clusters_used", "n_clusters_empty")


def _log_history(client, run_id: str, est) -> None:
    """Per-epoch metrics, stepped by epoch, in batches (one call per 900 values, not per epoch)."""
    from mlflow.entities import Metric
    stamp = int(time.time() * 1000)
    batch = [Metric(key, float(rec[key]), stamp, int(rec["epoch"])) for rec in est.history_["epochs"]
             for key in HISTORY_KEYS]
    for i in range(0, len(batch), 900):
        client.log_batch(run_id, metrics=batch[i:i + 900])


def _run_tags(est) -> dict:
    events = est.history_["events"]
    return {"phase_reached": events[-1]["phase"] if events else "warmup",
            "stop_reason": str(est.history_["stop_reason"])}


def _write_artifacts(t: Path, est, cfg, metrics: dict, report: Location | None = None,
                     output: Location | None = None) -> None:
    """What a run keeps besides the model: the explanation report (JSON, Parquet, PNG, HTML; copied
    from ``report``, a local folder or a published URI, when given), the resolved config, the
    standardization statistics, the history, the metrics and a computed representation's model
    (the autoencoder's weights, ``representation/`` of the run's ``output``)."""
    if output is not None and getattr(cfg, "representation", None) is not None:
        with local_copy(output / "representation") as copy:
            shutil.copytree(copy, t / "representation")
    if report is not None and (report.is_uri or report.path.is_dir()):
        with local_copy(report) as copy:
            shutil.copytree(copy, t / "report")
    else:
        write_report(est.explain(), t / "report")
    (t / "config.json").write_text(cfg.public_json())
    (t / "standardization.json").write_text(json.dumps(
        {"features": list(est.feature_names_in_), "mean": est.mean_.tolist(), "scale": est.scale_.tolist()}))
    (t / "history.json").write_text(json.dumps(est.history_, default=str))
    (t / "metrics.json").write_text(json.dumps(metrics, default=str))


def log_training(result, cfg) -> dict:
    """One MLflow run for a finished ``distributed.train``: params (hyperparameters, data
    location and fingerprint), per-epoch metrics, final metrics, tags, artifacts (explanation JSON
    and Parquet tables, PNG shape graphs, HTML report, resolved config, standardization
    statistics, history) and the model, registered when ``tracking.model_name`` is set. The
    registration comes last, so a failure anywhere before it registers nothing."""
    import mlflow

    tc = cfg.tracking
    use(tc.uri, tc.experiment)
    est, metrics = result.estimator, result.metrics
    with mlflow.start_run(run_name=metrics.get("run_name"), tags=_tags()) as run:
        mlflow.log_params(_params(cfg.model.model_dump(), cfg, result.plan))
        _log_history(mlflow.MlflowClient(), run.info.run_id, est)
        mlflow.log_metrics({k: float(metrics[k]) for k in FINAL_KEYS if k in metrics})
        mlflow.set_tags({**_tags(), **_run_tags(est)})
        with tempfile.TemporaryDirectory() as tmp:
            _write_artifacts(Path(tmp), est, cfg, metrics, output=result.output)
            mlflow.log_artifacts(tmp)
        _, version = log_model(est, est.reference_, registered_name=tc.model_name)
    return {"run_id": run.info.run_id, "experiment": tc.experiment, "tracking_uri": mlflow.get_tracking_uri(),
            "run_url": run_url(mlflow.get_tracking_uri(), run.info.experiment_id, run.info.run_id),
            "registered_model": tc.model_name, "version": version}


def log_search(result, cfg) -> dict:
    """A parent run for a ``tune.search`` and one nested run per trial (failed ones marked
    FAILED with their error). The winner's nested run holds the artifacts and the model; the
    parent holds the selection (``search.json``: every trial's inertia), the best inertia and
    the explanation-consistency metrics. The model is registered last."""
    import mlflow

    tc = cfg.tracking
    exp_id = use(tc.uri, tc.experiment)
    client = mlflow.MlflowClient()
    s = cfg.search
    searched = set(s.space()) | {"random_state"}
    base = {k: v for k, v in cfg.model.model_dump().items() if k not in searched}
    tags = _tags()
    best_run = None
    with mlflow.start_run(run_name=result.metrics["search"]["name"], tags=tags) as parent:
        mlflow.log_params({**_params(base, cfg, result.plan), "search.seeds": json.dumps(s.seeds),
                           "search.space": json.dumps(s.space())[:6000], "search.num_samples": s.num_samples,
                           "search.rule": "lowest hard inertia"})
        for trial in result.trials:
            run = client.create_run(exp_id, run_name=f"trial-{trial.trial_id}", tags={
                "mlflow.parentRunId": parent.info.run_id, "neurcam.trial_id": trial.trial_id,
                "neurcam.status": trial.status, **tags})
            rid = run.info.run_id
            try:
                _log_trial(client, rid, trial, cfg, result.plan)
            except BaseException:
                client.set_terminated(rid, "FAILED")  # never left RUNNING by an error or an interrupt
                raise
            if trial is result.best:
                best_run = rid
        search_metrics = {"best_inertia": result.best.inertia, "n_trials": len(result.trials),
                          "n_failed": sum(t.status != "ok" for t in result.trials),
                          **{k: v for k, v in result.consistency.items() if isinstance(v, (int, float))}}
        mlflow.log_metrics({k: float(v) for k, v in search_metrics.items()})
        mlflow.set_tags({**tags, "neurcam.kind": "search", "best_run_id": best_run,
                         "best_trial": result.best.trial_id})
        mlflow.log_text(json.dumps([t.row() for t in result.trials], indent=1, default=str), "search.json")
        with tempfile.TemporaryDirectory() as tmp:
            out = result.output
            _write_artifacts(Path(tmp), result.estimator, result.config, result.metrics, report=out / "report", output=out)
            client.log_artifacts(best_run, tmp)
        # last: the registered version (alias candidate), logged in the winner's run
        with mlflow.start_run(run_id=best_run, nested=True):
            _, version = log_model(result.estimator, result.estimator.reference_, registered_name=tc.model_name)
    return {"run_id": parent.info.run_id, "best_run_id": best_run, "experiment": tc.experiment,
            "tracking_uri": mlflow.get_tracking_uri(),
            "run_url": run_url(mlflow.get_tracking_uri(), parent.info.experiment_id, parent.info.run_id),
            "registered_model": tc.model_name, "version": version}


def _log_trial(client, rid: str, trial, cfg, plan) -> None:
    """One trial's params, history, metrics and tags, and its terminal status."""
    client.log_batch(rid, params=_param_list(_params(trial.model, cfg, plan)))
    if trial.status == "ok":
        est = NeurCAM.load(trial.model_path)
        _log_history(client, rid, est)
        for k in FINAL_KEYS:
            if k in trial.metrics:
                client.log_metric(rid, k, float(trial.metrics[k]))
        for k, v in _run_tags(est).items():
            client.set_tag(rid, k, v)
        client.set_terminated(rid, "FINISHED")
    else:
        client.set_tag(rid, "neurcam.error", (trial.error or "")[-4000:])
        client.log_text(rid, trial.error or "", "error.txt")
        client.set_terminated(rid, "FAILED")


def _param_list(params: dict):
    from mlflow.entities import Param
    return [Param(k, str(v)[:6000]) for k, v in params.items()]


def tracking_failed(cfg, out: Location, exc: Exception, runs: str) -> TrackingError:
    """The error for a run whose model is safe on disk but whose MLflow logging failed."""
    from .uri import tracking_uri
    return TrackingError(redact(f"training finished and the model is saved in {out}/model, but logging to MLflow "
                                f"({tracking_uri(cfg.tracking.uri)}) failed, so {runs}, the artifacts and the "
                                f"registered version were not recorded (nothing was registered): "
                                f"{type(exc).__name__}: {exc}"))
