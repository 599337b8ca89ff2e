"""The parts of re-clustering that need no Ray head: stable ids (matching, renaming, saving,
scoring, explaining), snapshot choice, the policy, the registry lease against a real ``mlflow
server``, environment overrides, ``neurcam validate``, job submission's argument checks and the
console routing of Ray's log lines."""
import json
import os
import sys
import subprocess
import time
import warnings

import numpy as np
import pandas as pd
import pytest
import yaml

from neurcam_dist import NeurCAM
from neurcam_dist.uris import Location
from neurcam_dist.cli import main
from neurcam_dist.clusterids import match_ids, size_shift, top_terms_overlap
from neurcam_dist.config import ReclusterConfig, load_config
from neurcam_dist.data import DataError
from neurcam_dist.data.snapshots import pick_snapshot
from neurcam_dist.ops.recluster import decide
from neurcam_dist.ops.submit import entrypoint, runtime_env

from .conftest import SMALL, blobs


# ---------------------------------------------------------------- stable ids
def test_matching_carries_ids_over_and_gives_new_clusters_fresh_ids():
    # challenger cluster 0 is the champion's id 5, 1 is id 0, 2 overlaps nothing, 3 is id 2
    table = np.array([[0, 3, 40], [50, 2, 0], [0, 0, 0], [1, 30, 0]])
    ids, nxt = match_ids(table, champion_ids=[0, 2, 5], next_id=7)
    assert ids.tolist() == [5, 0, 7, 2] and nxt == 8
    # fewer clusters than the champion: a champion id retires, and is not handed out again
    ids, nxt = match_ids(np.array([[10, 0, 1], [0, 0, 9]]), [0, 2, 5], next_id=7)
    assert ids.tolist() == [0, 5] and nxt == 7
    # next_id below the champion's largest id is raised: ids never collide
    ids, nxt = match_ids(np.array([[0, 0], [0, 4], [5, 0]]), [3, 9], next_id=1)
    assert ids.tolist() == [10, 9, 3] and nxt == 11
    with pytest.raises(ValueError, match="does not match 3 champion clusters"):
        match_ids(np.ones((2, 2)), [0, 1, 2], 3)


def test_size_shift_and_term_overlap():
    assert size_shift({0: 50, 1: 50}, {0: 50, 1: 50}) == 0.0
    assert size_shift({0: 100}, {1: 10}) == 1.0
    assert size_shift({0: 75, 1: 25}, {0: 50, 1: 50}) == pytest.approx(0.25)
    assert top_terms_overlap(list("abcdefghij"), list("abcdeklmno")) == 0.5
    assert top_terms_overlap(["a", "b"], ["b", "a"]) == 1.0


@pytest.fixture(scope="module")
def renamed(tmp_path_factory):
    X, _ = blobs(n=240, d=4, k=3, seed=3)
    est = NeurCAM(n_clusters=3, random_state=0, **SMALL).fit(X)
    raw = est.predict(X)
    est.set_cluster_ids([7, 2, 4], next_id=9)
    return est, X, raw


def test_a_renamed_model_predicts_saves_and_explains_with_its_ids(renamed, tmp_path):
    est, X, raw = renamed
    ids = np.array([7, 2, 4])
    assert np.array_equal(est.predict(X), ids[raw]) and np.array_equal(est.labels_, ids[raw])
    assert est.predict_proba(X).shape == (len(X), 3)              # column k is cluster ids[k]
    est.save(tmp_path / "m")
    back = NeurCAM.load(tmp_path / "m")
    assert back.cluster_ids_.tolist() == [7, 2, 4] and back.next_cluster_id_ == 9
    assert np.array_equal(back.predict(X), est.predict(X))
    expl = est.explain(X)
    assert expl.cluster_ids == [7, 2, 4] and sorted(p["cluster"] for p in expl.profiles) == [2, 4, 7]
    assert expl.model_card["clusters"]["cluster_ids"] == [7, 2, 4]
    from neurcam_dist.explain import Explanation
    assert Explanation.from_dict(json.loads(json.dumps(expl.to_dict()))).cluster_ids == [7, 2, 4]
    from neurcam_dist.explain.report import html_report
    page = html_report(expl)
    assert "href='#cluster-7'>7</a>" in page and "cluster-0" not in page
    assert [i for i in (7, 2, 4, 0, 1) if f"id='cluster-{i}' data-index" in page] == [7, 2, 4]
    for bad, msg in (([1, 1, 2], "distinct"), ([0, 1], "3 distinct"), ([-1, 0, 1], "non-negative")):
        with pytest.raises(ValueError, match=msg):
            NeurCAM.load(tmp_path / "m").set_cluster_ids(bad)
    with pytest.raises(ValueError, match="must exceed every cluster id"):
        NeurCAM.load(tmp_path / "m").set_cluster_ids([0, 1, 5], next_id=5)


