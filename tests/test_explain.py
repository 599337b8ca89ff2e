"""Explanations: additivity, purification, serialisation, the table scorer, plots and the report."""
from html.parser import HTMLParser

import json
import numpy as np
import pandas as pd
import pytest
import torch

from neurcam_dist import NeurCAM
from neurcam_dist.cli import main
from neurcam_dist.explain import Explanation
from neurcam_dist.explain.explanation import fmt
from neurcam_dist.explain.grids import interp_pair, purify
from neurcam_dist.explain.report import render_figures, write_report


@pytest.fixture(scope="module")
def explanation(fitted_pairs, data):
    X, _ = data
    return fitted_pairs.explain(X)


def test_rows_decompose_exactly_into_intercept_and_terms(fitted_pairs, data):
    X, _ = data
    rows = fitted_pairs.explain_rows(X)
    assert rows.contributions.shape == (len(X), len(rows.terms), 3)
    np.testing.assert_allclose(rows.intercept + rows.contributions.sum(1), rows.logits, rtol=0, atol=1e-9)
    np.testing.assert_allclose(rows.logits, fitted_pairs.decision_function(X), rtol=1e-5, atol=1e-4)
    # centred on the training data: every term averages to zero over it
    np.testing.assert_allclose(rows.contributions.mean(0), 0.0, atol=1e-6)
    frame = rows.to_frame()
    assert len(frame) == rows.contributions.size
    assert frame.groupby("row").contribution.sum().shape == (len(X),)


def test_table_model_is_additive_and_matches_the_network(explanation, fitted_pairs, data):
    X, _ = data
    cols = {n: X[n].to_numpy(float) for n in explanation.feature_names}
    parts = np.stack([t.evaluate([cols[f] for f in t.features]) for t in explanation.terms], 1)
    np.testing.assert_allclose(explanation.intercept + parts.sum(1), explanation.logits(X), atol=1e-9)
    scorer = explanation.to_scorer()
    agreement = (scorer.predict(X) == fitted_pairs.predict(X)).mean()
    assert agreement >= 0.995
    np.testing.assert_allclose(scorer.predict_proba(X).sum(1), 1.0, atol=1e-12)


def test_terms_are_in_original_units_and_centred(explanation, data):
    X, _ = data
    for t in explanation.terms:
        for f, g in zip(t.features, t.grids, strict=False):
            assert g.min() == pytest.approx(X[f].min(), rel=1e-6) and g.max() == pytest.approx(X[f].max(), rel=1e-6)
        at_rows = t.evaluate([X[f].to_numpy(float) for f in t.features])
        if t.kind == "main":  # pair terms are centred by purification (see the purification test)
            np.testing.assert_allclose(at_rows.mean(0), 0.0, atol=1e-6)
        np.testing.assert_allclose(t.importance, np.abs(at_rows).mean(0), atol=1e-6)


def test_purification_keeps_the_sum_and_zeroes_row_and_column_means():
    rng = np.random.default_rng(0)
    pair = rng.normal(size=(5, 4, 3)) + np.arange(5)[:, None, None] - np.arange(4)[None, :, None]
    weights = rng.integers(0, 5, size=(5, 4)).astype(float)
    weights[2] = 0  # a grid row with no data
    pure, ma, mb = purify(pair, weights)
    np.testing.assert_allclose(pure + ma[:, None, :] + mb[None, :, :], pair, atol=1e-12)
    rows = np.einsum("ab,abk->ak", weights, pure)[weights.sum(1) > 0]
    cols = np.einsum("ab,abk->bk", weights, pure)
    assert np.abs(rows).max() < 1e-9 and np.abs(cols).max() < 1e-9


def test_purification_inside_the_explanation_leaves_logits_unchanged(fitted_pairs, data):
    X, _ = data
    expl = fitted_pairs.explain(X)
    unpurified = _table_logits_without_purification(fitted_pairs, X, expl)
    np.testing.assert_allclose(expl.logits(X), unpurified, atol=1e-8)
    for t in expl.terms:
        if t.kind == "pair":
            ga, gb = t.grids
            from neurcam_dist.explain.grids import nearest_index
            w = np.zeros((len(ga), len(gb)))
            np.add.at(w, (nearest_index(ga, X[t.features[0]].to_numpy(float)),
                          nearest_index(gb, X[t.features[1]].to_numpy(float))), 1.0)
            assert np.abs(np.einsum("ab,abk->ak", w, t.values)).max() < 1e-6 * len(X)
            assert np.abs(np.einsum("ab,abk->bk", w, t.values)).max() < 1e-6 * len(X)


