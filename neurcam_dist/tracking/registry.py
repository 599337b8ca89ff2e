"""The registered model downstream scoring pulls: a pyfunc from code (``pyfunc_model.py``) with the
safetensors model directory as its artifact, registered and aliased ``candidate``; ``promote``
moves ``champion``."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import ConfigError, ModelFileError
from ..explain.assignments import ROW_TERMS

# What the registered model's predict takes at inference (its signature's params): ``explain``
# adds each row's top terms and their contributions (the columns ``neurcam predict`` writes).
PYFUNC_PARAMS = {"explain": False, "top_terms": ROW_TERMS}
MAX_TOP_TERMS = 50


def pyfunc_options(params) -> int:
    """The ``top_terms`` a pyfunc call asks for (0: no explanation columns), from its ``params``;
    ``ConfigError`` names an unknown param or a bad value."""
    params = dict(params or {})
    unknown = sorted(set(params) - set(PYFUNC_PARAMS))
    if unknown:
        raise ConfigError(f"unknown params {unknown}: this model takes {sorted(PYFUNC_PARAMS)} "
                          f"(explain: bool, top_terms: 1..{MAX_TOP_TERMS})")
    explain, top = params.get("explain", False), params.get("top_terms", ROW_TERMS)
    if not isinstance(explain, (bool, np.bool_)):
        raise ConfigError(f"params explain must be true or false, got {explain!r}")
    if isinstance(top, bool) or not isinstance(top, (int, np.integer)) or not 1 <= top <= MAX_TOP_TERMS:
        raise ConfigError(f"params top_terms must be an integer from 1 to {MAX_TOP_TERMS}, got {top!r}")
    return int(top) if explain else 0


def signature_example(est, X_example: pd.DataFrame, rows: int = 5) -> pd.DataFrame:
    """The registered model's input example in the types its signature declares: a numeric
    feature as double (missing: NaN), a boolean one as boolean, a text or category one as string
    (missing: None), dates and times as datetime (UTC); the model reads each the way ``fit`` did."""
    example = X_example[list(est.feature_names_in_)].head(rows).copy()
    coding = est.fitted_.coding
    for j, name in enumerate(est.feature_names_in_):
        column = coding.columns[j] if coding is not None else None
        if column is not None and column.categorical and column.dtype == "text":
            from ..columns import level_texts
            example[name] = pd.Series(level_texts(example[name]), index=example.index, dtype=object)
        elif column is not None and column.categorical and column.dtype == "bool":
            example[name] = example[name].astype(bool)
        elif column is not None and column.dtype == "date":   # datetime in UTC; the model reads days
            example[name] = pd.to_datetime(example[name], utc=True).dt.tz_localize(None)
        else:
            example[name] = example[name].astype(np.float64)
    return example


def signature(est, example: pd.DataFrame):
    """The registered model's signature: every feature column by name, each of MLflow's ``Any``
    type, so that MLflow's schema enforcement passes on whatever the estimator reads (a pandas
    ``category``, nullable ``Int64``/``boolean``/``string``, ``int64``, zoned datetimes: a typed
    column spec refuses most of them before the model's code runs) and the model reads each
    column the way ``fit`` did, with its own messages; the outputs and the params
    (``PYFUNC_PARAMS``) as the example scores them. The input example shows each column's kind."""
    from mlflow.models import ModelSignature, infer_signature
    from mlflow.types.schema import AnyType, ColSpec, Schema
    output = est.score_frame(example).reset_index(drop=True)
    inferred = infer_signature(example, output, params=PYFUNC_PARAMS)
    inputs = Schema([ColSpec(AnyType(), str(name)) for name in est.feature_names_in_])
    return ModelSignature(inputs=inputs, outputs=inferred.outputs, params=inferred.params)


