"""Object storage against a real S3 server (SeaweedFS on 127.0.0.1, started by the ``s3_server``
fixture): models, reports, run outputs and predictions published through a manifest, data read
from s3://, Ray Train checkpoints and Tune trial models in the bucket, MLflow artifacts there too.

The commands that start Ray run as subprocesses with the AWS variables in their environment (the
session's shared Ray was started without them; a local Ray's workers inherit the driver's)."""
import json
import os
import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from .conftest import SMALL, blobs, checkpoint_registered, doc_blocks, free_port
from neurcam_dist import NeurCAM
from neurcam_dist.storage import atomic_directory, published
from neurcam_dist.uris import Location, filesystem

BUCKET = "s3://neurcam"


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    for k, v in s3_server.items():
        monkeypatch.setenv(k, v)
    return s3_server


def _objects(prefix: str) -> list[str]:
    from pyarrow.fs import FileSelector, FileType
    fs, root = filesystem(prefix)
    return sorted(i.path[len(root):].lstrip("/") for i in fs.get_file_info(FileSelector(root, recursive=True,
                                                                                         allow_not_found=True))
                  if i.type == FileType.File)


def _cli(args, env, timeout=300, cwd=None):
    return subprocess.run([sys.executable, "-m", "neurcam_dist.cli", *args], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=timeout, cwd=cwd)


def test_uris_join_and_stay_strings():
    from pathlib import Path

    from neurcam_dist.config import parse_config
    from neurcam_dist.uris import as_path, is_uri, join
    assert join("s3://b/out", "model") == "s3://b/out/model"
    assert join("s3://K:S@b/out/?endpoint_override=h:9000&scheme=http", "trials", "x") == \
        "s3://K:S@b/out/trials/x?endpoint_override=h:9000&scheme=http"
    assert join("runs/x", "model") == "runs/x/model" and as_path("file:///tmp/x") == Path("/tmp/x")
    assert as_path("s3://b/out") == "s3://b/out" and not is_uri("file:///tmp/x") and is_uri("gs://b/x")
    cfg = parse_config({"data": {"path": "s3://b/d"}, "model": {"n_clusters": 2}, "output": "s3://b/out"})
    assert cfg.storage_path() == "s3://b/out/_ray"   # Ray Train's checkpoints go to the bucket too


