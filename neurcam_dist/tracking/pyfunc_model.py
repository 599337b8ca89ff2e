"""The MLflow pyfunc flavour of a NeurCAM, logged as *code* (MLflow "models from code").

Nothing is pickled: MLflow stores this file, and the weights travel as the model directory that
``NeurCAM.save`` writes (safetensors + JSON, checked against its sha256 manifest on load).
Input: a DataFrame holding the model's feature columns (others are ignored). Output: ``cluster``
(the model's stable cluster id) and one ``proba_ID`` column per cluster; with
``params={"explain": True}`` also each row's ``top_terms`` (default 3) strongest terms toward its
cluster, ``term_r`` and ``term_r_contribution``: the columns ``neurcam predict`` writes, value for
value. MLflow drops params its signature does not declare (with a warning) before this code runs;
a call made on this class directly refuses them.
"""
from __future__ import annotations

import mlflow
import pandas as pd
from mlflow.pyfunc import PythonModel

from neurcam_dist.errors import DataError  # absolute: MLflow loads this file as code, outside the package
from neurcam_dist.tracking.registry import pyfunc_options


class NeurCAMPyfunc(PythonModel):
    """The registered model's MLflow pyfunc: scores a DataFrame of feature rows."""
    def load_context(self, context) -> None:
        """Load the model directory the registry stored beside this code."""
        from neurcam_dist.estimator import NeurCAM
        self.estimator = NeurCAM.load(context.artifacts["model"])

    def predict(self, context, model_input: pd.DataFrame, params=None) -> pd.DataFrame:
        """``cluster`` and ``proba_ID`` columns for each input row (``NeurCAM.score_frame``), and
        with ``params={"explain": True}`` the top terms (``top_terms``, default 3)."""
        top = pyfunc_options(params)
        est = self.estimator
        missing = [c for c in est.feature_names_in_ if c not in model_input.columns]
        if missing:
            raise DataError(f"the input lacks the model's feature columns {missing}")
        return est.score_frame(model_input[list(est.feature_names_in_)], top_terms=top)


mlflow.models.set_model(NeurCAMPyfunc())
