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
    import mlflow
    from mlflow import MlflowClient
    from mlflow.models import infer_signature

    example = X_example[est.feature_names_in_].head(5)
    proba = est.predict_proba(example)
    output = pd.DataFrame({"cluster": proba.argmax(1), **{f"proba_{k}": proba[:, k] for k in range(proba.shape[1])}})
    with tempfile.TemporaryDirectory() as tmp:
        est.save(Path(tmp) / "model")
        info = mlflow.pyfunc.log_model(
            name="model", python_model=str(Path(__file__).with_name("pyfunc_model.py")),
            artifacts={"model": str(Path(tmp) / "model")},
            signature=infer_signature(example.astype(np.float64), output), input_example=example.astype(np.float64),
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


def log_training(result, cfg) -> dict:
    """One MLflow run for a finished ``distributed.train``: params (hyperparameters, data
    location and fingerprint), per-epoch metrics, final metrics, tags, artifacts (explanation JSON
    and Parquet tables, PNG shape graphs, HTML report, resolved config, standardization
    statistics, history) and the model, registered when ``tracking.model_name`` is set. The
    registration comes last, so a failure anywhere before it registers nothing."""
    import json

    import mlflow
    from mlflow.entities import Metric

    from .report import write_report

    tc = cfg.tracking
    use(tc.uri, tc.experiment)
    est, metrics = result.estimator, result.metrics
    with mlflow.start_run(run_name=metrics.get("run_name")) as run:
        mlflow.log_params({**{f"model.{k}": v for k, v in cfg.model.model_dump().items()},
                           **{f"train.{k}": v for k, v in cfg.train.model_dump().items()},
                           **data_fingerprint(result.plan)})
        history = est.history_["epochs"]
        stamp = int(time.time() * 1000)
        batch = [Metric(key, float(rec[key]), stamp, int(rec["epoch"])) for rec in history
                 for key in ("loss", "clust_loss", "kl", "T", "T2", "lr")]
        client = mlflow.MlflowClient()
        for i in range(0, len(batch), 900):
            client.log_batch(run.info.run_id, metrics=batch[i:i + 900])
        mlflow.log_metrics({k: float(metrics[k]) for k in ("inertia", "ari", "nmi", "acc", "train_seconds")
                            if k in metrics})
        events = est.history_["events"]
        mlflow.set_tags({**_tags(), "phase_reached": events[-1]["phase"] if events else "warmup",
                         "stop_reason": est.history_["stop_reason"]})
        with tempfile.TemporaryDirectory() as tmp:
            t = Path(tmp)
            write_report(est.explain(), t / "report")
            (t / "config.json").write_text(cfg.model_dump_json(indent=1))
            (t / "standardization.json").write_text(json.dumps(
                {"features": est.feature_names_in_, "mean": est.mean_.tolist(), "scale": est.scale_.tolist()}))
            (t / "history.json").write_text(json.dumps(est.history_, default=str))
            (t / "metrics.json").write_text(json.dumps(metrics, default=str))
            mlflow.log_artifacts(str(t))
        _, version = log_model(est, est._reference, registered_name=tc.model_name)
    return {"run_id": run.info.run_id, "experiment": tc.experiment, "tracking_uri": mlflow.get_tracking_uri(),
            "registered_model": tc.model_name, "version": version}


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
