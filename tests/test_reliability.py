"""Messy real inputs: no silent wrong answers, clear errors, nothing half-written, no leaked secrets.

In-memory and file-level checks here; the Ray ones (profile pass, predict, train) share the
session's local Ray and stay small.
"""
import hashlib
import html
import json
import os
import signal
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from neurcam_dist import NeurCAM
from neurcam_dist.uris import Location
from neurcam_dist.cli import main
from neurcam_dist.config import ConfigError, apply_overrides, parse_config
from neurcam_dist.data import DataError, plan, resolve
from neurcam_dist.data.sources import refuse_output_inside
from neurcam_dist.model.network import NeurCAMNet
from neurcam_dist.redaction import redact, split_credentials
from neurcam_dist.storage import write_run_output

from .conftest import SMALL, blobs


def est(**kw):
    return NeurCAM(**{**SMALL, "n_clusters": 3, **kw})


# ---------------------------------------------------------------- silent wrong answers
def test_a_change_of_unit_never_changes_the_clustering():
    X, _ = blobs(n=180)
    base = est().fit(X)
    for factor in (1e20, 1e-30, 1e300):
        scaled = est().fit(X * factor)
        assert np.isfinite(scaled.scale_).all() and scaled.scale_.dtype == np.float64
        np.testing.assert_array_equal(scaled.labels_, base.labels_)
        np.testing.assert_array_equal(scaled.predict(X * factor), base.predict(X))
        np.testing.assert_allclose(scaled.transform_features(X * factor), base.transform_features(X), atol=1e-6)


def test_numbers_the_scale_cannot_hold_are_refused_by_column_at_every_door(tmp_path, capsys):
    """A span beyond float64's range (+-1e308) or subnormal values (5e-324) cannot be standardized:
    refused before training by the estimator, the CLI and the Ray profile pass, naming the column
    and the value. One sign up to float64's limit (1.7e308 and 0) is a unit, not an error: the
    moments stay finite."""
    X, _ = blobs(n=120)
    rng = np.random.default_rng(0)
    spans = X.assign(amount=rng.choice([1e308, -1e308], len(X)))
    tiny = X.assign(amount=rng.choice([5e-324, 1e-320, 0.0], len(X)))
    with pytest.raises(DataError, match=r"'amount' holds values from -1e\+308 to 1e\+308, a span beyond"):
        est().fit(spans)
    with pytest.raises(DataError, match=r"'amount' holds 5e-324, a subnormal number .* \(row \d+\)"):
        est().fit(tiny)
    one_sign = est(epochs=3).fit(X.assign(amount=rng.choice([1.7e308, 0.0], len(X))))
    assert np.isfinite(one_sign.mean_).all() and np.isfinite(one_sign.scale_).all()
    spans.to_csv(tmp_path / "spans.csv", index=False)
    assert main(["fit", "--input", str(tmp_path / "spans.csv"), "--output", str(tmp_path / "m"),
                 "--n-clusters", "3"]) == 2
    assert "numeric column 'amount' holds values from -1e+308 to 1e+308" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()
    from neurcam_dist.config import DataConfig
    from neurcam_dist.data import profile
    for name, frame in (("spans", spans), ("tiny", tiny)):
        (tmp_path / name).mkdir()
        frame.to_parquet(tmp_path / name / "p0.parquet")
        with pytest.raises(DataError, match=r"numeric column 'amount' holds"):
            profile(plan(DataConfig(path=str(tmp_path / name), features=list(frame.columns))))


def test_a_cell_near_float64s_limit_is_scored_by_the_shapes_trend_never_as_nan():
    """A row far outside the training range (an amount of 1e308 where training had tens) is scored
    by where its shapes head (the same cluster as at 1e12 deviations), with finite probabilities;
    it used to become inf in float32, NaN logits, and cluster 0 whatever the row."""
    X, _ = blobs(n=200)
    model = est(epochs=6).fit(X)
    for sign in (1.0, -1.0):
        rows = X.iloc[:4].copy()
        rows["f0"] = sign * 1e308
        near = X.iloc[:4].copy()
        near["f0"] = model.mean_[0] + sign * 1e12 * model.scale_[0]
        proba = model.predict_proba(rows)
        assert np.isfinite(proba).all() and np.isfinite(model.decision_function(rows)).all()
        np.testing.assert_array_equal(model.predict(rows), model.predict(near))


