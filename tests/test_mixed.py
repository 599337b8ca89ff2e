"""Tables as they come: categorical columns and missing cells read natively, from fit to SQL."""
import json
import re
import sqlite3

import numpy as np
import pandas as pd
import pytest

from neurcam_dist import NeurCAM, service
from neurcam_dist.cli import main
from neurcam_dist.columns import ColumnCoding
from neurcam_dist.data.synthetic import mixed_table
from neurcam_dist.errors import ConfigError, DataError
from neurcam_dist.explain.sql import run_agreement, to_sql

from .conftest import SMALL

FAST = dict(SMALL, epochs=40, warmup_epochs=15, batch_size=64)


@pytest.fixture(scope="module")
def mixed():
    df, y = mixed_table(600, seed=1, defined_by="level")
    X = df.drop(columns="customer_id")
    return X, y, NeurCAM(n_clusters=3, random_state=0, **FAST).fit(X)


def test_text_category_and_boolean_columns_are_features_and_missing_cells_a_value(mixed):
    from sklearn.metrics import adjusted_rand_score
    X, y, est = mixed
    coding = est.fitted_.coding
    assert [c.name for c in coding.columns if c.categorical] == ["plan", "region", "paperless"]
    assert coding.columns[0].levels[-1] == "(other levels)" and set(coding.columns[0].levels[:-1]) == {
        "monthly", "yearly", "two-year"}
    assert coding.columns[1].levels[:-1] == ("north", "south", "east", "west")     # a category's own order
    assert coding.columns[2].levels == ("False", "True", "(other levels)")
    assert coding.missing_shares()["usage"] == pytest.approx(X["usage"].isna().mean())
    # the segments are the plan's levels: with a level weighing as much as a standardized numeric
    # (categorical_weight=1; the default weighs it less, docs/mixed.md) found, and the plan ranks first
    level = NeurCAM(n_clusters=3, random_state=0, categorical_weight=1.0, **FAST).fit(X)
    assert adjusted_rand_score(y, level.labels_) > 0.85
    assert level.importance_["term"].iloc[0] == "plan"
    # scoring: a level never seen at training is 'other' and counted, a blank cell takes its value
    new = X.head(20).copy()
    new.loc[new.index[0], "plan"] = "weekly"
    new.loc[new.index[1], "tenure"] = np.nan
    scored, met = est.score_frame_counted(new)
    assert met["unseen"] == {"plan": 1} and met["missing"]["tenure"] == 1
    assert scored["cluster"].notna().all()
    other = new.iloc[[0]].assign(plan="other")
    assert est.decision_function(new.iloc[[0]]) == pytest.approx(est.decision_function(other))


def test_a_level_the_data_calls_other_keeps_its_name_and_a_pooled_cell_shows_the_rows_own_value(tmp_path):
    """The pooled level is "(other levels)", apart from a level named "other"; a row scored with it
    shows its own value beside it; a model saved when the pooled level was named "other" reads the same."""
    import hashlib
    df, _ = mixed_table(400, seed=2, defined_by="level")
    X = df.drop(columns="customer_id")
    X["plan"] = X["plan"].replace({"two-year": "other"})           # a level the data itself calls 'other'
    est = NeurCAM(n_clusters=3, random_state=0, **FAST).fit(X)
    levels = est.fitted_.coding.columns[0].levels
    assert "other" in levels[:-1] and levels[-1] == "(other levels)" and len(set(levels)) == len(levels)
    assert est.explain(X).term("plan").levels[0][-2:] == ["(other levels)", "missing"]
    new = X.head(2).assign(plan=["Three year", "other"])
    shown = [r["values"].get("plan") for r in est.explain(X, rows=new).examples["rows"]]
    assert shown == ["Three year (other levels)", "other"]
    est.save(tmp_path / "m")
    config = tmp_path / "m" / "config.json"
    saved = json.loads(config.read_text())
    assert saved["coding"]["columns"][0]["levels"][-1] == "(other levels)"
    saved["coding"]["columns"][0]["levels"][-1] = "other"                # as an older version wrote it
    config.write_text(json.dumps(saved))
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    manifest["files"]["config.json"] = hashlib.sha256(config.read_bytes()).hexdigest()
    (tmp_path / "m" / "manifest.json").write_text(json.dumps(manifest))
    old = NeurCAM.load(tmp_path / "m")
    assert old.fitted_.coding.columns[0].levels == levels
    np.testing.assert_array_equal(old.predict(new), est.predict(new))


def test_a_categorical_term_is_a_lookup_table_of_its_levels(mixed):
    X, _, est = mixed
    expl = est.explain(X)
    term = expl.term("plan")
    assert term.levels == [["two-year", "yearly", "monthly", "(other levels)", "missing"]] or term.levels[0][-2:] == [
        "(other levels)", "missing"]
    assert term.values.shape == (len(term.levels[0]) - 1, 3) and term.missing.shape == (3,)
    rows = est.explain_rows(X)
    col = rows.terms.index("plan")
    codes = est.fitted_.encode(X)[:, 0]
    for code in np.unique(codes[~np.isnan(codes)]):
        at = rows.contributions[codes == code, col]       # every row of a level: one contribution
        assert np.ptp(at, axis=0).max() < 1e-5
    # the table scorer (the exported tables only) agrees with the network, missing cells included
    assert (expl.to_scorer().predict(X) == est.predict(X)).all()
    again = type(expl).from_dict(json.loads(json.dumps(expl.to_dict())))
    assert again.term("plan").levels == term.levels
    assert (again.to_scorer().predict(X) == est.predict(X)).all()
    sizes = expl.term("usage").histogram
    assert sizes["missing"] == int(X["usage"].isna().sum())
    profile = expl.profiles[int(np.argmax([p["size"] for p in expl.profiles]))]
    assert any("level" in f for f in profile["features"])


