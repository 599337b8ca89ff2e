"""The registered model downstream scoring pulls: a pyfunc from code (``pyfunc_model.py``) with the
safetensors model directory as its artifact, registered and aliased ``candidate``; ``promote``
moves ``champion``."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pandas as pd


def log_model(est, X_example: pd.DataFrame, registered_name: str | None = None, alias: str = "candidate"):
    """Log ``est`` as a pyfunc in the active run; register it and alias the new version.
    Returns ``(model_info, version or None)``."""
    import warnings

    import mlflow
    from mlflow import MlflowClient
    from mlflow.models import infer_signature

    example = X_example[list(est.feature_names_in_)].head(5)
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
    from ..version import __version__
    return __version__
