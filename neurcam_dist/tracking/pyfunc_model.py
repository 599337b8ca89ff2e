"""The MLflow pyfunc flavour of a NeurCAM, logged as *code* (MLflow "models from code").

Nothing is pickled: MLflow stores this file, and the weights travel as the model directory that
``NeurCAM.save`` writes (safetensors + JSON, checked against its sha256 manifest on load).
Input: a DataFrame holding the model's feature columns (others are ignored). Output: ``cluster``
(the model's stable cluster id) and one ``proba_ID`` column per cluster.
"""
from __future__ import annotations

import mlflow
import pandas as pd
from mlflow.pyfunc import PythonModel


class NeurCAMPyfunc(PythonModel):
    def load_context(self, context) -> None:
        from neurcam_dist.estimator import NeurCAM
        self.estimator = NeurCAM.load(context.artifacts["model"])

    def predict(self, context, model_input: pd.DataFrame, params=None) -> pd.DataFrame:
        est = self.estimator
        missing = [c for c in est.feature_names_in_ if c not in model_input.columns]
        if missing:
            raise ValueError(f"the input lacks the model's feature columns {missing}")
        proba = est.predict_proba(model_input[list(est.feature_names_in_)])
        ids = est.cluster_ids_
        out = pd.DataFrame({"cluster": ids[proba.argmax(1)]}, index=model_input.index)
        for k in range(proba.shape[1]):
            out[f"proba_{ids[k]}"] = proba[:, k]
        return out


mlflow.models.set_model(NeurCAMPyfunc())
