"""Ray Data + Ray Train: a real local Ray, real Parquet shards on disk, two DDP workers."""
import dataclasses
import json
import os
import re
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml

from neurcam_dist import NeurCAM, metrics
from neurcam_dist.uris import Location
from neurcam_dist.cli import main
from neurcam_dist.config import ConfigError, load_config, parse_config
from neurcam_dist.data import DataError, join_embeddings, plan
from neurcam_dist.distributed import train
from neurcam_dist.model.gates import is_one_hot
from neurcam_dist.distributed import predict_parquet
from neurcam_dist.data.synthetic import write_shards
from neurcam_dist.distributed.worker import _Resident

from .conftest import checkpoint_registered

pytestmark = pytest.mark.usefixtures("ray_cluster")

N_ROWS = 3000
MODEL = dict(n_clusters=3, hidden=[16, 16], n_bases=4, warmup_epochs=3, distill_epochs=1, epochs=8,
             epsilon=0.3, batch_size=64, lr=5e-3, early_stopping=False, random_state=0)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    d = tmp_path_factory.mktemp("shards")
    write_shards(d, N_ROWS, n_features=4, repr_dim=6, n_clusters=3, n_files=4, seed=0)
    return d


def table_of(path) -> pd.DataFrame:
    return pd.read_parquet(path).sort_values("id").reset_index(drop=True)


def job(data_path, out, workers=2, model=None, **train_kw):
    return {"data": {"path": str(data_path), "embedding": "embedding", "label": "label", "id": "id"},
            "model": {**MODEL, **(model or {})},
            "train": {"num_workers": workers, "cpus_per_worker": 1, "shuffle_buffer": 256, **train_kw},
            "output": str(out)}


@pytest.fixture(scope="module")
def two_workers(shards, tmp_path_factory):
    # streams the Parquet files every epoch (the large-data path); the other runs cache the rows
    return train(job(shards, tmp_path_factory.mktemp("run2") / "out", workers=2, cache="never"))


def test_two_workers_train_to_exactly_one_hot_gates(two_workers, shards):
    est = two_workers.estimator
    assert est.history_["world_size"] == 2
    for kind, t in ((est.net_.single, est.temperatures_[0]), (est.net_.pairs, est.temperatures_[1])):
        assert is_one_hot(kind.gates.matrix(t)) and (kind.n == 0 or bool(kind.gates.locked))
    h = est.history_
    assert [r["epoch"] for r in h["epochs"]] == list(range(1, h["n_epochs"] + 1))
    assert [e["phase"] for e in h["events"]] == ["warmup", "anneal_single", "final"]
    # every row is seen once per epoch across the two shards (equal split may drop < 2 rows)
    assert all(N_ROWS - 2 <= r["rows"] <= N_ROWS for r in h["epochs"])