def served_refusal(exc) -> Exception:
    """The service's refusal (``NeurcamError``) raised inside the pyfunc, as the ``MlflowException``
    (``INVALID_PARAMETER_VALUE``) that ``mlflow models serve`` answers with HTTP 400 and the
    one-line message alone (``errors.refusal_as``): the server turns any other exception into a
    400 whose body carries the stack trace, and prefixes an ``MlflowException``'s message with the
    whole input."""
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

    from ..errors import refusal_as
    return refusal_as(MlflowException, exc, error_code=INVALID_PARAMETER_VALUE)


def log_model(est, X_example: pd.DataFrame, registered_name: str | None = None, alias: str = "candidate"):
    """Log ``est`` as a pyfunc in the active run; register it and alias the new version.
    Returns ``(model_info, version or None)``."""
    import warnings

    import mlflow
    from mlflow import MlflowClient

    example = signature_example(est, X_example)
    with warnings.catch_warnings():  # the "integer column" hint is about inputs; ours are float64
        warnings.filterwarnings("ignore", message="Hint: Inferred schema contains integer", category=UserWarning)
        sig = signature(est, example)
    with tempfile.TemporaryDirectory() as tmp:
        est.save(Path(tmp) / "model")
        info = mlflow.pyfunc.log_model(
            name="model", python_model=str(Path(__file__).with_name("pyfunc_model.py")),
            artifacts={"model": str(Path(tmp) / "model")},
            signature=sig, input_example=example,
            pip_requirements=[f"neurcam-dist=={_version()}"], registered_model_name=registered_name)
    version = None
    if registered_name:
        version = str(info.registered_model_version)
        client = MlflowClient()
        try:
            # the lineage's ids, so a later re-clustering never reuses a retired cluster id
            client.set_model_version_tag(registered_name, version, "cluster_ids",
                                         ",".join(str(int(v)) for v in est.cluster_ids_))
            client.set_model_version_tag(registered_name, version, "next_cluster_id", str(int(est.next_cluster_id_)))
            from .promotion import set_alias
            set_alias(client, registered_name, alias, version)
        except BaseException:
            # a version nobody can find by alias is a half-done registration: take it back
            try:
                client.delete_model_version(registered_name, version)
            except Exception:  # noqa: BLE001 - the original error is the one to report
                pass
            raise
    return info, version


def promote(name: str, version: str, alias: str = "champion") -> None:
    """Move ``alias`` (default ``champion``) to ``version`` of registered model ``name``."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException
    client = MlflowClient()
    try:
        client.get_model_version(name, str(version))
    except MlflowException as exc:
        raise ConfigError(f"registered model {name!r} has no version {version}: {exc.message}") from None
    from .promotion import record_champion, set_alias
    set_alias(client, name, alias, str(version))
    if alias == "champion":
        record_champion(name, str(version))


def load_estimator(uri: str):
    """A ``NeurCAM`` from a ``models:/NAME@alias`` (or ``runs:/ID/model``) URI logged by ``log_model``.

    Only the model directory is downloaded and read (JSON + safetensors, checked against its
    sha256 manifest): the pyfunc code stored beside it in the registry is not run. Loading the
    same URI with ``mlflow.pyfunc.load_model`` does run that stored code, so whoever can write to
    the registry can run code in such a scorer: the registry is the trust boundary."""
    from mlflow.artifacts import download_artifacts
    from mlflow.exceptions import MlflowException

    from ..estimator import NeurCAM
    with tempfile.TemporaryDirectory() as tmp:
        try:
            local = Path(download_artifacts(artifact_uri=uri, dst_path=tmp))
        except MlflowException as exc:
            raise ModelFileError(f"cannot fetch {uri} from the MLflow registry: {exc.message}") from None
        model_dir = local / "artifacts" / "model"
        if not (model_dir / "manifest.json").is_file():
            raise ModelFileError(f"{uri} holds no NeurCAM model directory (artifacts/model with a manifest): "
                             f"it was not logged by neurcam-dist")
        return NeurCAM.load(model_dir)


def _version() -> str:
    from ..version import __version__
    return __version__
