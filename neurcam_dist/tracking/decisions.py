"""What a re-clustering keeps in MLflow: the snapshot a registered version was trained on (a tag
that lets the next run skip an unchanged snapshot) and the decision beside the search's parent run
and on the version. The re-clustering (``ops.recluster``) reaches MLflow through here only."""
from __future__ import annotations

import json

FINGERPRINT_TAG = "neurcam.snapshot_fingerprint"
LOGGED = ("inertia_challenger", "inertia_champion", "agreement_ari", "size_shift", "top_terms_overlap")


def tag_snapshot(name: str, version: str, fingerprint: str) -> None:
    """Mark version ``version`` of ``name`` as trained on the snapshot ``fingerprint``."""
    from mlflow import MlflowClient
    MlflowClient().set_model_version_tag(name, version, FINGERPRINT_TAG, fingerprint)


def versions_trained_on(name: str, fingerprint: str) -> list[int]:
    """The versions of ``name`` trained on the snapshot ``fingerprint``, newest first."""
    from mlflow import MlflowClient
    return sorted((int(mv.version) for mv in MlflowClient().search_model_versions(f"name = '{name}'")
                   if mv.tags.get(FINGERPRINT_TAG) == fingerprint), reverse=True)


def log_decision(record: dict, artifact: str) -> None:
    """``record`` (a re-clustering's decision) as ``artifact`` beside the search's parent run
    (``run_id``), its figures as metrics and the outcome as tags, and whether it was promoted on
    the challenger's version."""
    from mlflow import MlflowClient
    client = MlflowClient()
    run_id = record.get("run_id")
    if run_id:
        client.log_dict(run_id, record, artifact)
        for key in LOGGED:
            if record.get(key) is not None:
                client.log_metric(run_id, f"recluster.{key}", float(record[key]))
        client.set_tag(run_id, "recluster.promoted", str(record["promoted"]).lower())
        client.set_tag(run_id, "recluster.reason", record["reason"][:5000])
        client.set_tag(run_id, "recluster.mapping", json.dumps(record["mapping"]))
    if record.get("challenger_version"):
        client.set_model_version_tag(record["model_name"], record["challenger_version"], "recluster.promoted",
                                     str(record["promoted"]).lower())