def test_distributed_scores_equal_the_in_memory_ones(two_workers, shards):
    df = table_of(shards)
    est, m = two_workers.estimator, two_workers.metrics
    X = df[est.feature_names_in_]
    emb = np.stack(df["embedding"].to_numpy())
    labels = est.predict(X)
    assert m["n_rows"] == N_ROWS and m["n_files"] == 4 and m["repr_dim"] == 6
    assert m["inertia"] == pytest.approx(metrics.inertia(emb, labels), rel=1e-9)
    assert m["ari"] == pytest.approx(metrics.ari(df["label"], labels), abs=1e-12)
    assert m["nmi"] == pytest.approx(metrics.nmi(df["label"], labels), abs=1e-12)
    assert m["acc"] == pytest.approx(metrics.acc(df["label"], labels), abs=1e-12)
    assert m["cluster_sizes"] == np.bincount(labels, minlength=3).tolist()
    empty = [int(i) for i, s in zip(est.cluster_ids_, m["cluster_sizes"], strict=False) if s == 0]
    assert m["empty_clusters"] == empty == est.history_["empty_clusters"] and m["n_clusters_empty"] == len(empty)
    assert ("warnings" in m) == bool(empty)
    # the streamed standardization statistics are the population moments of the features
    np.testing.assert_allclose(est.mean_, X.astype(np.float64).mean().to_numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(est.scale_, X.astype(np.float64).std(ddof=0).to_numpy(), rtol=1e-5)
    # the saved model is the same model, and the explanation works on the result object
    loaded = NeurCAM.load(two_workers.model_path)
    assert np.array_equal(loaded.predict_proba(X), est.predict_proba(X))
    on_disk = json.loads((two_workers.output.path / "metrics.json").read_text())
    assert on_disk["inertia"] == m["inertia"]
    expl = est.explain()
    assert expl.cluster_sizes and sum(expl.cluster_sizes) == len(est.reference_)


def test_streamed_workers_run_the_teacher_once_per_row(two_workers):
    """Streamed rows reach a worker in another order and split every epoch; the frozen model's
    assignment is kept per row key, so a worker runs it at most once per row (the history is
    worker 0's), not on every batch of every annealing epoch."""
    h = two_workers.estimator.history_["epochs"]
    assert {r["source"] for r in h} == {"stream"}
    assert {r["threads"] for r in h} == {1}   # rows from Ray Data every epoch: the CPUs stay Ray Data's
    annealing = [r for r in h if r["phase"] in ("anneal_single", "anneal_pairs", "final")]
    assert len(annealing) >= 3 and all(r["teacher_rows"] == 0 for r in h if r not in annealing)
    # the first annealing epoch: every row worker 0 sees is new to it (about half of them)
    assert N_ROWS // 2 - 2 <= annealing[0]["teacher_rows"] <= N_ROWS // 2 + 2
    assert sum(r["teacher_rows"] for r in annealing) <= N_ROWS < sum(r["rows"] for r in annealing) / 2
    assert annealing[-1]["teacher_rows"] < annealing[0]["teacher_rows"]


def test_row_targets_are_the_teachers_and_computed_once_per_row():
    from neurcam_dist.distributed.teacher import RowTargets
    from neurcam_dist.model import TrainingSpec, build_trainer
    from neurcam_dist.model.fitted import log_assignment
    spec = TrainingSpec.for_data({**MODEL, "hidden": (16, 16)}, N_ROWS, 4)
    teacher = build_trainer(spec, np.random.default_rng(0).normal(size=(3, 6)).astype(np.float32),
                            precision="fp32").net.eval()
    x = torch.randn(100, 4, generator=torch.Generator().manual_seed(1))
    want = log_assignment(teacher, x)
    said = []
    cache = RowTargets(100, 3, torch.device("cpu"), budget=10**6, say=said.append)
    for epoch in range(3):
        order = torch.randperm(100, generator=torch.Generator().manual_seed(epoch))
        for keys in order.split(32 if epoch else 7):  # another order and batch size each epoch
            torch.testing.assert_close(cache.targets(teacher, x[keys], keys), want[keys], rtol=1e-5, atol=1e-6)
        assert cache.take_computed() == (100 if epoch == 0 else 0)
    other = build_trainer(spec, np.zeros((3, 6), np.float32), precision="fp32").net.eval()   # a new teacher: computed afresh
    torch.testing.assert_close(cache.targets(other, x[:10], torch.arange(10)), log_assignment(other, x[:10]))
    assert cache.take_computed() == 10 and not said
    small = RowTargets(100, 3, torch.device("cpu"), budget=1000, say=said.append)   # 1,300 bytes: over
    for _ in range(2):
        torch.testing.assert_close(small.targets(teacher, x[:10], torch.arange(10)), want[:10], rtol=1e-5, atol=1e-6)
    assert small.take_computed() == 20 and len(said) == 1
    assert said[0].startswith("the frozen model's assignments of all 100 rows would need 0.00 GiB, over this "
                              "worker's budget") and "computed again for every batch" in said[0]


def test_device_resident_shards_train_from_memory_with_the_teacher_cached(two_workers, shards, tmp_path, capsys):
    """cache: auto keeps a shard that fits on the worker's device: the first epoch takes the rows
    (small data: from the held table), later epochs reshuffle the kept rows, and the frozen model's
    assignment is computed once per row (no second forward). The same seed gives the same model.
    (Two workers' resident shards: ``test_dae.py``'s run, streamed, and the held-rows test.)"""
    run = train(job(shards, tmp_path / "out1", workers=1))
    h = run.estimator.history_
    assert [r["source"] for r in h["epochs"]] == ["held"] + ["resident"] * (h["n_epochs"] - 1)
    assert any(r["phase"] == "final" for r in h["epochs"])
    assert all(r["teacher_rows"] == 0 for r in h["epochs"])
    assert all(r["rows"] == N_ROWS for r in h["epochs"])  # every row once per epoch, resident or not
    assert is_one_hot(run.estimator.net_.single.gates.matrix(run.estimator.temperatures_[0]))
    # rows in memory from the start (held): the lone worker may add the CPUs kept for Ray Data to
    # its torch threads, up to this node's CPUs and what its steps are worth (settings.threads_for:
    # this small model's are worth one); a search trial, or train.take_idle_cpus: false, adds none
    import ray
    from neurcam_dist.distributed.driver import idle_cpus
    from neurcam_dist.distributed.job import resolve_early
    from neurcam_dist.settings import threads_for
    cpus = ray.cluster_resources()["CPU"]
    lone = resolve_early(parse_config(job(shards, tmp_path / "x", workers=1)))
    want = threads_for(lone.spec.step_work(N_ROWS), int(min(cpus, len(os.sched_getaffinity(0)))))
    assert want == 1 and {r["threads"] for r in h["epochs"]} == {want}
    assert idle_cpus(lone) == cpus - 1 and idle_cpus(dataclasses.replace(lone, trial="t1")) == 0
    assert idle_cpus(resolve_early(parse_config(job(shards, tmp_path / "y", workers=1, take_idle_cpus=False)))) == 0
    # the same config again, through the command line: the same model, bit for bit
    capsys.readouterr()
    config = tmp_path / "one.yaml"
    config.write_text(yaml.safe_dump(job(shards, tmp_path / "cli", workers=1)))
    assert main(["train", "--config", str(config)]) == 0
    one = json.loads((tmp_path / "cli" / "metrics.json").read_text())
    said = capsys.readouterr().out
    assert one["num_workers"] == 1 and "keeps its shard of the 3,000 rows on its device" in said
    # a worker's line reaches the console once (Train v2's print both logs and prints it)
    assert said.count("worker 0: 3,000 rows resident on cpu") == 1, said
    assert len([ln for ln in said.splitlines() if " epoch 1 " in ln and "rows/s" in ln]) == 1, said
    assert (f"rows in memory: each worker now trains on {want} torch threads" in said) == (want > 1)
    # small data: read in the driver once and handed over in memory (no Ray Data read tasks)
    assert "the 3,000 training rows are small: read here once and handed to the workers in memory" in said
    assert one["inertia"] == pytest.approx(two_workers.metrics["inertia"], rel=0.05)
    a, b = run.estimator.net_.state_dict(), NeurCAM.load(tmp_path / "cli" / "model").net_.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_shard_over_its_resident_budget_is_dropped_with_a_message():
    said = []
    keep = _Resident(True, budget=1000, seed=0, rank=0, say=said.append, expected_rows=10**6)
    x, xr = torch.zeros(10, 4), torch.zeros(10, 6)  # 400 bytes a batch
    keep.add(x, xr)
    assert keep._x.shape[0] * 40 <= 1000   # the expected shard is reserved only up to the budget
    keep.add(x + 1, xr + 2)
    assert not said and keep.rows == 20
    keep.add(x, xr)
    keep.seal()
    assert not keep.ready and keep._x is None and not keep.active
    assert said == ["the shard passed the resident budget of 0.00 GiB on its device: streaming every epoch "
                    "(raise train.device_cache_gib, or add workers)"]
    fits = _Resident(True, budget=10**6, seed=0, rank=0, say=said.append, expected_rows=15)
    for i in range(3):  # past the expected rows: the buffers grow, the rows stay in order
        fits.add(x + i, xr - i)
    fits.seal()
    assert fits.ready and fits.rows == 30 and fits.x.shape == (30, 4) and fits.xr.shape == (30, 6)
    assert torch.equal(fits.x, torch.cat([x, x + 1, x + 2])) and torch.equal(fits.xr, torch.cat([xr, xr - 1, xr - 2]))
    same = _Resident(True, budget=10**6, seed=0, rank=0, say=said.append, repr_is_x=True)
    same.add(x, x)
    same.seal()
    assert same.xr is same.x and same.bytes == 160  # features as the representation: held once


def test_held_rows_are_sliced_between_workers_the_same_way_every_run(shards, tmp_path):
    """Small data that the workers keep resident comes from one Arrow table in the object store,
    not a Ray Data shard: each of two workers takes a fixed slice, every row once, so (unlike a
    split stream) two runs give the same model bit for bit. Past its resident budget a worker
    trains from its held slice every epoch, the frozen model's assignment kept by row key. The
    second run is ``model.deterministic``: its workers train under torch's deterministic
    algorithms, which change nothing on a CPU."""
    a, b = (train(job(shards, tmp_path / name, workers=2, model=extra))
            for name, extra in (("a", None), ("b", {"deterministic": True})))
    h = a.estimator.history_
    assert h["world_size"] == 2
    assert (h["deterministic"], b.estimator.history_["deterministic"]) == (False, True)
    # the deterministic run's workers start with cuBLAS's fixed workspace in their environment
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from neurcam_dist.distributed.session import worker_env
    assert worker_env(False) == {}
    seen = tmp_path / "workspace.txt"

    def record(config):
        Path(config["out"]).write_text(os.environ.get("CUBLAS_WORKSPACE_CONFIG") or "unset")
    TorchTrainer(record, train_loop_config={"out": str(seen)}, scaling_config=ScalingConfig(num_workers=1),
                 run_config=RunConfig(name="env", storage_path=str(tmp_path / "env"), **worker_env(True))).fit()
    assert seen.read_text() == os.environ.get("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    assert [r["source"] for r in h["epochs"]] == ["held"] + ["resident"] * (h["n_epochs"] - 1)
    assert all(r["rows"] == N_ROWS for r in h["epochs"])   # no row dropped to even out the split
    sa, sb = a.estimator.net_.state_dict(), b.estimator.net_.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    tight = train(job(shards, tmp_path / "c", workers=2, device_cache_gib=1e-6))
    epochs = tight.estimator.history_["epochs"]
    assert {r["source"] for r in epochs} == {"held"} and all(r["rows"] == N_ROWS for r in epochs)
    annealing = [r for r in epochs if r["phase"] in ("anneal_single", "anneal_pairs", "final")]
    assert annealing and all(r["teacher_rows"] == N_ROWS // 2 for r in annealing)  # worker 0's half, per batch
    est = tight.estimator
    assert is_one_hot(est.net_.single.gates.matrix(est.temperatures_[0]))
    assert tight.metrics["inertia"] == pytest.approx(a.metrics["inertia"], rel=0.05)


def test_a_held_shard_is_one_slice_of_every_row_in_batches():
    from neurcam_dist.distributed.worker import HeldShard
    table = pa.table({"key": np.arange(10, dtype=np.int64), "v": np.arange(10, dtype=np.float64) * 2})

    def collate(t):
        v = torch.from_numpy(np.array(t["v"]))
        return v[:, None], -v[:, None], torch.from_numpy(np.array(t["key"]))

    shards = [HeldShard(table, rank, 3, collate) for rank in range(3)]
    keys = [s.keys.tolist() for s in shards]
    assert keys == [[0, 1, 2], [3, 4, 5], [6, 7, 8, 9]]      # contiguous, disjoint, every row once
    ordered = list(HeldShard(table, 2, 3, collate, shuffle=False).batches(3, torch.device("cpu"), seed=0))
    assert [k.tolist() for _, _, k in ordered] == [[6, 7, 8], [9]]
    assert all(torch.equal(x[:, 0], 2.0 * k) and torch.equal(xr, -x) for x, xr, k in ordered)  # rows stay whole
    one, again, other = ([k.tolist() for _, _, k in HeldShard(table, 0, 1, collate).batches(4, torch.device("cpu"),
                                                                                        seed)]
                         for seed in (1, 1, 2))
    assert one == again != other and sorted(sum(one, [])) == list(range(10)) and [len(b) for b in one] == [4, 4, 2]


def test_a_held_slice_is_let_go_once_its_rows_are_resident_and_kept_when_they_are_not():
    from types import SimpleNamespace

    from neurcam_dist.distributed.worker import HeldShard, ShardFeed, _Resident
    from neurcam_dist.model.loop import Targets
    from neurcam_dist.model.schedule import Phase
    table = pa.table({"key": np.arange(10, dtype=np.int64), "v": np.arange(10, dtype=np.float32)})

    def collate(t):
        v = torch.from_numpy(np.array(t["v"]))
        return v[:, None], v[:, None] * 2, torch.from_numpy(np.array(t["key"]))

    trainer = SimpleNamespace(schedule=SimpleNamespace(epoch=0, annealing=False, uses_teacher=False,
                                                       phase=Phase.WARMUP), teacher=None)
    group = SimpleNamespace(world=1, rank=0, device=torch.device("cpu"))
    for budget, resident in ((2**20, True), (60, False)):
        said = []
        shard, keep = HeldShard(table, 0, 1, collate), _Resident(True, budget, seed=0, rank=0, say=said.append)
        feed = ShardFeed(shard, 4, 0, group, keep, None, Targets(torch.zeros(2, 1), 1.05))
        epochs = []
        for epoch in range(2):
            trainer.schedule.epoch = epoch
            epochs.append(sorted(int(v) for b in feed.pass_batches(trainer, epoch) for v in b.x[:, 0]))
        assert epochs == [list(range(10))] * 2 and keep.ready is resident
        assert feed.source == ("resident" if resident else "held")
        # resident: the host slice is a second copy and is let go; past the budget it is the feed and stays
        assert (shard.x is None) is resident and (shard.keys is None) is resident
        assert resident or "passed the resident budget" in said[0]


def _train_workers():
    found = []
    for p in psutil.process_iter(["cmdline", "name"]):
        text = " ".join(p.info["cmdline"] or []) + " " + (p.info["name"] or "")
        if "RayTrainWorker" in text:
            found.append(p)
    return found


def test_workers_resumed_mid_pass_end_on_the_uninterrupted_run_s_network(shards, tmp_path):
    """Epochs of 1,000 of the 3,000 rows on two workers (their rows held and kept on the device):
    a run cut short after 4 epochs (its checkpoint taken 17 batches into the second pass of each
    worker's rows), resumed from that checkpoint by Ray Train (run again under its name), ends with the network of the run
    that was never stopped, bit for bit: every worker goes on with the batches it would have had."""
    import torch as th

    from neurcam_dist.distributed import driver
    from neurcam_dist.distributed.job import prepare, resolve
    from neurcam_dist.distributed.worker import STATE_FILE
    cfg = parse_config(job(shards, tmp_path / "out", workers=2, checkpoint_every=1,
                           model={"epoch_rows": 1000, "epochs": 14, "warmup_epochs": 5}))
    resolved, prof = prepare(resolve(cfg))
    init = driver.initial_state(resolved, prof)
    assert resolved.spec.epoch_steps(N_ROWS) == 16 and init.watched is not None

    def final(result) -> dict:
        with result.checkpoint.as_directory() as d:
            return th.load(os.path.join(d, STATE_FILE), map_location="cpu", weights_only=True)
    whole = final(driver.run_workers(resolved, driver.worker_config(resolved, init), "whole"))
    cut = driver.run_workers(resolved, driver.worker_config(resolved, init, max_epochs=4), "cut")
    stopped = final(cut)
    assert [p["pass"] for p in stopped["streams"]] == [1, 1] and all(p["done"] for p in stopped["streams"])
    # the same run name in the same storage: Ray Train goes on from that run's latest checkpoint
    resumed = final(driver.run_workers(resolved, driver.worker_config(resolved, init), "cut"))
    assert resumed["resumes"] == [4] and len(resumed["records"]) == len(whole["records"])
    assert [r["loss"] for r in resumed["records"]] == [r["loss"] for r in whole["records"]]
    # 16 steps of 64 rows an epoch (a pass's last batch is shorter), a fixed sample's loss watched
    assert all(1000 - 64 <= r["rows"] <= 1024 for r in whole["records"]) and "watched_loss" in whole["records"][-1]
    for key, value in whole["trainer"]["net"].items():
        assert th.equal(value, resumed["trainer"]["net"][key]), key


def test_killed_worker_resumes_from_checkpoint(shards, tmp_path):
    out = tmp_path / "out"
    # streaming epochs (a few seconds each) leave time to kill a worker mid-run
    cfg = job(shards, out, workers=2, model={"epochs": 12}, checkpoint_every=2, max_failures=1, cache="never")
    box = {}

    def run():
        try:
            box["result"] = train(cfg)
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            box["error"] = exc

    th = threading.Thread(target=run)
    th.start()
    deadline = time.time() + 240
    # a checkpoint registered with the controller (its snapshot says so), not just written
    while time.time() < deadline and not checkpoint_registered(
            p.read_text() for p in out.glob("_ray/*/checkpoint_manager_snapshot.json")):
        assert th.is_alive(), box.get("error")
        time.sleep(0.2)
    victims = _train_workers()
    assert victims, "no Ray Train worker process found to kill"
    victims[0].kill()
    th.join(timeout=400)
    assert not th.is_alive()
    if "error" in box:
        raise box["error"]
    h = box["result"].estimator.history_
    assert len(h["resumes"]) == 1 and h["resumes"][0] % 2 == 0 and h["resumes"][0] >= 2
    # the history is complete and has no duplicates: epochs before the checkpoint come from it
    assert [r["epoch"] for r in h["epochs"]] == list(range(1, h["n_epochs"] + 1))
    final_start = next(e["epoch"] for e in h["events"] if e["phase"] == "final")
    assert h["n_epochs"] == max(12, final_start)
    est = box["result"].estimator
    assert is_one_hot(est.net_.single.gates.matrix(est.temperatures_[0]))


def test_predict_writes_every_row_exactly_once(two_workers, shards, tmp_path, monkeypatch):
    """With Ray Data (forced) and in this process (small input): the same rows, to the bit."""
    monkeypatch.setenv("NEURCAM_LOCAL_PASS_BYTES", "0")
    said = []
    summary = predict_parquet(two_workers.estimator, str(shards), tmp_path / "by_ray", id_column="id", batch_size=100,
                              log=said.append, progress_seconds=0)
    monkeypatch.delenv("NEURCAM_LOCAL_PASS_BYTES")
    # progress lines from the executor's loop: counts that only grow, the last one every row
    counts = [int(m.replace(",", "")) for m in re.findall(r"^scored ([\d,]+) of 3,000 rows", "\n".join(said), re.M)]
    assert counts and counts == sorted(counts) and counts[-1] == N_ROWS, said
    assert said[-1].startswith(f"scored {N_ROWS:,} of {N_ROWS:,} rows (100%), "), said
    out = tmp_path / "scored"
    here = predict_parquet(two_workers.estimator, str(shards), out, id_column="id", batch_size=100)
    assert (summary["where"], here["where"]) == ("ray", "here")
    assert summary["files"] >= 4   # a block (and an output file) per input file at least: every actor gets work
    assert summary["n_rows"] == here["n_rows"] == N_ROWS and here["files"] == 4   # one output file per input file
    by_ray = pd.read_parquet(tmp_path / "by_ray").sort_values("id").reset_index(drop=True)
    res = pd.read_parquet(out)
    assert len(res) == N_ROWS and res["id"].tolist() == list(range(N_ROWS))   # in input order
    pd.testing.assert_frame_equal(res, by_ray, check_exact=True)
    df = table_of(shards)
    res = res.sort_values("id").reset_index(drop=True)
    est = two_workers.estimator
    assert np.array_equal(res["cluster"].to_numpy(), est.predict(df[est.feature_names_in_]))
    terms = set(est.explain_rows(df[est.feature_names_in_].head(2)).terms)
    assert set(res["term_1"]) <= terms and (res["term_1_contribution"] >= res["term_2_contribution"]).all()
    before = sorted(p.name for p in out.iterdir())
    bad = tmp_path / "bad"
    bad.mkdir()
    df.drop(columns=["f1"]).to_parquet(bad / "x.parquet")
    with pytest.raises(DataError, match=r"x.parquet: no column\(s\) \['f1'\]"):
        predict_parquet(est, str(bad), out)
    assert sorted(p.name for p in out.iterdir()) == before  # a failed run leaves the old output intact
    import duckdb      # a user's own reader at the output path: every row once, the marker not read
    assert duckdb.sql(f"SELECT count(*), count(DISTINCT id) FROM read_parquet('{out}/**/*.parquet')").fetchall() == \
        [(N_ROWS, N_ROWS)]


def test_nan_in_a_shard_fails_naming_file_and_column(shards, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for f in sorted(shards.glob("*.parquet")):
        t = pq.read_table(f)
        if f.name == "part-00002.parquet":
            col = t["f2"].to_numpy().copy()
            col[[5, 9]] = np.nan
            col[11] = np.inf
            t = t.set_column(t.schema.get_field_index("f2"), "f2", pa.array(col))
        pq.write_table(t, data / f.name)
    out = tmp_path / "out"
    with pytest.raises(DataError, match=r"part-00002.parquet: column 'f2': 2 NaN, 1 inf, 0 null"):
        train(job(data, out, model={"missing": "refuse"}))
    assert not (out / "model").exists() and not (out / "metrics.json").exists()
    # missing cells are a value of their own by default; the infinite one is still refused
    with pytest.raises(DataError, match=r"part-00002.parquet: column 'f2': 0 NaN, 1 inf, 0 null"):
        train(job(data, out))
    assert not (out / "model").exists()


def test_join_with_missing_and_duplicate_keys_fails_with_counts(tmp_path):
    rng = np.random.default_rng(0)
    feats = pd.DataFrame({"key": np.arange(100), "a": rng.normal(size=100), "b": rng.normal(size=100)})
    keys = np.r_[np.setdiff1d(np.arange(100), [3, 50, 77]), [10, 11]]   # 3 missing, 2 duplicated
    embs = pa.table({"key": keys, "vec": pa.FixedSizeListArray.from_arrays(
        pa.array(rng.normal(size=len(keys) * 4).astype(np.float32)), 4)})
    (tmp_path / "f").mkdir()
    (tmp_path / "e").mkdir()
    feats.iloc[:60].to_parquet(tmp_path / "f" / "a.parquet")
    feats.iloc[60:].to_parquet(tmp_path / "f" / "b.parquet")
    pq.write_table(embs, tmp_path / "e" / "e.parquet")
    cfg = parse_config({"data": {"path": str(tmp_path / "f"), "embedding": "vec",
                                 "embedding_table": {"path": str(tmp_path / "e"), "key": "key"}},
                        "model": {"n_clusters": 2}, "output": str(tmp_path / "out")}).data
    with pytest.raises(DataError, match=r"3 of 100 feature row\(s\) have no embedding.*2 key\(s\) appear more than once.*\(4 rows\)"):
        join_embeddings(cfg, Location(tmp_path / "staging"))
    assert not (tmp_path / "staging" / "joined").exists()
    # with every key present exactly once the join lands as plain shards that train like any other
    good = pa.table({"key": np.arange(100), "vec": pa.FixedSizeListArray.from_arrays(
        pa.array(rng.normal(size=400).astype(np.float32)), 4)})
    pq.write_table(good, tmp_path / "e" / "e.parquet")
    joined = join_embeddings(cfg, Location(tmp_path / "staging"))
    p = plan(joined)
    assert p.n_rows == 100 and p.features == ["a", "b"] and p.repr_kind == "list" and p.repr_dim == 4


def test_schema_problems_are_named_before_any_training(shards, tmp_path):
    def cfg(**data):
        return parse_config({"data": {"path": str(shards), **data}, "model": {"n_clusters": 2},
                             "output": str(tmp_path)}).data
    with pytest.raises(DataError, match=r"part-00000.parquet and 3 other file\(s\) of 4: no column 'nope' \(feature\); "
                                        r"columns: \['id', 'f0', 'f1', 'f2', 'f3', 'embedding', 'label'\]$"):
        plan(cfg(features=["f0", "nope"]))
    # one line per missing column, not one per file; the nearest name for a typo or a case slip
    with pytest.raises(DataError) as info:
        plan(cfg(features=["F1x", "f0"], label="Label"))
    msg = str(info.value)
    assert msg.startswith("2 schema problem(s):") and msg.count("no column") == 2
    assert "no column 'F1x' (feature); did you mean 'f1'?" in msg and "no column 'Label' (label); did you mean 'label'?" in msg
    with pytest.raises(DataError, match=r"column 'f1' \(embedding\) has type float, expected list<float>"):
        plan(cfg(embedding="f1"))
    p = plan(cfg(embedding="embedding", label="label", id="id"))
    assert p.features == ["f0", "f1", "f2", "f3"] and p.repr_dim == 6 and p.n_rows == N_ROWS
    cols = plan(cfg(features=["f0", "f1"], embedding=["f2", "f3"]))
    assert cols.repr_kind == "columns" and cols.repr_dim == 2 and cols.columns == ["f0", "f1", "f2", "f3"]
    files = sorted(str(f) for f in shards.glob("*.parquet"))
    assert plan(cfg(path=str(shards / "part-0000[01].parquet"))).source.files == files[:2]   # a glob
    assert plan(cfg(path=files[1:3])).n_rows == N_ROWS // 2                                # a list
    empty = tmp_path / "empty"
    empty.mkdir()
    pq.write_table(pq.read_table(next(shards.glob("*.parquet"))).slice(0, 0), empty / "e.parquet")
    with pytest.raises(DataError, match=r"is empty: 1 file\(s\), 0 rows"):
        plan(cfg(path=str(empty)))
    with pytest.raises(DataError, match=r"no Parquet files found"):
        plan(cfg(path=str(tmp_path / "nowhere")))
    own = tmp_path / "own"
    own.mkdir()
    pq.write_table(pa.table({"__neurcam_row": [1.0, 2.0], "f0": [0.0, 1.0]}), own / "a.parquet")
    with pytest.raises(DataError, match=r"\['__neurcam_row'\] have names neurcam-dist uses for its own columns"):
        plan(cfg(path=str(own)))


def test_config_errors_name_the_field(tmp_path):
    good = job("data/", "runs/x")
    assert parse_config(good).model.n_clusters == 3
    with pytest.raises(ConfigError, match=r"model\.n_clusters: Input should be greater than or equal to 2"):
        parse_config({**good, "model": {**good["model"], "n_clusters": 1}})
    with pytest.raises(ConfigError, match=r"train\.num_wrkers: unknown key \(not a setting of this section; "
                                          r"did you mean 'num_workers'\?\)"):
        parse_config({**good, "train": {"num_wrkers": 2}})
    with pytest.raises(ConfigError) as info:   # every section, nested ones included; no guess when none is near
        parse_config({**good, "model": {**good["model"], "epoch": 5}, "search": {"seed": [1]},
                      "tracking": {"experimnt": "x"}, "zzzz": 1})
    for line in ("model.epoch: unknown key (not a setting of this section; did you mean 'epochs'?)",
                 "search.seed: unknown key (not a setting of this section; did you mean 'seeds'?)",
                 "tracking.experimnt: unknown key (not a setting of this section; did you mean 'experiment'?)",
                 "zzzz: unknown key (not a setting of this section)\n"):
        assert line in str(info.value) + "\n"
    with pytest.raises(ConfigError, match=r"output: Field required"):
        parse_config({k: v for k, v in good.items() if k != "output"})
    f = tmp_path / "c.yaml"
    f.write_text(yaml.safe_dump(good))
    assert load_config(f, {"model.epochs": 3}).model.epochs == 3
    with pytest.raises(ConfigError, match=r"model\.epsilon: Input should be less than 1"):
        load_config(f, {"model.epsilon": 1.5})
    # a key under its earlier name (the glossary's renames) still works, with a line saying so
    table = {"path": "e/", "key": "id"}
    f.write_text(yaml.safe_dump({**good, "data": {**good["data"], "embedding": "vec", "embeddings": table}}))
    old = load_config(f, environ={})
    assert old.data.embedding_table.key == "id" and old.data.embedding_table.path == "e/"
    assert old.notes() == [f"data.embeddings is deprecated, read as data.embedding_table: rename it in {f}"]
    assert parse_config({**good, "data": {**good["data"], "embedding": "vec", "embedding_table": table}}).notes() == []
    with pytest.raises(ConfigError, match=r"data\.embeddings and data\.embedding_table are both given"):
        parse_config({**good, "data": {**good["data"], "embedding": "vec", "embeddings": table,
                                       "embedding_table": table}})


def test_gpu_shares_are_checked_before_anything_starts(shards, tmp_path):
    good = job("data/", "runs/x")
    with pytest.raises(ConfigError, match=r"train\.gpus_per_worker: Input should be less than or equal to 1"):
        parse_config({**good, "train": {"use_gpu": True, "num_workers": 1, "gpus_per_worker": 1.5}})
    with pytest.raises(ConfigError, match=r"gpus_per_worker=0\.25 needs train\.use_gpu: true"):
        parse_config({**good, "train": {"num_workers": 1, "gpus_per_worker": 0.25}})
    with pytest.raises(ConfigError, match=r"gpus_per_worker=0\.5 with train\.num_workers=2: the workers of one "
                                          r"run would share a GPU, which NCCL refuses"):
        parse_config({**good, "train": {"use_gpu": True, "num_workers": 2, "gpus_per_worker": 0.5}})
    cfg = parse_config({**good, "train": {"use_gpu": True, "num_workers": 1, "gpus_per_worker": 0.25}})
    assert cfg.train.gpu_share == 0.25
    # this cluster has no GPU: refused with the numbers, before reading or training anything
    out = tmp_path / "gpu"
    with pytest.raises(ValueError, match=r"num_workers=1 x train\.gpus_per_worker=0\.25 needs 0\.25 GPUs; "
                                         r"the cluster has 0"):
        train(job(shards, out, workers=1, use_gpu=True, gpus_per_worker=0.25))
    assert not out.exists()


def test_a_wrong_path_column_or_size_fails_before_ray_starts_and_writes_nothing(shards, tmp_path):
    """In a fresh process (no Ray running): the data is planned from the footers first."""
    import subprocess
    import sys
    for i, (command, data, features, model, expected) in enumerate((
            ("train", tmp_path / "nowhere", ["f0", "f9"], {}, "no Parquet files found at"),
            ("train", shards, ["f0", "f9"], {}, "no column 'f9' (feature)"),
            ("tune", shards, ["f0", "f9"], {}, "no column 'f9' (feature)"),
            ("train", shards, ["f0", "f1"], {"n_clusters": 10**6},
             f"model: n_clusters=1000000 is larger than the number of rows ({N_ROWS})"))):
        out = tmp_path / f"out{i}"
        cfg = job(data, out, model=model)
        cfg["data"]["features"] = features
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
        proc = subprocess.run([sys.executable, "-m", "neurcam_dist.cli", command, "--config", str(tmp_path / "c.yaml")],
                              capture_output=True, text=True, timeout=120, env={**os.environ, "RAY_ADDRESS": ""})
        assert proc.returncode == 2 and expected in proc.stderr, proc.stderr
        assert "Started a local Ray instance" not in proc.stderr + proc.stdout and not out.exists()


def test_sample_is_uniform_over_every_file_and_seeded(shards):
    from neurcam_dist.data import sample
    from neurcam_dist.config import DataConfig
    p = plan(DataConfig(path=str(shards), embedding="embedding", label="label", id="id"))
    ids = sample(p, 200, 3, ["id"])["id"].to_numpy()
    assert len(ids) == 200 == len(np.unique(ids))
    # every shard (750 rows each) is represented, not only the first files
    assert set(np.unique(ids // (N_ROWS // 4))) == {0, 1, 2, 3}
    assert np.array_equal(sample(p, 200, 3, ["id"])["id"].to_numpy(), ids)
    assert not np.array_equal(sample(p, 200, 4, ["id"])["id"].to_numpy(), ids)
    # nearly the whole dataset: exactly n distinct rows (no head-of-file fallback)
    near = sample(p, N_ROWS - 1, 0, ["id"])["id"].to_numpy()
    assert len(near) == N_ROWS - 1 == len(np.unique(near))
    assert len(sample(p, N_ROWS * 2, 0, ["id"])) == N_ROWS


def test_reference_rows_are_a_random_subset_of_the_sample():
    from types import SimpleNamespace

    from neurcam_dist.distributed.driver import InitialState, set_reference
    table = pa.table({"f0": np.arange(1000, dtype=np.float32)})   # the sample, in file order
    est = SimpleNamespace()
    set_reference(est, InitialState(start=None, sample=table), SimpleNamespace(features=["f0"]), 100, seed=0)
    rows = est.reference_["f0"].to_numpy()
    assert len(rows) == 100 == len(np.unique(rows))
    assert not np.array_equal(rows, np.arange(100)) and rows.max() > 500  # not the head of the sample


def _read_slowly(ds, callback) -> list:
    """Every row key of ``ds`` through Ray Data's executor in this process, 40 ms a block (a
    consumer slower than the reader, like a training worker), with ``callback`` as its only
    execution callback; the callback's instance is kept on its class. The executor may hold 50 kB
    of blocks: reads wait for the consumer, as a large stream's do for the training workers."""
    from ray.data import ExecutionResources

    from neurcam_dist.data.sources import ROW_KEY
    ds.context.custom_execution_callback_classes = [callback]
    ds.context.execution_options.resource_limits = ExecutionResources(object_store_memory=50_000)
    keys = []
    for batch in ds.iter_batches(batch_size=None, batch_format="pyarrow"):
        keys.extend(batch[ROW_KEY].to_pylist())
        time.sleep(0.04)
    return keys


def test_the_streams_idle_scheduling_loop_pauses_and_the_stream_is_unchanged(shards, caplog):
    from ray.data import DataContext
    from ray.data._internal.execution.execution_callback import ExecutionCallback

    from neurcam_dist.config import DataConfig
    from neurcam_dist.data import reading
    from neurcam_dist.data.pacing import IdlePause

    class Counting(ExecutionCallback):      # Ray Data's own loop, counted
        def __init__(self):
            self.steps = 0
            Counting.made = self

        def on_execution_step(self, executor):
            self.steps += 1

    class Paced(IdlePause):
        def __init__(self):
            super().__init__()
            Paced.made = self

    p = plan(DataConfig(path=str(shards), embedding="embedding", label="label", id="id"))
    assert IdlePause in reading.streamed_dataset(p).context.custom_execution_callback_classes   # the training feed
    assert IdlePause not in DataContext.get_current().custom_execution_callback_classes

    unpaced = _read_slowly(reading.streamed_dataset(p, batch_rows=100), Counting)
    paced = _read_slowly(reading.streamed_dataset(p, batch_rows=100), Paced)
    assert paced == unpaced and sorted(paced) == list(range(N_ROWS))     # same rows, same order
    # unpaced, the loop polls while the consumer works (the state the pause is for); paced, most
    # of its steps moved nothing and paused. How much fewer steps that makes depends on how fast
    # the unpaced loop polls on a loaded machine (1,000 a second idle, 190 in a loaded CI run).
    assert Counting.made.steps > 200, Counting.made.steps
    assert Paced.made.steps < Counting.made.steps, (Paced.made.steps, Counting.made.steps)
    assert Paced.made.pauses > Paced.made.steps / 2, (Paced.made.pauses, Paced.made.steps)

    # an executor without the state it reads: the pause switches itself off and says so, once
    off = IdlePause()
    with caplog.at_level("WARNING", logger="neurcam_dist.data.pacing"):
        off.on_execution_step(object())
        off.on_execution_step(object())
    assert off.off and caplog.text.count("idle scheduling loop is not paced") == 1


def test_a_users_poll_interval_wins_over_the_local_default(monkeypatch):
    """``session.local_ray_defaults`` (before a local Ray starts; that its workers get 0.2 s is
    checked in ``test_hostile_inputs``' killed-command test) keeps a value the user set."""
    from neurcam_dist.distributed.session import TRAIN_POLL_VAR, local_ray_defaults
    monkeypatch.setenv(TRAIN_POLL_VAR, "1.5")
    local_ray_defaults()
    assert os.environ[TRAIN_POLL_VAR] == "1.5"
    monkeypatch.delenv(TRAIN_POLL_VAR)
    local_ray_defaults()
    assert os.environ[TRAIN_POLL_VAR] == "0.2"