def test_models_and_reports_are_published_through_a_manifest(s3_env, fitted, data, tmp_path, capsys):
    X, _ = data
    uri = f"{BUCKET}/models/m1"
    fitted.save(uri)
    first = published.read_manifest(uri)
    assert set(first["files"]) == {"config.json", "weights.safetensors", "manifest.json"}
    assert all(len(m["sha256"]) == 64 for m in first["files"].values())
    back = NeurCAM.load(uri)
    assert np.array_equal(back.predict_proba(X), fitted.predict_proba(X))
    # two more saves: the newest and the one it replaced are kept, nothing else
    fitted.save(uri)
    second = published.read_manifest(uri)
    fitted.save(uri)
    third = published.read_manifest(uri)
    versions = {p.split("/")[0].removeprefix("run=") for p in _objects(uri) if p.startswith("run=")}
    assert versions == {second["version"], third["version"]} and first["version"] not in versions
    assert f"run={third['version']}/_SUCCESS" in _objects(uri)
    assert not _objects(f"{BUCKET}/models/.m1.staging")     # nothing left where versions are written

    # a run folder: its top-level files also lie at their plain keys (`aws s3 cp OUT/metrics.json -`)
    from neurcam_dist.storage import write_run_output

    def run_folder(tmp):
        (tmp / "model").mkdir()
        (tmp / "model" / "config.json").write_text("{}")
        (tmp / "metrics.json").write_text('{"inertia": 1.5}')
    write_run_output(Location(f"{BUCKET}/runs/plain"), run_folder)
    fs, root = filesystem(f"{BUCKET}/runs/plain")
    with fs.open_input_stream(f"{root}/metrics.json") as f:
        assert json.loads(f.read()) == {"inertia": 1.5} == json.loads(published.read_text(Location(f"{BUCKET}/runs/plain/metrics.json")))
    assert "model/config.json" not in _objects(f"{BUCKET}/runs/plain")   # folders only in the partition

    # a write that fails half-way: the manifest still names the last good version, which loads
    def broken(tmp):
        (tmp / "config.json").write_text("{}")
        raise RuntimeError("disk on fire")
    with pytest.raises(RuntimeError, match="disk on fire"):
        atomic_directory(Location(uri), broken, marker="manifest.json")
    assert published.read_manifest(uri)["version"] == third["version"]
    assert np.array_equal(NeurCAM.load(uri).predict(X), fitted.predict(X))
    # a file altered in the bucket is caught by its checksum
    fs, root = filesystem(uri)
    with fs.open_output_stream(f"{root}/run={third['version']}/weights.safetensors") as f:
        f.write(b"garbage")
    with pytest.raises(ValueError, match="does not match the manifest"):
        NeurCAM.load(uri)
    # someone else's objects are not shadowed; a path with no output says so
    with fs.open_output_stream("neurcam/foreign/notes.txt") as f:
        f.write(b"not ours")
    with pytest.raises(ValueError, match=r"holds \['notes.txt'\], which neurcam did not publish"):
        fitted.save(f"{BUCKET}/foreign")
    with pytest.raises(ValueError, match="no model at s3://neurcam/nothing/here"):
        NeurCAM.load(f"{BUCKET}/nothing/here")

    # neurcam explain: model and report on s3, endpoint and credentials in the URIs, never printed
    fitted.save(f"{BUCKET}/models/m2")
    X.to_csv(tmp_path / "d.csv", index=False)
    from neurcam_dist.cli import main
    secret = s3_env["AWS_SECRET_ACCESS_KEY"]
    endpoint = s3_env["AWS_ENDPOINT_URL"].removeprefix("http://")
    creds = f"s3://{s3_env['AWS_ACCESS_KEY_ID']}:{secret}@neurcam"
    options = f"?endpoint_override={endpoint}&scheme=http"
    with_options = f"{creds}/reports/r1{options}"
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ENDPOINT_URL"):
        os.environ.pop(var)   # monkeypatch restores them
    assert main(["explain", "--model", f"{creds}/models/m2{options}",
                 "--data", str(tmp_path / "d.csv"), "--out", with_options]) == 0
    out = capsys.readouterr()
    assert secret not in out.out + out.err
    assert "open the report: s3://***@neurcam/reports/r1/report.html?endpoint_override=" in out.out
    page = published.read_text(Location(with_options.replace("/r1?", "/r1/report.html?")))
    assert page.startswith("<!DOCTYPE html>") and "id='clusters'" in page


def _upload_blobs(prefix: str, n_files: int = 2) -> pd.DataFrame:
    X, y = blobs(n=600, seed=3)
    df = X.assign(id=np.arange(len(X)), label=y)
    fs, root = filesystem(prefix)
    bounds = np.linspace(0, len(df), n_files + 1).astype(int)
    for i in range(n_files):
        part = df.iloc[bounds[i]:bounds[i + 1]]
        pq.write_table(pa.Table.from_pandas(part, preserve_index=False), f"{root}/part-{i}.parquet", filesystem=fs)
    return df


def _read_plainly(uri: str) -> dict:
    """What a user's own tools read at ``uri``, with no neurcam code: object-storage.md's blocks as
    written (pyarrow's dataset with Hive partitions, names starting with '.' or '_' skipped; DuckDB's
    ``read_parquet`` over ``URI/**/*.parquet``), their bucket swapped for ``uri``. DuckDB reaches the
    bucket through fsspec (its httpfs extension is a download, which this machine cannot make); the
    glob and the reader are DuckDB's own."""
    import duckdb
    from fsspec.implementations.arrow import ArrowFSWrapper
    from pyarrow.fs import FileSystem
    (python,) = doc_blocks("docs/object-storage.md")
    (sql,) = doc_blocks("docs/object-storage.md", "sql")
    space: dict = {}
    exec(compile(python.replace("s3://bucket/scored", uri), "object-storage.md", "exec"), space)
    table = space["scored"]

    class S3(ArrowFSWrapper):
        protocol = "s3"
    con = duckdb.connect()
    con.register_filesystem(S3(FileSystem.from_uri(uri)[0]))
    per_cluster = con.sql(sql.replace("s3://bucket/scored", uri)).fetchall()
    rows, ids, runs = con.sql(f"SELECT count(*), count(DISTINCT id), count(DISTINCT run) FROM "
                              f"read_parquet('{uri}/**/*.parquet', hive_partitioning = true)").fetchall()[0]
    assert sum(n for _, n in per_cluster) == rows and len(per_cluster) == len(set(table["cluster"].to_pylist()))
    return {"pyarrow": (table.num_rows, len(set(table["id"].to_pylist())), len(set(table["run"].to_pylist()))),
            "duckdb": (rows, ids, runs)}


