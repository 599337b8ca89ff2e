"""One way through: a job resolved once, one fitted state, one scorer, one run-output writer, the
front door's checks up front, and one error base whose messages survive Ray."""
import dataclasses
import json
import pickle
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from neurcam_dist import NeurCAM
from neurcam_dist.cli import main
from neurcam_dist.config import TrainConfig, parse_config
from neurcam_dist.errors import (ConfigError, DataError, ModelFileError, NeurcamError, NotPublishedError,
                                 TrainingError, find_cause)
from neurcam_dist.model import FittedNet, TrainingSpec
from neurcam_dist.params import HYPERPARAMETERS

from .conftest import SMALL


@pytest.fixture()
def shards(tmp_path, data):
    from neurcam_dist.data.bundled import write_frame_shards
    X, y = data
    d = tmp_path / "data"
    write_frame_shards(X.assign(label=y), str(d), 2)
    return d


def _cfg(shards, tmp_path, **model):
    return parse_config({"data": {"path": str(shards), "label": "label", "id": "id"},
                         "model": {"n_clusters": 3, "epsilon": 0.7, **model}, "output": str(tmp_path / "out")})


# ---------------------------------------------------------------- a job resolved once
def test_a_job_is_resolved_once_and_its_config_never_rewritten(shards, tmp_path, monkeypatch):
    from neurcam_dist.distributed.job import resolve_early
    from neurcam_dist.model import build
    calls = []
    real = build.check_params_for_data
    monkeypatch.setattr(build, "check_params_for_data", lambda *a: calls.append(a) or real(*a))
    cfg = _cfg(shards, tmp_path)
    before = cfg.model_dump()
    job = resolve_early(cfg)
    # epsilon: YAML -> ModelConfig -> TrainingSpec, under one name, checked against the data once
    assert job.spec.epsilon == 0.7 and job.spec.random_state == cfg.model.random_state and len(calls) == 1
    derived = {"n_features", "distill_far_epochs"}   # the data's width; distillation's floor, from distill_epochs
    assert {f.name for f in dataclasses.fields(TrainingSpec)} - derived <= set(HYPERPARAMETERS)
    trial = job.for_trial("t1", {"epsilon": 0.5, "random_state": 3}, str(tmp_path / "t1"))
    assert trial.spec.epsilon == 0.5 and trial.spec.random_state == 3 and job.spec.epsilon == 0.7
    assert cfg.model_dump() == before and job.config is cfg
    eff = trial.effective_config()
    assert eff.model.epsilon == 0.5 and eff.output == str(tmp_path / "t1") and eff.search is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.spec = trial.spec
    with pytest.raises(DataError, match=r"model: n_single=0 and n_pairs=0"):
        job.for_trial("t2", {"n_single": 0, "n_pairs": 0}, str(tmp_path / "t2"))
    with pytest.raises(DataError, match=r"model: n_clusters=500 is larger than the number of rows \(240\)"):
        resolve_early(_cfg(shards, tmp_path, n_clusters=500))


def test_workers_get_the_train_settings_under_their_config_names():
    from neurcam_dist.distributed.worker import WorkerConfig
    names = {f.name for f in dataclasses.fields(WorkerConfig)}
    assert {"cpus_per_worker", "cache", "device_cache_gib", "shuffle_buffer", "checkpoint_every"} <= names
    assert {"cpus_per_worker", "cache", "device_cache_gib", "shuffle_buffer", "checkpoint_every"} <= set(
        TrainConfig.model_fields)
    assert not {"threads", "resident", "resident_budget", "seed"} & names


# ---------------------------------------------------------------- one fitted state
def test_fit_save_load_go_through_one_fitted_state(fitted, data, tmp_path):
    X, _ = data
    state, weights = fitted.fitted_.to_dict()
    back = FittedNet.from_dict({**state, "params": fitted.get_params()}, weights)
    np.testing.assert_array_equal(back.logits(X.to_numpy()), fitted.fitted_.logits(X.to_numpy()))
    fitted.save(tmp_path / "m")
    loaded = NeurCAM.load(tmp_path / "m")
    for attr in ("mean_", "scale_", "channel_means_", "cluster_ids_", "cluster_centers_"):
        np.testing.assert_array_equal(getattr(loaded, attr), getattr(fitted, attr))
    for attr in ("temperatures_", "next_cluster_id_", "n_iter_", "repr_dim_", "uses_features_as_repr_",
                 "precision_", "selected_features_", "selected_pairs_", "text_"):
        assert getattr(loaded, attr) == getattr(fitted, attr), attr
    # the learned attributes are views of the one state, not copies that could drift
    assert loaded.net_ is loaded.fitted_.net and loaded.history_ is loaded.fitted_.history
    loaded.set_cluster_ids([5, 2, 8], 9)
    assert loaded.fitted_.cluster_ids.tolist() == [5, 2, 8] and loaded.scoring_model().cluster_ids.tolist() == [5, 2, 8]
    with pytest.raises(ModelFileError):
        NeurCAM.load(tmp_path / "nowhere")