def test_the_model_file_keeps_the_levels_and_older_models_still_load(mixed, tmp_path):
    X, _, est = mixed
    est.save(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config["coding"]["columns"][0]["name"] == "plan"
    loaded = NeurCAM.load(tmp_path / "m")
    assert (loaded.predict(X) == est.predict(X)).all()
    # a model of plain numbers written before the coding existed: its state has no input coding
    numeric = X[["usage", "tenure", "income"]].dropna()
    plain = NeurCAM(n_clusters=3, random_state=0, **FAST).fit(numeric)
    state, weights = plain.fitted_.to_dict()
    state.pop("coding")
    weights = {k: v for k, v in weights.items() if not k.startswith("coding.")}
    from neurcam_dist.model import FittedNet
    old = FittedNet.from_dict({**state, "params": plain.get_params()}, weights)
    assert old.coding is None and old.net.coding is None
    np.testing.assert_allclose(old.logits(numeric.to_numpy()), plain.fitted_.logits(numeric.to_numpy()), atol=1e-5)
    # its messages are today's: the column, the rows, and what to do with a model of that age
    with pytest.raises(DataError, match=r"X has missing values in column\(s\) 'usage' \(\d+ rows\).*saved before "
                                        r"missing cells could be scored.*fit the model again"):
        old.encode(numeric.assign(usage=np.nan))
    with pytest.raises(DataError, match=r"^new.csv has missing values in column\(s\) 'usage'"):
        old.encode(numeric.assign(usage=np.nan), "new.csv")      # neurcam predict names its input so
    with pytest.raises(DataError, match=r"infinite values in column\(s\) 'tenure'"):
        old.encode(numeric.assign(tenure=np.inf))
    with pytest.raises(DataError, match=r"column 'income'.*holds 'unknown'|column 'income'.*unknown"):
        old.encode(numeric.assign(income=numeric.income.astype(object).where(numeric.index != numeric.index[0],
                                                                             "unknown")))


def test_bad_cells_are_named(mixed):
    X, _, est = mixed
    with pytest.raises(DataError, match=r"infinite values in column\(s\) 'tenure' \(1 rows\)"):
        est.predict(X.assign(tenure=X.tenure.where(X.index != 4, np.inf)))
    with pytest.raises(DataError, match=r"column 'usage' was numeric at fit but holds text"):
        est.predict(X.assign(usage=X.usage.astype(object).where(X.index != 2, "unknown")))
    with_token = X.assign(usage=X.usage.astype(object).where(X.index != 2, "n/a"))   # a missing token: missing
    assert est.predict(with_token)[2] == est.predict(X.assign(usage=X.usage.where(X.index != 2, np.nan)))[2]
    with pytest.raises(DataError, match=r"column 'tenure' holds numbers except 1 cell\(s\), the first at row 3"):
        NeurCAM(n_clusters=3, **FAST).fit(X.assign(tenure=X.tenure.astype(str).where(X.index != 3, "?")))
    with pytest.raises(ValueError, match=r"categorical_features names 'planz'.*did you mean 'plan'"):
        NeurCAM(n_clusters=3, categorical_features=["planz"], **FAST).fit(X)
    # booleans among text are a category, not numbers with typos (pandas reads True as 1)
    rng = np.random.default_rng(0)
    flags = pd.Series(rng.choice(np.array([True, "yes", False, None], dtype=object), len(X)), dtype=object)
    coding, _ = ColumnCoding.fit(X[["tenure"]].assign(flag=flags))
    assert set(coding.columns[1].levels) == {"True", "yes", "False", "(other levels)"} and coding.columns[1].missing_rows > 0
    # Decimal cells (a database driver's NUMERIC) are numbers, at fit and at predict alike
    import decimal
    prices = pd.Series([decimal.Decimal(f"{v:.2f}") for v in X.tenure], dtype=object).where(X.index != 5, None)
    coding, arr = ColumnCoding.fit(X[["tenure"]].assign(price=prices))
    assert not coding.columns[1].categorical and np.isnan(arr[5, 1]) and arr[0, 1] == round(float(X.tenure[0]), 2)
    np.testing.assert_array_equal(coding.encode(X[["tenure"]].assign(price=prices.astype(float))), arr)


def test_integer_codes_named_categorical_and_rare_levels_share_other():
    rng = np.random.default_rng(0)
    X = pd.DataFrame({"segment_code": rng.choice([1, 2, 3], 300), "x": rng.normal(size=300)})
    X.loc[:2, "segment_code"] = 9          # 3 rows: fewer than min_level_rows=5
    coding, arr = ColumnCoding.fit(X, ["segment_code"])
    col = coding.columns[0]
    assert col.levels == ("1", "2", "3", "(other levels)") and col.dtype == "number" and col.rows[-1] == 3
    assert (arr[:3, 0] == 3).all()
    plain, _ = ColumnCoding.fit(X)            # not named: a number like any other
    assert not plain.has_categorical


def test_clustering_space_of_a_numeric_table_is_its_standardized_columns(data):
    X, _ = data
    est = NeurCAM(n_clusters=3, random_state=0, **FAST).fit(X)
    np.testing.assert_array_equal(est.clustering_space(X), est.transform_features(X))
    space = est.fitted_.coding.clustering_space(np.array([[0.0, 1.0, np.nan, 2.0]]))
    assert space.tolist() == [[0.0, 1.0, 0.0, 2.0]]   # a missing cell at the mean (no indicator: none at fit)


def test_the_sql_query_reads_levels_nulls_quotes_and_booleans_in_duckdb_and_sqlite():
    import duckdb
    df, _ = mixed_table(400, seed=3, defined_by="level")
    df["plan"] = df["plan"].replace({"two-year": "Bob's plan"})     # a quote in a level
    X = df.drop(columns="customer_id")
    est = NeurCAM(n_clusters=3, random_state=0, **FAST).fit(X)
    new = X.head(60).copy()
    new.loc[new.index[:3], "plan"] = ["weekly", None, "monthly"]     # unseen, NULL
    new.loc[new.index[4], "income"] = np.nan
    expl = est.explain(X)
    engines = run_agreement(expl, new, est.predict(new), est.fitted_.coding.dtypes())
    assert engines == {"sqlite": 1.0, "sqlite-text": 1.0, "duckdb": 1.0}
    text = to_sql(expl, "rows", dtypes=est.fitted_.coding.dtypes())
    assert "'Bob''s plan'" in text and "IS NULL OR TRIM(CAST(\"income\" AS VARCHAR)) = ''" in text
    assert "LOWER(TRIM(CAST(\"paperless\" AS VARCHAR))) IN ('true', '1', '1.0')" in text   # typed or text alike
    con = duckdb.connect()
    con.register("rows", new.astype({"region": object}))
    got = con.execute(text).fetchdf()["cluster"].to_numpy()
    assert (got == est.predict(new)).all()
    with sqlite3.connect(":memory:") as lite:
        new.astype({"region": object}).to_sql("rows", lite, index=False)
        assert (pd.read_sql_query(text, lite)["cluster"].to_numpy() == est.predict(new)).all()


def test_sql_reads_blank_text_as_predict_does_and_refuses_what_no_engine_holds(mixed, tmp_path):
    """Blank text ('' and spaces) is a missing cell in the query as in predict; columns whose
    names are one in SQL, a column named like the query's own and a level with a NUL character are
    refused by name before a query is built; a query below --min-agreement is not written and the
    rows that disagree are shown; a feature missing in every training row is refused at fit."""
    from neurcam_dist.explain.sql import check_names
    X, _, est = mixed
    expl = est.explain(X)
    dtypes = est.fitted_.coding.dtypes()
    rows = X.head(40).copy()
    nulls = rows.assign(plan=None)
    for blank in ("", "   "):
        got = run_agreement(expl, rows.assign(plan=blank), est.predict(nulls), dtypes)
        assert got == {"sqlite": 1.0, "sqlite-text": 1.0, "duckdb": 1.0}, (blank, got)
    assert (est.predict(rows.assign(plan="  ")) == est.predict(nulls)).all()
    with pytest.raises(DataError, match=r"columns 'PLAN' and 'plan' are one column in SQL"):
        to_sql(expl, "t", keep=["PLAN"], dtypes=dtypes)
    with pytest.raises(ConfigError, match=r"--keep cannot name 'cluster'"):
        to_sql(expl, "t", keep=["Cluster"], dtypes=dtypes)
    with pytest.raises(DataError, match=r"column '__neurcam_x0_0' has the name of one of the query's own columns"):
        check_names(expl, ["__neurcam_x0_0"], ["__neurcam_x0_0"])
    nul = X.assign(plan=X["plan"].replace({"monthly": "month\x00ly"}))
    nul_model = NeurCAM(n_clusters=3, random_state=0, **dict(FAST, epochs=10, warmup_epochs=4)).fit(nul)
    with pytest.raises(DataError, match=r"column 'plan' has a level with a NUL character, 'month\\x00ly'"):
        to_sql(nul_model.explain(nul), "t", dtypes=dtypes)
    # below the threshold: nothing written, the rows that disagree shown
    est.save(tmp_path / "model")
    X.to_parquet(tmp_path / "x.parquet")
    args = ["export", "--model", str(tmp_path / "model"), "--input", str(tmp_path / "x.parquet"), "--table", "t",
            "--grid-size", "2", "--pair-grid-size", "2", "--output", str(tmp_path / "q.sql")]
    assert main([*args, "--min-agreement", "0"]) == 0 and (tmp_path / "q.sql").exists()
    (tmp_path / "q.sql").unlink()
    with pytest.raises(DataError, match=r"below --min-agreement 100%, so nothing was written; [\d,]+ rows disagree, "
                                        r"e\.g\. row \d+ \(predict \d, query \d: plan="):
        service.export(str(tmp_path / "model"), str(tmp_path / "x.parquet"), table="t", grid_size=2,
                       pair_grid_size=2, output=str(tmp_path / "q.sql"), min_agreement=1.0)
    assert main([*args, "--min-agreement", "1"]) == 2 and not (tmp_path / "q.sql").exists()
    with pytest.raises(SystemExit):
        main([*args, "--min-agreement", "1.5"])
    # a feature with no values at all: refused at fit (auto selection leaves it out, saying why)
    with pytest.raises(DataError, match=r"column\(s\) 'income' are missing in every one of the 600 rows"):
        NeurCAM(n_clusters=3, **FAST).fit(X.assign(income=np.nan))


def test_a_column_of_another_kind_is_refused_and_look_alike_levels_are_named(mixed):
    """Numbers where text levels were (or 0/1 where True/False were) and none a known level:
    refused by predict, naming the column and both kinds; numbers that are the levels' text are
    read. Levels that differ only in case, outer spaces or Unicode form are named at fit."""
    X, _, est = mixed
    with pytest.raises(DataError, match=r"column 'plan' held text levels at fit .* but holds numbers here "
                                        r"\(dtype int64\), none of them a level the model knows"):
        est.predict(X.assign(plan=np.arange(len(X)) % 3))
    with pytest.raises(DataError, match=r"column 'paperless' held True/False at fit .* but holds numbers here"):
        est.predict(X.assign(paperless=X["paperless"].astype(int)))
    coded = X.assign(plan=X["plan"].map({"monthly": "1", "yearly": "2", "two-year": "3"}))
    by_text = NeurCAM(n_clusters=3, random_state=0, **dict(FAST, epochs=10, warmup_epochs=4)).fit(coded)
    as_numbers = coded.assign(plan=coded["plan"].astype(int))
    assert (by_text.predict(as_numbers) == by_text.predict(coded)).all()
    alike = X.copy()
    alike.loc[alike.index[:30], "plan"] = "Monthly"
    alike.loc[alike.index[30:60], "plan"] = "monthly "
    alike.loc[alike.index[60:90], "plan"] = "cafe\u0301"
    alike.loc[alike.index[90:120], "plan"] = "caf\u00e9"
    with pytest.warns(UserWarning, match=r"column 'plan': 2 group\(s\) of levels differ only in case, outer spaces "
                                         r"or Unicode form, and are kept as distinct levels .*'Monthly' \(30 rows\)"):
        model = NeurCAM(n_clusters=3, random_state=0, **dict(FAST, epochs=10, warmup_epochs=4)).fit(alike)
    assert {"Monthly", "monthly ", "monthly"} <= set(model.fitted_.coding.columns[0].levels)


def test_missing_tokens_read_the_same_from_csv_parquet_pandas_and_sql(mixed, tmp_path):
    """``NA`` / ``None`` / ``NULL`` text cells are missing from every door, as the CSV reader takes
    them: the same rows land in the same clusters from a CSV, a Parquet file, a DataFrame and the
    exported query; a numbers column holding a token reads it as missing; a model that learned a
    token as a level (before this rule) keeps reading it as that level."""
    from neurcam_dist.columns import Column, level_codes
    from neurcam_dist.data.tables import read_table
    X, _, _ = mixed
    X = X.assign(plan=X["plan"].astype(object), tenure=X["tenure"].round(2).astype(str))
    X.loc[X.index[:40], "plan"] = "NA"
    X.loc[X.index[40:80], "plan"] = "None"
    X.loc[X.index[80:90], "plan"] = "NULL"
    X.loc[X.index[90:95], "tenure"] = "NA"
    X.to_csv(tmp_path / "x.csv", index=False)
    X.to_parquet(tmp_path / "x.parquet")
    from_csv, from_parquet = read_table(str(tmp_path / "x.csv")), read_table(str(tmp_path / "x.parquet"))
    assert from_parquet["plan"].iloc[0] == "NA" and pd.isna(from_csv["plan"].iloc[0])   # the doors differ ...
    est = NeurCAM(n_clusters=3, random_state=0, **dict(FAST, epochs=20, warmup_epochs=8)).fit(
        from_parquet.assign(tenure=from_csv["tenure"]))
    assert est.fitted_.coding.columns[0].levels == ("two-year", "yearly", "monthly", "(other levels)")   # ... the model not
    assert est.fitted_.coding.missing_shares()["plan"] == pytest.approx(90 / len(X), abs=0.02)
    by_csv, by_parquet = est.predict(from_csv), est.predict(from_parquet)
    np.testing.assert_array_equal(by_csv, by_parquet)     # tenure from Parquet: text with an 'NA' cell
    np.testing.assert_array_equal(est.predict(X), by_csv)
    got = run_agreement(est.explain(from_csv), from_parquet.assign(tenure=from_csv["tenure"]), by_csv,
                        est.fitted_.coding.dtypes())
    assert got == {"sqlite": 1.0, "sqlite-text": 1.0, "duckdb": 1.0}
    old = Column(name="plan", levels=("NA", "monthly", "other"), dtype="text")
    codes, unseen = level_codes(pd.Series(["NA", "monthly", "None", "weekly"]), old.levels)
    assert codes[:2].tolist() == [0.0, 1.0] and np.isnan(codes[2]) and codes[3] == 2.0 and unseen == 1


def test_a_clustering_space_of_too_many_levels_is_refused_before_it_is_built():
    """A column of 10,000 levels kept with min_level_rows=1 on a million rows: the one-hot space
    would take hundreds of GiB; the fit refuses at once with the estimate and what to lower."""
    import time
    rng = np.random.default_rng(0)
    n = 1_000_000
    X = pd.DataFrame({"code": pd.Categorical.from_codes(rng.integers(0, 10_000, n),
                                                        [f"L{i:05d}" for i in range(10_000)]),
                      "x": rng.normal(size=n)})
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=r"the clustering space of 1,000,000 rows x 10,002 columns \(one per categorical "
                                          r"level; levels: 'code' 10,001\) needs about 18\d\.\d GiB.*lower max_levels"):
        NeurCAM(n_clusters=3, min_level_rows=1, max_levels=20_000, verbose=False).fit(X)
    assert time.perf_counter() - t0 < 60
    from neurcam_dist.columns import ColumnCoding
    coding, _ = ColumnCoding.fit(X.head(50_000), min_level_rows=1, max_levels=20_000)
    said = []
    with pytest.raises(ConfigError, match=r"needs about 9\.\d GiB, over half of the 8\.0 GiB available"):
        coding.check_space(50_000, 8 * 2**30, say=said.append)       # about 9 GiB: refused with 8 ...
    coding.check_space(50_000, 64 * 2**30, say=said.append)          # ... said with 64
    assert len(said) == 1 and re.search(r"takes about 9\.\d GiB while it is built", said[0])