def test_models_saved_before_cluster_ids_load_as_0_to_k(renamed, tmp_path):
    from neurcam_dist.storage import read_model_dir, write_model_dir
    est, X, raw = renamed
    est.save(tmp_path / "m")
    config, state = read_model_dir(Location(tmp_path / "m"))
    del config["cluster_ids"], config["next_cluster_id"], config["format"], config["format_version"]
    write_model_dir(Location(tmp_path / "old"), config, state)
    old = NeurCAM.load(tmp_path / "old")
    assert old.cluster_ids_.tolist() == [0, 1, 2] and old.next_cluster_id_ == 3
    assert np.array_equal(old.predict(X), raw)


def test_the_pyfunc_model_answers_with_stable_ids(renamed, tmp_path):
    from neurcam_dist.tracking.pyfunc_model import NeurCAMPyfunc
    est, X, raw = renamed
    est.save(tmp_path / "m")

    class Context:   # what MLflow hands load_context: the logged artifacts' local paths
        artifacts = {"model": str(tmp_path / "m")}

    model = NeurCAMPyfunc()
    model.load_context(Context())
    out = model.predict(None, X)
    assert list(out.columns) == ["cluster", "proba_7", "proba_2", "proba_4"]
    assert np.array_equal(out["cluster"].to_numpy(), np.array([7, 2, 4])[raw])


@pytest.mark.usefixtures("ray_cluster")
def test_batch_scoring_writes_stable_ids(renamed, tmp_path):
    from neurcam_dist.distributed import predict_parquet
    est, X, raw = renamed
    (tmp_path / "in").mkdir()
    X.assign(id=np.arange(len(X))).to_parquet(tmp_path / "in" / "a.parquet")
    predict_parquet(est, str(tmp_path / "in"), tmp_path / "out", batch_size=100)
    got = pd.read_parquet(tmp_path / "out").sort_values("id")
    assert np.array_equal(got["cluster"].to_numpy(), np.array([7, 2, 4])[raw])
    assert {"proba_7", "proba_2", "proba_4"} <= set(got.columns) and "proba_0" not in got.columns


# ---------------------------------------------------------------- snapshots
def test_the_newest_snapshot_is_picked_and_a_missing_one_is_named(tmp_path):
    for name in ("date=2026-11-24", "date=2026-11-26", "date=2026-11-25", "_date=2026-12-01", ".date=2026-12-02",
                 "notes"):
        (tmp_path / "ev" / name).mkdir(parents=True)
    (tmp_path / "ev" / "date=2026-12-03").write_text("a file, not a partition")
    assert pick_snapshot(str(tmp_path / "ev")) == (f"{tmp_path}/ev/date=2026-11-26", "2026-11-26")
    assert pick_snapshot(str(tmp_path / "ev"), "2026-11-24")[1] == "2026-11-24"
    with pytest.raises(DataError, match=r"recluster.snapshot='2026-12-01' is not among the 3 snapshot\(s\).*"
                                        r"2026-11-24, 2026-11-25, 2026-11-26"):
        pick_snapshot(str(tmp_path / "ev"), "2026-12-01")
    for n in (9, 10, 100):   # numbers by value, not by text
        (tmp_path / "runs" / f"batch_{n}" / "part").mkdir(parents=True)
    assert pick_snapshot(str(tmp_path / "runs" / "batch_{snapshot}" / "part")) == (
        f"{tmp_path}/runs/batch_100/part", "100")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no snapshot found"):
        pick_snapshot(str(tmp_path / "empty"))


# ---------------------------------------------------------------- the policy
@pytest.mark.parametrize("policy, seen, inertias, unscorable, promote, says", [
    ("manual", "3", (0.5, 1.0), None, False, "neurcam promote m 4"),
    ("improve", None, (0.9, None), None, True, "the first model of m"),
    ("always", "3", (2.0, 1.0), None, True, "policy always"),
    ("improve", "3", (0.98, 1.0), None, True, "2.00% below the champion's"),
    ("improve", "3", (0.995, 1.0), None, False, "1.00% needed"),
    ("improve", "3", (1.2, 1.0), None, False, "-20.00% better"),
    ("improve", "3", (0.5, None), "lacks column f9", False, "cannot be scored"),
])
def test_the_promotion_policy(policy, seen, inertias, unscorable, promote, says):
    rc = ReclusterConfig(policy=policy, min_improvement=0.01)
    new, old = inertias
    want, reason = decide(rc, "m", "4", seen, new, old, unscorable)
    assert want is promote and says in reason


