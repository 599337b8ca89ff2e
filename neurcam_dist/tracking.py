"""MLflow: where runs go, and the registered model that downstream scoring pulls.

Tracking URI: the config's, else ``MLFLOW_TRACKING_URI``, else an embedded local store (a SQLite
database and an artifact folder under the working directory), so nothing needs a server.
A model is logged as a pyfunc from code (``pyfunc_model.py``) with the safetensors model
directory as its artifact, registered, and aliased ``candidate``; ``promote`` moves ``champion``.
"""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

LOCAL_DB = "mlflow.db"
LOCAL_ARTIFACTS = "mlartifacts"


def tracking_uri(configured: str | None = None, workdir: str | os.PathLike = ".") -> str:
    uri = configured or os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    return f"sqlite:///{(Path(workdir) / LOCAL_DB).resolve()}"


def use(configured: str | None = None, experiment: str = "neurcam", workdir: str | os.PathLike = ".") -> str:
    """Point MLflow at the tracking store and experiment; returns the experiment id."""
    import mlflow
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # a bar per model logged, in logs
    uri = tracking_uri(configured, workdir)
    if uri.startswith(("http://", "https://")):
        check_reachable(uri)
    mlflow.set_tracking_uri(uri)
    exp = mlflow.get_experiment_by_name(experiment)
    if exp is not None:
        mlflow.set_experiment(experiment)
        return exp.experiment_id
    location = None
    if uri.startswith("sqlite:///"):  # the embedded store keeps artifacts beside its database
        location = (Path(workdir) / LOCAL_ARTIFACTS).resolve().as_uri()
    exp_id = mlflow.create_experiment(experiment, artifact_location=location)
    mlflow.set_experiment(experiment)
    return exp_id


def check_reachable(uri: str, timeout: float = 5.0) -> None:
    """Fail in seconds, not after MLflow's minutes of HTTP retries, when the server is down."""
    import urllib.error
    import urllib.request
    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout):
            return
    except (urllib.error.URLError, OSError) as exc:
        raise ConnectionError(f"MLflow tracking server {uri} is unreachable ({exc})") from None


def log_model(est, X_example: pd.DataFrame, registered_name: str | None = None, alias: str = "candidate"):
    """Log ``est`` as a pyfunc in the active run; register it and alias the new version.
    Returns ``(model_info, version or None)``."""
    import warnings

    import mlflow
    from mlflow import MlflowClient
    from mlflow.models import infer_signature

    example = X_example[est.feature_names_in_].head(5)
    proba = est.predict_proba(example)
    output = pd.DataFrame({"cluster": proba.argmax(1), **{f"proba_{k}": proba[:, k] for k in range(proba.shape[1])}})
    with warnings.catch_warnings():  # the "integer column" hint is about inputs; ours are float64
        warnings.filterwarnings("ignore", message="Hint: Inferred schema contains integer", category=UserWarning)
        signature = infer_signature(example.astype(np.float64), output)
    with tempfile.TemporaryDirectory() as tmp:
        est.save(Path(tmp) / "model")
        info = mlflow.pyfunc.log_model(
            name="model", python_model=str(Path(__file__).with_name("pyfunc_model.py")),
            artifacts={"model": str(Path(tmp) / "model")},
            signature=signature, input_example=example.astype(np.float64),
            pip_requirements=[f"neurcam-dist=={_version()}"], registered_model_name=registered_name)
    version = None
    if registered_name:
        version = str(info.registered_model_version)
        MlflowClient().set_registered_model_alias(registered_name, alias, version)
    return info, version


def data_fingerprint(plan) -> dict:
    return {"data.path": str(plan.source.spec), "data.n_rows": plan.n_rows, "data.n_files": len(plan.source.files),
            "data.schema_hash": plan.schema_hash, "data.features": ",".join(plan.features)[:6000],
            "data.repr": f"{plan.repr_kind}:{plan.repr_dim}"}


def _tags() -> dict:
    import subprocess

    import ray
    tags = {"ray_version": ray.__version__, "neurcam_version": _version()}
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        if rev.returncode == 0:
            tags["git_revision"] = rev.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return tags


def _params(model: dict, cfg, plan) -> dict:
    return {**{f"model.{k}": v for k, v in model.items()},
            **{f"train.{k}": v for k, v in cfg.train.model_dump().items()}, **data_fingerprint(plan)}


HISTORY_KEYS = ("loss", "clust_loss", "kl", "T", "T2", "lr")
FINAL_KEYS = ("inertia", "ari", "nmi", "acc", "train_seconds")


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