def test_fit_predict_export_on_a_csv_with_text_ids_free_text_categories_and_blanks(tmp_path, capsys):
    df, _ = mixed_table(300, seed=4, defined_by="level")
    df["comment"] = [f"called on day {i}" for i in range(len(df))]
    df["price"] = [f"${v:,.2f}" for v in np.linspace(5, 5000, len(df))]   # an amount exported as formatted text
    df["zip"] = [f"0{2000 + i}" for i in range(len(df))]                   # codes: digits, leading zeros kept
    df.to_csv(tmp_path / "t.csv", index=False)
    args = ["fit", "--input", str(tmp_path / "t.csv"), "--output", str(tmp_path / "run"), "--n-clusters", "3",
            *[a for k, v in FAST.items() if k not in ("verbose", "device")
              for a in (f"--{k.replace('_', '-')}", *(map(str, v) if isinstance(v, tuple) else [str(v)]))]]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "categorical: plan, region, paperless" in err
    assert "comment (text with 300 distinct values, more than a category's max_levels=64" in err
    assert ("price (numbers written as text with '$', thousands separators (e.g. '$5.00', '$21.71'), 300 distinct "
            "values: write them as plain numbers (1234.5)") in err
    assert "zip (text with 300 distinct values" in err
    assigned = pd.read_csv(tmp_path / "run" / "assignments.csv", dtype={"customer_id": str})
    assert assigned["customer_id"].tolist() == df["customer_id"].tolist()
    new = df.head(30).copy()
    new.loc[new.index[0], "plan"] = "weekly"
    new.loc[new.index[1], "tenure"] = np.nan
    new.to_csv(tmp_path / "new.csv", index=False)
    new.to_parquet(tmp_path / "new.parquet")
    for src, out in (("new.csv", "s1"), ("new.parquet", "s2")):
        assert main(["predict", "--model", str(tmp_path / "run" / "model"), "--input", str(tmp_path / src),
                     "--output", str(tmp_path / out), "--id", "customer_id"]) == 0
        said = capsys.readouterr().out
        assert "levels not seen at training, scored as (other levels): plan (1 cells)" in said
        assert "tenure (1 cells)" in said
    a, b = pd.read_parquet(tmp_path / "s1"), pd.read_parquet(tmp_path / "s2")
    assert (a["cluster"] == b["cluster"]).all()
    assert (a["cluster"].to_numpy() == NeurCAM.load(tmp_path / "run" / "model").predict(
        new.drop(columns=["customer_id", "comment"])[["plan", "region", "paperless", "usage", "tenure", "income"]])).all()
    assert main(["export", "--model", str(tmp_path / "run" / "model"), "--input", str(tmp_path / "t.csv"),
                 "--table", "crm.customers", "--output", str(tmp_path / "q.sql")]) == 0
    assert "in SQLite, SQLite with every column TEXT and DuckDB" in capsys.readouterr().out