def test_a_representation_beyond_float32_is_refused_by_column():
    X, _ = blobs(n=60)
    rep = pd.DataFrame({"e0": np.ones(60), "e1": np.ones(60)})
    rep.loc[3, "e1"] = 1e39
    with pytest.raises(ValueError, match=r"X_repr has values beyond float32's range.*\['e1'\]"):
        est().fit(X, X_repr=rep)


def test_constant_features_are_never_selected():
    X, _ = blobs(n=120)
    X = X.assign(px4_0=0.0, flat=7.5)
    with pytest.warns(UserWarning, match=r"2 constant feature\(s\) left out.*'px4_0', 'flat'"):
        m = est(n_pairs=3).fit(X)
    used = set(m.selected_features_) | {f for p in m.selected_pairs_ for f in p}
    assert not used & {"px4_0", "flat"}
    card = m.explain().model_card
    assert card["constant_features_left_out"] == ["px4_0", "flat"]
    with pytest.raises(ValueError, match=r"constant feature\(s\) \['px4_0', 'flat'\] \(constant_features='error'\)"):
        est(constant_features="error").fit(X)
    with pytest.raises(ValueError, match="every feature is constant"):
        est().fit(pd.DataFrame({"a": np.zeros(30), "b": np.ones(30)}))


def test_a_gate_gives_an_excluded_feature_exactly_zero_weight():
    allowed = torch.tensor([True, False, True, False])
    net = NeurCAMNet(4, 3, 8, 4, (8,), 4, torch.zeros(3, 2), seed=0, allowed=allowed)
    for kind in (net.single, net.pairs):
        for t in (1.0, 0.1, 1e-6):
            g = kind.gates.matrix(t)
            assert torch.equal(g[..., ~allowed], torch.zeros_like(g[..., ~allowed]))
        assert set(kind.gates.selected().flatten().tolist()) <= {0, 2}


def test_more_clusters_than_distinct_rows_warns_and_is_recorded(tmp_path, capsys):
    X = pd.DataFrame(np.repeat([[0.0, 1.0], [5.0, 2.0], [9.0, -3.0]], 20, axis=0), columns=["a", "b"])
    with pytest.warns(UserWarning, match=r"only [1-3] of n_clusters=5 clusters hold training rows; X has only 3 "
                                         r"distinct row"):
        m = est(n_clusters=5).fit(X)
    used = len(np.unique(m.labels_))
    assert m.history_["n_clusters_used"] == used <= 3
    empty = sorted(set(range(5)) - set(m.labels_.tolist()))
    card = m.explain().model_card["clusters"]
    assert card == {"n_clusters": 5, "n_clusters_used": used, "cluster_ids": [0, 1, 2, 3, 4], "empty": empty,
                    "note": m.history_["empty_clusters_note"]}
    assert card["note"].endswith("fit n_clusters=3 at most") and f"{', '.join(map(str, empty))} empty" in card["note"]
    X.to_csv(tmp_path / "d.csv", index=False)
    capsys.readouterr()
    assert main(["fit", "--data", str(tmp_path / "d.csv"), "--out", str(tmp_path / "o"), "--n-clusters", "5",
                 "--epochs", "20", "--quiet", "--report"]) == 0
    metrics = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert metrics["n_clusters_used"] <= 3 and metrics["n_clusters_empty"] == 5 - metrics["n_clusters_used"]
    assert len(metrics["empty_clusters"]) == metrics["n_clusters_empty"] and len(metrics["warnings"]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]   # the run's last words say it, with what to do
    assert last == f"neurcam: warning: {metrics['warnings'][0]}" and "n_clusters=3 at most" in last
    page = (tmp_path / "o" / "report" / "report.html").read_text()
    assert "id='empty-clusters'" in page and html.escape(metrics["warnings"][0]) in page