# ---------------------------------------------------------------- the registry lease
def test_promotion_is_a_compare_and_set_under_a_lease(mlflow_server, monkeypatch):
    import mlflow
    from mlflow import MlflowClient

    from neurcam_dist.tracking import LeaseTimeout, champion_version, promote_if_unchanged
    from neurcam_dist.tracking.promotion import lease
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    mlflow.set_tracking_uri(mlflow_server)
    client = MlflowClient()
    name = f"lease-{time.time_ns()}"
    client.create_registered_model(name)
    run = client.create_run(client.get_experiment_by_name("Default").experiment_id)
    v1 = client.create_model_version(name, f"runs:/{run.info.run_id}/model", run.info.run_id).version
    v2 = client.create_model_version(name, f"runs:/{run.info.run_id}/model", run.info.run_id).version
    assert champion_version(name) is None
    assert promote_if_unchanged(name, v1, None) == (True, None)
    assert champion_version(name) == v1
    # a challenger compared with "no champion" must not replace v1
    assert promote_if_unchanged(name, v2, None) == (False, v1) and champion_version(name) == v1
    assert promote_if_unchanged(name, v2, v1) == (True, v1) and champion_version(name) == v2
    assert f"{name}.promotion-lease" not in [m.name for m in client.search_registered_models()]
    # a held lease makes others wait, then give up naming the holder; an expired one is taken over
    with lease(name, ttl_s=60) as holder:
        with pytest.raises(LeaseTimeout, match=f"is held by {holder}"):
            with lease(name, wait_s=1.0, log=lambda m: None):
                pass
    client.create_registered_model(f"{name}.promotion-lease", tags={"holder": "dead-pod", "expires": "1"})
    said = []
    with lease(name, wait_s=5.0, log=said.append):
        pass
    assert "held by dead-pod has expired" in said[0]
    # a live holder's heartbeat keeps its lease past the ttl; a holder killed inside it (SIGKILL:
    # nothing runs on its way out) blocks the next one only until its ttl runs out
    with lease(name, ttl_s=1.5) as holder:
        time.sleep(3.0)                                 # twice the ttl: renewed meanwhile
        with pytest.raises(LeaseTimeout, match=f"is held by {holder}"):
            with lease(name, wait_s=1.0, log=lambda m: None):
                pass
    code = ("import os, time, mlflow; from neurcam_dist.tracking.promotion import lease\n"
            f"with lease({name!r}, ttl_s=3.0):\n    print('held', flush=True); time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, "MLFLOW_TRACKING_URI": mlflow_server},
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    proc.kill()
    proc.wait()
    t0 = time.monotonic()
    said = []
    with lease(name, wait_s=30.0, log=said.append):
        waited = time.monotonic() - t0
    assert waited < 8.0 and any("has expired: taking it over" in m for m in said), (waited, said)


# ---------------------------------------------------------------- config, validate, submit
def test_environment_overrides_and_set_wins(tmp_path, monkeypatch):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("data: {path: /a}\nmodel: {n_clusters: 3}\noutput: /o\n")
    monkeypatch.setenv("NEURCAM_DATA_PATH", "/b")
    monkeypatch.setenv("NEURCAM_OUTPUT", "/p")
    monkeypatch.setenv("NEURCAM_TRACKING_URI", "http://mlflow:5000")
    c = load_config(cfg)
    assert (c.data.path, c.output, c.tracking) == ("/b", "/p", None)
    assert "NEURCAM_TRACKING_URI ignored: the config has no tracking: section" in c._notes
    assert load_config(cfg, {"data.path": "/c"}).data.path == "/c"
    cfg.write_text("data: {path: /a}\nmodel: {n_clusters: 3}\noutput: /o\ntracking: {uri: http://x}\n")
    assert load_config(cfg).tracking.uri == "http://mlflow:5000"
    # a text field keeps what was written, where YAML reads a date or a number (--set or the file)
    from neurcam_dist.cli import _overrides
    c = load_config(cfg, _overrides(["recluster.snapshot=2026-11-02", "tracking.experiment=42"]))
    assert (c.recluster.snapshot, c.tracking.experiment) == ("2026-11-02", "42")
    assert load_config(cfg, _overrides(["model.epochs=50"])).model.epochs == 50   # numbers stay numbers


def test_validate_checks_the_data_without_running(tmp_path, capsys):
    X, _ = blobs(n=60)
    for day in ("2026-11-25", "2026-11-26"):
        (tmp_path / "ev" / f"date={day}").mkdir(parents=True)
        X.assign(id=np.arange(60)).to_parquet(tmp_path / "ev" / f"date={day}" / "p.parquet")
    good = {"data": {"path": str(tmp_path / "ev"), "id": "id"}, "model": {"n_clusters": 3},
            "recluster": {"policy": "manual"}, "output": str(tmp_path / "out")}
    (tmp_path / "good.yaml").write_text(yaml.safe_dump(good))
    assert main(["validate", str(tmp_path / "good.yaml")]) == 0
    out = capsys.readouterr().out
    assert "snapshot: '2026-11-26'" in out and "60 rows in 1 file(s); 4 features" in out
    assert not (tmp_path / "out").exists()                     # nothing ran, nothing was written
    bad = {**good, "data": {**good["data"], "label": "segment"}}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    assert main(["validate", str(tmp_path / "bad.yaml")]) == 2
    assert "no column 'segment' (label)" in capsys.readouterr().err
    (tmp_path / "typo.yaml").write_text(yaml.safe_dump({**good, "recluster": {"polcy": "manual"}}))
    assert main(["validate", str(tmp_path / "typo.yaml")]) == 2
    assert "recluster.polcy: unknown key" in capsys.readouterr().err
    assert main(["validate", str(tmp_path / "good.yaml"), "--set", "model.n_clusters=500"]) == 2
    assert "model:" in capsys.readouterr().err


def test_submit_checks_its_arguments_before_connecting(tmp_path, monkeypatch):
    (tmp_path / "jobs").mkdir()
    (tmp_path / "c.yaml").write_text("x: 1\n")
    assert entrypoint("tune", "c.yaml", ["model.m=1.1"]) == "python jobs/tune.py --config c.yaml --set model.m=1.1"
    with pytest.raises(ValueError, match="unknown job 'fit'"):
        entrypoint("fit", "c.yaml", [])
    with pytest.raises(ValueError, match="has no jobs/ folder"):
        runtime_env(str(tmp_path / "jobs"), "c.yaml")
    with pytest.raises(ValueError, match="is not a file under --working-dir"):
        runtime_env(str(tmp_path), "../c.yaml")
    monkeypatch.setenv("NEURCAM_DATA_PATH", "/data/x")
    monkeypatch.setenv("NEURCAM_TRACKING_URI", "http://user:s3cret@mlflow:5000")
    said = []
    env = runtime_env(str(tmp_path), "c.yaml", said.append)
    assert env["env_vars"] == {"NEURCAM_DATA_PATH": "/data/x"} and env["working_dir"] == str(tmp_path.resolve())
    assert "NEURCAM_TRACKING_URI holds a password: not passed" in said[0] and "s3cret" not in said[0]


# ---------------------------------------------------------------- the console
def test_ray_log_lines_go_to_a_file_and_ours_to_the_console(ray_cluster, tmp_path, capsys, monkeypatch):
    from neurcam_dist.distributed.console import routed_logs
    monkeypatch.delenv("NEURCAM_VERBOSE", raising=False)

    @ray_cluster.remote
    def chatty(channel):
        from neurcam_dist.distributed import events
        print("Dataset execution finished (noise)", flush=True)
        events.attach(channel)
        events.say("epoch 3 loss=1.0")   # a record, rendered by the driver's console
        return 1

    from ray._private import ray_constants
    from ray._private.ray_logging import global_worker_stdstream_dispatcher
    from ray.autoscaler.v2.utils import is_autoscaler_v2
    assert not is_autoscaler_v2()  # the monitor's lines below are autoscaler v1's
    status = ["======== Autoscaler status: 2026-11-28 01:12:39.317535 ========", "Node status",
              "---------------------------------------------------------------", " 1 node_0123456789abcdef",
              "INFO autoscaler.py:147 -- The autoscaler took 0.0 seconds to fetch the list of non-terminated nodes."]
    event = f"INFO monitor.py:1 -- {ray_constants.LOG_PREFIX_EVENT_SUMMARY}Adding 1 node(s) of type worker."
    with routed_logs(Location(tmp_path), log=print) as path:
        warnings.warn("ExecutionOptions.exclude_resources is deprecated (a library's warning)", UserWarning,
                      stacklevel=1)
        from neurcam_dist.distributed.events import current_channel
        assert ray_cluster.get(chatty.remote(current_channel())) == 1
        deadline = time.time() + 20
        while "[neurcam] epoch 3" not in path.read_text() and time.time() < deadline:
            time.sleep(0.2)
        global_worker_stdstream_dispatcher.emit({"pid": "autoscaler", "ip": "127.0.0.1", "is_err": False,
                                                 "lines": [*status, event]})
        same = "Failed to query Ray Train Controller actor state. Continuing to monitor."
        for lines in ([same, same], [same], [same, same, "cleaned up"], [same]):
            global_worker_stdstream_dispatcher.emit({"pid": 4242, "actor_name": "PlacementGroupCleaner",
                                                     "ip": "127.0.0.1", "is_err": True, "lines": lines})
    text = path.read_text()
    assert "Dataset execution finished (noise)" in text and "[neurcam] epoch 3 loss=1.0" in text
    # the autoscaler's events are kept, its status table every 5 s is not (as Ray's own printer does)
    assert "Adding 1 node(s) of type worker." in text and not any(line in text for line in status)
    # a process's run of one repeated line: written once, then with its count when the run ends
    cleaner = [line for line in text.splitlines() if line.startswith("(PlacementGroupCleaner pid=4242) ")]
    assert [line.split(") ", 1)[1] for line in cleaner] == [same, f"[repeated 4x] {same}", "cleaned up", same]
    out, err = capsys.readouterr()
    assert "[neurcam] epoch 3 loss=1.0" in out and "(noise)" not in out
    assert f"Ray's own log lines go to {path}" in out
    # the driver's Python warnings (Ray Train's own deprecations): in the file, not on the console
    assert "UserWarning: ExecutionOptions.exclude_resources is deprecated (a library's warning)" in text
    assert "exclude_resources" not in err + out


def test_ray_start_up_lines_are_held_for_the_log_and_given_back_on_failure(ray_cluster, tmp_path, capfd,
                                                                            monkeypatch):
    """Ray's start-up lines (written before the run's log folder may exist) head the log file; a
    start that fails gives them back to the console with the error."""
    import os
    import sys

    from neurcam_dist.distributed.console import held_stderr, routed_logs
    monkeypatch.delenv("NEURCAM_VERBOSE", raising=False)
    with held_stderr() as start:
        os.write(2, b"[core_worker.cc] a line from C++\n")   # past every Python stream
        print("INFO worker.py -- Started a local Ray instance.", file=sys.stderr)
    assert capfd.readouterr().err == ""
    assert start.text == "[core_worker.cc] a line from C++\nINFO worker.py -- Started a local Ray instance.\n"
    with routed_logs(Location(tmp_path), log=print, earlier=start.text) as path:
        pass
    assert path.read_text().startswith(start.text)
    with pytest.raises(RuntimeError, match="refused"), held_stderr():
        os.write(2, b"Started a local Ray instance.\n")
        raise RuntimeError("refused")
    assert capfd.readouterr().err == "Started a local Ray instance.\n"


# ---------------------------------------------------------------- small-data passes
@pytest.mark.usefixtures("ray_cluster")
def test_the_sample_is_drawn_by_row_number_and_reads_only_its_rows(tmp_path, monkeypatch):
    """The k-means sample: n distinct rows, each row equally likely, the same rows for the same
    seed whatever the files' row groups or the reader (Ray read tasks or this process), and a file
    that changed since planning is refused by name."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from neurcam_dist import data as data_mod
    from neurcam_dist.config import DataConfig
    df = pd.DataFrame({"f0": np.arange(300, dtype=float), "f1": np.arange(300, dtype=float) * -2.0})
    layouts = {}
    for name, group in (("a", 7), ("b", 1000)):
        d = tmp_path / name
        d.mkdir()
        for i, (lo, hi) in enumerate(((0, 130), (130, 160), (160, 300))):
            pq.write_table(pa.Table.from_pandas(df.iloc[lo:hi], preserve_index=False), d / f"p{i}.parquet",
                           row_group_size=group)
        layouts[name] = data_mod.plan(DataConfig(path=str(d)))
    assert pq.ParquetFile(tmp_path / "a" / "p0.parquet").metadata.num_row_groups == 19

    got = {}
    for name, plan in layouts.items():
        for local in (True, False):
            monkeypatch.setenv("NEURCAM_LOCAL_PASS_BYTES", str(2**30 if local else 0))
            t = data_mod.sample(plan, 40, 5, ["f1", "f0"])
            got[name, local] = t.to_pandas()
    first = got["a", True]
    assert first.columns.tolist() == ["f1", "f0"] and len(first) == 40
    assert first["f0"].is_unique and first["f0"].is_monotonic_increasing   # distinct rows, in file order
    assert (first["f1"] == -2 * first["f0"]).all()                        # whole rows, not mixed
    for other in got.values():
        pd.testing.assert_frame_equal(other, first)
    assert not data_mod.sample(layouts["a"], 40, 6, ["f0"]).to_pandas()["f0"].equals(first["f0"])
    assert len(data_mod.sample(layouts["a"], 10_000, 5, ["f0"])) == 300   # capped at the rows there are
    # each row equally likely: over 3,000 seeds a row is drawn 3,000 * 40/300 = 400 times (sd 19)
    counts = np.zeros(300)
    for seed in range(3000):
        for f, rows in data_mod.sampling.draw(layouts["b"], 40, seed).items():
            counts[rows + {"p0": 0, "p1": 130, "p2": 160}[f.rsplit("/", 1)[-1][:2]]] += 1
    assert counts.sum() == 3000 * 40 and 300 < counts.min() and counts.max() < 500
    # a file rewritten with other rows since planning: the drawn row numbers would be other rows
    pq.write_table(pa.Table.from_pandas(df.iloc[130:170], preserve_index=False), tmp_path / "a" / "p1.parquet")
    for local in (True, False):
        monkeypatch.setenv("NEURCAM_LOCAL_PASS_BYTES", str(2**30 if local else 0))
        with pytest.raises(Exception, match=r"p1.parquet no longer has the 30 rows it had when the run was planned"):
            data_mod.sample(layouts["a"], 299, 5, ["f0"])


@pytest.mark.usefixtures("ray_cluster")
def test_small_data_passes_in_process_match_ray_data(renamed, tmp_path, monkeypatch):
    """The profile, sample, scoring and comparison passes give the same numbers and the same
    errors whether they run in this process (small data) or on Ray Data."""
    from neurcam_dist import data as data_mod
    from neurcam_dist.config import DataConfig
    from neurcam_dist.distributed import evaluate
    from neurcam_dist.distributed.compare import compare
    est, X, _ = renamed
    d = tmp_path / "d"
    d.mkdir()
    df = X.assign(label=np.arange(len(X)) % 3)
    for i in range(3):
        df.iloc[i * 80:(i + 1) * 80].to_parquet(d / f"p{i}.parquet")
    plan = data_mod.plan(DataConfig(path=str(d), label="label"))
    other = NeurCAM(n_clusters=2, random_state=1, **SMALL).fit(X)

    said = []

    def run():
        prof = data_mod.profile(plan)
        table = data_mod.sample(plan, 10_000, 0, plan.features)
        scores = evaluate(est.scoring_model(), plan, batch_size=50, log=said.append)
        cmp = compare(est.scoring_model(), other.scoring_model(), plan, batch_size=50)
        return prof, table, scores, cmp

    monkeypatch.setenv("NEURCAM_LOCAL_PASS_BYTES", "0")
    monkeypatch.setattr("neurcam_dist.distributed.scoring.PROGRESS_SECONDS", 0.0)
    assert not data_mod.reading.local_pass(plan, plan.features)
    ray_side = run()
    # the Ray Data pass said how far its reads were, the last time all 240 rows
    assert said and said[-1].startswith("read 240 of 240 rows (100%)"), said
    said.clear()
    monkeypatch.delenv("NEURCAM_LOCAL_PASS_BYTES")
    assert data_mod.reading.local_pass(plan, plan.features)
    here = run()
    assert said == []   # the pass in this process is short: no progress lines
    for a, b in ((ray_side[0].mean, here[0].mean), (ray_side[0].std, here[0].std), (ray_side[0].lo, here[0].lo)):
        np.testing.assert_array_equal(a, b)          # per-file tallies merged in file order on both
    assert ray_side[1].equals(here[1])                       # the same rows in the same order
    for key in ("inertia", "ari", "nmi", "acc"):
        assert ray_side[2][key] == pytest.approx(here[2][key], rel=1e-9)
    assert ray_side[2]["cluster_sizes"] == here[2]["cluster_sizes"]
    assert np.array_equal(ray_side[3]["table"], here[3]["table"])
    assert ray_side[3]["inertia_champion"] == pytest.approx(here[3]["inertia_champion"], rel=1e-9)
    # the training rows handed to the workers: read here (small data) or by the per-file read tasks
    # of a streamed run, the files' rows in order, as Ray Data's own Parquet reader reads them
    # (plus each row's key: its place in the files, for the workers' per-row teacher cache)
    import ray.data
    streamed_ds = ray.data.read_parquet(plan.source.files, columns=list(dict.fromkeys(plan.columns)))   # Ray's reader
    streamed_ds.context.execution_options.preserve_order = True
    streamed = streamed_ds.to_pandas()
    pd.testing.assert_frame_equal(data_mod.read(plan, ordered=True).to_pandas(), streamed)   # ours, keyless
    held = ray.get(data_mod.reading.held_rows(plan).table)   # the table the workers slice
    assert held.schema.remove(held.schema.get_field_index(data_mod.ROW_KEY)) == streamed_ds.schema().base_schema
    in_memory = held.to_pandas()
    assert len(in_memory) == len(df) == 240
    assert in_memory.pop(data_mod.ROW_KEY).tolist() == list(range(240))
    pd.testing.assert_frame_equal(in_memory, streamed, check_dtype=False)   # pandas' dtypes differ: Ray Data's are ArrowDtype
    per_file = data_mod.reading.streamed_dataset(plan, batch_rows=50)   # 2 batches a file
    per_file_rows = per_file.to_pandas()
    assert per_file_rows.pop(data_mod.ROW_KEY).tolist() == list(range(240))
    pd.testing.assert_frame_equal(per_file_rows, streamed)
    assert per_file.limit(130).count() == 130 and per_file.count() == 240
    # blocks of the rows asked for, not merged into one per file (a file per block held 500-700 MiB
    # of a 4M-row stream in the object store)
    assert per_file.materialize().num_blocks() == 6
    # a file that grew after planning would give its rows the next file's keys: refused, by name
    pd.concat([df.iloc[80:160], df.iloc[:1]]).to_parquet(d / "p1.parquet")
    with pytest.raises(Exception, match=r"p1.parquet has more rows than the 80 it had when the run was planned"):
        data_mod.reading.streamed_dataset(plan).to_pandas()
    with pytest.raises(DataError, match=r"p1.parquet has more rows than the 80 it had when the run was planned"):
        data_mod.reading.local_tables(plan)   # the same read tasks here: the same refusal, by name
    df.iloc[80:160].to_parquet(d / "p1.parquet")
    bad = df.iloc[:80].copy()
    bad.loc[bad.index[3], "f1"] = np.inf
    bad.to_parquet(d / "p0.parquet")
    errors = []
    for limit in ("0", str(2**30)):
        monkeypatch.setenv("NEURCAM_LOCAL_PASS_BYTES", limit)
        with pytest.raises(DataError) as info:
            data_mod.profile(plan)
        errors.append(str(info.value))
    assert errors[0] == errors[1] and "p0.parquet: column 'f1': 0 NaN, 1 inf, 0 null" in errors[0]


def test_on_a_terminal_each_trial_gets_a_progress_bar(ray_cluster, tmp_path, capsys, monkeypatch):
    from neurcam_dist.distributed.console import routed_logs
    monkeypatch.delenv("NEURCAM_VERBOSE", raising=False)

    @ray_cluster.remote
    def trial(name: str, epochs: int, channel):
        from neurcam_dist.distributed import events
        events.attach(channel, trial=name)
        for e in range(1, epochs + 1):
            events.say(f"epoch {e} warmup loss={1.0 / e:.5f} T=1 T2=1 1,234 rows/s", epoch=e, phase="warmup",
                       loss=1.0 / e, rows_per_s=1234.0)
        events.say("scoring")
        return epochs

    from neurcam_dist.distributed.events import current_channel
    with routed_logs(Location(tmp_path), log=lambda m: None, bars=True) as path:
        ch = current_channel()
        assert ray_cluster.get([trial.remote("aa_1", 3, ch), trial.remote("bb_2", 5, ch)]) == [3, 5]
        deadline = time.time() + 20
        while path.read_text().count("scoring") < 2 and time.time() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)
    out = capsys.readouterr().out
    # one bar per trial, updated in place (carriage returns), the last state of each visible;
    # lines that are not epoch lines print above the bars
    assert "trial aa_1: epoch 3 [" in out and "trial bb_2: epoch 5 [" in out and "\r" in out
    assert "warmup loss=0.20000 1,234 rows/s" in out
    assert "[neurcam] trial aa_1: scoring" in out and "[neurcam] trial bb_2: epoch" not in out


def test_history_is_appended_and_old_runs_are_pruned(tmp_path):
    from neurcam_dist.ops import history
    out = tmp_path / "out"
    for i, outcome in enumerate(("promoted", "kept", "failed")):
        history.append_history(Location(out), {"model_name": "m", "outcome": outcome, "promoted": outcome == "promoted",
                                          "finished_unix": 100.0 + i, "inertia_challenger": 9.0,
                                          "inertia_champion": 10.0, "snapshot": f"2026-11-2{i}"})
    with open(out / history.HISTORY, "a") as f:
        f.write('{"torn')                               # a line cut short by a kill is left out
    records = history.read_history(Location(out))
    assert [r["outcome"] for r in records] == ["promoted", "kept", "failed"]
    table = history.history_table(records)
    assert list(table["inertia_ratio"]) == [0.9, 0.9, 0.9] and list(table["snapshot"])[-1] == "2026-11-22"
    text = history.export_metrics(Location(out), records[-1], records)
    assert text == (out / history.METRICS).read_text()
    from prometheus_client.parser import text_string_to_metric_families
    got = {s.name: s.value for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert got["neurcam_recluster_failed"] == 1.0 and got["neurcam_recluster_last_success_timestamp_seconds"] == 101.0
    # recluster.pushgateway: the same metrics PUT to a Pushgateway's API (a stand-in server on 127.0.0.1)
    from .conftest import pushgateway_stub
    with pushgateway_stub() as (address, received):
        history.export_metrics(Location(out), records[-1], records, pushgateway=address)
    (path, body), = received
    assert path == "/metrics/job/neurcam-recluster/model/m" and "neurcam_recluster_failed" in body

    for name in ("search-20261101-000000-aaaaaa", "search-20261102-000000-bbbbbb", "search-20261103-000000-cccccc"):
        (out / "trials" / name).mkdir(parents=True)
        (out / "_ray" / f"{name}-t0").mkdir(parents=True)
    (out / "_ray" / "staging").mkdir()
    gone = history.prune_runs(Location(out), Location(out / "_ray"), keep=2)
    assert gone == ["search-20261101-000000-aaaaaa"]
    assert sorted(p.name for p in (out / "trials").iterdir()) == ["search-20261102-000000-bbbbbb",
                                                                  "search-20261103-000000-cccccc"]
    assert sorted(p.name for p in (out / "_ray").iterdir()) == ["search-20261102-000000-bbbbbb-t0",
                                                                "search-20261103-000000-cccccc-t0", "staging"]
    # a search still running (another re-clustering into this output: no history line yet) is never
    # deleted under it; once the history records it, it goes like the others
    import time
    running, ended = (time.strftime("search-%Y%m%d-%H%M%S-", time.localtime(time.time() + d)) + x
                      for d, x in ((0, "dddddd"), (1, "eeeeee")))
    for name in (running, ended):
        (out / "trials" / name).mkdir(parents=True)
    history.append_history(Location(out), {"model_name": "m", "outcome": "kept", "search": ended})
    assert history.prune_runs(Location(out), Location(out / "_ray"), keep=0) == ["search-20261102-000000-bbbbbb",
                                                                       "search-20261103-000000-cccccc", ended]
    assert [p.name for p in (out / "trials").iterdir()] == [running]
    history.append_history(Location(out), {"model_name": "m", "outcome": "promoted", "search": running})
    assert history.prune_runs(Location(out), Location(out / "_ray"), keep=0) == [running]
    assert (out / history.HISTORY).read_text().count("\n") == 6   # 3 lines, the torn one, 2 lines: none blank


def test_an_unreachable_store_or_tracking_server_is_one_line_saying_what_to_check(tmp_path):
    """validate exits 2 (never 1, never a traceback) and recluster exits 1, each with one line."""
    import os
    from .conftest import free_port
    port = free_port()                       # nothing listens there
    env = {**os.environ, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "x",
           "AWS_SECRET_ACCESS_KEY": "y", "AWS_REGION": "us-east-1"}
    for k in ("MLFLOW_TRACKING_URI", "NEURCAM_DATA_PATH", "NEURCAM_OUTPUT", "NEURCAM_TRACKING_URI"):
        env.pop(k, None)
    cfg = {"data": {"path": "s3://nobucket/events/"}, "model": {"n_clusters": 3}, "output": str(tmp_path / "out"),
           "recluster": {"policy": "manual"},
           "tracking": {"uri": f"sqlite:///{tmp_path / 'm.db'}", "model_name": "m"}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))

    def run(*args):
        return subprocess.run([sys.executable, "-m", "neurcam_dist.cli", *args], env=env, capture_output=True,
                              text=True, timeout=120)
    for args, code in ((["validate", str(tmp_path / "c.yaml")], 2), (["recluster", "--config", str(tmp_path / "c.yaml")], 1)):
        done = run(*args)
        assert done.returncode == code, done.stderr[-2000:]
        lines = [x for x in done.stderr.splitlines() if x.startswith("neurcam:")]
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert "the object store cannot be reached" in lines[0] and "check AWS_ENDPOINT_URL" in lines[0]
    cfg.update(data={"path": str(tmp_path)}, tracking={"uri": f"http://127.0.0.1:{port}"})
    (tmp_path / "t.yaml").write_text(yaml.safe_dump({k: v for k, v in cfg.items() if k != "recluster"}))
    pd.DataFrame({"a": [1.0, 2.0, 3.0, 4.0], "b": [1.0, 0.0, 1.0, 0.0]}).to_parquet(tmp_path / "p.parquet")
    done = run("validate", str(tmp_path / "t.yaml"), "--check-tracking")
    assert done.returncode == 2 and "unreachable" in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
