"""Ray Tune search: real Tune trials driving Ray Train, logged to a real ``mlflow server``."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from neurcam_dist import service
from neurcam_dist.distributed import tuner as tune_mod
from neurcam_dist.cli import main
from neurcam_dist.config import ConfigError, parse_config
from neurcam_dist.data.synthetic import write_shards

from .conftest import free_port, run_example

SMALL_MODEL = {"n_clusters": 3, "hidden": [16, 16], "n_bases": 4, "warmup_epochs": 3, "distill_epochs": 1,
               "epochs": 6, "epsilon": 0.3, "batch_size": 64, "lr": 5e-3, "early_stopping": False}


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    d = tmp_path_factory.mktemp("tune-data") / "data"
    write_shards(d, 1200, n_features=4, repr_dim=6, n_clusters=3, n_files=3, seed=2)
    return d


def job(shards, out, search, tracking=None):
    j = {"data": {"path": str(shards), "embedding": "embedding", "label": "label", "id": "id"},
         "model": dict(SMALL_MODEL), "train": {"num_workers": 1, "kmeans_sample": 800},
         "search": search, "output": str(out)}
    if tracking:
        j["tracking"] = tracking
    return j


def nested_runs(client, parent_id):
    exp = client.get_run(parent_id).info.experiment_id
    return client.search_runs([exp], f"tags.mlflow.parentRunId = '{parent_id}'")


def test_two_seed_search_registers_the_lowest_inertia_trial(shards, tmp_path, mlflow_server, ray_cluster,
                                                              monkeypatch, capsys):
    import mlflow

    from neurcam_dist.explain import Explanation
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    mlflow.set_tracking_uri(mlflow_server)
    client = mlflow.MlflowClient()
    res = service.search(job(shards, tmp_path / "out", {"seeds": 2},
                              {"uri": mlflow_server, "experiment": "tune-test", "model_name": "tuned"}))
    assert [t.status for t in res.trials] == ["ok"] * 2
    assert sorted(int(t.params["random_state"]) for t in res.trials) == [0, 1]
    # one trial at a time (search.max_concurrent_trials defaults to 1): each finishes before the next starts
    events = [("started" if " started: " in ln else "finished") for ln in capsys.readouterr().out.splitlines()
              if ln.startswith("[neurcam] trial ") and (" started: " in ln or " finished (" in ln)]
    assert events == ["started", "finished"] * 2
    assert res.best.inertia == min(t.inertia for t in res.trials)

    # MLflow: a parent run, one nested run per trial with per-epoch metrics; exactly one version,
    # logged in the nested run whose inertia is the minimum
    t = res.tracking
    runs = nested_runs(client, t["run_id"])
    assert len(runs) == 2
    inertias = {r.info.run_id: r.data.metrics["inertia"] for r in runs}
    versions = client.search_model_versions("name='tuned'")
    assert len(versions) == 1 and versions[0].version == t["version"]
    assert versions[0].run_id == min(inertias, key=inertias.get) == t["best_run_id"]
    assert client.get_model_version_by_alias("tuned", "candidate").version == t["version"]
    for r in runs:
        assert r.info.status == "FINISHED" and r.data.params["model.n_clusters"] == "3"
        steps = [m.step for m in client.get_metric_history(r.info.run_id, "loss")]
        assert steps == list(range(1, len(steps) + 1)) and len(steps) >= SMALL_MODEL["epochs"]
    parent = client.get_run(t["run_id"])
    assert parent.data.metrics["best_inertia"] == pytest.approx(min(inertias.values()))
    assert parent.data.metrics["n_trials"] == 2 and parent.data.metrics["n_failed"] == 0
    # 4 features: every run has at most 4 terms, so top-5, -10 and -25 all hold every term
    shared = [parent.data.metrics[f"top{k}_intersection"] for k in (5, 10, 25)]
    assert 0 <= shared[0] <= 4 and shared[0] == shared[1] == shared[2] == res.consistency["top5_intersection"]
    local = mlflow.artifacts.download_artifacts(run_id=t["best_run_id"], artifact_path="report",
                                                dst_path=str(tmp_path / "dl"))
    assert Explanation.from_json(f"{local}/explanation.json").cluster_sizes
    names = {a.path for a in client.list_artifacts(t["best_run_id"])}
    assert {"report", "config.json", "standardization.json", "history.json", "metrics.json"} <= names
    assert client.get_run(t["best_run_id"]).outputs.model_outputs  # MLflow 3: the pyfunc is a LoggedModel

    # the winner on disk: model, metrics, every trial, and the report
    out = tmp_path / "out"
    summary = json.loads((out / "search.json").read_text())
    assert summary["best_trial"] == res.best.trial_id and len(summary["trials"]) == 2
    assert json.loads((out / "metrics.json").read_text())["inertia"] == res.best.inertia
    assert (out / "report" / "report.html").exists()
    assert json.loads((out / "config.json").read_text())["model"]["random_state"] == res.best.params["random_state"]
    # the report's stability: both runs compared, a band around each of the winner's curves
    written = Explanation.from_json(out / "report" / "explanation.json")
    st = written.stability
    assert st["n_models"] == 2 and st["top5_intersection"] == res.consistency["top5_intersection"]
    mains = [t for t in written.terms if t.kind == "main"]
    assert mains and set(st["bands"]) == {t.name for t in mains}
    for t in mains:
        low, high = np.asarray(st["bands"][t.name]["low"]), np.asarray(st["bands"][t.name]["high"])
        assert np.all(low <= t.values + 1e-12) and np.all(t.values <= high + 1e-12)

    # the registered model, loaded in a fresh process, predicts what the estimator predicts
    X = res.estimator.reference_
    X.to_parquet(tmp_path / "x.parquet")
    code = ("import mlflow, pandas as pd, numpy as np; "
            "m = mlflow.pyfunc.load_model('models:/tuned@candidate'); "
            f"np.save(r'{tmp_path / 'c.npy'}', m.predict(pd.read_parquet(r'{tmp_path / 'x.parquet'}'))['cluster'].to_numpy())")
    run = subprocess.run([sys.executable, "-c", code], env={**os.environ, "MLFLOW_TRACKING_URI": mlflow_server},
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert np.array_equal(np.load(tmp_path / "c.npy"), res.estimator.predict(X))


def test_a_failing_trial_is_recorded_and_the_best_other_registered(shards, tmp_path, mlflow_server, ray_cluster,
                                                                   monkeypatch):
    import mlflow
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    # n_single=0 with n_pairs=0 leaves no shape function: that trial fails, the other one trains
    res = service.search(job(shards, tmp_path / "out", {"seeds": [4], "n_single": [0, 3], "n_pairs": [0]},
                              {"uri": mlflow_server, "experiment": "tune-fail", "model_name": "tuned-fail"}))
    failed = [t for t in res.trials if t.status == "failed"]
    assert len(res.trials) == 2 and len(failed) == 1 and failed[0].params["n_single"] == 0
    assert "needs at least one shape function" in failed[0].error
    assert res.best.params["n_single"] == 3
    client = mlflow.MlflowClient(mlflow_server)
    runs = {r.data.tags["neurcam.trial_id"]: r for r in nested_runs(client, res.tracking["run_id"])}
    assert runs[failed[0].trial_id].info.status == "FAILED"
    assert "at least one shape function" in runs[failed[0].trial_id].data.tags["neurcam.error"]
    assert runs[res.best.trial_id].info.status == "FINISHED"
    versions = client.search_model_versions("name='tuned-fail'")
    assert [v.run_id for v in versions] == [runs[res.best.trial_id].info.run_id]
    rows = json.loads((tmp_path / "out" / "search.json").read_text())["trials"]
    assert sorted(r["status"] for r in rows) == ["failed", "ok"]


def test_stopped_server_and_all_failed_searches_exit_nonzero(shards, tmp_path, ray_cluster, capsys, monkeypatch):
    import yaml
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    # the wait for a server that is down (300 s by default) is test_tracking's and test_chaos's
    monkeypatch.setenv("NEURCAM_TRACKING_WAIT_S", "2")
    # MLflow down: the search finishes, the winner is saved, the command says what was not logged
    dead = f"http://127.0.0.1:{free_port()}"
    cfg = tmp_path / "search.yaml"
    cfg.write_text(yaml.safe_dump(job(shards, tmp_path / "out", {"seeds": [0]},
                                      {"uri": dead, "experiment": "x", "model_name": "never"})))
    assert main(["tune", "--config", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert "model is saved in" in err and "nothing was registered" in err and dead in err
    assert (tmp_path / "out" / "model" / "manifest.json").exists()
    assert (tmp_path / "out" / "report" / "report.html").exists()
    # every trial failing: exit 1 with each trial's reason, and nothing written
    cfg.write_text(yaml.safe_dump(job(shards, tmp_path / "out3", {"seeds": [0, 1], "n_single": [0], "n_pairs": [0]})))
    assert main(["tune", "--config", str(cfg)]) == 1
    err = capsys.readouterr().err
    assert "every one of the 2 trial(s)" in err and err.count("needs at least one shape function") == 2
    assert not (tmp_path / "out3" / "model").exists()


def test_search_config_is_checked_before_anything_runs(shards, tmp_path):
    base = job(shards, tmp_path, {})
    with pytest.raises(ConfigError, match=r"search.n_clusters: trials that differ in the number of clusters "
                                          r"cannot be compared by inertia"):
        parse_config({**base, "search": {"n_clusters": [3, 4]}})
    with pytest.raises(ConfigError, match=r"search.standardize: .* cannot be compared by inertia"):
        parse_config({**base, "search": {"standardize": [True, False]}})
    with pytest.raises(ConfigError, match=r"search.m\[1\] = 0.9: Input should be greater than or equal to 1"):
        parse_config({**base, "search": {"m": [1.05, 0.9]}})
    with pytest.raises(ConfigError, match=r"search.epsilon.uniform\[1\] = 1.5"):
        parse_config({**base, "search": {"epsilon": {"uniform": [0.5, 1.5]}}})
    with pytest.raises(ConfigError, match=r"search.gamma: .*one-key mapping"):
        parse_config({**base, "search": {"gamma": {"gauss": [0, 1]}}})
    with pytest.raises(ConfigError, match=r"search.seeds: .*seeds repeat"):
        parse_config({**base, "search": {"seeds": [1, 1]}})
    s = parse_config({**base, "search": {"seeds": 4, "m": [1.05, 1.1], "gamma": {"loguniform": [0.1, 10]},
                                         "num_samples": 2}}).search
    assert s.seeds == [0, 1, 2, 3] and tune_mod.n_trials(s) == 4 * 2 * 2
    space = tune_mod.param_space(s)
    assert space["random_state"] == {"grid_search": [0, 1, 2, 3]} and space["m"] == {"grid_search": [1.05, 1.1]}
    assert 0.1 <= space["gamma"].sample() <= 10
    assert parse_config(base).search.seeds == [0, 1, 2, 3, 4]  # the default: 5 seeds


def test_concurrent_trials_that_would_starve_ray_data_are_refused(shards, tmp_path, ray_cluster):
    # the session's Ray has 4 CPUs: 2 concurrent trials x 2 workers leave none for reading
    j = job(shards, tmp_path / "out", {"seeds": 2, "max_concurrent_trials": 2})
    j["train"]["num_workers"] = 2
    with pytest.raises(ValueError, match=r"search.max_concurrent_trials=2 trials .* leaves less than 1 of "
                                         r"the cluster's 4 CPUs"):
        tune_mod.search(j)
    assert not (tmp_path / "out").exists()


def test_the_training_and_search_pages_python_blocks_run_as_written_on_the_digits_config(ray_cluster, tmp_path,
                                                                                          monkeypatch, capsys):
    """distributed.md's and search.md's Python blocks, as a user runs them after the page's first
    step (``neurcam generate digits``): on configs/digits.yaml, kept whole but for a short model and
    one worker, one seed (the test's budget)."""
    import pandas as pd
    import yaml

    from .conftest import ROOT, doc_blocks
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert main(["generate", "digits", "--output", "data/digits"]) == 0
    config = yaml.safe_load((ROOT / "configs" / "digits.yaml").read_text())
    config["model"].update({**SMALL_MODEL, "n_clusters": 10, "n_pairs": 2, "precision": "fp32"})
    config["train"].update({"num_workers": 1, "kmeans_sample": 800})
    config["search"]["seeds"] = [3]
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "digits.yaml").write_text(yaml.safe_dump(config))
    (training,) = doc_blocks("docs/distributed.md")
    space: dict = {}
    exec(compile(training, "distributed.md", "exec"), space)
    result = space["result"]
    assert result.tracking is None and (tmp_path / "runs" / "digits" / "model").is_dir()
    X = pd.read_parquet("data/digits").drop(columns=["id", "label"])
    assert result.estimator.n_features_in_ == 64 and result.estimator.predict(X).shape == (1797,)
    assert result.metrics["inertia"] > 0 and "ari" in result.metrics
    (searching,) = doc_blocks("docs/search.md")
    exec(compile(searching, "search.md", "exec"), space)
    res = space["res"]
    assert [t.params["random_state"] for t in res.trials] in ([3], ["3"]) and res.best.inertia == res.trials[0].inertia
    assert res.estimator.predict(X).shape == (1797,) and res.tracking is None