def test_the_epoch_budget_ends_distillation_and_warm_up():
    X, _ = blobs(n=90)
    m = est(epochs=3, warmup_epochs=400, distill_epochs=10, early_stopping=False).fit(X)
    first_anneal = next(e for e in m.history_["events"] if e["phase"].startswith("anneal"))
    # one epoch is left for annealing: the budget bounds the whole run
    assert first_anneal["epoch"] == 2 and "cut to leave annealing room within epochs=3" in first_anneal["reason"]
    assert m.n_iter_ == 3 and m.history_["stop_reason"] == "reached epochs=3"


def test_automatic_features_skip_index_and_id_columns(tmp_path, capsys):
    X, _ = blobs(n=90)
    df = X.assign(customer_id=np.arange(90), customerId=np.arange(90) * 3, label=1)
    df.index.name = None
    df.to_csv(tmp_path / "d.csv")  # writes the index as "Unnamed: 0" when read back
    assert main(["fit", "--data", str(tmp_path / "d.csv"), "--out", str(tmp_path / "o"), "--n-clusters", "3",
                 "--epochs", "20", "--label", "label"]) == 0
    err = capsys.readouterr().err
    assert "features (4): f0, f1, f2, f3; not used: Unnamed: 0, customer_id, customerId" in err
    m = NeurCAM.load(tmp_path / "o" / "model")
    assert list(m.feature_names_in_) == ["f0", "f1", "f2", "f3"]
    df.index = pd.Index(np.random.default_rng(0).permutation(90))  # pandas writes it as __index_level_0__
    df.to_parquet(tmp_path / "p.parquet")
    assert "__index_level_0__" in pq.read_schema(tmp_path / "p.parquet").names
    from neurcam_dist.config import DataConfig
    assert plan(DataConfig(path=str(tmp_path / "p.parquet"), label="label")).features == ["f0", "f1", "f2", "f3"]


def test_a_malformed_number_is_an_error_not_a_dropped_column(tmp_path, capsys):
    X, _ = blobs(n=50)
    df = X.astype(object)
    df.loc[17, "f2"] = "1,5"
    df.to_csv(tmp_path / "d.csv", index=False)
    assert main(["fit", "--data", str(tmp_path / "d.csv"), "--out", str(tmp_path / "o"), "--n-clusters", "3"]) == 2
    assert "column 'f2' holds numbers except 1 cell(s), the first at row 17 ('1,5')" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_blank_labels_are_refused_before_training(tmp_path, capsys):
    X, y = blobs(n=50)
    df = X.assign(label=pd.Series(y, dtype="float64"))
    df.loc[[4, 9], "label"] = np.nan
    df.to_csv(tmp_path / "d.csv", index=False)
    assert main(["fit", "--data", str(tmp_path / "d.csv"), "--out", str(tmp_path / "o"), "--n-clusters", "3",
                 "--label", "label"]) == 2
    assert "label column 'label' has 2 blank cell(s), the first at row 4" in capsys.readouterr().err


def test_latin1_csv_and_bad_grid_size_say_what_to_change(tmp_path, capsys, fitted, data):
    X, _ = data
    (tmp_path / "d.csv").write_bytes(X.rename(columns={"f0": "café"}).to_csv(index=False).encode("latin-1"))
    assert main(["fit", "--data", str(tmp_path / "d.csv"), "--out", str(tmp_path / "o"), "--n-clusters", "3"]) == 2
    err = capsys.readouterr().err
    assert "is not valid utf-8 text" in err and "pass its encoding, e.g. --encoding latin-1" in err
    assert main(["fit", "--data", str(tmp_path / "d.csv"), "--out", str(tmp_path / "o"), "--n-clusters", "3",
                 "--epochs", "15", "--encoding", "latin-1", "--quiet"]) == 0
    assert "café" in NeurCAM.load(tmp_path / "o" / "model").feature_names_in_
    fitted.save(tmp_path / "m")
    X.to_csv(tmp_path / "x.csv", index=False)
    assert main(["explain", "--model", str(tmp_path / "m"), "--data", str(tmp_path / "x.csv"),
                 "--out", str(tmp_path / "e"), "--grid-size", "0"]) == 2
    assert "--grid-size must be at least 2" in capsys.readouterr().err