def test_counterfactuals_move_rows_to_another_level_and_rules_read_levels(mixed):
    X, _, est = mixed
    rows = X.head(12)
    moves = est.counterfactuals(rows)
    level_moves = moves[moves["feature"].isin(["plan", "region", "paperless"])]
    assert len(level_moves) and level_moves["change_std"].eq(1.0).all()
    moved = rows.copy()
    for i, m in moves.iterrows():
        if not isinstance(m["feature"], str):
            continue
        value = m["new_value"]
        if m["feature"] == "paperless":
            value = value == "True"
        moved.loc[moved.index[i], m["feature"]] = value
    done = moves["feature"].map(lambda f: isinstance(f, str)).to_numpy()
    assert (est.predict(moved)[done] == moves["target"].to_numpy()[done]).all()
    # the candidates of a move are scored around their row (only the moved features' channels run),
    # as the whole network scores them: a level, a number and a missing cell moved, from a row with one
    fitted = est.fitted_
    arr = fitted.coding.encode(rows) if fitted.coding is not None else rows.to_numpy(float)
    r = int(np.flatnonzero(np.isnan(arr).any(1))[0])
    block = np.repeat(arr[r:r + 1], 9, axis=0)
    for i, (j, v) in enumerate([(0, 0), (0, 1), (1, 2), (2, 1), (3, np.nan), (3, -2.0), (4, 40.0), (5, 1e5), (4, 0)]):
        block[i, j] = v
    import torch
    x, base = (torch.from_numpy(fitted.standardize(a)) for a in (block, arr[r:r + 1]))
    assert fitted.net.single._sparse_inputs(*fitted.net._coded(x, base[0])) is not None   # few channels run
    np.testing.assert_allclose(fitted.logits(block, around=arr[r]), fitted.logits(block), rtol=0, atol=1e-4)
    assert (fitted.assign(block, around=arr[r]) == fitted.assign(block)).all()
    from neurcam_dist.explain.rules import cluster_rules
    rules = cluster_rules(X, est.predict(X), est.cluster_ids_)
    text = " ".join(r.text() for r in rules)
    assert "plan = " in text or "plan != " in text
    assert all(r.precision > 0.5 for r in rules)


@pytest.mark.usefixtures("ray_cluster")
def test_numbers_written_as_text_with_blank_cells_are_one_numeric_feature_at_both_doors(tmp_path, capsys):
    """An amount exported as text with ' ' in its blank cells (a well-known churn table's form):
    a numeric feature with missing cells from a DataFrame as from the CLI, one model either way."""
    rng = np.random.default_rng(4)
    df = pd.DataFrame({"tenure": rng.integers(1, 70, 600), "monthly": rng.normal(60, 20, 600).round(2)})
    df["total"] = (df.tenure * df.monthly).round(2).astype(str)
    df.loc[[5, 17, 488], "total"] = " "
    df.loc[[9], "total"] = "NA"
    df.to_csv(tmp_path / "churn.csv", index=False)
    raw = pd.read_csv(tmp_path / "churn.csv", keep_default_na=False)   # every cell as written
    assert not pd.api.types.is_numeric_dtype(raw["total"])
    est = NeurCAM(n_clusters=3, random_state=0, **FAST).fit(raw)
    total = est.fitted_.coding.columns[2]
    assert (total.name, total.categorical, total.missing_rows) == ("total", False, 4)
    assert main(["fit", "--input", str(tmp_path / "churn.csv"), "--output", str(tmp_path / "out"), "--n-clusters", "3",
                 "--hidden", "32", "32", "--n-bases", "8", "--warmup-epochs", "15", "--epochs", "40",
                 "--distill-epochs", "3", "--batch-size", "64"]) == 0   # FAST's values
    assert "features (3): tenure, monthly, total; numbers written as text (blank cells missing): total" in \
        capsys.readouterr().err
    cli = NeurCAM.load(tmp_path / "out" / "model")
    assert cli.fitted_.coding.columns[2] == total
    np.testing.assert_array_equal(cli.predict(raw), est.predict(raw))
    typo = raw.assign(total=raw["total"].replace({"NA": "n/a?"}))   # text that is no number is still refused
    with pytest.raises(DataError, match=r"column 'total' holds numbers except 1 cell\(s\), the first at row 9"):
        NeurCAM(n_clusters=3, **FAST).fit(typo)


def test_ray_training_counts_levels_and_missing_cells_across_shards(tmp_path, capsys):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from neurcam_dist.config import DataConfig
    from neurcam_dist.data import plan, profile
    from neurcam_dist.distributed import train
    df, _ = mixed_table(600, seed=5, defined_by="level")
    df["id"] = np.arange(len(df))
    df["price"] = [f"${v:,.2f}" for v in np.linspace(5, 5000, len(df))]   # every value in one row: all 'other'
    df["note"] = [f"called on day {i}" for i in range(len(df))]              # free text
    d = tmp_path / "shards"
    d.mkdir()
    a, b = df.iloc[:300].copy(), df.iloc[300:].copy()
    b.loc[b["plan"] == "two-year", "plan"] = "two years"      # a level only the second file has
    a.to_parquet(d / "a.parquet")
    t = pa.Table.from_pandas(b, preserve_index=False)
    i = t.schema.get_field_index("plan")
    pq.write_table(t.set_column(i, "plan", t["plan"].dictionary_encode()), d / "b.parquet")   # dictionary here
    features = ["plan", "region", "paperless", "usage", "tenure", "income", "price"]
    prof = profile(plan(DataConfig(path=str(d), id="id", features=features)), missing="learn")
    assert prof.levels["plan"] == {"monthly": int((df.plan == "monthly").sum()), "yearly": int((df.plan == "yearly").sum()),
                                   "two-year": int((a.plan == "two-year").sum()),
                                   "two years": int((b.plan == "two years").sum())}
    assert prof.missing["usage"] == int(df.usage.isna().sum()) and prof.missing["region"] == int(df.region.isna().sum())
    with pytest.raises(DataError, match=r"(?s)column 'usage'.*null.*model.missing: learn"):
        profile(plan(DataConfig(path=str(d), id="id", features=features)))
    blank = d.parent / "blank"   # a feature missing in every row is refused by the Ray pass as by the estimator
    blank.mkdir()
    for name in ("a", "b"):
        pq.write_table(pq.read_table(d / f"{name}.parquet").drop_columns(["region"]).append_column(
            "region", pa.nulls(300, pa.string())), blank / f"{name}.parquet")
    with pytest.raises(DataError, match=r"column\(s\) 'region' are missing in every one of the 600 rows"):
        profile(plan(DataConfig(path=str(blank), id="id", features=features)), missing="learn")
    res = train({"data": {"path": str(d), "id": "id", "features": features},
                 "model": {**{k: v for k, v in FAST.items() if k not in ("verbose", "device")}, "hidden": [16, 16],
                           "n_clusters": 3, "epochs": 12, "warmup_epochs": 4, "distill_epochs": 2,
                           "categorical_weight": 1.5},
                 "train": {"num_workers": 2, "cpus_per_worker": 1}, "output": str(tmp_path / "out")})
    est = res.estimator
    coding = est.fitted_.coding
    assert coding.categorical_weight == 1.5 and est.get_params()["categorical_weight"] == 1.5   # the config's, on Ray
    # a named text column whose values are all rare is 'other' in every row: said why, and no gate takes it
    # (as the estimator leaves it out in memory)
    said = capsys.readouterr()
    assert ("price: none of its 600 distinct values is in min_level_rows=5 rows, so it is in (other levels) in every "
            "row and no gate may select it; numbers written as text with '$', thousands separators") in said.out + said.err
    assert coding.columns[6].levels == ("(other levels)",) and "price" not in est.selected_features_
    assert "price" not in NeurCAM(**FAST, n_clusters=3).fit(df[features]).selected_features_
    # with the features chosen from the schema, the profile pass leaves it out (as fit's "not used"),
    # and the plan, the profile and the model's width follow
    from neurcam_dist.config import JobConfig
    from neurcam_dist.distributed.job import prepare, resolve
    job, prof = prepare(resolve(JobConfig.model_validate({"data": {"path": str(d), "id": "id"}, "model": {"n_clusters": 3},
                                                          "output": str(tmp_path / "auto")})))
    said = capsys.readouterr()
    assert ("not used: price (numbers written as text with '$', thousands separators (e.g. '$5.00', '$13.34'), "
            "600 distinct values: write them as plain numbers") in said.out + said.err
    assert ("note (text with 600 distinct values, more than a category's max_levels=64: `neurcam featurize-text` "
            "for text, data.id for an id)") in said.out + said.err
    assert job.plan.features == list(prof.names) == job.plan.repr_columns and not {"price", "note"} & set(job.plan.features)
    assert set(features) - {"price"} <= set(job.plan.features) and "plan" in job.plan.categorical
    assert job.spec.n_features == len(job.plan.features) and len(prof.mean) == len(job.plan.features)
    assert "price: none of its" not in said.out + said.err
    # an output inside the data it reads is refused before the pass, and by validate, by one rule
    from neurcam_dist.errors import ConfigError
    from neurcam_dist.ops.validate import validate
    inside = JobConfig.model_validate({"data": {"path": str(d), "id": "id"}, "model": {"n_clusters": 3},
                                       "output": str(d / "run")})
    said = validate(inside.model_copy(update={"output": str(tmp_path / "elsewhere")}))
    assert ("categorical: plan, region, paperless, price, note: training counts their levels first and leaves out "
            "one that is no category") in "\n".join(said)
    for check in (lambda: prepare(resolve(inside)), lambda: validate(inside)):
        with pytest.raises(ConfigError, match=r"output .*/shards/run is inside the input .*/shards"):
            check()
    # a table of nothing but free text has no feature left: said, before any worker starts
    (tmp_path / "text").mkdir()
    pd.DataFrame({"id": range(100), "note": [f"note {i}" for i in range(100)]}).to_parquet(tmp_path / "text" / "a.parquet")
    with pytest.raises(DataError, match="no feature columns left: name them in data.features"):
        prepare(resolve(JobConfig.model_validate({"data": {"path": str(tmp_path / "text"), "id": "id"},
                                                  "model": {"n_clusters": 3}, "output": str(tmp_path / "t")})))
    assert set(coding.columns[0].levels) == {"monthly", "yearly", "two-year", "two years", "(other levels)"}
    assert coding.columns[3].missing_rows == int(df.usage.isna().sum())
    assert res.metrics["repr_dim"] == coding.space_width()
    from neurcam_dist.distributed import predict_parquet
    predict_parquet(est, str(d), tmp_path / "scored", id_column="id")
    scored = pd.read_parquet(tmp_path / "scored").sort_values("id")
    rows = pd.concat([a, b])[features]
    assert (scored["cluster"].to_numpy() == est.predict(rows)).all()
    # a column that is text in one file and numbers in another is named with both files
    bad = b.copy()
    bad["plan"] = np.arange(len(bad))
    bad.to_parquet(d / "b.parquet")
    with pytest.raises(DataError, match=r"b.parquet: column .plan. is int64 here but (large_)?string in .*a.parquet"):
        plan(DataConfig(path=str(d), id="id", features=features))


