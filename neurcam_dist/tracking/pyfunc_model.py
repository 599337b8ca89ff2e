"""The MLflow pyfunc flavour of a NeurCAM, logged as *code* (MLflow "models from code").

Nothing is pickled: MLflow stores this file, and the weights travel as the model directory that
``NeurCAM.save`` writes (safetensors + JSON, checked against its sha256 manifest on load).
Input: a DataFrame holding the model's feature columns (others are ignored). Output: ``cluster``
(the model's stable cluster id) and one ``proba_ID`` column per cluster; with
``params={"explain": True}`` also each row's ``top_terms`` (default 3) strongest terms toward its
cluster, ``term_r`` and ``term_r_contribution``: the columns ``neurcam predict`` writes, value for
value. MLflow drops params its signature does not declare (with a warning) before this code runs;
a call made on this class directly refuses them. The signature types every column ``Any``
(``registry.signature``): the model reads each one as ``fit`` did; a date column may come as ISO
8601 text (JSON has no dates: ``mlflow models serve``). A refusal (bad cells, a bad param) is
raised as the one-line ``MlflowException`` the scoring server answers with HTTP 400.
"""
from __future__ import annotations

import mlflow
import pandas as pd
from mlflow.pyfunc import PythonModel

from neurcam_dist.errors import DataError, NeurcamError  # absolute: MLflow loads this file as code
from neurcam_dist.tracking.registry import pyfunc_options, served_refusal


class NeurCAMPyfunc(PythonModel):
    """The registered model's MLflow pyfunc: scores a DataFrame of feature rows."""
    def load_context(self, context) -> None:
        """Load the model directory the registry stored beside this code."""
        from neurcam_dist.estimator import NeurCAM
        self.estimator = NeurCAM.load(context.artifacts["model"])

    def predict(self, context, model_input: pd.DataFrame, params=None) -> pd.DataFrame:
        """``cluster`` and ``proba_ID`` columns for each input row (``NeurCAM.score_frame``), and
        with ``params={"explain": True}`` the top terms (``top_terms``, default 3)."""
        try:
            top = pyfunc_options(params)
            est = self.estimator
            missing = [c for c in est.feature_names_in_ if c not in model_input.columns]
            if missing:
                raise DataError(f"the input lacks the model's feature columns {missing}")
            return est.score_frame(_dates_from_text(est, model_input[list(est.feature_names_in_)]), top_terms=top)
        except NeurcamError as exc:
            raise served_refusal(exc) from None


def _dates_from_text(est, frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with each date column the model has that holds text read as ISO 8601 dates
    and times (a JSON request's form); a cell that is not one is refused, naming the column."""
    coding = est.fitted_.coding
    if coding is None:
        return frame
    for column in coding.columns:
        col = frame[column.name]
        if column.dtype != "date" or not (pd.api.types.is_object_dtype(col.dtype)
                                          or pd.api.types.is_string_dtype(col.dtype)):
            continue
        text = col.dropna()
        if text.empty or not all(isinstance(v, str) for v in text):
            continue
        try:
            parsed = pd.to_datetime(col, format="ISO8601", utc=True)
        except (ValueError, TypeError) as exc:
            raise DataError(f"column {column.name!r} held dates and times at fit; its text here is not an ISO 8601 "
                            f"date or time ({exc}): send dates as 2024-05-31 or 2024-05-31T14:00:00Z") from None
        frame = frame.assign(**{column.name: parsed})
    return frame


mlflow.models.set_model(NeurCAMPyfunc())
