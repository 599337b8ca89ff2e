"""What the report shows beyond the shape graphs: typical and borderline rows, one row's view,
stability across runs, and two versions compared; and ``neurcam explain --show/--id/--compare``."""
import copy
import dataclasses

import numpy as np
import pytest

from neurcam_dist import NeurCAM
from neurcam_dist.cli import main
from neurcam_dist.explain import Explanation
from neurcam_dist.explain.build import build_explanation
from neurcam_dist.explain.compare import comparison, comparison_text
from neurcam_dist.explain.examples import CONFIDENT, NEAREST, row_text
from neurcam_dist.explain.stability import match_clusters, stability, topk_intersections, warning

from .conftest import SMALL, blobs


@pytest.fixture(scope="module")
def five():
    X, y = blobs(n=400, d=4, k=5, seed=4)
    return NeurCAM(n_clusters=5, random_state=0, **SMALL).fit(X), X, y


def test_typical_rows_are_the_members_nearest_their_centroid(five):
    est, X, _ = five
    expl = build_explanation(est, X)
    ex = expl.examples
    assert ex["basis"] == NEAREST
    fitted = est.scoring_model()
    z = fitted.standardize(X.to_numpy()).astype(np.float64)
    centroids = fitted.net.centroids.detach().double().numpy()
    labels = est.predict(X)
    for k, cid in enumerate(expl.cluster_ids):
        members = np.flatnonzero(labels == cid)
        dist = ((z[members] - centroids[k]) ** 2).sum(1)
        want = members[np.argsort(dist, kind="stable")[:3]].tolist()
        assert [r["row"] for r in ex["typical"][str(cid)]] == want
        assert all(r["cluster"] == cid for r in ex["typical"][str(cid)])
    # the borderline row of each cluster has the smallest lead of its logit over the next one
    logits = est.decision_function(X)
    lead = np.diff(np.sort(logits, axis=1)[:, -2:], axis=1)[:, 0]
    for cid, r in ex["borderline"].items():
        members = np.flatnonzero(labels == int(cid))
        assert r["row"] == int(members[np.argmin(lead[members])])
    assert build_explanation(est, X, typical=0).examples is None


def test_a_rows_change_moves_it_and_its_bars_are_its_pushes(five):
    est, X, _ = five
    expl = build_explanation(est, X, rows=X.iloc[[0, 5, 9]])
    records = expl.examples["rows"]
    assert [r["row"] for r in records] == [0, 5, 9] and expl.examples["borderline"]
    rows = est.explain_rows(X.iloc[[0, 5, 9]])
    for n, r in enumerate(records):
        k = list(est.cluster_ids_).index(r["cluster"])
        push = rows.contributions[n, :, k] - rows.contributions[n].mean(1)
        got = {q["term"]: q["push"] for q in r["terms"]}
        assert got == pytest.approx({t: float(push[rows.terms.index(t)]) for t in got})
        assert abs(r["terms"][0]["push"]) == pytest.approx(np.abs(push).max())
        assert r["probability"] == pytest.approx(est.predict_proba(X.iloc[[[0, 5, 9][n]]]).max())
    borderline = list(expl.examples["borderline"].values())
    moved = [r for r in records + borderline if r["change"]]
    assert moved, "no row of the test could be moved by one feature"
    for r in moved:
        row = X.loc[[r["row"]]].copy()
        ch = r["change"]
        assert row[ch["feature"]].iloc[0] == pytest.approx(ch["value"])
        row[ch["feature"]] = ch["new_value"]
        if ch.get("feature_2"):
            row[ch["feature_2"]] = ch["new_value_2"]
        assert est.predict(row)[0] == ch["target"] != r["cluster"]
    text = row_text(moved[0])
    assert f"cluster {moved[0]['cluster']}" in text and f"would join cluster {moved[0]['change']['target']}" in text


def test_without_the_clustering_space_typical_means_most_confident():
    X, _ = blobs(n=300, d=4, k=3, seed=5)
    rep = np.random.default_rng(0).normal(size=(300, 6)) + X.to_numpy()[:, :1]
    est = NeurCAM(n_clusters=3, random_state=0, **SMALL).fit(X, X_repr=rep)
    expl = build_explanation(est, X)
    assert expl.examples["basis"] == CONFIDENT
    proba = est.predict_proba(X).max(1)
    labels = est.predict(X)
    for cid, recs in expl.examples["typical"].items():
        members = np.flatnonzero(labels == int(cid))
        assert [r["row"] for r in recs] == members[np.argsort(-proba[members], kind="stable")[:3]].tolist()


