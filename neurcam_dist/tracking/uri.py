"""Where runs go: the config's tracking URI, else ``MLFLOW_TRACKING_URI``, else an embedded local
store (a SQLite database and an artifact folder under the working directory), so nothing needs a
server; an http server that is down is reported in seconds."""
from __future__ import annotations

import os
from pathlib import Path

from ..redaction import redact, split_credentials

LOCAL_DB = "mlflow.db"
LOCAL_ARTIFACTS = "mlartifacts"


def tracking_uri(configured: str | None = None, workdir: str | os.PathLike = ".") -> str:
    """The tracking URI: the configured one, else ``MLFLOW_TRACKING_URI``, else the embedded
    store ``./mlflow.db`` under ``workdir``."""
    uri = configured or os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    return f"sqlite:///{(Path(workdir) / LOCAL_DB).resolve()}"


def connect(uri: str) -> str:
    """Credentials in an http(s) URI (``http://user:secret@host``) move to the variables MLflow
    reads (``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD``); returns the URI without them,
    which is the one MLflow, logs and errors see."""
    if not uri.startswith(("http://", "https://")):
        return uri
    clean, user, password = split_credentials(uri)
    if user is not None:
        os.environ["MLFLOW_TRACKING_USERNAME"] = user
    if password is not None:
        os.environ["MLFLOW_TRACKING_PASSWORD"] = password
    return clean


def use(configured: str | None = None, experiment: str = "neurcam", workdir: str | os.PathLike = ".") -> str:
    """Point MLflow at the tracking store and experiment; returns the experiment id."""
    import mlflow
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # a bar per model logged, in logs
    uri = connect(tracking_uri(configured, workdir))
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
    from mlflow.exceptions import MlflowException
    try:
        exp_id = mlflow.create_experiment(experiment, artifact_location=location)
    except MlflowException:  # created meanwhile by a concurrent run (two scheduled jobs at once)
        exp = mlflow.get_experiment_by_name(experiment)
        if exp is None:
            raise
        exp_id = exp.experiment_id
    mlflow.set_experiment(experiment)
    return exp_id


def check_reachable(uri: str, timeout: float = 5.0) -> None:
    """Fail in seconds, not after MLflow's minutes of HTTP retries, when the server is down."""
    import base64
    import urllib.error
    import urllib.request
    uri = connect(uri)
    request = urllib.request.Request(f"{uri.rstrip('/')}/health")
    user, password = os.environ.get("MLFLOW_TRACKING_USERNAME"), os.environ.get("MLFLOW_TRACKING_PASSWORD")
    if user is not None and password is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout):
            return
    except (urllib.error.URLError, OSError) as exc:
        raise ConnectionError(f"MLflow tracking server {redact(uri)} is unreachable ({redact(exc)})") from None