def test_the_registered_model_takes_text_and_missing_cells(mixed, tmp_path, monkeypatch):
    import mlflow

    from neurcam_dist import tracking
    X, _, est = mixed
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    tracking.use(None, experiment="mixed", workdir=tmp_path)
    with mlflow.start_run():
        info, version = tracking.log_model(est, X, registered_name="mixed-model")
    assert [c.name for c in info.signature.inputs.inputs] == list(X.columns)   # every feature, by name
    example = mlflow.models.Model.load(info.model_uri).load_input_example(info.model_uri)   # each kind shown
    assert pd.api.types.is_string_dtype(example["plan"]) and example["paperless"].dtype == bool and example["usage"].dtype == float
    new = X.head(15).copy()
    new.loc[new.index[0], "plan"] = "weekly"
    new.loc[new.index[1], "usage"] = np.nan
    scored = mlflow.pyfunc.load_model(info.model_uri).predict(new.astype({"region": object}))
    assert (scored["cluster"].to_numpy() == est.predict(new)).all()


def test_the_registered_model_takes_every_dtype_and_the_served_one_refuses_in_one_line(mixed, tmp_path, monkeypatch):
    """The registry model takes what the estimator takes: a pandas ``category``, nullable
    ``Int64``/``boolean``/``string`` with missing cells, plain ``int64``, a zoned datetime; and
    ``mlflow models serve`` scores JSON (a date as ISO text, a null cell) the same way and answers a
    bad request (an infinite cell, ``top_terms`` 0) with HTTP 400 and the service's one-line
    message, no stack trace."""
    import json
    import os
    import subprocess
    import sys
    import time
    import urllib.error
    import urllib.request

    import mlflow

    from neurcam_dist import tracking

    from .conftest import free_port
    X0, _, _ = mixed
    rng = np.random.default_rng(0)
    X = X0.assign(signup=pd.to_datetime(17_000 + rng.integers(0, 400, len(X0)), unit="D").tz_localize("UTC"),
                  visits=rng.integers(0, 20, len(X0)))
    est = NeurCAM(n_clusters=3, random_state=0, **dict(FAST, epochs=20, warmup_epochs=8)).fit(X)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    tracking.use(None, experiment="served", workdir=tmp_path)
    with mlflow.start_run():
        info, version = tracking.log_model(est, X, registered_name="served-model")
    assert {str(c.type) for c in info.signature.inputs.inputs} == {"Any"}
    typed = X.head(40).astype({"plan": "string", "paperless": "boolean", "visits": "Int64", "tenure": "Float64"})
    typed.loc[typed.index[0], "plan"] = pd.NA
    typed.loc[typed.index[1], "paperless"] = pd.NA
    typed.loc[typed.index[2], "visits"] = pd.NA
    typed.loc[typed.index[3], "tenure"] = pd.NA
    typed["signup"] = typed["signup"].dt.tz_convert("America/New_York")
    assert typed["region"].dtype == "category"
    model = mlflow.pyfunc.load_model(info.model_uri)
    np.testing.assert_array_equal(model.predict(typed)["cluster"], est.predict(typed))
    np.testing.assert_array_equal(model.predict(X.head(40))["cluster"], est.predict(X.head(40)))   # int64 as fit took it

    port = free_port()
    env = dict(os.environ, MLFLOW_TRACKING_URI=mlflow.get_tracking_uri())
    log = open(tmp_path / "serve.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "mlflow", "models", "serve", "-m", "models:/served-model/1",
                               "--env-manager", "local", "--host", "127.0.0.1", "-p", str(port), "-w", "1"],
                              stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/ping", timeout=2)
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
                time.sleep(0.5)

        def ask(frame, params=None, inf_at=None):
            split = json.loads(frame.to_json(orient="split", date_format="iso"))
            if inf_at is not None:   # JSON's Infinity token in that cell (pandas writes inf as null)
                split["data"][inf_at[0]][split["columns"].index(inf_at[1])] = float("inf")
            body = {"dataframe_split": split, **({"params": params} if params else {})}
            req = urllib.request.Request(f"http://127.0.0.1:{port}/invocations", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=60) as r:
                    return r.status, json.loads(r.read())
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read())

        rows = X.head(12).copy()
        rows.loc[rows.index[0], "usage"] = np.nan
        rows.loc[rows.index[1], "plan"] = "weekly"
        status, got = ask(rows)
        assert status == 200, got
        np.testing.assert_array_equal([p["cluster"] for p in got["predictions"]], est.predict(rows))
        answers = [ask(rows, inf_at=(1, "usage")), ask(rows, {"explain": True, "top_terms": 0})]
        for (status, said), expected in zip(answers, ["'usage'", "top_terms must be an integer from 1 to 50"], strict=False):
            assert status == 400 and said["error_code"] == "INVALID_PARAMETER_VALUE" and "stack_trace" not in said, said
            assert expected in said["message"] and "\n" not in said["message"] and "Traceback" not in said["message"]
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def test_the_re_clustering_comparison_counts_the_levels_the_champion_never_saw(mixed, tmp_path):
    from neurcam_dist.config import DataConfig
    from neurcam_dist.data import plan
    from neurcam_dist.distributed.compare import compare
    X, _, champion = mixed
    fresh = X.copy()
    fresh.loc[fresh["plan"] == "two-year", "plan"] = "two years"     # renamed in the new snapshot
    challenger = NeurCAM(n_clusters=3, random_state=1, **FAST).fit(fresh)
    (tmp_path / "snap").mkdir()
    fresh.to_parquet(tmp_path / "snap" / "part.parquet")
    p = plan(DataConfig(path=str(tmp_path / "snap"), features=list(X.columns)))
    cmp = compare(challenger.scoring_model(), champion.scoring_model(), p)
    assert cmp["unseen_champion"] == {"plan": int((fresh["plan"] == "two years").sum())}
    assert cmp["n_rows"] == len(fresh)
    assert cmp["inertia_challenger"] == pytest.approx(challenger.inertia(fresh), rel=1e-4)