def permuted(expl: Explanation, perm: list[int]) -> Explanation:
    """The same explanation with its cluster columns in another order (another run's numbering)."""
    other = copy.deepcopy(expl)
    for t in other.terms:
        t.values = t.values[..., perm]
        t.importance = t.importance[perm]
    return dataclasses.replace(other, intercept=expl.intercept[perm], cluster_ids=[expl.cluster_ids[p] for p in perm])


def test_stability_matches_clusters_by_their_rows(five):
    est, X, _ = five
    expl = build_explanation(est, X, typical=0)
    perm = [3, 0, 4, 1, 2]
    other = permuted(expl, perm)
    assert match_clusters(expl, other, X).tolist() == [perm.index(k) for k in range(5)]
    st = stability(expl, [other], X)
    assert st["n_models"] == 2 and st["flagged"] == [] and st["warning"] is None
    assert all(v == 1.0 for v in st["recurrence"].values())
    for t in expl.terms:
        if t.kind == "main":   # the same curves once matched: a band of zero width
            assert np.allclose(st["bands"][t.name]["low"], t.values) and np.allclose(st["bands"][t.name]["high"], t.values)


def test_a_term_another_run_does_not_use_is_flagged_and_widens_the_band(five):
    est, X, _ = five
    expl = build_explanation(est, X, typical=0)
    top = expl.importance[0]["term"]
    other = dataclasses.replace(copy.deepcopy(expl), terms=[t for t in copy.deepcopy(expl.terms) if t.name != top])
    st = stability(expl, [other], X, top=3)
    assert top in st["flagged"] and st["recurrence"][top] == 0.0
    t = expl.term(top)
    assert np.allclose(st["bands"][top]["low"], np.minimum(t.values, 0)) and np.allclose(
        st["bands"][top]["high"], np.maximum(t.values, 0))


def test_a_low_top5_intersection_is_a_warning_saying_what_to_do():
    said = warning({"top5_intersection": 1.3, "consistency_runs": 5})
    assert "share 1.3 of their top-5 terms" in said and "more seeds (search.seeds)" in said and "n_single" in said
    assert warning({"top5_intersection": 4.0, "consistency_runs": 5}) is None
    assert warning({"consistency_runs": 1}) is None


def test_topk_intersection_is_the_mean_over_pairs_of_shared_terms():
    runs = [["a", "b", "c", "d"], ["a", "c", "e", "f"], ["b", "a", "g", "h"]]
    got = topk_intersections(runs, ks=(1, 2, 4))
    # K=1: a|a share 1, a|b 0, a|b 0; K=2: {a,b}&{a,c}=1, {a,b}&{b,a}=2, {a,c}&{b,a}=1; K=4: 2, 2, 1
    assert got == {"top1_intersection": pytest.approx(1 / 3), "top2_intersection": pytest.approx(4 / 3),
                   "top4_intersection": pytest.approx(5 / 3)}
    assert topk_intersections([["a"]]) == {}


def test_comparing_versions_counts_every_row_once(five):
    est, X, _ = five
    expl = build_explanation(est, X, typical=0)
    same = comparison(expl, expl, est.predict(X), est.predict(X))
    assert same["same_id"] == 1.0 and same["ari"] == 1.0
    assert all(set(row) == {o} for o, row in same["flow"].items())
    assert all(d["new_terms"] == [] for d in same["drivers"])
    renamed = copy.deepcopy(est).set_cluster_ids([0, 1, 2, 3, 7], next_id=8)
    after = build_explanation(renamed, X, typical=0)
    cmp = comparison(after, expl, renamed.predict(X), est.predict(X))
    assert sum(n for row in cmp["flow"].values() for n in row.values()) == cmp["n_rows"] == len(X)
    moved = int((est.predict(X) == 4).sum())
    assert cmp["flow"]["4"] == {"7": moved} and cmp["same_id"] == pytest.approx(1 - moved / len(X))
    new = [d for d in cmp["drivers"] if d["before"] is None]
    assert [d["cluster"] for d in new] == [7] and new[0]["new_terms"] == new[0]["now"]
    assert f"{moved:,} rows moved from cluster 4 to cluster 7" in comparison_text(cmp)