def test_report_images_are_unique_and_flat_terms_are_not_drawn(tmp_path):
    from neurcam_dist.explain.report import render_figures, write_report
    X, _ = blobs(n=120, d=3)
    X.columns = ["a b", "a_b", "c"]
    m = est(n_single=3).fit(X)
    expl = m.explain()
    names = list(render_figures(expl))
    terms = [n for n in names if not n.startswith("cluster")]       # the rest: per-cluster thumbnails
    assert len(names) == len(set(names)) and len(terms) == 1 + len(expl.terms)
    expl.terms[0].values = np.zeros_like(expl.terms[0].values)  # a term with no effect
    page = write_report(expl, tmp_path / "r").read_text()
    assert f"{expl.terms[0].name} (no effect on any cluster)" in page
    from neurcam_dist.explain.report import left_out_terms
    assert 0 in left_out_terms(expl)
    plots = [p.name for p in (tmp_path / "r" / "plots").glob("*.png")]
    assert len([p for p in plots if not p.startswith("cluster")]) == 1 + len(expl.terms) - len(left_out_terms(expl))
    assert not [p for p in plots if p.startswith("cluster") and "_000_" in p]   # nor in the clusters' sections


# ---------------------------------------------------------------- clear errors
@pytest.mark.parametrize("name", ["epsilon", "lr", "m", "gamma"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_hyperparameters_are_refused(name, value):
    X, _ = blobs(n=30)
    with pytest.raises(ValueError, match=rf"{name} must be a finite number"):
        est(**{name: value}).fit(X)
    with pytest.raises(ConfigError, match=rf"model\.{name}"):
        parse_config({"data": {"path": "x"}, "model": {"n_clusters": 3, name: value}, "output": "o"})


def test_a_model_from_a_newer_version_names_its_version_and_parameter(fitted, tmp_path):
    fitted.save(tmp_path / "m")
    cfg_path = tmp_path / "m" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["params"]["cluster_prior"] = 0.5
    cfg["written_by"] = "neurcam-dist 9.0.0"
    cfg_path.write_text(json.dumps(cfg))
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    manifest["files"]["config.json"] = hashlib.sha256(cfg_path.read_bytes()).hexdigest()
    (tmp_path / "m" / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=r"written by neurcam-dist 9.0.0 and has parameter\(s\) \['cluster_prior'\]"):
        NeurCAM.load(tmp_path / "m")


def test_set_into_an_empty_section():
    raw = apply_overrides({"search": None, "model": {"n_clusters": 3}}, {"search.seeds": 3})
    assert raw["search"] == {"seeds": 3}
    with pytest.raises(ConfigError, match=r"cannot set model.n_clusters.x: model.n_clusters is a value"):
        apply_overrides({"model": {"n_clusters": 3}}, {"model.n_clusters.x": 1})


def test_data_paths_skip_hidden_and_underscore_entries_and_take_brackets_literally(tmp_path):
    X, _ = blobs(n=40)
    root = tmp_path / "run[1]"
    for sub in ("", "part=a", "_ray/staging", ".tmp-x", "part=b/_temporary"):
        (root / sub).mkdir(parents=True, exist_ok=True)
        X.to_parquet(root / sub / "x.parquet")
    (root / "notes.txt").write_text("not data")
    src = resolve(str(root))
    assert sorted(Path(f).relative_to(root).as_posix() for f in src.files) == ["part=a/x.parquet", "x.parquet"]
    assert src.skipped == 4 and "4 hidden, '_' or non-Parquet entries skipped" in src.describe()
    with pytest.raises(ConfigError, match=r"output .* is inside the input"):
        refuse_output_inside(Location(root / "scored"), src)
    with pytest.raises(ConfigError, match=r"output .* holds the input"):   # replacing it would delete the data
        refuse_output_inside(Location(tmp_path), src)
    refuse_output_inside(Location(tmp_path / "elsewhere"), src)


# ---------------------------------------------------------------- nothing half-written
def _set(tag):
    def write(d: Path):
        (d / "model").mkdir()
        (d / "model" / "w").write_text(tag)
        (d / "metrics.json").write_text(json.dumps({"run": tag}))
        (d / "config.json").write_text(json.dumps({"run": tag}))
    return write


def test_a_run_output_set_appears_whole_or_not_at_all(tmp_path):
    out = tmp_path / "out"
    (out / "_ray").mkdir(parents=True)
    write_run_output(Location(out), _set("1"))

    def crash(d: Path):
        _set("2")(d)
        raise KeyboardInterrupt  # killed after writing metrics and model, before publishing

    with pytest.raises(KeyboardInterrupt):
        write_run_output(Location(out), crash)
    assert json.loads((out / "metrics.json").read_text()) == {"run": "1"}
    assert (out / "model" / "w").read_text() == "1"
    write_run_output(Location(out), _set("3"))
    assert json.loads((out / "metrics.json").read_text()) == {"run": "3"}
    assert (out / "model" / "w").read_text() == "3" and json.loads((out / "config.json").read_text())["run"] == "3"
    sets = [p.name for p in (out / ".versions").iterdir() if p.name != ".lock"]
    assert (out / "_ray").is_dir() and len(sets) == 2 and not any(s.startswith(".tmp-") for s in sets)


def test_a_reader_keeps_the_set_it_resolved_for_one_re_run(tmp_path):
    """A reader that resolved ``OUTPUT/current`` (a slow model load, a file being read) while a
    re-run published into the same output still finds what it resolved: the replaced set goes at
    the next publication, not at this one."""
    out = tmp_path / "out"
    write_run_output(Location(out), _set("1"))
    resolved = (out / "current").resolve()
    write_run_output(Location(out), _set("2"))
    assert (resolved / "model" / "w").read_text() == "1" and (out / "model" / "w").read_text() == "2"
    second = (out / "current").resolve()
    write_run_output(Location(out), _set("3"))
    assert not resolved.exists() and (second / "model" / "w").read_text() == "2"


def test_writers_publishing_into_one_output_at_once_never_remove_each_other_s_set(tmp_path):
    """Overlapping runs into one output (a CronJob that overlaps): a writer that publishes while
    another is still writing never removes the other's half-written set, and a set that another
    writer published after it stays the current one; a crashed writer's leftover goes once it is
    a day old."""
    import os
    import threading

    from neurcam_dist.storage.atomic import STALE_S, write_run_output
    out = tmp_path / "out"
    write_run_output(Location(out), _set("1"))
    inside, release = threading.Event(), threading.Event()

    def slow(tmp):   # writer B: half-written while writer A publishes
        _set("B")(tmp)
        inside.set()
        assert release.wait(30)

    b = threading.Thread(target=write_run_output, args=(Location(out), slow))
    b.start()
    assert inside.wait(30)
    write_run_output(Location(out), _set("A"))                       # A publishes while B is writing
    assert json.loads((out / "metrics.json").read_text()) == {"run": "A"}
    release.set()
    b.join(30)
    assert json.loads((out / "metrics.json").read_text()) == {"run": "B"}   # B's set was whole: the last wins
    assert (out / "model" / "w").read_text() == "B"
    left = tmp_path / "out" / ".versions" / ".tmp-20200101-000000-deadbeef"
    left.mkdir()   # a writer that died
    write_run_output(Location(out), _set("C"))
    assert left.is_dir()                                   # might be a live writer's: kept
    os.utime(left, (left.stat().st_atime, left.stat().st_mtime - STALE_S - 60))
    write_run_output(Location(out), _set("D"))
    assert not left.exists()
    sets = [p.name for p in (out / ".versions").iterdir() if p.name != ".lock"]
    assert len(sets) == 2 and (out / "model" / "w").read_text() == "D"   # D, and C it replaced


def test_an_interrupted_model_swap_is_recovered(fitted, tmp_path, data):
    X, _ = data
    fitted.save(tmp_path / "m")
    os.replace(tmp_path / "m", tmp_path / ".m.old-1a2b3c4d")  # the first rename of a swap, then a crash
    with pytest.warns(UserWarning, match="restored"):
        back = NeurCAM.load(tmp_path / "m")
    np.testing.assert_array_equal(back.predict(X), fitted.predict(X))
    assert (tmp_path / "m").is_dir() and not list(tmp_path.glob(".m.old-*"))


def test_fit_refuses_to_overwrite_another_commands_output(tmp_path, data, capsys):
    X, _ = data
    X.to_csv(tmp_path / "d.csv", index=False)
    out = tmp_path / "train-out"
    write_run_output(Location(out), _set("train"))
    (out / "_ray").mkdir()
    (out / "trials").mkdir()
    assert main(["fit", "--data", str(tmp_path / "d.csv"), "--out", str(out), "--n-clusters", "3",
                 "--epochs", "10", "--quiet"]) == 2
    assert "which this command did not write" in capsys.readouterr().err
    assert (out / "_ray").is_dir() and (out / "trials").is_dir() and (out / "model" / "w").read_text() == "train"


# ---------------------------------------------------------------- secrets
def test_every_line_the_service_says_is_redacted(capsys):
    """A worker's or trial's line goes through ``events.say``, the driver's too: one function, and
    it redacts (a URI's user information, secret query values) before the line leaves."""
    from neurcam_dist.distributed import events
    events.say("reading s3://AKIA:SECRETKEY@bucket/data?token=abc123 now")
    out = capsys.readouterr().out
    assert "SECRETKEY" not in out and "abc123" not in out and "s3://***@bucket/data" in out
    assert not hasattr(events, "log")


def test_credentials_are_redacted_and_passed_the_way_mlflow_expects(monkeypatch):
    from neurcam_dist.tracking.uri import check_reachable, connect
    assert redact("see http://alice:s3cret@host:5000/x") == "see http://***@host:5000/x"
    assert split_credentials("https://alice:p%40ss@h:1/p") == ("https://h:1/p", "alice", "p@ss")
    cfg = parse_config({"data": {"path": "s3://AKIA:SECRETKEY@bucket/data"}, "model": {"n_clusters": 3},
                        "tracking": {"uri": "http://alice:s3cret@127.0.0.1:9/"}, "output": "o"})
    text = cfg.public_json()
    assert "s3cret" not in text and "SECRETKEY" not in text and "***@127.0.0.1:9" in text
    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    assert connect("http://alice:s3cret@127.0.0.1:9/") == "http://127.0.0.1:9/"
    assert os.environ["MLFLOW_TRACKING_USERNAME"] == "alice" and os.environ["MLFLOW_TRACKING_PASSWORD"] == "s3cret"
    with pytest.raises(ConnectionError) as err:
        check_reachable("http://alice:s3cret@127.0.0.1:9/", timeout=1)
    assert "s3cret" not in str(err.value) and "127.0.0.1:9" in str(err.value)


def test_a_server_with_credentials_in_its_uri_is_reachable(mlflow_server, monkeypatch):
    from neurcam_dist.tracking.uri import check_reachable
    monkeypatch.delenv("MLFLOW_TRACKING_USERNAME", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_PASSWORD", raising=False)
    host = mlflow_server.split("://", 1)[1]
    check_reachable(f"http://alice:s3cret@{host}")  # failed before: the credentials became the host name


def test_sigterm_ends_open_runs_failed(mlflow_server):
    import mlflow

    from neurcam_dist.signals import sigterm_as_exit, terminated
    mlflow.set_tracking_uri(mlflow_server)
    mlflow.set_experiment("sigterm")
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as stop:
        with sigterm_as_exit(), mlflow.start_run() as run:
            os.kill(os.getpid(), signal.SIGTERM)
    assert stop.value.code == 128 + signal.SIGTERM == terminated()
    assert mlflow.get_run(run.info.run_id).info.status == "FAILED"
    assert signal.getsignal(signal.SIGTERM) is before


# ---------------------------------------------------------------- on Ray
@pytest.fixture(scope="module")
def messy(tmp_path_factory):
    d = tmp_path_factory.mktemp("messy")
    X, _ = blobs(n=200, d=3)
    rng = np.random.default_rng(0)
    emb = [rng.normal(size=4).tolist() for _ in range(200)]
    emb[7][2] = float("nan")
    t = pa.table({"id": np.arange(200), "a": X.f0 * 1e300, "b": X.f1, "k": np.full(200, 3.0),
                  "embedding": pa.array(emb, pa.list_(pa.float64()))})
    pq.write_table(t.slice(0, 100), d / "p0.parquet")
    pq.write_table(t.slice(100), d / "p1.parquet")
    return d, X


@pytest.mark.usefixtures("ray_cluster")
def test_profile_is_finite_for_huge_values_and_finds_constants(messy):
    from neurcam_dist.config import DataConfig
    from neurcam_dist.data import profile
    d, X = messy
    prof = profile(plan(DataConfig(path=str(d), id="id", features=["a", "b", "k"])))
    np.testing.assert_allclose(prof.mean[0] / 1e300, X.f0.mean(), rtol=1e-9)
    np.testing.assert_allclose(prof.std[0] / 1e300, X.f0.std(ddof=0), rtol=1e-9)
    np.testing.assert_allclose(prof.std[1], X.f1.std(ddof=0), rtol=1e-9)
    assert prof.constant.tolist() == [False, False, True] and prof.scale()[2] == 1.0


@pytest.mark.usefixtures("ray_cluster")
def test_a_nan_inside_an_embedding_is_counted_once(messy):
    from neurcam_dist.config import DataConfig
    from neurcam_dist.data import profile
    d, _ = messy
    with pytest.raises(DataError, match=r"p0.parquet: column 'embedding': 1 NaN, 0 inf, 0 null"):
        profile(plan(DataConfig(path=str(d), id="id", features=["a", "b"], embedding="embedding")))


def _free_cpus() -> float:
    import ray
    return ray.available_resources().get("CPU", 0.0) if ray.is_initialized() else 0.0


def _cpus_come_back(free: float, within: float = 15.0) -> bool:
    """Whether this session's Ray has ``free`` CPUs available again within ``within`` seconds."""
    deadline = time.monotonic() + within
    while _free_cpus() < free:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize("where", ["ray", "here"])
def test_predict_names_the_file_and_column_of_a_nan(fitted, data, tmp_path, monkeypatch, where):
    from neurcam_dist.distributed import predict_parquet
    if where == "ray":
        monkeypatch.setenv("NEURCAM_LOCAL_PASS_BYTES", "0")
    X, _ = data
    df = X.assign(id=np.arange(len(X)))
    (tmp_path / "in").mkdir()
    df.iloc[:120].to_parquet(tmp_path / "in" / "a.parquet")
    bad = df.iloc[120:].copy()
    bad.loc[bad.index[5], "f3"] = np.inf
    bad.to_parquet(tmp_path / "in" / "b.parquet")
    free = _free_cpus()
    with pytest.raises(DataError, match=r"b.parquet: has infinite values in column\(s\) 'f3' \(1 rows\)") as refused:
        predict_parquet(fitted, str(tmp_path / "in"), tmp_path / "out", batch_size=50)
    assert not (tmp_path / "out").exists()
    # the refused pass's actors are gone while the error is still held: a held error once kept
    # them, with their CPUs, and the next pass waited for a CPU to read with until Ray Data gave up
    assert refused.value.__context__ is None and _cpus_come_back(free), (free, _free_cpus())
    # a missing cell is scored with the term's value for it, and counted (here: in this process)
    bad.loc[bad.index[5], "f3"] = np.nan
    bad.to_parquet(tmp_path / "in" / "b.parquet")
    summary = predict_parquet(fitted, str(tmp_path / "in"), tmp_path / "out", batch_size=50)
    got = pd.read_parquet(tmp_path / "out").sort_values("id")
    np.testing.assert_array_equal(got["cluster"], fitted.predict(pd.concat([df.iloc[:120], bad]).drop(columns="id")))
    assert summary["missing_cells"] == {"f3": 1} and summary["where"] == where
    with pytest.raises(ConfigError, match="prediction output .* is inside the input"):
        predict_parquet(fitted, str(tmp_path / "in"), tmp_path / "in" / "scored")


def test_a_file_changed_under_a_run_is_named(tmp_path):
    from neurcam_dist.config import DataConfig
    from neurcam_dist.distributed.driver import unchanged_input
    X, _ = blobs(n=40)
    for i in range(2):
        X.to_parquet(tmp_path / f"s{i}.parquet")
    p = plan(DataConfig(path=str(tmp_path)))
    with pytest.raises(DataError, match=r"changed after validation; nothing was written:\n  .*s1.parquet \(deleted\)"):
        with unchanged_input(p):
            (tmp_path / "s1.parquet").unlink()
            raise FileNotFoundError("s1.parquet")  # what Ray Data raises mid-epoch
    X.head(10).to_parquet(tmp_path / "s1.parquet")
    p = plan(DataConfig(path=str(tmp_path)))
    with pytest.raises(DataError, match=r"(?s)changed during the run.*s0.parquet \(rewritten\)"):
        with unchanged_input(p):
            X.head(5).to_parquet(tmp_path / "s0.parquet")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with unchanged_input(plan(DataConfig(path=str(tmp_path)))):
            pass


def test_a_registration_whose_alias_fails_is_taken_back(mlflow_server, fitted, data):
    import mlflow
    from mlflow import MlflowClient

    from neurcam_dist.tracking.registry import load_estimator, log_model
    X, _ = data
    mlflow.set_tracking_uri(mlflow_server)
    mlflow.set_experiment("alias-fails")
    with pytest.raises(Exception, match="alias"), mlflow.start_run() as run:
        log_model(fitted, X, registered_name="alias-fails", alias="not a valid alias!")
    assert MlflowClient().search_model_versions("name='alias-fails'") == []
    assert mlflow.get_run(run.info.run_id).info.status == "FAILED"
    with mlflow.start_run():
        _, version = log_model(fitted, X, registered_name="alias-fails")
    back = load_estimator("models:/alias-fails@candidate")  # the model directory, checked, no stored code run
    np.testing.assert_array_equal(back.predict(X), fitted.predict(X))
    assert [v.version for v in MlflowClient().search_model_versions("name='alias-fails'")] == [version]


@pytest.mark.usefixtures("ray_cluster")
def test_constant_features_on_ray_are_named_once_or_refused(messy, tmp_path, capsys):
    from neurcam_dist.distributed.job import prepare, resolve
    d, _ = messy
    cfg = {"data": {"path": str(d), "id": "id", "features": ["a", "b", "k"]},
           "model": {"n_clusters": 3}, "output": str(tmp_path / "out")}
    _, prof = prepare(resolve(parse_config(cfg)))
    assert capsys.readouterr().out.count("1 constant feature(s) left out (no gate may select them): ['k']") == 1
    assert prof.constant.tolist() == [False, False, True]
    cfg["model"]["constant_features"] = "error"
    with pytest.raises(DataError, match=r"data: 1 constant feature\(s\) \['k'\] \(constant_features='error'\)"):
        prepare(resolve(parse_config(cfg)))


def test_long_text_is_not_taken_for_small_input(tmp_path):
    """Whether a pass runs in-process is decided on the bytes the columns take: numbers and
    fixed-size lists at 8 bytes a value, text at its uncompressed size (the footers)."""
    from neurcam_dist.data import footers, resolve
    from neurcam_dist.data.reading import small_enough
    from neurcam_dist.data.sources import column_bytes
    n = 2000
    emb = pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(n * 4, np.float32)), 4)
    pq.write_table(pa.table({"a": np.arange(n, dtype=np.int32), "emb": emb,
                             "doc": [f"{i} " + "word " * 400 for i in range(n)]}), tmp_path / "t.parquet")
    src = resolve(str(tmp_path))
    schema = footers(src)[0][1]
    assert column_bytes(src, schema, n, ["a", "emb"]) == n * 8 * (1 + 4)
    text = column_bytes(src, schema, n, ["a", "doc"])
    assert text >= n * 8 + n * 2000    # 2,000 characters a document, however well they compress on disk
    assert small_enough(text) and not small_enough(text * 100)