def _table_logits_without_purification(est, X, expl):
    """Table model built from raw (unpurified, uncentred) channel tables on the explanation's grids."""
    from neurcam_dist.explain import term_groups
    from neurcam_dist.explain.build import _term_table
    from neurcam_dist.explain.grids import interp_main
    terms, owner = term_groups(est.net_)
    names = est.feature_names_in_
    out = np.zeros((len(X), 3))
    for n, t in enumerate(terms):
        grids = expl.term(" & ".join(names[i] for i in t)).grids
        table = _term_table(est.scoring_model(), np.flatnonzero(owner == n), t, grids)
        cols = [X[names[i]].to_numpy(float) for i in t]
        out += interp_main(grids[0], table, cols[0]) if len(t) == 1 else interp_pair(grids[0], grids[1], table, *cols)
    return out


def test_pair_chosen_by_two_channels_is_reported_once_with_their_sum(data):
    X, _ = data
    est = NeurCAM(n_clusters=3, n_pairs=2, random_state=3, hidden=(16,), n_bases=4, warmup_epochs=4, epochs=8,
                  distill_epochs=1, batch_size=32, verbose=False).fit(X)
    gates = est.net_.pairs.gates
    gates.index.copy_(torch.tensor([[0, 1], [1, 0]]))  # both channels now read the pair (f0, f1)
    # the selection is read from the gates (est.selected_pairs_ follows them)
    expl = est.explain(X, pair_grid_size=8)
    pair_terms = [t for t in expl.terms if t.kind == "pair"]
    assert [t.name for t in pair_terms] == ["f0 & f1"]
    rows = est.explain_rows(X)
    assert rows.terms.count("f0 & f1") == 1
    c = est.contributions(X)
    single = est.net_.single.n
    both = c[:, single, :] + c[:, single + 1, :] - est.channel_means_[single] - est.channel_means_[single + 1]
    np.testing.assert_allclose(rows.contributions[:, rows.terms.index("f0 & f1"), :], both, atol=1e-5)


def test_json_round_trip_is_exact(explanation, tmp_path):
    explanation.to_json(tmp_path / "e.json")
    back = Explanation.from_json(tmp_path / "e.json")
    assert back.to_dict() == explanation.to_dict()
    bad = explanation.to_dict()
    bad["schema_version"] = 99
    with pytest.raises(ValueError, match="schema version 99"):
        Explanation.from_dict(bad)


def test_parquet_tables(explanation, tmp_path):
    explanation.to_parquet(tmp_path / "tables")
    terms = pd.read_parquet(tmp_path / "tables" / "terms.parquet")
    values = pd.read_parquet(tmp_path / "tables" / "values.parquet")
    assert set(terms.term) == {t.name for t in explanation.terms}
    assert len(values) == sum(t.values.size for t in explanation.terms)


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.imgs, self.tags, self.attrs = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += [(tag, k, v) for k, v in attrs]
        if tag == "img":
            self.imgs.append(dict(attrs)["src"])