def _write_artifacts(t: Path, est, cfg, metrics: dict, report: Path | None = None) -> None:
    """What a run keeps besides the model: the explanation report (JSON, Parquet, PNG, HTML),
    the resolved config, the standardization statistics, the history and the metrics."""
    import json
    import shutil

    from .report import write_report
    if report is not None and report.is_dir():
        shutil.copytree(report, t / "report")
    else:
        write_report(est.explain(), t / "report")
    (t / "config.json").write_text(cfg.model_dump_json(indent=1))
    (t / "standardization.json").write_text(json.dumps(
        {"features": est.feature_names_in_, "mean": est.mean_.tolist(), "scale": est.scale_.tolist()}))
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
    with mlflow.start_run(run_name=metrics.get("run_name")) as run:
        mlflow.log_params(_params(cfg.model.model_dump(), cfg, result.plan))
        _log_history(mlflow.MlflowClient(), run.info.run_id, est)
        mlflow.log_metrics({k: float(metrics[k]) for k in FINAL_KEYS if k in metrics})
        mlflow.set_tags({**_tags(), **_run_tags(est)})
        with tempfile.TemporaryDirectory() as tmp:
            _write_artifacts(Path(tmp), est, cfg, metrics)
            mlflow.log_artifacts(tmp)
        _, version = log_model(est, est._reference, registered_name=tc.model_name)
    return {"run_id": run.info.run_id, "experiment": tc.experiment, "tracking_uri": mlflow.get_tracking_uri(),
            "registered_model": tc.model_name, "version": version}


def log_search(result, cfg) -> dict:
    """A parent run for a ``tune.search`` and one nested run per trial (failed ones marked
    FAILED with their error). The winner's nested run holds the artifacts and the model; the
    parent holds the selection (``search.json``: every trial's inertia), the best inertia and
    the explanation-consistency metrics. The model is registered last."""
    import json

    import mlflow

    from .estimator import NeurCAM
    from .tune import trial_model

    tc = cfg.tracking
    exp_id = use(tc.uri, tc.experiment)
    client = mlflow.MlflowClient()
    s = cfg.search
    searched = set(s.space()) | {"random_state"}
    base = {k: v for k, v in cfg.model.model_dump().items() if k not in searched}
    tags = _tags()
    best_run = None
    with mlflow.start_run(run_name=result.metrics["search"]["name"]) as parent:
        mlflow.log_params({**_params(base, cfg, result.plan), "search.seeds": json.dumps(s.seeds),
                           "search.space": json.dumps(s.space())[:6000], "search.num_samples": s.num_samples,
                           "search.rule": "lowest hard inertia"})
        for trial in result.trials:
            run = client.create_run(exp_id, run_name=f"trial-{trial.trial_id}", tags={
                "mlflow.parentRunId": parent.info.run_id, "neurcam.trial_id": trial.trial_id,
                "neurcam.status": trial.status, **tags})
            rid = run.info.run_id
            try:
                model = trial_model(cfg, trial.params).model_dump()
            except ValueError:  # parameters the model refused: record them as given
                model = {**cfg.model.model_dump(), **trial.params}
            client.log_batch(rid, params=_param_list(_params(model, cfg, result.plan)))
            if trial.status == "ok":
                est = NeurCAM.load(Path(trial.output) / "model")
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
            _write_artifacts(Path(tmp), result.estimator, result.config, result.metrics,
                             report=result.output / "report")
            client.log_artifacts(best_run, tmp)
        # last: the registered version (alias candidate), logged in the winner's run
        with mlflow.start_run(run_id=best_run, nested=True):
            _, version = log_model(result.estimator, result.estimator._reference, registered_name=tc.model_name)
    return {"run_id": parent.info.run_id, "best_run_id": best_run, "experiment": tc.experiment,
            "tracking_uri": mlflow.get_tracking_uri(), "registered_model": tc.model_name, "version": version}


def _param_list(params: dict):
    from mlflow.entities import Param
    return [Param(k, str(v)[:6000]) for k, v in params.items()]


def promote(name: str, version: str, alias: str = "champion") -> None:
    """Move ``alias`` (default ``champion``) to ``version`` of registered model ``name``."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    client = MlflowClient()
    try:
        client.get_model_version(name, str(version))
    except MlflowException as exc:
        raise ValueError(f"registered model {name!r} has no version {version}: {exc.message}") from None
    client.set_registered_model_alias(name, alias, str(version))


def load_estimator(uri: str):
    """A ``NeurCAM`` from a ``models:/NAME@alias`` (or any pyfunc) URI logged by ``log_model``."""
    import mlflow
    return mlflow.pyfunc.load_model(uri).unwrap_python_model().estimator


def _version() -> str:
    from . import __version__
    return __version__