def _job(data: str, out: str, **train) -> dict:
    model = {k: v for k, v in SMALL.items() if k not in ("verbose", "device")}
    return {"data": {"path": data, "features": ["f0", "f1", "f2", "f3"], "label": "label", "id": "id"},
            "model": {"n_clusters": 3, "random_state": 0, **model}, "output": out,
            "train": {"num_workers": 2, "cpus_per_worker": 1, **train}}


def test_a_location_opens_its_file_system_once_and_shares_it_below(s3_env, tmp_path):
    """``uris.Location``: resolved once, ``/`` below it (a URI keeps its query options at the end),
    the file system opened on first use and handed to what lies below; a plain path to any reader."""
    from neurcam_dist.ops import history
    from neurcam_dist.uris import Location
    assert str(Location(f"{BUCKET}/located?scheme=http") / "a" / "b.json") == f"{BUCKET}/located/a/b.json?scheme=http"
    out = Location(f"{BUCKET}/located")
    assert (out / "a").is_uri
    fs, root = out.filesystem()
    below_fs, below = (out / "trials" / "search-1").filesystem()
    assert below_fs is fs and below == f"{root}/trials/search-1"
    fs.create_dir(below)
    assert history._subfolders(out / "trials") == ["search-1"]
    history.append_history(out, {"search": "search-1", "outcome": "kept"})
    assert [r["outcome"] for r in history.read_history(out)] == ["kept"]
    local = Location(tmp_path / "run")
    assert local.path == tmp_path / "run" and not local.is_uri and os.fspath(local / "m") == str(tmp_path / "run" / "m")
    history.append_history(local, {"search": "s", "outcome": "promoted"})
    assert (tmp_path / "run" / history.HISTORY).exists()


def test_data_on_s3_is_listed_like_a_local_folder(s3_env):
    from neurcam_dist.data import resolve
    from neurcam_dist.data.sources import DataError
    _upload_blobs(f"{BUCKET}/listing/a", n_files=2)
    _upload_blobs(f"{BUCKET}/listing/b", n_files=1)
    fs, root = filesystem(f"{BUCKET}/listing")
    for stray in ("_SUCCESS", "a/.part-7.parquet.tmp", "_ray/x.parquet", "a/notes.txt"):
        with fs.open_output_stream(f"{root}/{stray}") as f:
            f.write(b"x")
    # an output neurcam published inside the input prefix (scores beside their input) is not data
    from neurcam_dist.storage.published import write_version
    write_version(f"{BUCKET}/listing/scored", lambda r, fs_: pq.write_table(pa.table({"x": [1]}), f"{r}/p.parquet",
                                                                            filesystem=fs_))
    src = resolve(f"{BUCKET}/listing")
    assert [f.rsplit("/", 2)[-2:] for f in src.files] == [["a", "part-0.parquet"], ["a", "part-1.parquet"],
                                                          ["b", "part-0.parquet"]]
    assert src.skipped == 7      # the strays; the output's shard, marker and manifest
    assert len(resolve(f"{BUCKET}/listing/scored").files) == 1   # read as itself, through its manifest
    assert len(resolve(f"{BUCKET}/listing/*/part-0.parquet").files) == 2
    stamp = src.stamp()
    assert len(stamp) == 3 and all(v is not None for v in stamp.values())
    with fs.open_output_stream(f"{root}/b/part-0.parquet") as f:   # rewritten under a run
        f.write(b"changed")
    assert [c.rsplit("/", 1)[-1] for c in src.changed_since(stamp)] == ["part-0.parquet (rewritten)"]
    with pytest.raises(DataError, match="no Parquet files found at 's3://neurcam/listing/nothing'"):
        resolve(f"{BUCKET}/listing/nothing")
    # neurcam validate reads the footers and the snapshot listing from the bucket, writes nothing
    from neurcam_dist.config import parse_config
    from neurcam_dist.ops.validate import validate
    for day in ("2026-11-25", "2026-11-26"):
        _upload_blobs(f"{BUCKET}/events/date={day}", n_files=1)
    cfg = parse_config({"data": {"path": f"{BUCKET}/events/", "features": ["f0", "f1"]},
                        "model": {"n_clusters": 3}, "output": f"{BUCKET}/runs/validated",
                        "recluster": {"snapshot": "latest"}})
    lines = validate(cfg)
    assert "snapshot: '2026-11-26' -> s3://neurcam/events/date=2026-11-26" in lines
    assert any(line.startswith("data: 600 rows in 1 file(s)") for line in lines) and "output: s3://neurcam/runs/validated" in lines
    assert _objects(f"{BUCKET}/runs/validated") == []


