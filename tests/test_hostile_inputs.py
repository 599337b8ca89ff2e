"""Hostile but realistic input, tried as a user would: every case a clear error naming what is
wrong (column, row, file, flag, endpoint), in bounded time, with nothing half-written; or, where
the input is valid, the right answer (never a silent wrong one)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
import unicodedata

import numpy as np
import pyarrow as pa
import pandas as pd
import pytest
import yaml

from neurcam_dist import NeurCAM, cli
from neurcam_dist.errors import ConfigError, DataError
from neurcam_dist.uris import Location

from .conftest import SMALL, blobs

FAST = ["--hidden", "16", "--n-bases", "8", "--epochs", "12", "--warmup-epochs", "4", "--quiet"]


def run(capsys, *argv):
    """``neurcam ARGV`` in this process: (exit status, stderr)."""
    capsys.readouterr()
    rc = cli.main([str(a) for a in argv])
    return rc, capsys.readouterr().err


@pytest.fixture(scope="module")
def table():
    X, _ = blobs(n=150, d=4, seed=3)
    return X


# ------------------------------------------------------------------ CSV formats and empty files
def test_semicolon_csv_with_decimal_commas_is_read_as_the_same_table(table, tmp_path, capsys):
    table.to_csv(tmp_path / "plain.csv", index=False)
    table.to_csv(tmp_path / "semi.csv", index=False, sep=";", decimal=",")
    rc, err = run(capsys, "fit", "--input", tmp_path / "plain.csv", "--output", tmp_path / "a", "--n-clusters", 3, *FAST)
    assert rc == 0, err
    rc, err = run(capsys, "fit", "--input", tmp_path / "semi.csv", "--output", tmp_path / "b", "--n-clusters", 3, *FAST)
    assert rc == 0, err
    assert "';'-separated with decimal commas" in err
    a, b = NeurCAM.load(tmp_path / "a" / "model"), NeurCAM.load(tmp_path / "b" / "model")
    assert b.feature_names_in_.tolist() == list(table.columns)          # four features, not one "f0;f1;f2;f3"
    np.testing.assert_array_equal(a.predict(table), b.predict(table))   # the same numbers were read


def test_a_wrong_delimiter_is_refused_never_fitted_as_one_column(table, tmp_path, capsys):
    table.to_csv(tmp_path / "semi.csv", index=False, sep=";", decimal=",")
    rc, err = run(capsys, "fit", "--input", tmp_path / "semi.csv", "--output", tmp_path / "o", "--n-clusters", 2,
                  "--delimiter", ",", *FAST)
    assert rc == 2 and "--delimiter ';'" in err and "one column" in err, err
    assert not (tmp_path / "o").exists()


def test_a_csv_with_a_header_and_no_rows_says_it_has_no_rows(table, tmp_path, capsys):
    table.head(0).to_csv(tmp_path / "empty.csv", index=False)
    rc, err = run(capsys, "fit", "--input", tmp_path / "empty.csv", "--output", tmp_path / "o", "--n-clusters", 2)
    assert rc == 2 and "has no rows" in err and "4 column" in err, err


# ------------------------------------------------------------------ names
def test_feature_names_are_plotted_as_text_not_mathtext(table, tmp_path, capsys):
    X = table.rename(columns={"f0": "cost_$_per_unit_$", "f1": "\u05e9\u05dd \u05de\u05e9\u05e4\u05d7\u05d4"})
    X.to_csv(tmp_path / "d.csv", index=False)
    rc, err = run(capsys, "fit", "--input", tmp_path / "d.csv", "--output", tmp_path / "o", "--n-clusters", 3,
                  "--report", *FAST)
    assert rc == 0, err
    html = (tmp_path / "o" / "report" / "report.html").read_text()
    assert "cost_$_per_unit_$" in html and "\u05e9\u05dd" in html


def test_a_report_that_fails_keeps_the_model_and_says_so(table, tmp_path, capsys, monkeypatch):
    from neurcam_dist.explain import report

    def broken(expl):
        raise RuntimeError("renderer exploded")
    monkeypatch.setattr(report, "render_figures", broken)
    table.to_csv(tmp_path / "d.csv", index=False)
    rc, err = run(capsys, "fit", "--input", tmp_path / "d.csv", "--output", tmp_path / "o", "--n-clusters", 3,
                  "--report", *FAST)
    assert rc == cli.REPORT_FAILED and "renderer exploded" in err and "the model is kept" in err, err
    est = NeurCAM.load(tmp_path / "o" / "model")
    assert len(est.predict(table)) == len(table)
    assert "renderer exploded" in (tmp_path / "o" / "report" / "error.txt").read_text()


def test_a_host_without_the_plotting_library_keeps_the_model_and_says_so(table, tmp_path, capsys, monkeypatch):
    """A slim image (a GPU node with torch and Ray only) has no matplotlib: the report fails, the
    run does not."""
    import sys
    monkeypatch.delitem(sys.modules, "neurcam_dist.explain.report", raising=False)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    table.to_csv(tmp_path / "d.csv", index=False)
    rc, err = run(capsys, "fit", "--input", tmp_path / "d.csv", "--output", tmp_path / "o", "--n-clusters", 3,
                  "--report", *FAST)
    assert rc == cli.REPORT_FAILED and "matplotlib" in err and "the model is kept" in err, err
    assert len(NeurCAM.load(tmp_path / "o" / "model").predict(table)) == len(table)
    assert "matplotlib" in (tmp_path / "o" / "report" / "error.txt").read_text()


def test_names_equal_after_unicode_normalization_are_refused(table):
    composed, decomposed = unicodedata.normalize("NFC", "caf\u00e9"), unicodedata.normalize("NFD", "caf\u00e9")
    X = table.iloc[:, :2].set_axis([composed, decomposed], axis=1)
    with pytest.raises(DataError, match="Unicode normalization"):
        NeurCAM(n_clusters=2, **SMALL).fit(X)


# ------------------------------------------------------------------ predict
@pytest.fixture(scope="module")
def model_dir(table, tmp_path_factory):
    out = tmp_path_factory.mktemp("model") / "m"
    NeurCAM(n_clusters=3, random_state=0, **SMALL).fit(table).save(out)
    return out


def test_predict_never_overwrites_an_input_column_with_its_output(table, model_dir, tmp_path, capsys):
    frame = table.assign(cluster=7, id=np.arange(len(table)))
    frame.to_csv(tmp_path / "in.csv", index=False)
    (tmp_path / "pq").mkdir()
    frame.to_parquet(tmp_path / "pq" / "part-0.parquet", index=False)
    for src in (tmp_path / "in.csv", tmp_path / "pq"):
        for extra in (["--carry", "cluster"], ["--id", "cluster"]):
            rc, err = run(capsys, "predict", "--model", model_dir, "--input", src, "--output", tmp_path / "out", *extra)
            assert rc == 2 and "'cluster'" in err and "output column" in err, (src, extra, err)
            assert not (tmp_path / "out").exists()


def test_predict_names_the_column_and_row_of_a_bad_cell(table, model_dir, tmp_path, capsys):
    frame = table.astype(object)
    frame.iloc[5, 1] = "1,5"
    frame.to_csv(tmp_path / "in.csv", index=False)
    rc, err = run(capsys, "predict", "--model", model_dir, "--input", tmp_path / "in.csv", "--output",
                  tmp_path / "out", "--no-id")
    assert rc == 2 and "column 'f1', row 5 holds '1,5'" in err, err
    (tmp_path / "pq").mkdir()
    frame.astype({"f1": str}).to_parquet(tmp_path / "pq" / "part-0.parquet", index=False)
    rc, err = run(capsys, "predict", "--model", model_dir, "--input", tmp_path / "pq", "--output",
                  tmp_path / "out", "--no-id")
    assert rc == 2 and "part-0.parquet: feature column 'f1'" in err and "row 5 holds '1,5'" in err, err
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ configs
def test_a_duplicated_yaml_key_is_refused_with_the_key(tmp_path, capsys):
    (tmp_path / "c.yaml").write_text(f"data:\n  path: {tmp_path}\nmodel:\n  n_clusters: 3\n  epochs: 50\n"
                                     f"  epochs: 5\noutput: {tmp_path / 'o'}\n")
    rc, err = run(capsys, "validate", tmp_path / "c.yaml")
    assert rc == 2 and "'epochs' is given twice" in err and "lines 5 and 6" in err, err


@pytest.mark.parametrize("name", ["../x y", "a:b", "team/model", "m@1", " padded", ".."])
def test_registry_names_are_refused_before_training_as_mlflow_refuses_them(tmp_path, name):
    from mlflow.exceptions import MlflowException
    from mlflow.utils.validation import _validate_model_name

    from neurcam_dist.config import check_model_name, parse_config
    with pytest.raises(ValueError):
        check_model_name(name)
    with pytest.raises(ConfigError, match="model_name"):
        parse_config({"data": {"path": str(tmp_path)}, "model": {"n_clusters": 2}, "output": str(tmp_path / "o"),
                      "tracking": {"model_name": name}}, "c.yaml")
    if any(c in name for c in "/:") or name == "..":   # the registry's own rules agree
        with pytest.raises(MlflowException):
            _validate_model_name(name)
    for ok in ("digits-demo", "segments v2", "a.b_c"):
        assert check_model_name(ok) == ok
        _validate_model_name(ok)


# ------------------------------------------------------------------ outputs
def test_unwritable_outputs_are_refused_before_any_work(table, model_dir, tmp_path, capsys):
    table.to_csv(tmp_path / "d.csv", index=False)
    (tmp_path / "afile").write_text("x")
    cases = [("fit", "--input", tmp_path / "d.csv", "--n-clusters", 2, *FAST),
             ("predict", "--model", model_dir, "--input", tmp_path / "d.csv", "--no-id"),
             ("explain", "--model", model_dir, "--input", tmp_path / "d.csv")]
    for args in cases:
        for out, words in ((tmp_path / "afile" / "sub", "is a file, not a folder"),
                           ("/sys/neurcam-test/out", "cannot be written")):
            t0 = time.perf_counter()
            rc, err = run(capsys, *args, "--output", out)
            assert rc == 2 and words in err, (args[0], out, err)
            assert time.perf_counter() - t0 < 30    # refused up front, not after the work
    assert (tmp_path / "afile").read_text() == "x"


def test_a_run_whose_output_is_a_file_is_refused_before_ray_starts(table, tmp_path, capsys):
    (tmp_path / "d").mkdir()
    table.to_parquet(tmp_path / "d" / "p.parquet")
    (tmp_path / "afile").write_text("x")
    cfg = {"data": {"path": str(tmp_path / "d")}, "model": {"n_clusters": 2}, "output": str(tmp_path / "afile")}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    for cmd in ("validate", "train", "tune"):
        rc, err = run(capsys, cmd, "--config", tmp_path / "c.yaml")
        assert rc == 2 and "is a file, not a folder" in err and "Traceback" not in err, (cmd, err)
    assert (tmp_path / "afile").read_text() == "x"


def test_two_writers_on_one_output_leave_one_complete_set(table, tmp_path):
    table.to_csv(tmp_path / "d.csv", index=False)
    cmd = [sys.executable, "-m", "neurcam_dist.cli", "fit", "--input", str(tmp_path / "d.csv"), "--output",
           str(tmp_path / "o"), "--n-clusters", "3", *FAST]
    procs = [subprocess.Popen([*cmd, "--seed", str(s)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for s in (1, 2)]
    done = [p.communicate(timeout=300) + (p.returncode,) for p in procs]
    assert any(rc == 0 for _, _, rc in done), done
    for _, err, rc in done:
        assert rc == 0 or "Traceback" not in err, err
    import json
    metrics = json.loads((tmp_path / "o" / "metrics.json").read_text())
    est = NeurCAM.load(tmp_path / "o" / "model")        # whole and verified (checksums)
    from neurcam_dist.metrics import inertia
    x = est.transform_features(table)
    assert inertia(x, est.predict(table)) == pytest.approx(metrics["inertia"], rel=1e-6)  # the metrics are this model's


# ------------------------------------------------------------------ Parquet schema drift
def _shards(tmp_path, *frames):
    folder = tmp_path / "shards"
    folder.mkdir()
    for i, f in enumerate(frames):
        f.to_parquet(folder / f"part-{i}.parquet", index=False)
    return folder


def test_int_and_float_shards_of_one_feature_are_unified_not_refused(table, tmp_path, capsys):
    a = table.iloc[:75].assign(f3=np.arange(75))                     # int64 here
    b = table.iloc[75:].assign(f3=np.linspace(0.5, 9.5, 75))          # double there
    folder = _shards(tmp_path, a, b)
    rc, err = run(capsys, "fit", "--input", folder, "--output", tmp_path / "o", "--n-clusters", 3, *FAST)
    assert rc == 0, err
    rc, err = run(capsys, "predict", "--model", tmp_path / "o" / "model", "--input", folder, "--output",
                  tmp_path / "p", "--no-id")
    assert rc == 0, err
    scored = pd.read_parquet(tmp_path / "p")
    est = NeurCAM.load(tmp_path / "o" / "model")
    np.testing.assert_array_equal(scored["cluster"].to_numpy(), est.predict(pd.concat([a, b]).astype(float)))
    # the files' one schema, as every pass reads them: f3 as float64 wherever it is int64
    from neurcam_dist.data import resolve
    from neurcam_dist.data.reading import tables_here
    src = resolve(str(folder))
    assert src.schema.field("f3").type == pa.float64() and src.schema.names[:len(a.columns)] == list(a.columns)
    assert {t.schema.field("f3").type for t in tables_here(src, ["f3"])} == {pa.float64()}


def test_int_float_decimal_and_three_list_types_across_shards_train_on_ray(table, tmp_path, ray_cluster):
    """int64 in one file and double in another, a DECIMAL column, and one embedding written as
    fixed_size_list, list and large_list by three writers: read as one table, validated and trained."""
    import decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    from neurcam_dist import service
    folder = tmp_path / "shards"
    folder.mkdir()
    emb = np.random.default_rng(0).normal(size=(150, 3)).astype(np.float32)
    kinds = [lambda v: pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), 3),
             lambda v: pa.array(v.tolist(), pa.list_(pa.float32())),
             lambda v: pa.array(v.tolist(), pa.large_list(pa.float32()))]
    for i, rows in enumerate(np.array_split(np.arange(150), 3)):
        part = table.iloc[rows]
        cols = {c: pa.array(part[c].to_numpy()) for c in ("f0", "f1")}
        cols["f3"] = pa.array(rows if i == 0 else rows + 0.5)                        # int64, then double
        cols["price"] = pa.array([decimal.Decimal(f"{v:.2f}") for v in part["f2"]], pa.decimal128(12, 2))
        cols["emb"] = kinds[i](emb[rows])
        pq.write_table(pa.table(cols), folder / f"part-{i}.parquet")
    # the types every file is read as come with the source, whether or not its footers were asked
    # for first, and asking again reads nothing more (no side effect to depend on)
    from neurcam_dist.data import footers, resolve
    src = resolve(str(folder))
    assert src.casts["f3"] == pa.float64() and src.casts["price"] == pa.float64()
    assert src.casts["emb"] == pa.list_(pa.float32()) and footers(src) is footers(src)
    cfg = {"data": {"path": str(folder), "embedding": "emb"}, "output": str(tmp_path / "o"),
           "model": {"n_clusters": 3, "epochs": 4, "warmup_epochs": 2, "hidden": [16], "n_bases": 8},
           "train": {"num_workers": 1}}
    from neurcam_dist.config import parse_config
    assert service.validate(parse_config(cfg))   # checked as the job would be, no error
    result = service.train(cfg)
    assert result.metrics["n_rows"] == 150
    assert set(NeurCAM.load(tmp_path / "o" / "model").feature_names_in_) == {"f0", "f1", "f3", "price"}


@pytest.mark.parametrize("drift, words", [
    ("text", "is double in"),
    ("missing", "lack(s) column 'f3'"),
    ("extra", "lack(s) column 'extra', which other files of"),
])
def test_schema_drift_that_cannot_be_unified_names_the_files(table, tmp_path, capsys, drift, words):
    a = table.iloc[:75]
    b = {"text": lambda t: t.assign(f3=t["f3"].astype(str)), "missing": lambda t: t.iloc[:, :3],
         "extra": lambda t: t.assign(extra=1.0)}[drift](table.iloc[75:])
    folder = _shards(tmp_path, a, b)
    rc, err = run(capsys, "fit", "--input", folder, "--output", tmp_path / "o", "--n-clusters", 3, *FAST)
    assert rc == 2 and words in err and "part-" in err, err


def test_zero_row_shards_and_empty_folders(table, tmp_path, capsys):
    folder = _shards(tmp_path, table, table.head(0))
    rc, err = run(capsys, "fit", "--input", folder, "--output", tmp_path / "o", "--n-clusters", 3, *FAST)
    assert rc == 0, err                                          # an empty shard among others is fine
    (tmp_path / "empty").mkdir()
    rc, err = run(capsys, "fit", "--input", tmp_path / "empty", "--output", tmp_path / "o2", "--n-clusters", 3)
    assert rc == 2 and str(tmp_path / "empty") in err, err


# ------------------------------------------------------------------ wide tables
def test_a_model_too_large_for_memory_is_refused_with_the_limit_and_what_to_lower():
    from neurcam_dist.model import TrainingSpec
    spec = TrainingSpec.for_data({"n_clusters": 4}, 2000, 3000)
    assert 3e9 < spec.step_bytes(2000) < 5e9       # measured: 4.1 GB peak RSS for this model (see step_bytes)
    with pytest.raises(ConfigError, match=r"needs about 3\.\d GiB.*1\.0 GiB is available.*batch_size.*n_single"):
        spec.check_memory(2000, available=2**30)
    said = []
    spec.check_memory(2000, available=64 * 2**30, say=said.append)
    assert said and "the progress bar shows the rate" in said[0]


def test_a_model_too_large_for_a_ray_worker_is_refused_before_any_pass(ray_cluster, tmp_path):
    """The same check on the Ray path, against what one worker of the cluster can count on (its
    node's Ray memory split between the workers it holds), before the data is profiled."""
    from neurcam_dist.distributed import train
    from neurcam_dist.distributed.session import worker_memory
    from neurcam_dist.config import parse_config
    rng = np.random.default_rng(0)
    pd.DataFrame(rng.normal(size=(64, 1500)), columns=[f"c{j}" for j in range(1500)]).to_parquet(tmp_path / "w.parquet")
    cfg = {"data": {"path": str(tmp_path / "w.parquet")},
           "model": {"n_clusters": 3, "hidden": [8192, 8192], "batch_size": 64, "epochs": 2},
           "train": {"num_workers": 2}, "output": str(tmp_path / "out")}
    budget = worker_memory(parse_config(cfg).train)
    assert 0 < budget < 16 * 2**30                     # 2 workers on the session's one node
    with pytest.raises(ConfigError, match=r"needs about \d+\.\d GiB \(1,500 shape functions over 1,500 "
                                          r"features\), \d+\.\d GiB is available to a Ray Train worker: lower batch_size"):
        train(cfg)
    assert not (tmp_path / "out" / "model").exists()


# ------------------------------------------------------------------ endpoints that hang
class _Silent:
    """A TCP server that accepts connections and never answers."""

    def __enter__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held = []
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def _accept(self):
        while True:
            try:
                self.held.append(self.sock.accept()[0])
            except OSError:
                return

    def __exit__(self, *exc):
        self.sock.close()
        for c in self.held:
            c.close()


def _neurcam(args, env, timeout=120):
    full = {**os.environ, **env}
    return subprocess.run([sys.executable, "-m", "neurcam_dist.cli", *map(str, args)], env=full,
                          capture_output=True, text=True, timeout=timeout)


def test_a_tracking_server_that_never_answers_is_a_clear_error_in_seconds(model_dir, tmp_path, table):
    table.to_csv(tmp_path / "d.csv", index=False)
    with _Silent() as server:
        env = {"MLFLOW_TRACKING_URI": f"http://127.0.0.1:{server.port}", "NEURCAM_TRACKING_PROBE_S": "2"}
        for args in (["promote", "m", "1"],
                     ["predict", "--model", "models:/m@champion", "--input", tmp_path / "d.csv", "--output",
                      tmp_path / "p", "--no-id"],
                     ["explain", "--model", "models:/m@champion", "--input", tmp_path / "d.csv", "--output",
                      tmp_path / "e"]):
            done = _neurcam(args, env, timeout=90)
            assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
            assert f"127.0.0.1:{server.port} is unreachable (no answer within 2 s)" in done.stderr, done.stderr[-2000:]


def test_the_tracking_probe_time_is_a_positive_number_of_seconds(monkeypatch):
    from neurcam_dist.tracking.uri import PROBE_SECONDS, probe_seconds
    monkeypatch.delenv("NEURCAM_TRACKING_PROBE_S", raising=False)
    assert probe_seconds() == PROBE_SECONDS
    monkeypatch.setenv("NEURCAM_TRACKING_PROBE_S", "2.5")
    assert probe_seconds() == 2.5
    for bad in ("soon", "0"):
        monkeypatch.setenv("NEURCAM_TRACKING_PROBE_S", bad)
        with pytest.raises(ConfigError, match="NEURCAM_TRACKING_PROBE_S"):
            probe_seconds()


def test_a_job_server_that_never_answers_is_a_clear_error_in_bounded_time(tmp_path):
    (tmp_path / "jobs").mkdir()
    (tmp_path / "c.yaml").write_text(f"data: {{path: {tmp_path}}}\nmodel: {{n_clusters: 3}}\noutput: {tmp_path / 'o'}\n")
    with _Silent() as server:
        t0 = time.monotonic()
        done = _neurcam(["submit", "--address", f"http://127.0.0.1:{server.port}", "--working-dir", tmp_path,
                         "train", "--config", "c.yaml"], {"NEURCAM_JOB_SERVER_TIMEOUT": "3"}, timeout=120)
        took = time.monotonic() - t0
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert f"127.0.0.1:{server.port} did not answer" in done.stderr and "within 3 s" in done.stderr, done.stderr
    assert took < 60


def test_an_object_store_that_hangs_is_a_clear_error_in_bounded_time(tmp_path):
    with _Silent() as server:
        env = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{server.port}", "AWS_ACCESS_KEY_ID": "x",
               "AWS_SECRET_ACCESS_KEY": "y", "AWS_REGION": "us-east-1", "NEURCAM_S3_TIMEOUT": "2",
               "AWS_MAX_ATTEMPTS": "2"}
        cfg = {"data": {"path": "s3://bucket/data/"}, "model": {"n_clusters": 2}, "output": str(tmp_path / "o")}
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
        t0 = time.perf_counter()
        done = _neurcam(["validate", tmp_path / "c.yaml"], env, timeout=90)
        assert done.returncode == 2 and "the object store cannot be reached" in done.stderr, done.stderr[-2000:]
        assert "Timeout was reached" in done.stderr and "Traceback" not in done.stderr
        assert time.perf_counter() - t0 < 60


