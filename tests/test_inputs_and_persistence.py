"""Bad input fails early and precisely; saved models round-trip and refuse tampering."""
import json

import numpy as np
import pandas as pd
import pytest

from neurcam_dist import NeurCAM, metrics

from .conftest import SMALL


def est(**kw):
    params = dict(SMALL, n_clusters=3)
    params.update(kw)
    return NeurCAM(**params)


@pytest.mark.parametrize("mutate, params, message", [
    (lambda X: X.assign(f1=X.f1.where(X.index != 7, np.nan)), {"missing": "refuse"},
     r"missing values in column\(s\) 'f1' \(1 rows\).*missing='refuse'"),
    (lambda X: X.assign(f2=X.f2.where(X.index > 2, np.inf)), {}, r"infinite values in column\(s\) 'f2' \(3 rows\)"),
    (lambda X: X.assign(f2=X.f2.where(X.index > 2, -np.inf)), {"missing": "refuse"}, r"infinite values.*'f2'"),
    (lambda X: X.iloc[:0], {}, r"empty"),
    (lambda X: X.rename(columns={"f2": "f1"}), {}, r"duplicate column names \['f1'\]"),
])
def test_bad_features_name_the_problem(data, mutate, params, message):
    X, _ = data
    with pytest.raises(ValueError, match=message):
        est(**params).fit(mutate(X.copy()))


def test_row_count_mismatch_names_both_counts(data):
    X, _ = data
    with pytest.raises(ValueError, match=r"X has 240 rows but X_repr has 239"):
        est().fit(X, X_repr=np.zeros((239, 2)))


def test_nan_in_representation_named(data):
    X, _ = data
    rep = np.zeros((240, 2))
    rep[3, 1] = np.nan
    with pytest.raises(ValueError, match=r"X_repr has NaN.*'x1' \(1 rows\)"):
        est().fit(X, X_repr=rep)


@pytest.mark.parametrize("params, message", [
    (dict(n_clusters=1), r"n_clusters must be >= 2, got 1"),
    (dict(n_clusters=500), r"n_clusters=500 is larger than the number of rows \(240\)"),
    (dict(m=0.9), r"m must be >= 1.0, got 0.9"),
    (dict(epsilon=1.0), r"epsilon must be < 1.0, got 1.0"),
    (dict(epsilon=0.0), r"epsilon must be > 0.0, got 0.0"),
    (dict(gamma=-0.5), r"gamma must be >= 0.0, got -0.5"),
    (dict(init="random"), r"init must be one of"),
    (dict(precision="fp8"), r"precision must be one of"),
    (dict(hidden=(0,)), r"hidden must be"),
])
def test_bad_hyperparameters_name_the_parameter(data, params, message):
    X, _ = data
    with pytest.raises(ValueError, match=message):
        est(**params).fit(X)


def test_pairs_need_two_features():
    X = pd.DataFrame({"only": np.arange(20.0)})
    with pytest.raises(ValueError, match=r"n_pairs=2 needs at least 2 features, X has 1"):
        est(n_pairs=2, n_clusters=2).fit(X)


def test_predict_on_other_columns_fails(fitted, data):
    X, _ = data
    with pytest.raises(ValueError, match=r"missing \['f3'\], unexpected \['g'\]"):
        fitted.predict(X.rename(columns={"f3": "g"}))
    with pytest.raises(ValueError, match=r"has 3 columns, the model was fitted on 4"):
        fitted.predict(X.to_numpy()[:, :3])
    # same columns in another order are realigned, not misread
    assert np.array_equal(fitted.predict(X[X.columns[::-1]]), fitted.predict(X))


def test_unfitted_model_says_so():
    with pytest.raises(ValueError, match="not fitted"):
        NeurCAM().predict(np.zeros((2, 2)))