def test_train_from_s3_data_to_an_s3_output_on_two_workers(ray_cluster, s3_env, tmp_path, capsys):
    """In-process on the session's Ray (started with the server's settings, see conftest)."""
    from neurcam_dist.cli import main
    df = _upload_blobs(f"{BUCKET}/train-data")
    out = f"{BUCKET}/runs/t1"
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(_job(f"{BUCKET}/train-data", out)))
    assert main(["train", "--config", str(tmp_path / "job.yaml")]) == 0
    printed = capsys.readouterr()
    assert s3_env["AWS_SECRET_ACCESS_KEY"] not in printed.out + printed.err
    listed = _objects(out)
    assert "_neurcam_manifest.json" in listed
    assert any(p.startswith("_ray/") and "checkpoint_" in p for p in listed)   # Ray Train's checkpoints
    assert any(p.startswith("logs/ray-") for p in listed)                         # the run's Ray log
    assert not os.path.exists("s3:") and not (tmp_path / "s3:").exists()   # no local folder named after the URI
    metrics = json.loads(published.read_text(Location(f"{out}/metrics.json")))
    assert metrics["n_rows"] == len(df) and metrics["num_workers"] == 2
    fs, root = filesystem(out)     # a person's `aws s3 cp OUT/metrics.json -`: a plain object at that key
    with fs.open_input_stream(f"{root}/metrics.json") as f:
        assert json.loads(f.read()) == metrics
    est = NeurCAM.load(f"{out}/model")
    X = df[["f0", "f1", "f2", "f3"]]
    assert metrics["inertia"] > 0 and len(np.unique(est.predict(X))) == 3
    # a training run's output set that fails while being written: the old set stays
    from neurcam_dist.storage import write_run_output
    before = published.read_manifest(out)

    def broken(tmp):
        (tmp / "metrics.json").write_text("{}")
        raise RuntimeError("killed while writing")
    with pytest.raises(RuntimeError, match="killed while writing"):
        write_run_output(Location(out), broken)
    assert published.read_manifest(out) == before
    assert np.array_equal(NeurCAM.load(f"{out}/model").predict(X), est.predict(X))