# ------------------------------------------------------------------ a killed command's Ray
def _proc(pid: int, what: str) -> bytes:
    try:
        with open(f"/proc/{pid}/{what}", "rb") as f:
            return f.read()
    except OSError:
        return b""


def test_a_killed_commands_local_ray_is_stopped_by_the_next_command(table, tmp_path):
    """SIGKILL leaves a local Ray's processes running (nothing of the driver is left to stop
    them); the next command that starts a local Ray stops them and says so."""
    import json
    import signal

    from neurcam_dist.distributed.leftovers import _alive, session_processes
    from neurcam_dist.distributed.session import LOCAL_TRAIN_POLL_S, TRAIN_POLL_VAR
    (tmp_path / "d").mkdir()
    pd.concat([table] * 20, ignore_index=True).to_parquet(tmp_path / "d" / "p.parquet")
    env = {**os.environ, "NEURCAM_RAY_RECORDS": str(tmp_path / "records")}
    env.pop("RAY_ADDRESS", None)
    env.pop(TRAIN_POLL_VAR, None)   # the command's local Ray sets it (session.local_ray_defaults)

    def config(name, epochs):
        cfg = {"data": {"path": str(tmp_path / "d")}, "output": str(tmp_path / name), "train": {"num_workers": 1},
               "model": {"n_clusters": 3, "epochs": epochs, "warmup_epochs": 2, "hidden": [16], "n_bases": 8}}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
        return [sys.executable, "-m", "neurcam_dist.cli", "train", "--config", str(tmp_path / f"{name}.yaml")]
    first = subprocess.Popen(config("a", 100_000), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    record = tmp_path / "records" / f"{first.pid}.json"
    deadline = time.monotonic() + 180
    while not record.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert record.exists(), "the first command never recorded its Ray session"
    session = json.loads(record.read_text())["session_dir"]
    deadline = time.monotonic() + 120  # until its training workers are up
    while not (workers := [p for p in session_processes(session) if b"RayTrainWorker" in _proc(p, "cmdline")]):
        assert first.poll() is None and time.monotonic() < deadline, "the first command's workers never started"
        time.sleep(0.5)
    # a local Ray's training workers are looked at every 0.2 s, not Ray Train's 2 s (about 5 s of every run)
    assert f"{TRAIN_POLL_VAR}={LOCAL_TRAIN_POLL_S}".encode() in _proc(workers[0], "environ").split(b"\0")
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    time.sleep(2)
    assert [p for p in session_processes(session) if _alive(p)], "nothing outlived the killed command"
    done = subprocess.run(config("b", 2), env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    said = done.stdout + done.stderr
    assert "left running by an earlier command that was killed" in said and str(first.pid) in said, said[-3000:]
    assert not [p for p in session_processes(session) if _alive(p)]
    assert not record.exists()


# ------------------------------------------------------------------ outputs that guard what they replace
def test_export_never_writes_over_its_input_a_model_file_or_a_users_file(table, model_dir, tmp_path, capsys):
    src = tmp_path / "in.csv"
    table.to_csv(src, index=False)
    before = src.read_bytes()
    mine = tmp_path / "mine.sql"
    mine.write_text("select 1 -- my own query\n")
    config = (model_dir / "config.json").read_bytes()
    for out, words in ((src, "is the input"), (model_dir / "config.json", "model"), (mine, "not written by neurcam")):
        rc, err = run(capsys, "export", "--model", model_dir, "--input", src, "--table", "t", "--output", out)
        assert rc == 2 and words in err, (out, err)
    assert src.read_bytes() == before and (model_dir / "config.json").read_bytes() == config
    assert mine.read_text() == "select 1 -- my own query\n"
    ok = tmp_path / "q.sql"
    for _ in range(2):   # a query that export wrote may be replaced by the next export
        rc, err = run(capsys, "export", "--model", model_dir, "--input", src, "--table", "t", "--output", ok)
        assert rc == 0, err
    assert ok.read_text().startswith("-- NeurCAM")


def test_generate_and_fit_never_replace_a_users_folder_or_write_inside_their_input(table, tmp_path, capsys):
    user = tmp_path / "mine"
    user.mkdir()
    pd.DataFrame({"a": [1, 2]}).to_parquet(user / "part-00000.parquet")
    before = (user / "part-00000.parquet").read_bytes()
    rc, err = run(capsys, "generate", "synthetic", "--output", user, "--rows", "40", "--files", "2")
    assert rc == 2 and "not written by neurcam" in err, err
    assert (user / "part-00000.parquet").read_bytes() == before and sorted(p.name for p in user.iterdir()) == [
        "part-00000.parquet"]
    gen = tmp_path / "gen"
    for _ in range(2):   # its own folder is replaced whole
        rc, err = run(capsys, "generate", "synthetic", "--output", gen, "--rows", "40", "--files", "2")
        assert rc == 0, err
    rc, err = run(capsys, "fit", "--input", gen, "--output", gen / "run", "--n-clusters", "2", *FAST)
    assert rc == 2 and "inside the input" in err, err
    assert not (gen / "run").exists()


def test_home_and_variables_in_paths_expand_on_the_command_line_and_in_configs(table, tmp_path, capsys,
                                                                              monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("NEURCAM_TEST_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    table.to_csv(tmp_path / "in.csv", index=False)
    rc, err = run(capsys, "fit", "--input", "$NEURCAM_TEST_DIR/in.csv", "--output", "~/x", "--n-clusters", "2",
                  *FAST)
    assert rc == 0, err
    assert (tmp_path / "home" / "x" / "model").is_dir() and not (tmp_path / "~").exists()
    with pytest.raises(SystemExit) as stop:   # argparse's own exit: the flag's type expands it
        run(capsys, "fit", "--input", "${NEURCAM_NOT_SET_ANYWHERE}/in.csv", "--output", "o", "--n-clusters", "2")
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "argument --input" in err and "NEURCAM_NOT_SET_ANYWHERE" in err and "not set" in err, err
    from neurcam_dist.config import load_config
    (tmp_path / "c.yaml").write_text("data:\n  path: ~/data\nmodel:\n  n_clusters: 3\n"
                                     "output: $NEURCAM_TEST_DIR/out\n")
    cfg = load_config(tmp_path / "c.yaml")
    assert cfg.data.path == str(tmp_path / "home" / "data") and cfg.output == str(tmp_path / "out")
    # expanded once, at the door: a folder whose name holds a '$' (a variable's value, say) is
    # joined and resolved below without being read as a variable again
    odd = tmp_path / "cost$NEURCAM_NOT_SET_ANYWHERE"
    assert Location(odd).resolved() / "model" == str(odd.resolve() / "model")
    monkeypatch.setenv("NEURCAM_ODD", str(odd))
    assert Location("$NEURCAM_ODD") / "m" / "n" == str(odd / "m" / "n")


def test_yaml_anchors_and_merge_keys_are_yaml_not_errors(tmp_path):
    from neurcam_dist.config import load_config
    (tmp_path / "c.yaml").write_text(f"x-model: &m\n  n_clusters: 3\n  epochs: 5\ndata:\n  path: {tmp_path}\n"
                                     f"model:\n  <<: *m\n  epochs: 7\noutput: {tmp_path / 'o'}\n")
    cfg = load_config(tmp_path / "c.yaml")
    assert (cfg.model.n_clusters, cfg.model.epochs) == (3, 7)


@pytest.mark.parametrize("device, words", [("cuda:7", "device='cuda:7'"), ("tpu", "device='tpu'"),
                                           ("cuda", "device='cuda'")])
def test_a_device_this_machine_lacks_is_a_parameter_error(table, device, words):
    import torch
    if device.startswith("cuda") and torch.cuda.device_count() > 7:
        device = "cuda:99"
        words = "device='cuda:99'"
    if device == "cuda" and torch.cuda.is_available():
        return   # a machine with CUDA trains on it: nothing to refuse
    with pytest.raises(ConfigError, match=words.replace("(", r"\(")):
        NeurCAM(n_clusters=2, **{**SMALL, "device": device}).fit(table)


# ------------------------------------------------------------------ data as written
def test_ids_with_leading_zeros_come_back_as_written_in_fit_and_predict(table, tmp_path, capsys):
    codes = [f"{i:06d}" for i in range(len(table))]
    table.assign(id=codes).to_csv(tmp_path / "in.csv", index=False)
    rc, err = run(capsys, "fit", "--input", tmp_path / "in.csv", "--output", tmp_path / "o", "--n-clusters", 3, *FAST)
    assert rc == 0, err
    written = pd.read_csv(tmp_path / "o" / "assignments.csv", dtype=str)
    assert written["id"].tolist() == codes
    rc, err = run(capsys, "predict", "--model", tmp_path / "o" / "model", "--input", tmp_path / "in.csv",
                  "--output", tmp_path / "p", "--id", "id")
    assert rc == 0, err
    scored = pd.read_parquet(tmp_path / "p")
    assert sorted(scored["id"].tolist()) == codes


def test_a_duplicated_column_name_is_refused_naming_it_in_csv_and_parquet(tmp_path, capsys):
    (tmp_path / "dup.csv").write_text("a,f1,f1\n" + "".join(f"{i},{i % 3},{i % 5}\n" for i in range(30)))
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.Table.from_arrays([pa.array(np.arange(30.0)), pa.array(np.ones(30))], names=["f1", "f1"]),
                   tmp_path / "dup.parquet")
    for src in ("dup.csv", "dup.parquet"):
        rc, err = run(capsys, "fit", "--input", tmp_path / src, "--output", tmp_path / "o", "--n-clusters", 2, *FAST)
        assert rc == 2 and "['f1'] more than once" in err, (src, err)
        assert "f1.1" not in err and "lack(s)" not in err


def test_compressed_or_parquet_bytes_in_a_csv_name_say_what_the_file_is(tmp_path, capsys):
    import gzip
    (tmp_path / "z.csv").write_bytes(gzip.compress(b"a,b\n1,2\n" * 50))
    pd.DataFrame({"a": [1.0, 2.0]}).to_parquet(tmp_path / "p.csv")
    for name, words in (("z.csv", "gzip-compressed: name it .csv.gz"), ("p.csv", "a Parquet file: name it .parquet")):
        rc, err = run(capsys, "fit", "--input", tmp_path / name, "--output", tmp_path / "o", "--n-clusters", 2)
        assert rc == 2 and words in err and "--encoding" not in err, err


def test_the_history_names_lines_it_cannot_read_and_goes_on(tmp_path, capsys):
    good = {"finished_at": "2026-11-30T06:00:00", "snapshot": "2026-11-30", "outcome": "promoted",
            "inertia_challenger": 1.0, "inertia_champion": 2.0}
    lines = [json_line(good), '{"finished_at": "2026-12-01T06:0', "null",
             json_line({**good, "inertia_champion": "two"}), json_line({**good, "snapshot": "2026-12-02"})]
    (tmp_path / "recluster-history.jsonl").write_text("\n".join(lines) + "\n")
    rc, err = run(capsys, "history", "--output", tmp_path)
    assert rc == 0, err
    for n, why in ((2, "not JSON"), (3, "a JSON NoneType, not a record"), (4, "inertia_champion not a number")):
        assert f"line {n} of 5 could not be read ({why}" in err, err
    from neurcam_dist import service
    with pytest.warns(UserWarning, match="line 2 of 5"):
        assert [r["snapshot"] for r in service.history(str(tmp_path))] == ["2026-11-30", "2026-12-02"]


def json_line(record: dict) -> str:
    import json
    return json.dumps(record)


def test_snapshots_named_by_date_are_ranked_as_dates_with_a_warning_when_text_disagrees(tmp_path):
    from neurcam_dist.data.snapshots import pick_snapshot
    for day in range(8, 13):
        (tmp_path / f"date=2026-11-{day}").mkdir()
    said = []
    path, value = pick_snapshot(str(tmp_path), "latest", say=said.append)
    assert value == "2026-11-12" and path.endswith("date=2026-11-12")
    assert said and "'2026-11-9'" in said[0] and "as text" in said[0]
    padded = tmp_path / "padded"
    for day in ("2026-11-09", "2026-11-10"):
        (padded / f"date={day}").mkdir(parents=True)
    said.clear()
    assert pick_snapshot(str(padded), "latest", say=said.append)[1] == "2026-11-10" and not said


def test_long_and_non_latin_feature_names_get_short_plot_files_in_fit_and_explain(table, tmp_path, capsys):
    frame = table.copy()
    frame.columns = ["x" * 2000, "列名" * 120, "f2", "f3"]
    frame.to_csv(tmp_path / "in.csv", index=False)
    rc, err = run(capsys, "fit", "--input", tmp_path / "in.csv", "--output", tmp_path / "o", "--n-clusters", 3,
                  "--report", *FAST)
    assert rc == 0, err
    rc, err = run(capsys, "explain", "--model", tmp_path / "o" / "model", "--input", tmp_path / "in.csv",
                  "--output", tmp_path / "e")
    assert rc == 0, err
    for folder in (tmp_path / "o" / "report", tmp_path / "e"):
        files = [p for p in folder.rglob("*") if p.is_file()]
        assert files and all(len(p.name.encode()) < 100 for p in files)
    assert "列名" in (tmp_path / "o" / "report" / "report.html").read_text()


def test_the_report_data_element_holds_no_markup_whatever_the_names():
    from neurcam_dist.explain.report import _json_script
    html = _json_script({"terms": [{"name": "<!--<script>"}, {"name": "</script>]]>&"}]})
    body = html[html.index(">") + 1:html.rindex("</script>")]
    assert "<" not in body and ">" not in body and "&" not in body
    import json
    assert json.loads(body)["terms"][1]["name"] == "</script>]]>&"


# ------------------------------------------------------------------ a disk that fills up after training
def test_a_write_that_fails_after_training_keeps_the_model_and_names_the_file(table, tmp_path):
    """A real write failure (the process's file-size limit, as a full disk refuses a write): one
    line naming the file, exit 1, nothing published, no traceback."""
    import resource
    import signal
    table.to_csv(tmp_path / "d.csv", index=False)

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
    done = subprocess.run([sys.executable, "-m", "neurcam_dist.cli", "fit", "--input", str(tmp_path / "d.csv"),
                           "--output", str(tmp_path / "o"), "--n-clusters", "3", *FAST],
                          capture_output=True, text=True, timeout=300, preexec_fn=limit,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 1, done.stderr[-2000:]
    assert "no space left on the device while writing" in done.stderr and str(tmp_path / "o") in done.stderr
    assert "Traceback" not in done.stderr and "run the same command again" in done.stderr
    assert not (tmp_path / "o" / "model").exists()


def test_predict_into_a_disk_that_refuses_the_write_names_the_path(table, model_dir, tmp_path):
    import resource
    import signal
    big = pd.concat([table] * 200, ignore_index=True)   # 30,000 rows: scores well past the limit below
    big.to_csv(tmp_path / "d.csv", index=False)

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (16384, 16384))
    for out in (tmp_path / "p", tmp_path / "p.csv"):
        done = subprocess.run([sys.executable, "-m", "neurcam_dist.cli", "predict", "--model", str(model_dir),
                               "--input", str(tmp_path / "d.csv"), "--output", str(out), "--no-id"],
                              capture_output=True, text=True, timeout=300, preexec_fn=limit,
                              env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert "no space left on the device while writing" in done.stderr and str(out) in done.stderr, done.stderr
        assert not out.exists()


def test_a_fit_whose_output_cannot_be_written_keeps_the_fitted_model_elsewhere(table, tmp_path, capsys,
                                                                               monkeypatch):
    import errno

    from neurcam_dist import outputs

    def full(out, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(out))
    monkeypatch.setattr(outputs, "write_run_output", full)
    table.to_csv(tmp_path / "d.csv", index=False)
    rc, err = run(capsys, "fit", "--input", tmp_path / "d.csv", "--output", tmp_path / "o", "--n-clusters", 3, *FAST)
    assert rc == 1 and "no space left on the device while writing" in err, err
    kept = err.split("the fitted model is kept at ")[1].split(" ")[0]
    assert len(NeurCAM.load(kept).predict(table)) == len(table)


def test_a_disk_without_room_for_the_outputs_is_refused_before_training(table, tmp_path):
    from neurcam_dist.local import fitting
    table.to_csv(tmp_path / "d.csv", index=False)
    free = __import__("shutil").disk_usage(tmp_path).free
    rows = free // 160 + 1     # more assignments than the disk holds: refused from the row count alone
    with pytest.raises(ConfigError, match="MiB free on its disk"):
        from neurcam_dist.storage import check_room
        check_room(Location(tmp_path / "o"), fitting._fit_output_bytes(rows, 3, False))
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------ memory bounded by a chunk
def test_scoring_a_frame_is_chunked_and_equals_scoring_it_whole(table, monkeypatch):
    from neurcam_dist.explain import assignments as scorer
    from neurcam_dist.model import fitted as fitted_mod
    est = NeurCAM(n_clusters=3, random_state=0, **SMALL).fit(table)
    whole = est.score_frame(table, top_terms=3)
    proba = est.predict_proba(table)
    rows = scorer.chunk_rows(est.fitted_, 3)
    assert rows * 8 * 3 * 3 * (est.fitted_.net.single.n + 1) <= scorer.CHUNK_BYTES   # the budget holds
    monkeypatch.setattr(scorer, "chunk_rows", lambda fitted, top: 7)    # 150 rows in chunks of 7 ...
    monkeypatch.setattr(fitted_mod, "CHUNK", 11)
    # ... the same answer, to float32's rounding (a matmul over 7 rows sums in another order than over 150)
    pd.testing.assert_frame_equal(est.score_frame(table, top_terms=3), whole, check_exact=False, rtol=0, atol=1e-6)
    np.testing.assert_allclose(est.predict_proba(table), proba, rtol=0, atol=1e-7)
    np.testing.assert_array_equal(est.predict(table), est.cluster_ids_[proba.argmax(1)])


# ------------------------------------------------------------------ one-line errors before any call
@pytest.mark.parametrize("uri, words", [
    ("htp://127.0.0.1:5000", "unknown scheme 'htp' (did you mean 'http'?)"),
    ("localhost:5000", "has no scheme: write http://localhost:5000"),
    ("postgresql+nosuchdriver://u:pw@db/mlflow", "driver 'nosuchdriver' is not installed"),
    ("sqlite:////nonexistent-folder/x/mlflow.db", "the folder /nonexistent-folder/x does not exist"),
])
def test_tracking_uris_mlflow_cannot_use_are_refused_by_validate_and_before_work(tmp_path, capsys, uri, words):
    (tmp_path / "d").mkdir()
    pd.DataFrame({"a": np.arange(20.0), "b": np.ones(20)}).to_parquet(tmp_path / "d" / "part-0.parquet")
    (tmp_path / "c.yaml").write_text(f"data: {{path: {tmp_path / 'd'}}}\nmodel: {{n_clusters: 3}}\n"
                                     f"output: {tmp_path / 'o'}\ntracking: {{uri: '{uri}', experiment: e}}\n")
    rc, err = run(capsys, "validate", tmp_path / "c.yaml")
    assert rc == 2 and words in err and "pw" not in err, err
    rc, err = run(capsys, "promote", "m", "1", "--tracking-uri", uri)
    assert rc == 2 and words in err and "Traceback" not in err, err


def test_a_locked_sqlite_store_is_named_not_a_traceback(tmp_path, capsys):
    import sqlite3
    db = tmp_path / "mlflow.db"
    holder = sqlite3.connect(db)
    holder.execute("create table t (x)")
    holder.execute("begin exclusive")
    try:
        rc, err = run(capsys, "promote", "m", "1", "--tracking-uri", f"sqlite:///{db}")
    finally:
        holder.close()
    assert rc == 2 and "cannot be written" in err and "locked" in err, err


@pytest.mark.parametrize("alias, words", [("../x", "only letters, digits"), ("a b", "only letters, digits"),
                                          ("v1", "reserved"), ("latest", "reserved"), ("", "empty")])
def test_registry_aliases_are_checked_before_the_registry_is_called(tmp_path, capsys, alias, words):
    rc, err = run(capsys, "promote", "m", "1", "--alias", alias, "--tracking-uri", "sqlite:////nonexistent-x/db")
    assert rc == 2 and words in err and "Traceback" not in err, err   # refused before the URI is even used


def test_a_swapped_weights_file_with_a_regenerated_manifest_is_refused_as_altered(table, tmp_path):
    import hashlib
    import json
    import shutil
    NeurCAM(n_clusters=3, random_state=0, **SMALL).fit(table).save(tmp_path / "a")
    NeurCAM(n_clusters=2, random_state=0, **{**SMALL, "hidden": (8,)}).fit(table).save(tmp_path / "b")
    for swapped in (tmp_path / "b" / "weights.safetensors", None):
        if swapped is None:
            (tmp_path / "a" / "weights.safetensors").write_bytes(b"not a tensor file at all" * 10)
        else:
            shutil.copy(swapped, tmp_path / "a" / "weights.safetensors")
        manifest = json.loads((tmp_path / "a" / "manifest.json").read_text())
        manifest["files"]["weights.safetensors"] = hashlib.sha256(
            (tmp_path / "a" / "weights.safetensors").read_bytes()).hexdigest()
        (tmp_path / "a" / "manifest.json").write_text(json.dumps(manifest))
        from neurcam_dist.errors import ModelFileError
        with pytest.raises(ModelFileError, match="weights.safetensors was altered or replaced") as info:
            NeurCAM.load(tmp_path / "a")
        assert "\n" not in str(info.value)