def test_save_load_round_trip(fitted, data, tmp_path):
    X, _ = data
    fitted.save(tmp_path / "model")
    loaded = NeurCAM.load(tmp_path / "model")
    assert np.array_equal(loaded.predict_proba(X), fitted.predict_proba(X))
    assert loaded.selected_features_ == fitted.selected_features_
    assert loaded.get_params() == {**fitted.get_params(), "device": "cpu"}
    assert loaded.history_["stop_reason"] == fitted.history_["stop_reason"]
    # saving again replaces the model atomically and leaves no temporary directories behind
    fitted.save(tmp_path / "model")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_labels_importance_and_profiles_are_learned_attributes_that_survive_load(fitted, data, tmp_path):
    X, _ = data
    expl = fitted.explain()       # over the same reference rows
    pd.testing.assert_frame_equal(fitted.importance_, expl.importance_frame())
    pd.testing.assert_frame_equal(fitted.profiles_, expl.profiles_frame())
    assert fitted.importance_["importance"].is_monotonic_decreasing
    assert fitted.profiles_["size"].sum() == len(fitted.reference_)
    assert np.array_equal(fitted.labels_, fitted.predict(X)) and len(fitted.labels_) == len(X)
    fitted.save(tmp_path / "model")
    loaded = NeurCAM.load(tmp_path / "model")
    assert not hasattr(loaded, "reference_")
    assert np.array_equal(loaded.labels_, fitted.labels_)
    pd.testing.assert_frame_equal(loaded.importance_, fitted.importance_)
    pd.testing.assert_frame_equal(loaded.profiles_, fitted.profiles_)
    # renamed clusters (a re-clustering's stable ids): labels, columns and profiles follow
    loaded.set_cluster_ids([7, 3, 9])
    assert np.array_equal(loaded.labels_, loaded.predict(X))
    assert list(loaded.profiles_["cluster"]) == [7, 3, 9] and list(loaded.profiles_["size"]) == list(fitted.profiles_["size"])
    assert list(loaded.importance_.columns[-3:]) == ["importance_7", "importance_3", "importance_9"]

    # a model of format 1 (before labels were saved) still loads, and says what it lacks
    import hashlib

    from safetensors.torch import load_file, save_file
    path = tmp_path / "model"
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(format_version=1)
    del cfg["summary"]
    (path / "config.json").write_text(json.dumps(cfg))
    weights = load_file(str(path / "weights.safetensors"))
    del weights["fit.labels"]
    save_file(weights, str(path / "weights.safetensors"))
    (path / "manifest.json").write_text(json.dumps({"format": "neurcam-dist/model", "files": {
        f: hashlib.sha256((path / f).read_bytes()).hexdigest() for f in ("config.json", "weights.safetensors")}}))
    old = NeurCAM.load(path)
    assert np.array_equal(old.predict(X), fitted.predict(X))
    with pytest.raises(AttributeError, match="carries no training labels"):
        _ = old.labels_
    with pytest.raises(AttributeError, match=r"use explain\(X\).importance_frame\(\)"):
        _ = old.importance_
    cfg.update(format_version=3)
    (path / "config.json").write_text(json.dumps(cfg))
    (path / "manifest.json").write_text(json.dumps({"format": "neurcam-dist/model", "files": {
        f: hashlib.sha256((path / f).read_bytes()).hexdigest() for f in ("config.json", "weights.safetensors")}}))
    with pytest.raises(ValueError, match=r"model format version 3 is not supported \(this version reads 1, 2\)"):
        NeurCAM.load(path)


def test_load_refuses_altered_or_missing_files(fitted, tmp_path):
    path = tmp_path / "model"
    fitted.save(path)
    weights = path / "weights.safetensors"
    blob = bytearray(weights.read_bytes())
    blob[-1] ^= 0xFF
    weights.write_bytes(bytes(blob))
    with pytest.raises(ValueError, match=r"weights.safetensors was altered or corrupted"):
        NeurCAM.load(path)
    fitted.save(path)
    cfg = json.loads((path / "config.json").read_text())
    cfg["mean"][0] += 1
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"config.json was altered"):
        NeurCAM.load(path)
    fitted.save(path)
    weights.write_bytes(weights.read_bytes()[:100])                       # truncated (a copy cut short)
    with pytest.raises(ValueError, match=r"weights.safetensors was altered or corrupted"):
        NeurCAM.load(path)
    fitted.save(path)
    (path / "weights.safetensors").unlink()
    with pytest.raises(ValueError, match=r"missing \['weights.safetensors'\]"):
        NeurCAM.load(path)
    with pytest.raises(ValueError, match="no model directory"):
        NeurCAM.load(tmp_path / "nowhere")


def test_save_refuses_to_overwrite_a_foreign_directory(fitted, tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "notes.txt").write_text("keep me")
    with pytest.raises(ValueError, match="was not written by neurcam"):
        fitted.save(tmp_path / "docs")
    assert (tmp_path / "docs" / "notes.txt").read_text() == "keep me"


def test_metrics_against_hand_values():
    truth = np.array([0, 0, 1, 1, 2, 2])
    pred = np.array([2, 2, 0, 0, 1, 1])
    assert metrics.acc(truth, pred) == 1.0
    assert metrics.ari(truth, pred) == pytest.approx(1.0)
    assert metrics.nmi(truth, pred) == pytest.approx(1.0)
    assert metrics.acc(truth, np.array([0, 0, 0, 1, 1, 1])) == pytest.approx(4 / 6)
    xr = np.array([[0.0], [2.0], [10.0], [14.0]])
    # cluster means 1 and 12: squared distances 1, 1, 4, 4 -> mean 2.5
    assert metrics.inertia(xr, np.array([5, 5, 9, 9])) == pytest.approx(2.5)