def test_predict_from_and_to_s3(ray_cluster, s3_env, fitted, tmp_path, monkeypatch):
    """Ray Data (forced) reads the bucket and writes a new version there, in-process on the
    session's Ray; small input scored in this process gives the same rows."""
    from neurcam_dist.cli import main
    df = _upload_blobs(f"{BUCKET}/score-data")
    est = fitted
    X = df[["f0", "f1", "f2", "f3"]]
    est.save(f"{BUCKET}/runs/p1/model")
    preds = f"{BUCKET}/scored"
    monkeypatch.setenv("NEURCAM_LOCAL_PASS_BYTES", "0")
    assert main(["predict", "--model", f"{BUCKET}/runs/p1/model", "--input", f"{BUCKET}/score-data",
                 "--output", preds, "--log-dir", f"{BUCKET}/runs/p1/logs"]) == 0
    monkeypatch.delenv("NEURCAM_LOCAL_PASS_BYTES")
    from neurcam_dist.data import resolve
    from neurcam_dist.distributed import predict_parquet
    assert resolve(f"{BUCKET}/runs/p1/logs", suffixes=(".log",)).files   # Ray's lines, copied to the bucket
    assert predict_parquet(est, f"{BUCKET}/score-data", f"{BUCKET}/scored-here")["where"] == "here"

    def rows(uri):
        src = resolve(uri)          # the product's readers go through the manifest
        got = pd.concat([pq.read_table(f, filesystem=src.filesystem).to_pandas() for f in src.files])
        return got.sort_values("id").reset_index(drop=True)
    got = rows(preds)
    assert len(got) == len(df) and np.array_equal(got["cluster"].to_numpy(), est.predict(X))
    pd.testing.assert_frame_equal(rows(f"{BUCKET}/scored-here"), got, check_exact=True)
    # a plain Parquet reader at the output path reads every scored row once, also after a second
    # publication there (the first partition is gone once the second is committed)
    once = {"pyarrow": (len(df), len(df), 1), "duckdb": (len(df), len(df), 1)}
    assert _read_plainly(preds) == once
    predict_parquet(est, f"{BUCKET}/score-data", preds)
    assert _read_plainly(preds) == once
    src = resolve(preds)
    good = published.read_manifest(preds)
    assert [p for p in _objects(preds) if not p.startswith("run=")] == ["_neurcam_manifest.json"]
    assert f"run={good['version']}/_SUCCESS" in _objects(preds)

    # a writer that fails half-way, and one killed half-way (its shards left where versions are
    # written): neither is seen by any reader, the previous scores stay readable once
    from neurcam_dist.storage.published import write_version

    def half(root, fs):
        pq.write_table(pa.Table.from_pandas(df.head(50), preserve_index=False), f"{root}/part-0.parquet", filesystem=fs)
        raise RuntimeError("killed while writing")
    with pytest.raises(RuntimeError, match="killed while writing"):
        write_version(preds, half)
    fs, root = filesystem(preds)
    pq.write_table(pa.Table.from_pandas(df.head(50), preserve_index=False),
                   "neurcam/.scored.staging/29990101-000000.000000-dead/part-0.parquet", filesystem=fs)
    assert _read_plainly(preds) == once and published.read_manifest(preds) == good

    # a failed run leaves the previous output readable: a scoring input without a feature column
    # (checked from the footers, before any Ray work: in-process)
    from neurcam_dist.data import DataError
    from neurcam_dist.distributed import predict_parquet
    bad = df.drop(columns=["f1"])
    fs, root = filesystem(f"{BUCKET}/bad-data")
    pq.write_table(pa.Table.from_pandas(bad, preserve_index=False), f"{root}/x.parquet", filesystem=fs)
    with pytest.raises(DataError, match=r"x.parquet: no column\(s\) \['f1'\]"):
        predict_parquet(est, f"{BUCKET}/bad-data", preds)
    assert published.read_manifest(preds) == good and len(resolve(preds).files) == len(src.files)
    # a corrupt file among the data is named before anything runs
    with fs.open_output_stream("neurcam/score-data/part-9.parquet") as f:
        f.write(b"not parquet")
    with pytest.raises(DataError, match="part-9.parquet: not a readable Parquet file"):
        from neurcam_dist.data import footers
        footers(resolve(f"{BUCKET}/score-data"))


def _mlflow_server(root, env, artifacts: str):
    port = free_port()
    log = open(root / "mlflow.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                             "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
                             "--artifacts-destination", artifacts, "--workers", "1"],
                            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env})
    import urllib.request
    deadline = time.time() + 90
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                return proc, f"http://127.0.0.1:{port}"
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                raise RuntimeError((root / "mlflow.log").read_text()[-2000:]) from None
            time.sleep(0.5)