def test_choose_k_on_ray_s_example_runs_one_trial_per_k_and_seed_and_writes_the_choice(ray_cluster, tmp_path, capsys):
    """``service.choose_k_on_ray``'s Example (``neurcam choose-k --config``), run as written on the
    session's Ray: a Tune search over (K, seed) on every row, each K measured on the driver and one
    proposed; the choice beside the trials in the config's output; of the config's ``search:``
    only its concurrency counts. Then ``choose-k --config`` refuses a single seed and a model flag."""
    import yaml
    from neurcam_dist.choosing import propose
    seen = run_example(service.choose_k_on_ray, "service.choose_k_on_ray")
    out, proposed = seen["d"] / "k", seen["choice"]
    choice = json.loads((out / "choice" / "choice.json").read_text())
    assert [r["k"] for r in choice["table"]] == [2, 3] and choice["seeds"] == 2 and "on every row" in choice["rule"]
    assert choice["k"] == proposed.k == propose([dict(r) for r in choice["table"]], 2)[0]
    assert f"proposed K = {choice['k']}" in "\n".join(proposed.lines())   # what the CLI prints
    assert {r["k"]: r["silhouette"] for r in choice["table"]}[choice["k"]] == max(r["silhouette"] for r in choice["table"])
    assert all(r["clusters_used"] == r["k"] and 0 <= r["stability"] <= 1 for r in choice["table"])
    trials = [p for p in (out / "trials").glob("*/*") if (p / "model").exists()]
    assert len(trials) == 4                                 # 2 K x 2 seeds, nothing of search: m
    assert f"Proposed K = {choice['k']}" in (out / "choice" / "choice.html").read_text()
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"data": {"path": str(seen["d"] / "data")}, "model": {"n_clusters": 2},
                                                     "output": str(out)}))
    assert main(["choose-k", "--config", str(tmp_path / "c.yaml"), "--seeds", "1"]) == 2
    assert "seeds must be 2 or more" in capsys.readouterr().err
    assert main(["choose-k", "--config", str(tmp_path / "c.yaml"), "--n-pairs", "2"]) == 2
    assert "--set model.n_pairs=" in capsys.readouterr().err