def test_pandas_nullable_types_are_read_as_their_kinds(mixed):
    X, _, est = mixed
    typed = X.astype({"plan": "string", "paperless": "boolean", "tenure": "Float64"})
    typed.loc[typed.index[0], "paperless"] = pd.NA
    typed.loc[typed.index[1], "plan"] = pd.NA
    typed.loc[typed.index[2], "tenure"] = pd.NA
    arr = est.fitted_.encode(typed)
    assert np.isnan(arr[0, 2]) and np.isnan(arr[1, 0]) and np.isnan(arr[2, 4])
    plain = X.astype({"paperless": object})
    plain.loc[plain.index[0], "paperless"] = None
    plain.loc[plain.index[1], "plan"] = None
    plain.loc[plain.index[2], "tenure"] = np.nan
    assert (est.predict(typed) == est.predict(plain)).all()
    refit, _ = ColumnCoding.fit(typed)
    assert [c.dtype for c in refit.columns[:3]] == ["text", "text", "bool"]


def test_integer_codes_named_in_the_data_config_are_categorical_on_ray_too(tmp_path):
    from neurcam_dist.config import DataConfig
    from neurcam_dist.data import plan, profile
    rng = np.random.default_rng(0)
    (tmp_path / "d").mkdir()
    for i in range(2):
        pd.DataFrame({"segment_code": rng.choice([1, 2, 3], 50) + i, "x": rng.normal(size=50)}).to_parquet(
            tmp_path / "d" / f"p{i}.parquet")
    p = plan(DataConfig(path=str(tmp_path / "d"), categorical=["segment_code"]))
    assert p.categorical == ["segment_code"]
    prof = profile(p, missing="learn")
    assert sorted(prof.levels["segment_code"]) == ["1", "2", "3", "4"] and prof.dtypes["segment_code"] == "number"
    with pytest.raises(DataError, match=r"data.categorical names \['y'\], which are not features"):
        plan(DataConfig(path=str(tmp_path / "d"), categorical=["y"]))


def test_the_report_sentences_speak_of_levels(mixed, tmp_path, capsys):
    from neurcam_dist.explain.explanation import cluster_summary
    X, _, est = mixed
    sentences = [cluster_summary(p) for p in est.explain(X).profiles]
    assert any(re.search(r"plan = \w[\w-]* \(\d+% against \d+% over all rows\)", s) for s in sentences), sentences
    X.assign(customer_id=[f"C{i:04d}" for i in range(len(X))]).to_csv(tmp_path / "t.csv", index=False)
    est.save(tmp_path / "model")
    assert main(["explain", "--model", str(tmp_path / "model"), "--input", str(tmp_path / "t.csv"),
                 "--output", str(tmp_path / "ex"), "--rows", "C0003", "--id", "customer_id"]) == 0
    out = capsys.readouterr().out
    assert "row C0003" in out and "plan=" in out
    page = (tmp_path / "ex" / "report.html").read_text()
    assert "Categorical features and missing cells" in page


def test_a_model_saved_under_other_gains_reads_the_same(mixed):
    from neurcam_dist.model import FittedNet
    from neurcam_dist.model.network import CODING_GAIN, MISSING_GAIN
    X, _, est = mixed
    state, weights = est.fitted_.to_dict()
    assert state["coding"]["gains"] == [CODING_GAIN, MISSING_GAIN]
    other = {**state, "params": est.get_params(), "coding": {**state["coding"], "gains": [5.0, 20.0]}}
    scaled = {**weights, "coding.values": weights["coding.values"] * (CODING_GAIN / 5.0),
              "missing_delta": weights["missing_delta"] * (MISSING_GAIN / 20.0)}
    again = FittedNet.from_dict(other, scaled)
    arr = est.fitted_.encode(X)
    np.testing.assert_allclose(again.logits(arr), est.fitted_.logits(arr), rtol=1e-5, atol=1e-4)


def test_dates_and_times_are_days_since_the_epoch_at_every_door(tmp_path, capsys, monkeypatch):
    """A timestamp (any unit, any time zone) or a date named as a feature is read as days since
    1970-01-01 UTC, the same way at fit, predict (CLI and Python), after a save and through the
    registry model; auto selection names it as a date; a column whose kind changed is refused;
    SQL export, which no engine can write alike, is refused with what to do; rules show dates."""
    import mlflow
    import pyarrow as pa
    import pyarrow.parquet as pq

    from neurcam_dist import tracking
    rng = np.random.default_rng(0)
    days = rng.choice([17_000, 17_400], 240) + rng.integers(0, 60, 240)
    signup = pd.to_datetime(days, unit="D") + pd.to_timedelta(rng.integers(0, 86_400, 240), unit="s")
    X = pd.DataFrame({"a": rng.normal(size=240) + (days > 17_200) * 3, "signup": signup,
                      "birth": [d.date() for d in pd.to_datetime(days - 9_000, unit="D")]})
    for unit in ("us", "ns"):
        schema = pa.schema([("a", pa.float64()), ("signup", pa.timestamp(unit)), ("birth", pa.date32())])
        pq.write_table(pa.Table.from_pandas(X, preserve_index=False).cast(schema), tmp_path / f"{unit}.parquet")
    assert main(["fit", "--input", str(tmp_path / "us.parquet"), "--output", str(tmp_path / "auto"),
                 "--n-clusters", "2", "--epochs", "4"]) == 0
    err = capsys.readouterr().err
    assert "signup (dates and times: name it in --features to use it as days since 1970-01-01 00:00 UTC" in err
    assert "birth (dates and times: name it in --features" in err
    assert main(["fit", "--input", str(tmp_path / "us.parquet"), "--output", str(tmp_path / "run"), "--n-clusters",
                 "2", "--features", "a", "signup", "birth", "--epochs", "30"]) == 0
    assert "dates and times as days since 1970-01-01 00:00 UTC: signup, birth" in capsys.readouterr().err
    for unit in ("us", "ns"):
        assert main(["predict", "--model", str(tmp_path / "run" / "model"), "--input", str(tmp_path / f"{unit}.parquet"),
                     "--output", str(tmp_path / f"{unit}.csv")]) == 0
    by_us, by_ns = (pd.read_csv(tmp_path / f"{u}.csv")["cluster"] for u in ("us", "ns"))
    assert (by_us == by_ns).all()
    est = NeurCAM.load(tmp_path / "run" / "model")
    assert [c.dtype for c in est.fitted_.coding.columns] == ["number", "date", "date"]
    eastern = X.assign(signup=X.signup.dt.tz_localize("UTC").dt.tz_convert("America/New_York"))
    assert (est.predict(eastern) == by_us.to_numpy()).all() and (est.predict(X) == by_us.to_numpy()).all()
    days_now = est.transform_features(X)[:, 1] * est.scale_[1] + est.mean_[1]
    np.testing.assert_allclose(days_now, (X.signup - pd.Timestamp(0)) / pd.Timedelta(days=1), rtol=1e-6)
    with pytest.raises(DataError, match=r"column 'signup' held dates and times at fit \(read as days since "
                                        r"1970-01-01 00:00 UTC\) but holds numbers here"):
        est.predict(X.assign(signup=X.signup.astype("int64")))
    with pytest.raises(DataError, match=r"column 'a' held numbers at fit but holds dates and times here"):
        est.predict(X.assign(a=X.signup))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    tracking.use(None, experiment="dates", workdir=tmp_path)
    with mlflow.start_run():
        info, _ = tracking.log_model(est, X, registered_name="dates-model")
    scored = mlflow.pyfunc.load_model(info.model_uri).predict(X.head(20))
    assert (scored["cluster"].to_numpy() == by_us.to_numpy()[:20]).all()
    assert main(["export", "--model", str(tmp_path / "run" / "model"), "--input", str(tmp_path / "us.parquet"),
                 "--table", "t"]) == 2
    assert "reads 'signup', 'birth' as days since 1970-01-01 00:00 UTC" in capsys.readouterr().err
    assert main(["export", "--model", str(tmp_path / "run" / "model"), "--input", str(tmp_path / "us.parquet"),
                 "--format", "rules"]) == 0
    assert "rules measured on the 240 rows" in capsys.readouterr().err
    from neurcam_dist.explain.rules import cluster_rules
    by_date = cluster_rules(X[["signup"]], by_us.to_numpy(), est.cluster_ids_)   # a rule of dates alone
    text = " ".join(r.text() for r in by_date)
    assert re.search(r"signup (<=|>) 2017-0[2-8]-\d\d \d\d:\d\d UTC", text) and "e+" not in text, text  # the gap between the groups
    # a Ray job does not read dates: refused naming the column and the unit to write instead
    from neurcam_dist.config import DataConfig
    from neurcam_dist.data import plan
    (tmp_path / "ray").mkdir()
    (tmp_path / "us.parquet").rename(tmp_path / "ray" / "p.parquet")
    with pytest.raises(DataError, match=r"column 'signup' \(feature\) holds dates and times \(timestamp\[us\]\), "
                                        r"which a Ray job does not read: add a column of days since 1970-01-01"):
        plan(DataConfig(path=str(tmp_path / "ray"), features=["a", "signup"]))