def test_tune_trials_travel_through_the_bucket_and_mlflow_keeps_artifacts_there(s3_env, tmp_path):
    df = _upload_blobs(f"{BUCKET}/tune-data")
    # the representation in a second dataset, joined on the id (the join is staged in the bucket)
    rng = np.random.default_rng(0)
    emb = pa.table({"id": np.arange(len(df)), "emb": pa.array(list(rng.normal(size=(len(df), 4)).astype(np.float32)),
                                                              pa.list_(pa.float32()))})
    fs, root = filesystem(f"{BUCKET}/tune-emb")
    pq.write_table(emb, f"{root}/emb.parquet", filesystem=fs)
    proc, uri = _mlflow_server(tmp_path, s3_env, f"{BUCKET}/mlflow")
    try:
        job = _job(f"{BUCKET}/tune-data", f"{BUCKET}/runs/tune1")
        job["data"].update(embedding="emb", embedding_table={"path": f"{BUCKET}/tune-emb", "key": "id"})
        job["search"] = {"seeds": [0, 1], "max_concurrent_trials": 1}
        job["tracking"] = {"uri": uri, "experiment": "s3-test", "model_name": "s3-model"}
        (tmp_path / "tune.yaml").write_text(yaml.safe_dump(job))
        r = _cli(["tune", "--config", str(tmp_path / "tune.yaml")], s3_env, cwd=tmp_path)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        listed = _objects(f"{BUCKET}/runs/tune1")
        assert "_ray/staging/joined/_neurcam_manifest.json" in listed
        trial_manifests = [p for p in listed if p.startswith("trials/") and p.endswith("/_neurcam_manifest.json")]
        assert len(trial_manifests) == 2          # each trial published its model to the bucket
        search = json.loads(published.read_text(Location(f"{BUCKET}/runs/tune1/search.json")))
        assert [t["status"] for t in search["trials"]] == ["ok", "ok"]
        assert json.loads(published.read_text(Location(f"{BUCKET}/runs/tune1/metrics.json")))["repr_dim"] == 4
        winner = NeurCAM.load(f"{BUCKET}/runs/tune1/model")
        # MLflow's artifacts (the report, the model) are objects in the same bucket
        artifacts = _objects(f"{BUCKET}/mlflow")
        assert any(p.endswith("report/report.html") for p in artifacts)
        assert any(p.endswith("MLmodel") for p in artifacts)
        # and the registry flow works through the server: the candidate is the winner
        from neurcam_dist import tracking
        import mlflow
        mlflow.set_tracking_uri(uri)
        registered = tracking.load_estimator("models:/s3-model@candidate")
        X = blobs(n=600, seed=3)[0]
        assert np.array_equal(registered.predict(X), winner.predict(X))
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_killed_worker_resumes_from_an_s3_checkpoint(s3_env, tmp_path):
    import psutil
    _upload_blobs(f"{BUCKET}/kill-data", n_files=4)
    out = f"{BUCKET}/runs/killed"
    job = _job(f"{BUCKET}/kill-data", out, checkpoint_every=2, max_failures=1, cache="never")
    job["model"].update(epochs=12, epsilon=0.5)   # streamed from the bucket each epoch (~5 s): a short anneal
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    proc = subprocess.Popen([sys.executable, "-m", "neurcam_dist.cli", "train", "--config", str(tmp_path / "job.yaml")],
                            env={**os.environ, **s3_env}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=tmp_path)
    try:
        deadline = time.time() + 240
        # a checkpoint registered with the controller (its snapshot in the bucket says so), not just written
        while not checkpoint_registered(published.read_text(Location(f"{out}/_ray/{p}")) for p in _objects(f"{out}/_ray")
                                        if p.endswith("checkpoint_manager_snapshot.json")):
            assert proc.poll() is None and time.time() < deadline, proc.stdout.read()[-3000:]
            time.sleep(0.5)
        mine = {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
        victims = [p for p in psutil.process_iter(["cmdline"]) if "RayTrainWorker" in " ".join(p.info["cmdline"] or [])
                   and p.pid in mine]
        assert victims, "no Ray Train worker of this run found to kill"
        victims[0].kill()
        text, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, text[-3000:]
    h = NeurCAM.load(f"{out}/model").history_
    assert len(h["resumes"]) == 1 and h["resumes"][0] % 2 == 0 and h["resumes"][0] >= 2
    assert [r["epoch"] for r in h["epochs"]] == list(range(1, h["n_epochs"] + 1))


def test_an_object_store_that_denies_access_is_one_line_in_bounded_time(s3_env, tmp_path, fitted, data):
    """Wrong credentials against the real server: validate exits 2 and predict 1, each with one
    line naming the store, no traceback, within a minute."""
    _upload_blobs(f"{BUCKET}/denied", n_files=1)
    fitted.save(tmp_path / "model")
    env = {**s3_env, "AWS_SECRET_ACCESS_KEY": "not-the-secret"}
    cfg = {"data": {"path": f"{BUCKET}/denied"}, "model": {"n_clusters": 3}, "output": str(tmp_path / "o")}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    for args, code in ((["validate", str(tmp_path / "c.yaml")], 2),
                       (["predict", "--model", str(tmp_path / "model"), "--input", f"{BUCKET}/denied",
                         "--output", str(tmp_path / "p"), "--id", "id"], 1)):
        t0 = time.perf_counter()
        done = _cli(args, env, timeout=120)
        said = [x for x in done.stderr.splitlines() if x.startswith("neurcam:")]
        assert done.returncode == code and len(said) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert "denied" in said[0].lower() or "forbidden" in said[0].lower() or "signature" in said[0].lower(), said
        assert "not-the-secret" not in done.stderr + done.stdout
        assert time.perf_counter() - t0 < 60
        assert not (tmp_path / "p").exists()


def test_ray_storage_waits_for_an_object_store_that_comes_back(tmp_path, monkeypatch):
    """The file system Ray Train and Tune get for ``s3://`` storage (``storage.retrying``) rides
    out a store that stops answering for a few seconds: writes, reads, listings and deletions
    succeed once it is back, through a pickled copy too (what each Ray process holds), while the
    plain client fails at once; past the outage bound the store's own error comes through."""
    import pickle
    import secrets
    import threading

    from pyarrow import fs as pafs

    from neurcam_dist.storage.retrying import ray_storage
    from neurcam_dist.uris import Location
    from .conftest import Seaweed, _free_port_pair
    settings = {"AWS_ACCESS_KEY_ID": "blink", "AWS_SECRET_ACCESS_KEY": secrets.token_hex(16),
                "AWS_ENDPOINT_URL": f"http://127.0.0.1:{_free_port_pair()}", "AWS_REGION": "us-east-1"}
    for k, v in settings.items():
        monkeypatch.setenv(k, v)
    (tmp_path / "weed").mkdir()
    store = Seaweed(tmp_path / "weed", settings)
    store.start()
    try:
        given = ray_storage(Location("s3://neurcam/ray"))
        assert given["storage_path"] == "neurcam/ray"
        fs = pickle.loads(pickle.dumps(given["storage_filesystem"]))
        plain, _ = filesystem("s3://neurcam/ray")
        with fs.open_output_stream("neurcam/ray/before.bin") as f:
            f.write(b"checkpoint 1")
        store.stop()
        with pytest.raises(OSError):
            plain.get_file_info("neurcam/ray/before.bin")
        back = threading.Timer(4.0, store.start)
        back.start()
        try:
            with fs.open_output_stream("neurcam/ray/during.bin") as f:   # uploaded on close, once it is back
                f.write(b"checkpoint 2" * 1000)
        finally:
            back.join()
        with fs.open_input_stream("neurcam/ray/during.bin") as f:
            assert f.read() == b"checkpoint 2" * 1000
        names = sorted(i.base_name for i in fs.get_file_info(pafs.FileSelector("neurcam/ray")))
        assert names == ["before.bin", "during.bin"]
        fs.delete_file("neurcam/ray/before.bin")
        assert fs.get_file_info("neurcam/ray/before.bin").type == pafs.FileType.NotFound
        # a checkpoint folder copied as Ray copies it: pyarrow's copy on its IO threads, both ways
        (tmp_path / "ckpt").mkdir()
        for i in range(40):
            (tmp_path / "ckpt" / f"part-{i}.bin").write_bytes(bytes([i]) * 50_000)
        pafs.copy_files(str(tmp_path / "ckpt"), "neurcam/ray/ckpt", destination_filesystem=fs, use_threads=True)
        (tmp_path / "back").mkdir()
        pafs.copy_files("neurcam/ray/ckpt", str(tmp_path / "back"), source_filesystem=fs, use_threads=True)
        assert sorted(p.read_bytes() for p in (tmp_path / "back").iterdir()) == \
            sorted(p.read_bytes() for p in (tmp_path / "ckpt").iterdir())
        monkeypatch.setenv("NEURCAM_STORE_OUTAGE_S", "2")
        store.stop()
        t0 = time.monotonic()
        with pytest.raises(OSError):
            with fs.open_input_stream("neurcam/ray/during.bin") as f:
                f.read()
        assert time.monotonic() - t0 < 30
    finally:
        store.stop()
    assert ray_storage(Location(tmp_path / "local")) == {"storage_path": str(tmp_path / "local")}