# ---------------------------------------------------------------- one scorer
def test_one_scorer_for_the_estimator_the_registry_and_batch_scoring(fitted, data):
    from neurcam_dist.distributed.scoring import _Scorer
    X, _ = data
    frame = fitted.score_frame(X, top_terms=3)
    k = fitted.n_clusters
    assert list(frame.columns[:k + 1]) == ["cluster"] + [f"proba_{i}" for i in fitted.cluster_ids_]
    np.testing.assert_array_equal(frame["cluster"], fitted.predict(X))
    np.testing.assert_allclose(frame.iloc[:, 1:k + 1].to_numpy(), fitted.predict_proba(X), atol=1e-6)
    plain = fitted.score_frame(X)
    assert list(plain.columns) == list(frame.columns[:k + 1])
    from neurcam_dist.data import ROW_KEY
    read = pa.Table.from_pandas(X, preserve_index=False)   # as the readers give it: with each row's key
    read = read.append_column(ROW_KEY, pa.array(np.arange(len(X), dtype=np.int64) + 100))
    out = _Scorer(fitted.scoring_model(), None, [])(read).to_pandas()
    # batch scoring writes fit's layout: score_frame's columns plus the row's own cluster's probability,
    # after the row's number in the input when there is no id
    assert list(out.columns) == ["row", "cluster", "probability", *frame.columns[1:]]
    assert out["row"].tolist() == list(range(100, 100 + len(X)))
    pd.testing.assert_frame_equal(out.drop(columns=["row", "probability"]).astype({"cluster": "int64"}),
                                  frame.reset_index(drop=True))
    np.testing.assert_allclose(out["probability"], frame.iloc[:, 1:k + 1].max(axis=1), rtol=0, atol=1e-12)


def test_the_table_scorer_predicts_stable_ids(data):
    X, _ = data
    est = NeurCAM(n_clusters=3, random_state=0, **SMALL).fit(X)
    est.set_cluster_ids([7, 3, 9], 10)
    scorer = est.explain(X).to_scorer()
    assert set(scorer.predict(X).tolist()) <= {3, 7, 9}
    assert (scorer.predict(X) == est.predict(X)).mean() >= 0.99


