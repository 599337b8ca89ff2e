"""MLflow: a real ``mlflow server`` on 127.0.0.1 (SQLite backend, proxied artifact store)."""
import logging
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from neurcam_dist import tracking
from neurcam_dist.uris import Location
from neurcam_dist.cli import main

from .conftest import free_port


def test_registered_pyfunc_loads_in_a_fresh_process_and_predicts_like_the_estimator(
        fitted, data, mlflow_server, tmp_path, monkeypatch, ray_cluster):
    import mlflow
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    X, _ = data
    tracking.use(mlflow_server, experiment="registry-test")
    with mlflow.start_run():
        _, version = tracking.log_model(fitted, X, registered_name="neurcam-test")
    client = mlflow.MlflowClient()
    assert client.get_model_version_by_alias("neurcam-test", "candidate").version == version
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    assert main(["promote", "neurcam-test", version]) == 0
    assert client.get_model_version_by_alias("neurcam-test", "champion").version == version
    with pytest.raises(ValueError, match="has no version 99"):
        tracking.promote("neurcam-test", "99")
    X.to_parquet(tmp_path / "x.parquet")
    code = f"""
import mlflow, pandas as pd, numpy as np
m = mlflow.pyfunc.load_model('models:/neurcam-test@champion')
X = pd.read_parquet(r'{tmp_path / 'x.parquet'}')
out = m.predict(X)
np.save(r'{tmp_path / 'clusters.npy'}', out['cluster'].to_numpy())
np.save(r'{tmp_path / 'proba.npy'}', out[[c for c in out.columns if c.startswith('proba_')]].to_numpy())
m.predict(X, params={{"explain": True}}).to_parquet(r'{tmp_path / 'explained.parquet'}')
print("columns without params:", list(m.predict(X, params={{"explian": True}}).columns))
for bad in ({{"explain": True, "top_terms": 0}}, {{"explian": True}}):
    try:
        m.unwrap_python_model().predict(None, X, params=bad) if "explian" in bad else m.predict(X, params=bad)
    except Exception as exc:
        print("refused:", exc)
print("declared:", sorted(p.name for p in m.metadata.get_params_schema().params))
"""
    env = {**os.environ, "MLFLOW_TRACKING_URI": mlflow_server}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert np.array_equal(np.load(tmp_path / "clusters.npy"), fitted.predict(X))
    np.testing.assert_allclose(np.load(tmp_path / "proba.npy"), fitted.predict_proba(X), rtol=0, atol=1e-12)
    # params={"explain": True}: the top terms and their contributions, declared in the signature
    assert "declared: ['explain', 'top_terms']" in res.stdout
    assert "refused: params top_terms must be an integer from 1 to 50, got 0" in res.stdout
    assert "refused: unknown params ['explian']" in res.stdout            # called on the model class itself
    assert "Unrecognized params ['explian'] are ignored" in res.stderr      # MLflow drops it before, and says so
    assert "columns without params: ['cluster', 'proba_0', 'proba_1', 'proba_2']" in res.stdout
    explained = pd.read_parquet(tmp_path / "explained.parquet")
    # neurcam predict and neurcam explain take the registry URI
    X.assign(id=np.arange(len(X))).to_parquet(tmp_path / "in.parquet")
    assert main(["predict", "--model", "models:/neurcam-test@champion", "--input", str(tmp_path / "in.parquet"),
                 "--output", str(tmp_path / "scored")]) == 0
    scored = pd.read_parquet(tmp_path / "scored").sort_values("id")
    assert np.array_equal(scored["cluster"].to_numpy(), fitted.predict(X))
    # the registry model's explanation columns are neurcam predict's, value for value; predict's
    # files add `probability` (the row's own cluster's, as fit's assignments have it)
    same = scored.drop(columns=["id", "probability"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(explained.reset_index(drop=True)[same.columns], same, check_exact=True,
                                  check_dtype=False)   # predict writes cluster as int32
    np.testing.assert_array_equal(scored["probability"].to_numpy(), same.filter(like="proba_").max(axis=1))
    assert "term_3_contribution" in same.columns
    assert main(["explain", "--model", "models:/neurcam-test@champion", "--data", str(tmp_path / "x.parquet"),
                 "--out", str(tmp_path / "explained")]) == 0
    from neurcam_dist.explain import Explanation
    got = Explanation.from_json(tmp_path / "explained" / "explanation.json")
    assert got.importance == fitted.explain(X).importance


def test_embedded_local_store_needs_no_server(fitted, data, tmp_path, monkeypatch):
    import mlflow
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    X, _ = data
    tracking.use(None, experiment="local", workdir=tmp_path)
    assert mlflow.get_tracking_uri() == f"sqlite:///{tmp_path / 'mlflow.db'}"
    with mlflow.start_run() as run:
        info, version = tracking.log_model(fitted, X, registered_name="local-model")
    assert version == "1" and (tmp_path / "mlartifacts").is_dir()
    est = tracking.load_estimator(f"runs:/{run.info.run_id}/model")
    assert np.array_equal(est.predict(X), fitted.predict(X))
    with pytest.raises(Exception, match=r"Model is missing inputs \['f0', 'f1', 'f2', 'f3'\]"):
        mlflow.pyfunc.load_model(info.model_uri).predict(pd.DataFrame({"nope": [1.0]}))


def test_a_sqlite_store_keeps_its_artifacts_beside_its_database(fitted, data, tmp_path, monkeypatch):
    """A configured SQLite store elsewhere gets its artifacts beside its database: nothing is
    written where the process runs (it wrote ``./mlartifacts`` there)."""
    import mlflow
    (tmp_path / "store").mkdir(), (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    tracking.use(f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}", experiment="beside")
    with mlflow.start_run():
        _, version = tracking.log_model(fitted, data[0], registered_name="beside-model")
    assert version == "1" and (tmp_path / "store" / "mlartifacts").is_dir()
    assert not list((tmp_path / "here").iterdir())


def test_train_logs_run_artifacts_and_registers_a_candidate(mlflow_server, ray_cluster, tmp_path, monkeypatch, capsys):
    import json

    import mlflow

    from neurcam_dist.service import train
    from neurcam_dist.tracking import TrackingError
    from neurcam_dist.explain import Explanation
    from neurcam_dist.data.synthetic import write_shards

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("NEURCAM_VERBOSE", raising=False)
    write_shards(tmp_path / "data", 1500, n_features=4, repr_dim=6, n_clusters=3, n_files=3, seed=1)
    job = {"data": {"path": str(tmp_path / "data"), "embedding": "embedding", "label": "label", "id": "id"},
           "model": {"n_clusters": 3, "hidden": [16, 16], "n_bases": 4, "warmup_epochs": 3, "distill_epochs": 1,
                     "epochs": 6, "epsilon": 0.3, "batch_size": 64, "lr": 5e-3, "early_stopping": False},
           "train": {"num_workers": 1},
           "tracking": {"uri": mlflow_server, "experiment": "train-test", "model_name": "trained"},
           "output": str(tmp_path / "out")}
    capsys.readouterr()
    handlers = list(logging.getLogger("mlflow").handlers)
    result = train(job)
    t = result.tracking
    # MLflow's own lines (its logger's and its prints) go to the run's logs/; ours say what was logged
    said = capsys.readouterr()
    assert "Successfully registered model" not in said.err + said.out and "Created version" not in said.err + said.out
    assert f"registered trained version {t['version']} (alias candidate)" in said.out
    # the run's page once, in the service's line; not MLflow's "View run" print on stdout
    assert "View run" not in said.out and f"({mlflow_server}/#/experiments/" in said.out
    assert t["run_url"].endswith(f"/runs/{t['run_id']}") and t["run_url"] in said.out
    mlflow_log = next((tmp_path / "out" / "logs").glob("mlflow-*.log"))
    assert f"MLflow's own log lines go to {mlflow_log}" in said.out
    text = mlflow_log.read_text()
    assert " INFO mlflow." in text and "Successfully registered model 'trained'." in text
    assert logging.getLogger("mlflow").handlers == handlers  # put back
    mlflow.set_tracking_uri(mlflow_server)
    client = mlflow.MlflowClient()
    run = client.get_run(t["run_id"])
    assert run.data.params["data.n_rows"] == "1500" and run.data.params["model.n_clusters"] == "3"
    assert run.data.metrics["inertia"] == pytest.approx(result.metrics["inertia"])
    assert "ray_version" in run.data.tags and run.data.tags["phase_reached"] == "final"
    losses = client.get_metric_history(t["run_id"], "loss")
    assert sorted(m.step for m in losses) == list(range(1, result.estimator.n_iter_ + 1))
    names = {a.path for a in client.list_artifacts(t["run_id"])}
    assert {"report", "config.json", "standardization.json", "history.json", "metrics.json"} <= names
    assert run.outputs.model_outputs  # MLflow 3 records the pyfunc as a LoggedModel output of the run
    local = mlflow.artifacts.download_artifacts(run_id=t["run_id"], artifact_path="report", dst_path=str(tmp_path / "dl"))
    expl = Explanation.from_json(f"{local}/explanation.json")
    assert expl.cluster_sizes and (tmp_path / "dl" / "report" / "report.html").exists()
    assert json.loads((tmp_path / "out" / "metrics.json").read_text())["inertia"] == result.metrics["inertia"]
    mv = client.get_model_version_by_alias("trained", "candidate")
    assert mv.version == t["version"] and mv.run_id == t["run_id"]
    registered = tracking.load_estimator("models:/trained@candidate")
    X = result.estimator.reference_
    assert np.array_equal(registered.predict(X), result.estimator.predict(X))

    # a tracking server that is down: the model is still saved, the error says what was not logged,
    # and nothing new is registered
    dead = f"http://127.0.0.1:{free_port()}"
    job2 = {**job, "tracking": {**job["tracking"], "uri": dead}, "output": str(tmp_path / "out2")}
    monkeypatch.setenv("NEURCAM_TRACKING_WAIT_S", "3")   # waited for (300 s by default), then the error
    capsys.readouterr()
    with pytest.raises(TrackingError, match=r"model is saved in .*out2/model, but logging to MLflow"):
        train(job2)
    said = capsys.readouterr().out
    assert "waiting up to 3 s (NEURCAM_TRACKING_WAIT_S) for the server before logging" in said, said[-2000:]
    assert (tmp_path / "out2" / "model" / "manifest.json").exists()
    assert [v.version for v in client.search_model_versions("name='trained'")] == [t["version"]]


def test_a_process_s_mlflow_lines_go_to_one_file_said_once(tmp_path, capsys, monkeypatch):
    """The re-clustering reads the registry before its search and promotes after it: every block
    of MLflow's lines in one process goes to the same file, and the console hears of it once."""
    import mlflow

    from neurcam_dist.distributed.console import library_logs
    monkeypatch.delenv("NEURCAM_VERBOSE", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    for i in range(2):
        with library_logs(Location(tmp_path), ("mlflow",), "MLflow's") as path:
            if i == 0:
                tracking.use(None, experiment="lines", workdir=tmp_path)   # a new local store: its set-up lines
                mlflow.MlflowClient().search_registered_models()
            logging.getLogger("mlflow").info("block %d", i)
    out, err = capsys.readouterr()
    assert out.count("MLflow's own log lines go to") == 1 and f"go to {path}" in out
    assert "Creating initial MLflow database tables" not in out + err
    assert [p.name for p in (tmp_path / "logs").iterdir()] == [path.name]
    text = path.read_text()
    assert "Creating initial MLflow database tables" in text and "block 0" in text and "block 1" in text


def test_an_alias_another_process_creates_in_the_same_instant_is_set_on_the_next_try():
    """Two re-clusterings registering at once: MLflow's SQL store reads the alias, finds none, and
    both insert it; the later insert hits the unique key (seen once in test_ops' two concurrent
    re-clusterings). The alias is set again (then found and moved); any other error is raised at
    once. The race itself cannot be timed from a test: the store's answer is replayed here."""
    from mlflow.exceptions import MlflowException

    from neurcam_dist.tracking.promotion import set_alias

    class Answers:   # the client's set_registered_model_alias, answering with these errors first
        def __init__(self, errors):
            self.errors, self.calls = list(errors), []

        def set_registered_model_alias(self, name, alias, version):
            self.calls.append((name, alias, version))
            if self.errors:
                raise MlflowException(self.errors.pop(0))

    race = ("BAD_REQUEST: (sqlite3.IntegrityError) UNIQUE constraint failed: registered_model_aliases.workspace, "
            "registered_model_aliases.name, registered_model_aliases.alias")
    once = Answers([race])
    set_alias(once, "m", "candidate", 2)
    assert once.calls == [("m", "candidate", "2")] * 2
    denied = Answers(["PERMISSION_DENIED: not allowed"])
    with pytest.raises(MlflowException, match="PERMISSION_DENIED"):
        set_alias(denied, "m", "candidate", "2")
    assert len(denied.calls) == 1
    stuck = Answers([race] * 9)
    with pytest.raises(MlflowException, match="UNIQUE constraint"):
        set_alias(stuck, "m", "candidate", "2", tries=3)
    assert len(stuck.calls) == 3