def test_plots_and_self_contained_report(explanation, tmp_path):
    import base64
    import io

    from PIL import Image
    from neurcam_dist.explain.report import (by_importance, cluster_terms, figure_name, left_out_terms,
                                             thumbnail_name)
    left_out = left_out_terms(explanation)
    drawn = [i for i in by_importance(explanation) if i not in left_out]
    thumbs = [thumbnail_name(p["cluster"], i, explanation.terms[i])
              for p in explanation.profiles for i in cluster_terms(explanation, p)]
    figures = render_figures(explanation)
    assert len(figures) == len(drawn) + 1 + len(thumbs) and drawn and len(thumbs) >= explanation.n_clusters
    for data in figures.values():
        Image.open(io.BytesIO(data)).verify()
    report = write_report(explanation, tmp_path / "report")
    page = report.read_text()
    parser = _Collect()
    parser.feed(page)
    # the importance chart and the thumbnails are images; the shape graphs are drawn by the page's
    # script from the numbers it carries, most important first
    assert "table" in parser.tags and len(parser.imgs) == 1 + len(thumbs)
    data = json.loads(page.split("id='neurcam-data'>")[1].split("</script>")[0])
    assert [t["name"] for t in data["terms"]] == [explanation.terms[i].name for i in drawn]
    assert data["ids"] == explanation.cluster_ids and len(set(data["colours"])) == explanation.n_clusters
    for t, i in zip(data["terms"], drawn, strict=False):
        term = explanation.terms[i]
        assert np.allclose(t["values"], term.values, rtol=1e-3, atol=1e-3 * np.abs(term.values).max())
    # most important first; every term either drawn or listed with its reason; then the thumbnails
    names = [figure_name(i, explanation.terms[i]) for i in drawn]
    assert list(figures)[1:len(drawn) + 1] == names and list(figures)[len(drawn) + 1:] == thumbs
    # a section per cluster, before the importance section, each with its summary
    head = page.split("<h2 id='importance'>")[0]
    for p in explanation.profiles:
        section = head.split(f"id='cluster-{p['cluster']}' data-index=")[1].split("</section>")[0]
        assert f"{p['size']:,} rows" in section and "class='summary'>Mostly rows with" in section
    for i in left_out:
        assert f"{explanation.terms[i].name} (" in page
    for anchor in ("clusters", "importance", "shapes", "pairs", "card"):
        assert f"id='{anchor}'" in page and f"href='#{anchor}'" in page
    assert "e-0" not in page.split("<h2 id='card'>")[0]   # no scientific notation in the tables
    for src in parser.imgs:
        assert src.startswith("data:image/png;base64,")
        Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1]))).verify()
    # nothing fetched: no script, style sheet, image or frame comes from a URL (Plotly is embedded)
    assert not [a for a in parser.attrs if a[1] in ("src", "href") and a[2] and a[2].startswith(("http", "//"))]
    assert parser.tags.count("script") == 3 and "link" not in parser.tags and "iframe" not in parser.tags
    assert Explanation.from_json(tmp_path / "report" / "explanation.json").to_dict() == explanation.to_dict()


