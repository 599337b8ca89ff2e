"""What ``neurcam monitor`` keeps in MLflow: a run of its own per snapshot, in the experiment
``neurcam-monitor``, with the verdict as metrics and tags and ``drift.json`` and ``monitor.html``
as artifacts, so a model's drift over time is one metric chart in the MLflow UI."""
from __future__ import annotations

import re
from pathlib import Path

EXPERIMENT = "neurcam-monitor"


def metric_key(text: str) -> str:
    """``text`` as an MLflow metric name (letters, digits, ``_ - . /`` and spaces; others ``_``)."""
    return re.sub(r"[^A-Za-z0-9_\-./ ]", "_", str(text))[:250]


def drift_metrics(record: dict) -> dict[str, float]:
    """``drift.json``'s ``record`` as MLflow metrics: the verdict, each feature's PSI and missing
    share, each cluster's share now and the borderline share."""
    out = {"drift.alert": float(record["alert"]), "drift.rows": float(record["n_rows"]),
           "drift.drifted_features": float(sum(f["drifted"] for f in record["features"])),
           "drift.drifted_clusters": float(sum(c["drifted"] for c in record["clusters"])),
           "drift.borderline_share": float(record["borderline"]["now"])}
    for f in record["features"]:
        out[metric_key(f"drift.psi.{f['name']}")] = float(f["score"])
        out[metric_key(f"drift.missing.{f['name']}")] = float(f["missing_now"])
    for c in record["clusters"]:
        out[f"drift.share.{c['id']}"] = float(c["share_now"])
    return out


def log_drift(record: dict, folder: Path, model: str) -> str:
    """A run in the active experiment holding ``record`` (``drift.json``'s content) and the files of
    ``folder`` (``drift.json``, ``monitor.html``), tagged with the model ``model``; returns its id."""
    import mlflow
    with mlflow.start_run(run_name=f"monitor {Path(str(record['snapshot'])).name}") as run:
        mlflow.set_tags({"neurcam.model": model, "neurcam.snapshot": record["snapshot"],
                         "drift.alert": str(record["alert"]).lower()})
        mlflow.log_metrics(drift_metrics(record))
        for name in ("drift.json", "monitor.html"):
            mlflow.log_artifact(str(Path(folder) / name))
        return run.info.run_id