def test_python_scoring_warns_of_unseen_levels_and_new_missing_cells_as_the_cli_counts_them(mixed):
    X, _, est = mixed
    new = X.head(10).copy()
    new.loc[new.index[0], "plan"] = "weekly"           # a level never seen
    new.loc[new.index[1], "tenure"] = np.nan           # tenure had no missing training cell
    new.loc[new.index[2], "usage"] = np.nan            # usage had some: the model learned a value, no word
    for score in (est.predict, est.predict_proba, est.score_frame):
        with pytest.warns(UserWarning) as caught:
            score(new)
        said = [str(w.message) for w in caught if str(w.message).startswith("X: ")]
        assert said == ["X: levels not seen at training, scored as (other levels): plan (1 cells); missing cells, scored "
                        "with each term's value for them: tenure (1 cells)"], said
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est.predict(X.head(10).assign(usage=np.nan))   # what training had: no warning


def test_the_command_line_shows_the_service_s_warnings_as_its_own_lines(mixed, tmp_path, capsys):
    X, _, est = mixed
    est.save(tmp_path / "model")
    rows = X.head(300).copy()
    rows.loc[rows.index[1], "tenure"] = np.nan         # tenure had no missing training cell
    rows.to_parquet(tmp_path / "rows.parquet")
    assert main(["export", "--model", str(tmp_path / "model"), "--input", str(tmp_path / "rows.parquet"),
                 "--table", "t", "--output", str(tmp_path / "q.sql"), "--min-agreement", "0"]) == 0
    err = capsys.readouterr().err
    assert ("neurcam: warning: X: missing cells, scored with each term's value for them: tenure (1 cells)"
            in err), err
    assert "UserWarning" not in err and ".py:" not in err