def test_explain_cli(fitted_pairs, data, tmp_path, capsys):
    X, y = data
    fitted_pairs.save(tmp_path / "model")
    X.assign(label=y).to_csv(tmp_path / "d.csv", index=False)
    assert main(["explain", "--model", str(tmp_path / "model"), "--data", str(tmp_path / "d.csv"),
                 "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "report.html").exists()
    out = capsys.readouterr().out
    assert "open the report: file://" in out
    top = fitted_pairs.explain(X).importance[:3]
    assert "most important terms: " + ", ".join(r["term"] + " (" for r in top[:1]) in out
    # Parquet with a wide column the model does not read, more rows than --sample: a seeded sample
    X.assign(embedding=[np.zeros(64)] * len(X)).to_parquet(tmp_path / "d.parquet")
    assert main(["explain", "--model", str(tmp_path / "model"), "--data", str(tmp_path / "d.parquet"),
                 "--out", str(tmp_path / "sampled"), "--sample", "100"]) == 0
    assert "explaining a seeded sample of 100 of the 240 rows" in capsys.readouterr().out
    got = Explanation.from_json(tmp_path / "sampled" / "explanation.json")
    assert got.importance == fitted_pairs.explain(X.sample(100, random_state=0).sort_index()).importance
    X.drop(columns="f1").rename(columns={"f2": "F2"}).to_csv(tmp_path / "bad.csv", index=False)
    assert main(["explain", "--model", str(tmp_path / "model"), "--data", str(tmp_path / "bad.csv"),
                 "--out", str(tmp_path / "out2")]) == 2
    assert ("lacks the model's feature columns ['f1', 'f2']; did you mean 'F2' for 'f2'?; columns: ['f0', 'F2', "
            "'f3']") in capsys.readouterr().err
    assert not (tmp_path / "out2").exists()
    X.rename(columns={"f3": "f_3"}).to_parquet(tmp_path / "bad.parquet")
    assert main(["explain", "--model", str(tmp_path / "model"), "--data", str(tmp_path / "bad.parquet"),
                 "--out", str(tmp_path / "out3")]) == 2
    assert "lacks the model's feature columns ['f3']; did you mean 'f_3'?" in capsys.readouterr().err


def test_loaded_model_needs_data_to_explain(fitted, tmp_path):
    fitted.save(tmp_path / "m")
    with pytest.raises(ValueError, match="explain\\(\\) needs data"):
        NeurCAM.load(tmp_path / "m").explain()


def test_cluster_profiles(explanation, fitted_pairs, data):
    X, _ = data
    assert sum(explanation.cluster_sizes) == len(X)
    assert explanation.cluster_sizes == np.bincount(fitted_pairs.predict(X), minlength=3).tolist()
    for p in explanation.profiles:
        into = [q["mean_relative_contribution"] for q in p["into"]]
        out = [q["mean_relative_contribution"] for q in p["out_of"]]
        assert all(v > 0 for v in into) and into == sorted(into, reverse=True)
        assert all(v < 0 for v in out) and out == sorted(out)
    ranking = [r["importance"] for r in explanation.importance]
    assert ranking == sorted(ranking, reverse=True)


def test_cluster_profiles_compare_members_with_all_rows(explanation, fitted_pairs, data):
    X, _ = data
    labels = fitted_pairs.predict(X)
    used = {f for t in explanation.terms for f in t.features}
    for c, p in enumerate(explanation.profiles):
        members = X[labels == explanation.cluster_ids[c]]
        feats = {f["feature"]: f for f in p["features"]}
        assert set(feats) <= used and {f for q in p["into"] + p["out_of"] for f in q["features"]} <= set(feats)
        z = [abs(f["z"]) for f in p["features"]]
        assert z == sorted(z, reverse=True) or len(z) > 8
        for name, f in feats.items():
            col = X[name].to_numpy()
            assert f["mean"] == pytest.approx(members[name].mean()) and f["overall_mean"] == pytest.approx(col.mean())
            assert f["z"] == pytest.approx((members[name].mean() - col.mean()) / col.std())
            assert f["q10"] == pytest.approx(np.quantile(members[name], 0.1))


def test_cluster_summary_sentences():
    from neurcam_dist.explain.explanation import cluster_summary

    def stat(name, z, mean=1.0):
        return {"feature": name, "z": z, "mean": mean, "overall_mean": 0.5, "q10": 0, "q90": 1}

    into = [{"term": "b & c", "features": ["b", "c"], "mean_relative_contribution": 2.0}]
    p = {"cluster": 4, "size": 10, "into": into, "out_of": [],
         "features": [stat("a", 3.0), stat("b", -0.8, mean=0.25), stat("c", 0.1), stat("d", 0.7)]}
    # the features of the terms pushing rows in come first, then the others by |z|; 0.1 is not distinct
    assert cluster_summary(p) == ("Mostly rows with low b (mean 0.25 against 0.5 over all rows) and "
                                  "high a (mean 1 against 0.5 over all rows).")
    assert cluster_summary(p, n=1).startswith("Mostly rows with low b (") and " and " not in cluster_summary(p, n=1)
    near = dict(p, features=[stat("a", 0.2), stat("b", -0.3)])
    assert cluster_summary(near) == "Rows near the overall average of every feature the model uses; b & c sets them apart."
    assert cluster_summary(dict(p, size=0)) == "No row of the explained data falls in this cluster."
    old = {"cluster": 0, "size": 3, "into": [{"term": "a", "mean_relative_contribution": 1.0}], "out_of": []}
    assert cluster_summary(old) == "Pushed in mostly by a."   # an explanation written before the feature stats


# ---------------------------------------------------------------- SQL a warehouse runs
def test_the_exported_sql_assigns_clusters_in_duckdb_and_sqlite(fitted_pairs, tmp_path, capsys):
    """One query, run by two engines on held-out rows: the cluster predict gives (>= 99.5%), the
    stable ids, a NULL feature read as the term's missing value, as predict reads a NaN; the CLI
    writes it and says the agreement."""
    import sqlite3

    import duckdb

    from neurcam_dist.explain.sql import to_sql
    from .conftest import blobs
    est = fitted_pairs
    rows, _ = blobs(n=4000)              # the fit's distribution: the shape tables span the first 1,000
    train, held = rows.iloc[:1000], rows.iloc[1000:].reset_index(drop=True)
    est.save(tmp_path / "model")
    train.to_parquet(tmp_path / "train.parquet")
    renamed = NeurCAM.load(tmp_path / "model")
    renamed.set_cluster_ids([4, 8, 1], 9)
    held = held.assign(id=np.arange(len(held)), note="x")
    held.loc[7, "f2"] = np.nan                                           # a NULL feature
    sql = to_sql(renamed.explain(train), "held out", keep=["id", "note"])
    con = duckdb.connect()
    con.register("held out", held)
    by_duck = con.execute(sql).df().sort_values("id").reset_index(drop=True)
    lite = sqlite3.connect(":memory:")
    held.to_sql("held out", lite, index=False)
    by_lite = pd.DataFrame(lite.execute(sql).fetchall(), columns=["id", "note", "cluster"]).sort_values("id")
    assert list(by_duck.columns) == ["id", "note", "cluster"] and len(by_duck) == len(held)
    blank = int(renamed.predict(held.loc[[7], renamed.feature_names_in_])[0])
    assert by_duck.loc[7, "cluster"] == blank and by_lite.set_index("id").loc[7, "cluster"] == blank
    ok = held
    want = renamed.predict(ok[renamed.feature_names_in_])
    for got in (by_duck.set_index("id").loc[ok["id"], "cluster"], by_lite.set_index("id").loc[ok["id"], "cluster"]):
        assert set(got.astype(int)) <= {1, 4, 8}
        assert (got.astype(int).to_numpy() == want).mean() >= 0.995
    # the command: written to a file, with the measured agreement said
    assert main(["export", "--model", str(tmp_path / "model"), "--input", str(tmp_path / "train.parquet"),
                 "--table", "analytics.events", "--keep", "f0", "--output", str(tmp_path / "q.sql")]) == 0
    out = capsys.readouterr()
    said = out.out
    assert "the query's cluster equals predict's on" in said and "of the 1,000 rows" in said, said
    assert "warning" not in out.err                                    # 1,000 rows: enough to say
    # agreement measured on a handful of rows says so, and what to pass instead (the query is written)
    train.iloc[:5].to_parquet(tmp_path / "five.parquet")
    assert main(["export", "--model", str(tmp_path / "model"), "--input", str(tmp_path / "five.parquet"),
                 "--table", "t", "--output", str(tmp_path / "five.sql")]) == 0
    err = capsys.readouterr().err
    assert "warning: the agreement was measured on 5 rows of" in err and "fewer than 1,000" in err, err
    assert "pass a larger --input" in err and (tmp_path / "five.sql").exists()
    text = (tmp_path / "q.sql").read_text()
    assert 'FROM "analytics"."events"' in text and text.startswith("-- NeurCAM cluster assignment")
    assert main(["export", "--model", str(tmp_path / "model"), "--input", str(tmp_path / "train.parquet"),
                 "--table", "t", "--keep", "cluster"]) == 2
    assert "--keep cannot name 'cluster'" in capsys.readouterr().err
    # a table without a feature column is refused as explain refuses it, naming the column
    pd.read_parquet(tmp_path / "train.parquet").rename(columns={"f1": "F1"}).to_parquet(tmp_path / "renamed.parquet")
    assert main(["export", "--model", str(tmp_path / "model"), "--input", str(tmp_path / "renamed.parquet"),
                 "--table", "t"]) == 2
    assert "lacks the model's feature columns ['f1']; did you mean 'F1'?" in capsys.readouterr().err


# ---------------------------------------------------------------- what would move a row
def apply(rows, r):
    """The row of a counterfactual with its change (one feature or a pair's two) applied."""
    changed = rows.loc[[r["row"]]].copy()
    changed[r["feature"]] = r["new_value"]
    if r["feature_2"] is not None:
        changed[r["feature_2"]] = r["new_value_2"]
    return changed


def test_counterfactuals_name_one_change_that_moves_each_row(fitted_pairs, data):
    X, _ = data
    est = fitted_pairs
    rows = X.iloc[:40]
    cf = est.counterfactuals(rows)
    now = est.predict(rows)
    assert list(cf["row"]) == list(rows.index) and (cf["cluster"].to_numpy() == now).all()
    moved = 0
    for _, r in cf.iterrows():
        if r["feature"] is None:
            continue
        changed = apply(rows, r)
        assert est.predict(changed)[0] == r["target"] != r["cluster"]      # applying it moves the row
        assert r["change"] == pytest.approx(r["new_value"] - r["value"])
        for f, v in ((r["feature"], r["new_value"]), (r["feature_2"], r["new_value_2"])):
            if f is not None:
                assert X[f].min() - 1e-9 <= v <= X[f].max() + 1e-9           # within the data's range
        moved += 1
    assert moved >= 30
    # a pair move is given only where it is shorter than every one-feature move of that row, and
    # its length is the Euclidean length of the two changes in standard deviations
    singles = est.counterfactuals(rows, pairs=False)
    assert singles["feature_2"].isna().all()
    by_pair = cf[cf["feature_2"].notna()]
    assert len(by_pair), "no pair move in the test: the Neur2CAM model has pair terms"
    sd = dict(zip(est.feature_names_in_, est.scale_, strict=False))
    for i, r in by_pair.iterrows():
        pair = {r["feature"], r["feature_2"]}
        assert any(set(p) == pair for p in est.selected_pairs_)
        assert r["change_std"] == pytest.approx(np.hypot(r["change"] / sd[r["feature"]], r["change_2"] / sd[r["feature_2"]]))
        assert np.isnan(singles.loc[i, "change_std"]) or r["change_std"] < singles.loc[i, "change_std"]
    # toward a chosen cluster: the same rule; a row already there needs no change
    target = int(est.cluster_ids_[0])
    cf0 = est.counterfactuals(rows, target=target)
    assert (cf0.loc[now == target, "change"] == 0).all()
    for _, r in cf0[cf0["feature"].notna()].iterrows():
        assert est.predict(apply(rows, r))[0] == target
    # the smallest one-feature change: no grid value of another used feature (or a smaller step of
    # this one) moves the row with less change in standard deviations
    r = singles[singles["feature"].notna()].iloc[0]
    row = rows.loc[[r["row"]]]
    for f in est.feature_names_in_:
        for v in np.linspace(X[f].min(), X[f].max(), 200):
            trial = row.copy()
            trial[f] = v
            if est.predict(trial)[0] == r["target"]:
                assert abs(v - row[f].iloc[0]) / est.scale_[list(est.feature_names_in_).index(f)] >= \
                    r["change_std"] - 0.02
    with pytest.raises(ValueError, match="not one of this model's cluster ids"):
        est.counterfactuals(rows, target=99)


def test_rules_say_each_cluster_in_a_line_with_measured_coverage_and_precision(fitted, data, tmp_path, capsys):
    from neurcam_dist.explain.rules import cluster_rules
    X, _ = data
    labels = fitted.predict(X)
    rules = cluster_rules(X, labels, fitted.cluster_ids_)
    assert [r.cluster for r in rules] == list(fitted.cluster_ids_)
    for r in rules:
        taken = r.mask(X)
        mine = labels == r.cluster
        assert r.coverage == pytest.approx((taken & mine).sum() / mine.sum())      # measured, not claimed
        assert r.precision == pytest.approx((taken & mine).sum() / taken.sum())
        assert 1 <= len(r.conditions) <= 3 and r.precision >= 0.9 and r.coverage >= 0.5   # well-separated blobs
        assert len({(f, op) for f, op, _ in r.conditions}) == len(r.conditions)          # bounds merged
    fitted.save(tmp_path / "model")
    X.to_csv(tmp_path / "x.csv", index=False)
    assert main(["export", "--model", str(tmp_path / "model"), "--input", str(tmp_path / "x.csv"),
                 "--format", "rules"]) == 0
    out = capsys.readouterr()
    lines = out.out.strip().splitlines()
    assert len(lines) == len(rules) and lines[0].startswith(f"cluster {rules[0].cluster}: ") and "precision" in lines[0]
    assert "a summary to read, not the model" in out.err
    assert main(["export", "--model", str(tmp_path / "model"), "--input", str(tmp_path / "x.csv")]) == 2
    assert "--format sql needs --table NAME" in capsys.readouterr().err


# ---------------------------------------------------------------- the report at many clusters
def test_cluster_colours_never_use_the_others_grey_and_axes_name_their_unit(explanation):
    import matplotlib.pyplot as plt

    from neurcam_dist.explain.report import cluster_colours, thumbnail
    for n in range(1, 19):
        colours = cluster_colours(n)
        assert len(set(colours)) == n                                   # one colour per cluster
        assert not any(abs(r - g) < 0.02 and abs(g - b) < 0.02 for r, g, b, _ in colours), n   # no grey
    term = next(t for t in explanation.terms if t.kind == "main")
    fig = thumbnail(term, 0, explanation.n_clusters, explanation.cluster_ids)
    assert fig.axes[0].get_ylabel() == "logit contribution"
    plt.close(fig)


def test_thumbnails_take_the_strongest_pushes_either_way_and_the_card_lists_unused_features(explanation):
    from neurcam_dist.explain.report import cluster_terms, html_report
    names = [t.name for t in explanation.terms]
    assert len(names) >= 3
    profile = {"into": [{"term": names[0], "mean_relative_contribution": 5.6}],
               "out_of": [{"term": names[1], "mean_relative_contribution": -0.01},
                          {"term": names[2], "mean_relative_contribution": -2.0}]}
    picked = [explanation.terms[i].name for i in cluster_terms(explanation, profile, left_out={})]
    assert picked == [names[0], names[2]]          # the strong push in is drawn, the flat push out is not
    card = dict(explanation.model_card)
    card["selected_features"] = [names[0]] * 3     # one feature picked by three channels
    card["selected_pairs"], card["constant_features_left_out"] = [], []
    expl = type(explanation)(**{**explanation.__dict__, "model_card": card})
    page = html_report(expl, figures={})
    assert f"<td>{names[0]}</td>" in page.replace(", ", ",") or f"<td>{names[0]}</td>" in page
    others = [f for f in explanation.feature_names if f != names[0]]
    assert "features no term reads" in page and ", ".join(others) in page
    assert f"Never selected by any term, so they do not affect the clusters ({len(others)} of" in page


def test_with_a_label_the_report_shows_the_clusters_against_it(fitted, data, tmp_path, capsys):
    import json

    from sklearn.metrics import adjusted_rand_score
    X, y = data
    fitted.save(tmp_path / "model")
    table = X.assign(kind=np.where(y == 0, "a", np.where(y == 1, "b", "c")))
    table.loc[3, "kind"] = None                                     # a row without a label
    table.to_parquet(tmp_path / "t.parquet")
    assert main(["explain", "--model", str(tmp_path / "model"), "--input", str(tmp_path / "t.parquet"),
                 "--output", str(tmp_path / "e"), "--label", "kind"]) == 0
    truth = json.loads((tmp_path / "e" / "explanation.json").read_text())["model_card"]["labels"]
    assigned = fitted.predict(X)
    keep = table["kind"].notna().to_numpy()
    assert truth["ari"] == pytest.approx(adjusted_rand_score(table["kind"][keep], assigned[keep]))
    assert truth["n_rows"] == len(X) - 1 and truth["n_missing"] == 1
    assert sum(v for row in truth["table"].values() for v in row.values()) == len(X) - 1
    page = (tmp_path / "e" / "report.html").read_text()
    assert "Clusters against kind" in page and f"Adjusted Rand index {fmt(truth['ari'])}" in page
    assert page.count("Its rows' kind: ") == len([c for c in truth["mix"].values() if c])
    assert main(["explain", "--model", str(tmp_path / "model"), "--input", str(tmp_path / "t.parquet"),
                 "--output", str(tmp_path / "e2"), "--label", "knd"]) == 2
    assert "has no label column 'knd'" in capsys.readouterr().err


def test_fit_with_a_label_and_a_report_compares_them_in_the_report(data, tmp_path):
    X, y = data
    X.assign(label=y).to_csv(tmp_path / "d.csv", index=False)
    assert main(["fit", "--input", str(tmp_path / "d.csv"), "--output", str(tmp_path / "o"), "--n-clusters", "3",
                 "--label", "label", "--report", "--epochs", "20", "--quiet"]) == 0
    page = (tmp_path / "o" / "report" / "report.html").read_text()
    assert "Clusters against label" in page and "label label" not in page and "Its rows' label: " in page


def test_a_move_of_one_standard_deviation_is_said_in_the_singular():
    from neurcam_dist.explain.examples import change_words
    move = {"target": 2, "feature": "a", "value": 0.5, "new_value": 1.5}
    assert change_words({**move, "change_std": 1.0}).endswith("from 0.5 to 1.5 (1 standard deviation)")
    assert change_words({**move, "change_std": 1.25}).endswith("(1.25 standard deviations)")


def test_a_row_s_values_are_shown_as_they_are():
    """A year is 2007, not 2010 (3 significant digits); 29.75 stays 29.75; a move between two close
    values reads as a change."""
    from neurcam_dist.explain.examples import change_words, row_text, value_text
    assert [value_text(v) for v in (2007.0, 29.75, 101.23, 1e-7, None, "monthly")] == [
        "2007", "29.75", "101.23", "0.0000001", "missing", "monthly"]
    record = {"row": 3, "cluster": 1, "probability": 0.9, "values": {"year": 2007.0, "charges": 29.75},
              "terms": [{"term": "year", "push": 1.234}, {"term": "charges", "push": -0.5}],
              "change": {"target": 2, "feature": "charges", "value": 101.23, "new_value": 100.87, "change_std": 0.02}}
    text = row_text(record)
    assert "year=2007" in text and "charges=29.75" in text and "from 101.23 to 100.87" in text
    assert change_words(record["change"]).startswith("would join cluster 2 if charges went from 101.23 to 100.87")
    # a move too small for 6 digits is shown with the digits that tell the two values apart
    tiny = {"target": 1, "feature": "balance", "value": 1000000.0, "new_value": 1000000.0002, "change_std": 0.0001}
    assert "went from 1000000 to 1000000.0002 " in change_words(tiny)
    assert "went from 123456.5 to 123456.6 " in change_words(dict(tiny, value=123456.51, new_value=123456.58))


def test_one_number_format_on_the_console_in_the_report_the_rules_and_choice_html():
    """A measured number reads the same everywhere: at most 3 significant digits, never scientific
    notation (an inertia of 5193.2 is 5190 in choice.html's tables and on the console, a mean of
    123456.7 is 123000, a rule's bound 123500), and the page's hover labels use the same rule."""
    import dataclasses
    import re
    from neurcam_dist.choosing import choice_html, decide
    from neurcam_dist.explain.explanation import cluster_summary
    from neurcam_dist.explain.report_script import SCRIPT
    from neurcam_dist.explain.rules import Rule
    from neurcam_dist.monitor.page import _p
    from neurcam_dist.numerics import fmt
    assert [fmt(v) for v in (5193.2, 1.234e-5, 1234567.0, -0.5, 0.0)] == ["5190", "0.0000123", "1230000", "-0.5", "0"]
    assert fmt(123456.7, digits=4) == "123500" and fmt(1e-9, scale=10.0) == "0"
    stats = [{"feature": "income", "z": 2.0, "mean": 123456.7, "overall_mean": 1.234e-5, "q10": 0, "q90": 1}]
    assert cluster_summary({"cluster": 0, "size": 5, "into": [], "out_of": [], "features": stats}) == (
        "Mostly rows with high income (mean 123000 against 0.0000123 over all rows).")
    assert Rule(0, (("income", "<=", 123456.7),), 1.0, 1.0, 5, 10).text() == "income <= 123500"
    row = {"k": 3, "silhouette": 0.5, "stability": 1.0, "stable": True, "separated": True, "clusters_used": 3,
           "inertia": 5193.2, "stability_sd": 0.0, "term_agreement": 1.0, "terms_used": 3, "seconds": 0.1}
    choice = decide([dict(row, k=2, silhouette=0.3), row], 3, 300, 0.0)
    choice = dataclasses.replace(choice, terms=[{"n_single": 2, "n_pairs": 0, "terms": 2, "inertia": 5193.2,
                                                 "ratio": 1.0, "seconds": 0.1}])
    page = choice_html(choice)
    assert "<td>5190</td>" in page.split("How few terms suffice")[1] and not re.search(r"\de[+-]\d", page)
    assert any(" 5190 " in line for line in choice.lines()) and not any(re.search(r"\de[+-]\d", x) for x in choice.lines())
    assert not re.search(r"%\{[xyz]:[^}]*g\}", SCRIPT)   # d3's "g" turns 50000 into 5.000e+4
    assert _p(1e-30) == "&lt; 0.0001" and _p(0.0123) == "0.012"