# ---------------------------------------------------------------- the front door
def test_fit_checks_its_output_before_reading_or_training(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    assert main(["fit", "--data", str(tmp_path / "missing.csv"), "--out", str(out), "--n-clusters", "3"]) == 2
    err = capsys.readouterr().err
    assert "which this command did not write" in err and "no such file" not in err
    assert (out / "notes.txt").read_text() == "keep me"
    assert main(["fit", "--data", str(tmp_path / "missing.csv"), "--out", str(tmp_path / "o"), "--n-clusters", "1"]) == 2
    assert "n_clusters must be >= 2" in capsys.readouterr().err   # a bad value before the data is read


def test_fit_writes_the_run_folder_that_train_writes(tmp_path, data):
    from neurcam_dist import service
    X, y = data
    X.assign(label=y, customer_id=np.arange(len(X)) + 1000).to_csv(tmp_path / "d.csv", index=False)
    res = service.fit(str(tmp_path / "d.csv"), str(tmp_path / "run"), label="label",
                      params={"n_clusters": 3, **{k: v for k, v in SMALL.items() if k != "device"}})
    made = json.loads((tmp_path / "run" / "config.json").read_text())
    assert made["command"] == "fit" and made["features"] == list(X.columns) and made["label"] == "label"
    assert json.loads((tmp_path / "run" / "metrics.json").read_text()) == res.metrics
    assert (tmp_path / "run" / "model").is_symlink() and (tmp_path / "run" / "current").is_symlink()
    np.testing.assert_array_equal(NeurCAM.load(tmp_path / "run" / "model").predict(X), res.estimator.predict(X))
    # each row's cluster, beside the id column fit set aside (CSV in, CSV out)
    got = pd.read_csv(tmp_path / "run" / "assignments.csv")
    assert list(got.columns[:3]) == ["customer_id", "cluster", "probability"] and "term_1" in got.columns
    assert got["customer_id"].tolist() == list(range(1000, 1000 + len(X)))
    np.testing.assert_array_equal(got["cluster"], res.estimator.predict(X))
    np.testing.assert_allclose(got["probability"], res.estimator.predict_proba(X).max(1), atol=1e-6)



def test_fit_with_a_report_encodes_its_table_once_after_training(tmp_path, data, monkeypatch):
    """The metrics, the assignments and the report share one encoding of the table (they took one
    each, and the metrics a forward pass for labels the fit had stored); what they write is the
    same as from the estimator's own calls."""
    from neurcam_dist import service
    from neurcam_dist.columns import ColumnCoding
    X, y = data
    X.assign(label=y).to_csv(tmp_path / "d.csv", index=False)
    calls, at_fit_end = [], []
    encode, fit = ColumnCoding.encode_counted, NeurCAM.fit
    monkeypatch.setattr(ColumnCoding, "encode_counted", lambda self, *a, **k: calls.append(1) or encode(self, *a, **k))
    monkeypatch.setattr(NeurCAM, "fit", lambda self, *a, **k: (fit(self, *a, **k), at_fit_end.append(len(calls)))[0])
    res = service.fit(str(tmp_path / "d.csv"), str(tmp_path / "run"), label="label", report=True,
                      params={"n_clusters": 3, **{k: v for k, v in SMALL.items() if k != "device"}})
    assert res.report_error is None and (tmp_path / "run" / "report" / "report.html").is_file()
    assert len(calls) - at_fit_end[0] == 1, f"{len(calls) - at_fit_end[0]} encodings after training"
    monkeypatch.undo()
    est = res.estimator
    np.testing.assert_array_equal(est.labels_, est.predict(X))
    # the kept encoding of the reference rows is what encoding them again gives, on a mixed table too
    from neurcam_dist.data.synthetic import mixed_table
    mixed = mixed_table(300, seed=0)[0].drop(columns=["customer_id"], errors="ignore")
    mixed.iloc[::7, 0] = np.nan
    for model in (est, NeurCAM(n_clusters=3, **SMALL).fit(mixed)):
        kept = model._encoded_reference()
        assert kept is not None
        np.testing.assert_array_equal(kept, model.fitted_.encode(model.reference_))
    again = service.fit(str(tmp_path / "d.csv"), str(tmp_path / "run2"), label="label",
                        params={"n_clusters": 3, **{k: v for k, v in SMALL.items() if k != "device"}})
    from neurcam_dist import metrics
    expected = metrics.scores(est.clustering_space(X), est.predict(X), np.asarray(y))
    assert {k: again.metrics[k] for k in expected} == pytest.approx(expected)


# ---------------------------------------------------------------- one error base
def test_errors_share_one_base_are_the_builtins_callers_expect_and_keep_their_message():
    assert issubclass(ConfigError, ValueError) and issubclass(DataError, ValueError)
    assert issubclass(TrainingError, RuntimeError) and issubclass(NotPublishedError, FileNotFoundError)
    assert all(issubclass(c, NeurcamError) for c in (ConfigError, DataError, TrainingError, NotPublishedError))
    e = DataError("f.parquet: column 'x' has a NaN")
    e.args = (e.args[0] + "\nFailed to apply UDF transform after 1/1 attempts",)   # what Ray Data appends
    back = pickle.loads(pickle.dumps(e))
    assert back.message == "f.parquet: column 'x' has a NaN"
    try:
        try:
            raise back
        except DataError as inner:
            raise RuntimeError("wrapped by a library") from inner
    except RuntimeError as outer:
        assert find_cause(outer, DataError) is back and find_cause(outer, ConfigError) is None


# ---------------------------------------------------------------- pandas-friendly views
def test_explanations_read_as_dataframes_and_in_notebooks(fitted_pairs, data):
    X, _ = data
    expl = fitted_pairs.explain(X)
    imp = expl.importance_frame()
    assert imp["term"].tolist() == [r["term"] for r in expl.importance]
    assert [c for c in imp.columns if c.startswith("importance_")] == [f"importance_{i}" for i in expl.cluster_ids]
    prof = expl.profiles_frame()
    assert prof["cluster"].tolist() == expl.cluster_ids and prof["size"].sum() == len(X)
    html = expl._repr_html_()
    assert html.count("<tr>") == expl.n_clusters + 1 and imp["term"][0] in html
    rows = fitted_pairs.explain_rows(X.iloc[:5])
    frame = rows.to_frame()
    assert len(frame) == rows.contributions.size
    first = frame[frame["row"] == 0]
    assert (first["assigned"] == fitted_pairs.predict(X.iloc[:1])[0]).all()
    for term, group in first.groupby("term"):
        feats = term.split(" & ")
        assert np.allclose(group["value"], X[feats[0]].iloc[0])
        if len(feats) == 2:
            assert np.allclose(group["value_2"], X[feats[1]].iloc[0])
        else:
            assert group["value_2"].isna().all()


def test_the_estimator_shows_its_clusters_in_a_notebook(fitted):
    html = fitted._repr_mimebundle_()["text/html"]
    assert "fitted</b>: 3 clusters" in html and html.count("<td>") >= 2 * fitted.n_clusters
    assert "fitted</b>" not in NeurCAM(n_clusters=3)._repr_mimebundle_()["text/html"]


def test_predict_reads_the_csv_fit_read_and_finds_its_id_column(tmp_path, data, capsys):
    """``fit`` then ``predict`` on the same CSV, with an id column named ``wine_id``: no flags but
    the files, and the scores carry the ids."""
    X, _ = data
    X.assign(wine_id=np.arange(len(X)) + 7, note="a text column").to_csv(tmp_path / "wine.csv", index=False)
    fit_args = ["fit", "--input", str(tmp_path / "wine.csv"), "--output", str(tmp_path / "run"),
                "--n-clusters", "3", "--quiet", *[a for k, v in SMALL.items() if k not in ("verbose", "device")
                                                   for a in (f"--{k.replace('_', '-')}",
                                                             *(map(str, v) if isinstance(v, tuple) else [str(v)]))]]
    assert main(fit_args) == 0
    capsys.readouterr()
    assert main(["predict", "--model", str(tmp_path / "run" / "model"), "--input", str(tmp_path / "wine.csv"),
                 "--output", str(tmp_path / "scored")]) == 0
    out = capsys.readouterr().out
    assert "wrote 240 rows in 1 Parquet file(s)" in out and "id column" not in out   # the model's own id: no word
    got = pd.read_parquet(tmp_path / "scored")
    assert got["wine_id"].tolist() == list(range(7, 7 + len(X)))
    np.testing.assert_array_equal(got["cluster"], NeurCAM.load(tmp_path / "run" / "model").predict(X))
    assigned = pd.read_csv(tmp_path / "run" / "assignments.csv")
    np.testing.assert_array_equal(got["cluster"], assigned["cluster"])
    # Parquet input too (through predict_parquet)
    (tmp_path / "pq").mkdir()
    X.assign(wine_id=np.arange(len(X)) + 7).to_parquet(tmp_path / "pq" / "part.parquet")
    assert main(["predict", "--model", str(tmp_path / "run" / "model"), "--input", str(tmp_path / "pq"),
                 "--output", str(tmp_path / "scored_pq")]) == 0
    got_pq = pd.read_parquet(tmp_path / "scored_pq")
    assert got_pq["wine_id"].tolist() == got["wine_id"].tolist() and (got_pq["cluster"] == got["cluster"]).all()
    capsys.readouterr()
    # a named id that is not there is refused with the nearest name
    assert main(["predict", "--model", str(tmp_path / "run" / "model"), "--input", str(tmp_path / "wine.csv"),
                 "--output", str(tmp_path / "scored2"), "--id", "wine"]) == 2
    assert "no column(s) ['wine']" in capsys.readouterr().err


def _small_fit_flags() -> list[str]:
    return [a for k, v in SMALL.items() if k not in ("verbose", "device")
            for a in (f"--{k.replace('_', '-')}", *(map(str, v) if isinstance(v, tuple) else [str(v)]))]


def test_predict_explain_and_export_follow_the_model_s_id(tmp_path, data, capsys):
    """The README's ``predict`` line on a table without an ``id`` column, for a model fitted without
    one: the rows are numbered (``row``), as fit's assignments are in order. A model fitted with
    ``--id X`` looks for X first (not ``id``, even where the input has one); ``--id`` and
    ``--no-id`` override; ``explain --show`` names X's values and ``export``'s query returns X."""
    X, _ = data
    X.to_csv(tmp_path / "plain.csv", index=False)
    assert main(["fit", "--input", str(tmp_path / "plain.csv"), "--output", str(tmp_path / "plain"),
                 "--n-clusters", "3", "--quiet", *_small_fit_flags()]) == 0
    plain = tmp_path / "plain" / "model"
    assert NeurCAM.load(plain).id_column_ is None
    capsys.readouterr()
    for out in ("scored", "scored.csv"):   # the Parquet pass and the one-file CSV output
        assert main(["predict", "--model", str(plain), "--input", str(tmp_path / "plain.csv"),
                     "--output", str(tmp_path / out)]) == 0
        assert "no id column (the model was fitted without an id)" in capsys.readouterr().out
        got = pd.read_parquet(tmp_path / out) if out == "scored" else pd.read_csv(tmp_path / out)
        assert list(got.columns[:2]) == ["row", "cluster"] and got["row"].tolist() == list(range(len(X)))
        assigned = pd.read_csv(tmp_path / "plain" / "assignments.csv")
        np.testing.assert_array_equal(got["cluster"], assigned["cluster"])
    (tmp_path / "parts").mkdir()   # Parquet input over two files: rows numbered across them, in order
    X.iloc[:100].to_parquet(tmp_path / "parts" / "a.parquet")
    X.iloc[100:].to_parquet(tmp_path / "parts" / "b.parquet")
    assert main(["predict", "--model", str(plain), "--input", str(tmp_path / "parts"),
                 "--output", str(tmp_path / "scored_parts")]) == 0
    got = pd.read_parquet(tmp_path / "scored_parts").sort_values("row")
    assert got["row"].tolist() == list(range(len(X)))
    np.testing.assert_array_equal(got["cluster"], assigned["cluster"])
    capsys.readouterr()

    # fitted with --id account: predict looks for 'account', though the input also has an 'id'
    X.assign(account=np.arange(len(X)) * 3, id=-1).to_csv(tmp_path / "acc.csv", index=False)
    assert main(["fit", "--input", str(tmp_path / "acc.csv"), "--output", str(tmp_path / "acc"), "--id", "account",
                 "--features", *X.columns, "--n-clusters", "3", "--quiet", *_small_fit_flags()]) == 0
    model = tmp_path / "acc" / "model"
    assert NeurCAM.load(model).id_column_ == "account"
    capsys.readouterr()
    assert main(["predict", "--model", str(model), "--input", str(tmp_path / "acc.csv"),
                 "--output", str(tmp_path / "acc.csv.scored.csv")]) == 0
    got = pd.read_csv(tmp_path / "acc.csv.scored.csv")
    assert got.columns[0] == "account" and got["account"].tolist() == list(range(0, 3 * len(X), 3))
    assert "id" not in got.columns
    for flags, first in ((["--id", "id"], "id"), (["--no-id"], "row")):   # the flags override the model
        assert main(["predict", "--model", str(model), "--input", str(tmp_path / "acc.csv"),
                     "--output", str(tmp_path / "over.csv"), *flags]) == 0
        assert pd.read_csv(tmp_path / "over.csv").columns[0] == first
    assert main(["predict", "--model", str(model), "--input", str(tmp_path / "acc.csv"),
                 "--output", str(tmp_path / "both.csv"), "--id", "id", "--no-id"]) == 2
    assert "--id id and --no-id contradict each other" in capsys.readouterr().err
    # explain --show names the model's ids; --no-id, positions (a row whose id and position name
    # rows of different clusters)
    labels = NeurCAM.load(model).predict(X)
    j = next(j for j in range(1, len(X) // 3) if labels[j] != labels[3 * j])
    assert main(["explain", "--model", str(model), "--input", str(tmp_path / "acc.csv"),
                 "--output", str(tmp_path / "ex"), "--show", str(3 * j)]) == 0
    assert f"row {3 * j}: cluster {labels[j]} " in capsys.readouterr().out
    assert main(["explain", "--model", str(model), "--input", str(tmp_path / "acc.csv"),
                 "--output", str(tmp_path / "ex2"), "--show", str(3 * j), "--no-id"]) == 0
    assert f"row {3 * j}: cluster {labels[3 * j]} " in capsys.readouterr().out
    # export's query returns the model's id beside the cluster
    assert main(["export", "--model", str(model), "--input", str(tmp_path / "acc.csv"), "--table", "t",
                 "--output", str(tmp_path / "q.sql")]) == 0
    assert '"account"' in (tmp_path / "q.sql").read_text().split("FROM")[0]


def test_duplicate_and_empty_ids_are_counted_at_every_door_and_show_names_every_row(tmp_path, capsys):
    """Ids are checked once at the door of fit, predict and explain: rows that share an id, and
    rows with none, are kept as given and counted on the console; ``--show ID`` shows every row
    that holds the id, each named with its row."""
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"customer_id": [f"C{i:06d}" for i in range(200)], "a": rng.normal(size=200),
                       "b": rng.normal(size=200)})
    df.loc[5, "customer_id"] = "C000002"
    df.loc[[7, 9], "customer_id"] = ["", None]
    df.to_csv(tmp_path / "t.csv", index=False)
    df.to_parquet(tmp_path / "t.parquet")
    said = ("id column 'customer_id': 2 rows share 1 id(s) (e.g. 'C000002' in 2 rows) and 2 row(s) have no id "
            "(the first at row 7); the rows are kept with their ids as given")
    assert main(["fit", "--input", str(tmp_path / "t.csv"), "--output", str(tmp_path / "run"), "--n-clusters", "2",
                 "--epochs", "5", "--id", "customer_id"]) == 0
    assert said in capsys.readouterr().err
    for src, out in (("t.csv", "p.csv"), ("t.parquet", "p")):
        assert main(["predict", "--model", str(tmp_path / "run" / "model"), "--input", str(tmp_path / src),
                     "--output", str(tmp_path / out)]) == 0
        printed = capsys.readouterr()
        assert said in printed.out + printed.err
    scored = pd.read_csv(tmp_path / "p.csv", dtype={"customer_id": str}, keep_default_na=False)
    assert scored["customer_id"].tolist()[:10] == [*df["customer_id"].fillna("").tolist()[:10]]
    assert main(["explain", "--model", str(tmp_path / "run" / "model"), "--input", str(tmp_path / "t.csv"),
                 "--output", str(tmp_path / "ex"), "--show", "C000002", "C000010"]) == 0
    out = capsys.readouterr().out
    assert said in out
    assert "row C000002 (row 2): cluster" in out and "row C000002 (row 5): cluster" in out
    assert "row C000010: cluster" in out


def test_the_front_door_takes_paths_and_locations_where_it_takes_text(tmp_path):
    """A ``pathlib.Path`` or a ``uris.Location`` works wherever an entry point takes a place as
    text (``uris.Where``): the same outputs, no ``'Location' object has no attribute`` deep down."""
    from neurcam_dist import service
    from neurcam_dist.data.synthetic import mixed_table
    from neurcam_dist.uris import Location
    mixed_table(300, seed=0)[0].to_csv(tmp_path / "rows.csv", index=False)
    rows, model = Location(tmp_path / "rows.csv"), tmp_path / "run" / "model"   # a Location and a Path
    run = service.fit(rows, Location(tmp_path / "run"), params={"n_clusters": 3, "epochs": 12, "warmup_epochs": 4,
                                                                "verbose": False})
    assert run.estimator.n_clusters_ == 3 and (model / "config.json").is_file()
    assert Path(service.explain(model, rows, tmp_path / "explained", say=lambda *_: None).report).is_file()
    assert service.export(Location(model), tmp_path / "rows.csv", table="rows", output=tmp_path / "q.sql").agreement > 0.9
    assert (tmp_path / "q.sql").read_text().lstrip().upper().startswith(("WITH", "SELECT", "--"))
    service.monitor(Location(model), rows, tmp_path / "drift", say=lambda *_: None)
    assert (tmp_path / "drift" / "drift.json").is_file()
    assert service.sample(rows, tmp_path / "shards", rows=0, files=1)[0] == 300
    checked = service.validate({"data": {"path": Location(tmp_path / "shards")}, "model": {"n_clusters": 3},
                                "output": tmp_path / "ray-run"})
    assert any(line.startswith("data: 300 rows") for line in checked)
    assert service.load_model(Location(model)).n_clusters_ == service.load_fitted(model).n_clusters == 3


def test_a_location_s_parent_is_the_folder_that_holds_it():
    """``Location.parent``: the folder a one-file output (``predict`` to CSV, ``export`` to SQL)
    is checked in, for a local path and an object store's key alike, its text not expanded again."""
    from neurcam_dist.uris import Location
    assert [Location(t).parent.text for t in ("s3://b/run/q.sql", "s3://b/run/", "s3://b", "out/q.sql", "q.sql",
                                              "file:///a/q.sql")] == ["s3://b/run", "s3://b", "s3://b", "out", ".", "/a"]
    literal = Location(Path("/tmp/$HOME/q.sql"))   # a path object is taken as it is, and so is its parent
    assert literal.parent.text == "/tmp/$HOME" and literal.parent.is_uri is False