@pytest.mark.usefixtures("ray_cluster")
def test_two_whole_number_values_are_categorical_at_every_door(tmp_path, capsys):
    """A table's numeric column of exactly two whole numbers (a 0/1 flag, with or without blank
    cells, int or float or nullable) is categorical by default in the estimator, `neurcam fit` and
    a Ray job's profile pass (its counts merged across files), said on the features line; a
    column of more values, of fractions, or spread over three values across files stays numeric;
    ``categorical_features=None`` keeps every flag numeric, ``numeric_features`` (``--numeric``,
    ``data.numeric``) the flags it names, at every door."""
    from neurcam_dist.config import JobConfig
    from neurcam_dist.distributed.job import prepare, resolve
    rng = np.random.default_rng(3)
    n = 400
    df = pd.DataFrame({"id": np.arange(n), "usage": rng.normal(50, 10, n), "tenure": rng.gamma(2, 10, n),
                       "senior": (rng.random(n) < 0.2).astype(int),
                       "phone": np.where(rng.random(n) < 0.9, 1.0, 0.0),
                       "plan_code": rng.integers(1, 3, n),                   # 1 or 2 in the first half ...
                       "half": np.where(rng.random(n) < 0.5, 0.5, 1.5),      # two values, not whole numbers
                       "huge": np.where(rng.random(n) < 0.5, 0.0, 1e300),    # whole, but a scale, not a code
                       "year": rng.integers(2005, 2015, n)})
    df.loc[[3, 8], "phone"] = np.nan
    df.loc[n // 2:, "plan_code"] = 3                                          # ... and 3 in the second
    X = df.drop(columns="id")
    flags = {"senior", "phone"}

    def kinds(coding):
        return {c.name: (c.levels, c.dtype) for c in coding.columns if c.categorical}

    est = NeurCAM(n_clusters=2, random_state=0, **FAST).fit(X.astype({"senior": "Int64"}))
    assert kinds(est.fitted_.coding) == {c: (("0", "1", "(other levels)"), "number") for c in flags}
    assert est.fitted_.coding.columns[3].missing_rows == 2
    assert not NeurCAM(n_clusters=2, random_state=0, categorical_features=None, **FAST).fit(X).fitted_.coding.has_categorical
    kept = NeurCAM(n_clusters=2, random_state=0, numeric_features=["phone"], **FAST).fit(X)
    assert kinds(kept.fitted_.coding).keys() == {"senior"} and kept.get_params()["numeric_features"] == ["phone"]
    for wrong, why in ((["fone"], "not a column of X"), (["senior"], "categorical_features names it too")):
        with pytest.raises(ConfigError, match=why):
            NeurCAM(n_clusters=2, categorical_features=["senior"], numeric_features=wrong, **FAST).fit(X)
    with pytest.raises(ConfigError, match="its cells are text"):
        NeurCAM(n_clusters=2, numeric_features=["plan"], **FAST).fit(X.assign(plan="a"))
    rows = X.head(30).assign(senior=X.senior.head(30).astype(float))              # the same flag read as floats
    np.testing.assert_array_equal(est.predict(rows), est.predict(X.head(30)))
    # the CLI: the features line says which columns the rule took, the model codes them so
    df.to_csv(tmp_path / "t.csv", index=False)
    assert main(["fit", "--input", str(tmp_path / "t.csv"), "--output", str(tmp_path / "run"), "--n-clusters", "2",
                 "--epochs", "5", "--id", "id"]) == 0
    assert "; categorical, two whole-number values: senior, phone" in capsys.readouterr().err
    assert kinds(NeurCAM.load(tmp_path / "run" / "model").fitted_.coding).keys() == flags
    assert main(["fit", "--input", str(tmp_path / "t.csv"), "--output", str(tmp_path / "kept"), "--n-clusters", "2",
                 "--epochs", "5", "--id", "id", "--numeric", "phone"]) == 0
    assert re.search(r"; categorical, two whole-number values: senior(;|\n)", capsys.readouterr().err)
    assert kinds(NeurCAM.load(tmp_path / "kept" / "model").fitted_.coding).keys() == {"senior"}
    assert main(["fit", "--input", str(tmp_path / "t.csv"), "--output", str(tmp_path / "no"), "--n-clusters", "2",
                 "--id", "id", "--features", "usage", "senior", "--numeric", "phone"]) == 2
    assert "--numeric names ['phone'], which are not features" in capsys.readouterr().err
    # a Ray job: the profile pass counts each file's values, merges them, and reads the flags as levels
    shards = tmp_path / "shards"
    shards.mkdir()
    df.iloc[: n // 2].to_parquet(shards / "a.parquet")
    df.iloc[n // 2:].to_parquet(shards / "b.parquet")
    job, prof = prepare(resolve(JobConfig.model_validate({"data": {"path": str(shards), "id": "id"},
                                                          "model": {"n_clusters": 2}, "output": str(tmp_path / "ray")})))
    assert "categorical, two whole-number values: senior, phone" in capsys.readouterr().out
    assert set(job.plan.categorical) == flags and job.plan.features == list(prof.names)
    assert prof.levels["senior"] == {"0": int((df.senior == 0).sum()), "1": int((df.senior == 1).sum())}
    assert prof.levels["phone"] == {"0": int((df.phone == 0).sum()), "1": int((df.phone == 1).sum())}
    assert prof.missing["phone"] == 2 and prof.dtypes["senior"] == "number"
    coding = prof.coding(job.plan, min_level_rows=5, max_levels=64, missing="learn")
    assert kinds(coding) == kinds(est.fitted_.coding)
    config = {"data": {"path": str(shards), "id": "id", "numeric": ["phone"]}, "model": {"n_clusters": 2},
              "output": str(tmp_path / "ray-kept")}
    job, _ = prepare(resolve(JobConfig.model_validate(config)))
    assert job.plan.categorical == ["senior"] and re.search(r"two whole-number values: senior\n", capsys.readouterr().out)
    with pytest.raises(DataError, match=r"data.numeric names \['fone'\], which are not features"):
        resolve(JobConfig.model_validate({**config, "data": {**config["data"], "numeric": ["fone"]}}))


@pytest.mark.usefixtures("ray_cluster")
def test_missing_values_name_more_missing_tokens_kept_with_the_model_at_every_door(tmp_path, capsys):
    """``missing_values`` ('?' as in UCI's adult table, outer spaces aside) makes those cells
    missing in a numbers column and a categorical one: `neurcam fit` takes the column it refused
    before (the refusal says how), the model keeps the tokens, predict, the Python API after a
    load, the exported SQL (typed and all-TEXT) and a Ray job's profile pass read them so."""
    import json

    from neurcam_dist.config import JobConfig
    from neurcam_dist.distributed.job import prepare, resolve
    rng = np.random.default_rng(0)
    n = 300
    g = rng.integers(0, 2, n)
    df = pd.DataFrame({"id": [f"R{i}" for i in range(n)],
                       "age": (30 + 20 * g + rng.normal(0, 3, n)).round().astype(int).astype(str),
                       "work": np.where(g == 1, "Private", "Gov"), "hours": rng.normal(40, 5, n).round(1)})
    df.loc[[2, 5, 9], "age"] = " ?"
    df.loc[[4, 7], "work"] = " ?"
    df.loc[11, "work"] = "?"
    df.to_csv(tmp_path / "t.csv", index=False)
    args = ["fit", "--input", str(tmp_path / "t.csv"), "--n-clusters", "2", "--epochs", "10", "--id", "id"]
    assert main([*args, "--output", str(tmp_path / "no")]) == 2
    assert "if such a cell means missing, say so with missing_values (--missing-values '?')" in capsys.readouterr().err
    assert main([*args, "--output", str(tmp_path / "run"), "--missing-values", "?"]) == 0
    assert "numbers written as text (blank cells missing): age" in capsys.readouterr().err
    est = NeurCAM.load(tmp_path / "run" / "model")
    coding = est.fitted_.coding
    assert coding.missing_values == ("?",) and [c.missing_rows for c in coding.columns] == [3, 3, 0]
    assert "?" not in coding.columns[1].levels
    saved = json.loads((tmp_path / "run" / "model" / "config.json").read_text())
    assert saved["coding"]["missing_values"] == ["?"]
    # the Python API on the raw frame, the saved model on new rows, and predict agree
    X = df.drop(columns="id")
    mem = NeurCAM(n_clusters=2, random_state=0, missing_values=["?"], **FAST).fit(X)
    assert [c.missing_rows for c in mem.fitted_.coding.columns] == [3, 3, 0]
    new = X.head(20).assign(work=lambda f: f.work.where(f.index != 0, " ?  "))
    assert np.isnan(est.fitted_.coding.encode(new)[0, 1]) and not np.isnan(est.fitted_.coding.encode(X.head(1))[0, 1])
    assert main(["predict", "--model", str(tmp_path / "run" / "model"), "--input", str(tmp_path / "t.csv"),
                 "--output", str(tmp_path / "p.csv")]) == 0
    assert "missing cells, scored with each term's value for them: age (3 cells), work (3 cells)" in capsys.readouterr().out
    np.testing.assert_array_equal(pd.read_csv(tmp_path / "p.csv")["cluster"], est.predict(X))
    # the explanation's table scorer reads the tokens as the model does (the explanation keeps them)
    scorer = est.explain(X).to_scorer()
    tokened = [2, 4, 5, 7, 9, 11]
    np.testing.assert_array_equal(scorer.predict(X.iloc[tokened]), est.predict(X.iloc[tokened]))
    assert (scorer.predict(X) == est.predict(X)).mean() >= 0.95
    assert main(["export", "--model", str(tmp_path / "run" / "model"), "--input", str(tmp_path / "t.csv"),
                 "--output", str(tmp_path / "q.sql"), "--table", "t"]) == 0
    said = capsys.readouterr().out
    assert "predict's on 100.00% of the 300 rows" in said and "SQLite with every column TEXT" in said
    assert "TRIM(CAST(\"work\" AS VARCHAR)) IN ('?')" in (tmp_path / "q.sql").read_text()
    # a Ray job: the model section's missing_values reach the profile pass's level counts and the coding
    (tmp_path / "shards").mkdir()
    df.to_parquet(tmp_path / "shards" / "a.parquet")
    job, prof = prepare(resolve(JobConfig.model_validate(
        {"data": {"path": str(tmp_path / "shards"), "id": "id", "features": ["work", "hours"]},
         "model": {"n_clusters": 2, "missing_values": ["?"]}, "output": str(tmp_path / "ray")})))
    assert prof.levels["work"] == {"Private": int((df.work == "Private").sum()), "Gov": int((df.work == "Gov").sum())}
    assert prof.missing["work"] == 3 and job.model.estimator_params()["missing_values"] == ("?",)
    with pytest.raises(ConfigError, match="missing_values must be a list of texts"):
        NeurCAM(n_clusters=2, missing_values="?").fit(X)


def test_categorical_weight_scales_the_levels_in_the_clustering_space_and_is_kept(mixed, tmp_path):
    """``categorical_weight`` multiplies each categorical column's scaled one-hot in the
    clustering space (at 1 its columns' variances sum to 1, a standardized numeric's; the
    default is ``params.CATEGORICAL_WEIGHT``): the numeric columns do not move, the levels'
    variance grows by its square; the model keeps it, a job config takes it, and 0 is refused by name."""
    from neurcam_dist.config import ModelConfig
    from neurcam_dist.params import CATEGORICAL_WEIGHT
    X, _, est = mixed
    heavy = NeurCAM(n_clusters=3, random_state=0, categorical_weight=2.0, **FAST).fit(X)
    base, space = est.clustering_space(X), heavy.clustering_space(X)
    cat = np.array([j for j, c in enumerate(_space_columns(est.fitted_.coding)) if c])
    np.testing.assert_allclose(space[:, ~np.isin(np.arange(base.shape[1]), cat)],
                               base[:, ~np.isin(np.arange(base.shape[1]), cat)], rtol=1e-6)
    w = CATEGORICAL_WEIGHT   # the default (params.py: chosen by benchmarks/mixed.py --weights)
    assert est.fitted_.coding.categorical_weight == w and est.get_params()["categorical_weight"] == w
    np.testing.assert_allclose(space[:, cat], 2.0 / w * base[:, cat], rtol=1e-6)
    assert heavy.clustering_space(X)[:, cat].var(axis=0).sum() == pytest.approx(3 * 4.0, rel=1e-3)   # 3 columns, 1 x 2^2 each
    assert base[:, cat].var(axis=0).sum() == pytest.approx(3 * w**2, rel=1e-3)
    heavy.save(tmp_path / "m")
    again = NeurCAM.load(tmp_path / "m")
    assert again.fitted_.coding.categorical_weight == 2.0 and again.get_params()["categorical_weight"] == 2.0
    np.testing.assert_allclose(again.clustering_space(X), space)
    assert ModelConfig(n_clusters=3, categorical_weight=0.5).estimator_params()["categorical_weight"] == 0.5
    with pytest.raises(ConfigError, match="categorical_weight"):
        NeurCAM(n_clusters=3, categorical_weight=0.0).fit(X)


def _space_columns(coding) -> list[bool]:
    """For each clustering-space column of ``coding``: whether it belongs to a categorical feature."""
    out = []
    for c in coding.columns:
        width = (len(c.levels) + (c.missing_rows > 0)) if c.categorical else 1 + (c.missing_rows > 0)
        out += [c.categorical] * width
    return out