def test_explain_cli_rows_ids_and_compare(five, tmp_path, capsys):
    est, X, y = five
    est.save(tmp_path / "new")
    old = NeurCAM(n_clusters=4, random_state=1, **SMALL).fit(X)
    old.save(tmp_path / "old")
    X.assign(key=[f"r{i}" for i in range(len(X))], label=y).to_csv(tmp_path / "d.csv", index=False)
    base = ["explain", "--data", str(tmp_path / "d.csv")]
    assert main(base + ["--model", str(tmp_path / "new"), "--out", str(tmp_path / "a"), "--rows", "r3,r10",
                        "--id", "key", "--label", "label"]) == 0
    said = capsys.readouterr()
    out = said.out
    assert "row r3: cluster" in out and "row r10: cluster" in out   # the earlier spelling still works, and says so
    assert "--rows is deprecated and goes in the next release: use --show" in said.err
    got = Explanation.from_json(tmp_path / "a" / "explanation.json")
    assert [r["row"] for r in got.examples["rows"]] == ["r3", "r10"]
    assert got.examples["rows"][0]["cluster"] == est.predict(X.iloc[[3]])[0]
    assert all(isinstance(r["row"], str) for recs in got.examples["typical"].values() for r in recs)
    page = (tmp_path / "a" / "report.html").read_text()
    assert "id='row-r3'" in page and "class='row-bars'" in page
    # by position; then the comparison of two versions
    assert main(base + ["--compare", str(tmp_path / "old"), str(tmp_path / "new"), "--out", str(tmp_path / "b"),
                        "--show", "4"]) == 0
    out = capsys.readouterr().out
    assert "row 4: cluster" in out and f"{len(X):,} rows: " in out and "keep their cluster id" in out
    cmp = Explanation.from_json(tmp_path / "b" / "explanation.json").comparison
    assert cmp["n_rows"] == len(X) and cmp["names"]["old"].endswith("old")
    assert "id='compare'" in (tmp_path / "b" / "report.html").read_text()
    for args, says in ((["--show", "r999", "--id", "key"], "--show ['r999'] not found in column 'key'"),
                       (["--show", "400"], "--show [400] out of range"),
                       (["--show", "r3"], "is not a row position (0-based): name an id column with --id"),
                       (["--id", "key"], "give --show as well"),
                       (["--show", "1", "--id", "nope"], "no --id column 'nope'")):
        assert main(base + ["--model", str(tmp_path / "new"), "--out", str(tmp_path / "c")] + args) == 2
        assert says in capsys.readouterr().err
    assert not (tmp_path / "c").exists()
    with pytest.raises(SystemExit):
        main(base + ["--model", str(tmp_path / "old"), "--compare", str(tmp_path / "old"), str(tmp_path / "new"),
                     "--out", str(tmp_path / "c")])
    assert "argument --compare: not allowed with argument --model" in capsys.readouterr().err


def test_a_wide_models_page_carries_its_most_important_terms_only(five, tmp_path, monkeypatch):
    import json

    from neurcam_dist.explain import report
    est, X, _ = five
    expl = build_explanation(est, X, typical=0)
    drawn = [i for i in report.by_importance(expl) if i not in report.left_out_terms(expl)]
    assert len(drawn) > 2
    monkeypatch.setattr(report, "VIEW_TERMS", 2)
    page = report.write_report(expl, tmp_path / "r").read_text()
    data = json.loads(page.split("id='neurcam-data'>")[1].split("</script>")[0])
    assert [t["name"] for t in data["terms"]] == [expl.terms[i].name for i in drawn[:2]]
    assert f"The 2 most important of {len(drawn)}" in page
    assert len(list((tmp_path / "r" / "plots").glob("*_shape_*.png"))) == len(drawn)   # every term still drawn


def test_row_ids_of_any_index_are_json_values(five, tmp_path):
    import pandas as pd
    est, X, _ = five
    stamped = X.set_axis(pd.date_range("2026-01-01", periods=len(X), freq="h"))
    expl = build_explanation(est, stamped)
    expl.to_json(tmp_path / "e.json")
    back = Explanation.from_json(tmp_path / "e.json")
    first = back.examples["typical"][str(expl.cluster_ids[0])][0]["row"]
    assert isinstance(first, str) and pd.Timestamp(first) in stamped.index
