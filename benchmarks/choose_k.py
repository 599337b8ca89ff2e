"""Choosing K, side by side in one run: NeurCAM's ``choose_k`` (defaults: 3 seeds per K, each on
its own 80% subsample; the rule of ``neurcam_dist.choosing``) against the two usual recipes on
Lloyd KMeans (k-means++, n_init=10): the best silhouette, and the gap statistic (Tibshirani,
Walther & Hastie 2001: B = 10 reference sets drawn uniformly in the box of the data's principal
axes, the smallest K with gap(K) >= gap(K+1) - s(K+1)).

    python benchmarks/choose_k.py                 # writes benchmarks/results/choose_k.md
    python benchmarks/choose_k.py --quick         # the generated mixtures only
    python benchmarks/choose_k.py --design        # the rule's thresholds on the design mixtures

Rows: 16 seeded Gaussian mixtures of 3,000 rows x 8 features (``mixture``): K from 2 to 12 and
overlap from clear to hard (the centres' spread against the clusters' own) drawn at random as the
design set's were, unequal sizes and anisotropic clusters; their seeds are not those the rule was
designed on (docs/choosing-k.md). Then the
labelled public tables the project uses (wine, breast cancer, digits, pendigits, letters; the UCI
ones from ``--data-dir``): what each method proposes against the number of classes (a class count
is not the number of clusters a table has, so that part is a reading, not a score). K runs from 2
to 12, or to the number of classes + 4 where that is more.

Target (issue 52): the proposed K is the true K more often than the best silhouette and than the
gap statistic on the mixtures; K = 2..12 on the 3,000 x 8 table within 3 minutes on 2 cores.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.cluster import KMeans
from sklearn.metrics import silhouette_score

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_DATA, ROOT, load_dataset, machine, markdown_table, write_atomic

from neurcam_dist import choose_k



def mixtures(n_tables: int = 16, seed: int = 2026) -> list[tuple[int, float]]:
    """(true K, separation) of the benchmark's mixtures, drawn as the design set's are (K from 2 to
    12, separation from 1.0, hard, to 3.0, clear) with another seed: not chosen by hand."""
    rng = np.random.default_rng(seed)
    return [(int(rng.integers(2, 13)), round(float(rng.uniform(1.0, 3.0)), 2)) for _ in range(n_tables)]


def mixture(k: int, sep: float, seed: int, n: int = 3000, d: int = 8):
    """``k`` anisotropic Gaussian clusters of unequal sizes (Dirichlet shares, each at least 30% of
    an equal share) in ``d`` standardized features; centres spread ``sep`` times the clusters' scale."""
    rng = np.random.default_rng(seed)
    share = 0.3 / k + 0.7 * rng.dirichlet(np.full(k, 2.0))
    sizes = rng.multinomial(n, share / share.sum())
    centres = rng.normal(0, sep, size=(k, d))
    x, y = [], []
    for j in range(k):
        a = rng.normal(size=(d, d)) * 0.5 + np.eye(d)
        a /= np.linalg.norm(a, 2) / rng.uniform(0.6, 1.2)
        x.append(centres[j] + rng.normal(size=(sizes[j], d)) @ a.T)
        y += [j] * sizes[j]
    x = np.vstack(x)
    x = (x - x.mean(0)) / x.std(0)
    return pd.DataFrame(x, columns=[f"f{j}" for j in range(d)]), np.asarray(y)


def lloyd(x: np.ndarray, ks) -> dict:
    """Lloyd KMeans (k-means++, n_init=10) for each K: one fit each, shared by both recipes."""
    return {k: KMeans(k, n_init=10, random_state=0).fit(x) for k in ks}


def best_silhouette(x: np.ndarray, fits: dict, rows: np.ndarray) -> int:
    return max(fits, key=lambda k: silhouette_score(x[rows], fits[k].labels_[rows]))


def gap_statistic(x: np.ndarray, fits: dict, b: int = 10, seed: int = 0) -> int:
    """Tibshirani's gap with the principal-axes reference box and the 1-standard-error rule."""
    rng = np.random.default_rng(seed)
    centred = x - x.mean(0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    rotated = centred @ vt.T
    lo, hi = rotated.min(0), rotated.max(0)
    refs = [rng.uniform(lo, hi, size=x.shape) @ vt for _ in range(b)]
    gap, s = {}, {}
    ks = sorted(fits)
    for k in ks:
        w = np.log(fits[k].inertia_)
        wb = np.log([KMeans(k, n_init=3, random_state=i).fit(r).inertia_ for i, r in enumerate(refs)])
        gap[k], s[k] = wb.mean() - w, wb.std() * np.sqrt(1 + 1 / b)
    for k, nxt in zip(ks, ks[1:], strict=False):
        if gap[k] >= gap[nxt] - s[nxt]:
            return k
    return ks[-1]


def design(n_tables: int = 40) -> list[dict]:
    """How the rule's two thresholds were set: on ``n_tables`` mixtures of other seeds (1000 on,
    K and separation drawn), with Lloyd KMeans (n_init=3) standing in for NeurCAM so that the grid
    is cheap, the share of tables whose true K each (stability, silhouette share) pair finds."""
    from itertools import combinations

    from sklearn.metrics import adjusted_rand_score
    rng = np.random.default_rng(12345)
    stats = []
    for i in range(n_tables):
        k, sep = int(rng.integers(2, 13)), float(rng.uniform(1.0, 3.0))
        X, _ = mixture(k, sep, seed=1000 + i)
        x = X.to_numpy()
        rows = np.sort(np.random.default_rng(0).permutation(len(x))[:2000])
        st = {}
        for kk in range(2, 13):
            labels = []
            for s in range(3):
                sub = np.random.default_rng(100 + s).choice(len(x), int(0.8 * len(x)), replace=False)
                labels.append(KMeans(kk, n_init=3, random_state=s).fit(x[sub]).predict(x))
            st[kk] = (np.mean([silhouette_score(x[rows], lab[rows]) for lab in labels]),
                      np.mean([adjusted_rand_score(a, b) for a, b in combinations(labels, 2)]))
        stats.append((k, st))
        print(f"design table {i}: K={k}, separation {sep:.2f}", flush=True)
    out = [{"rule": "best silhouette", "true K found": sum(max(st, key=lambda kk: st[kk][0]) == k for k, st in stats)}]
    for stable in (0.8, 0.85, 0.9, 0.95, 0.99):
        for share in (0.8, 0.85, 0.9, 0.95):
            found = 0
            for k, st in stats:
                best = max(v[0] for v in st.values())
                ok = [kk for kk, (sil, stab) in st.items() if stab >= stable and sil >= share * best]
                found += (max(ok) if ok else max(st, key=lambda kk: st[kk][0])) == k
            out.append({"rule": f"largest K with stability >= {stable} and silhouette >= {share} x best",
                        "true K found": found})
    return out


TABLES: list[dict] = []   # choose_k's per-K table of every row, written beside the results


def compare(name: str, X: pd.DataFrame, y, ks, truth: int) -> dict:
    x = X.select_dtypes("number").to_numpy(np.float64)
    x = (x - x.mean(0)) / np.where(x.std(0) > 0, x.std(0), 1)
    rows = np.sort(np.random.default_rng(0).permutation(len(x))[:2000])
    t0 = time.perf_counter()
    choice = choose_k(X, y, k=ks, verbose=False)
    seconds = time.perf_counter() - t0
    fits = lloyd(x, list(ks))
    sil, gap = best_silhouette(x, fits, rows), gap_statistic(x, fits)
    TABLES.append({"table": name, "true K": truth, "per K": choice.table})
    row = {"table": name, "rows": len(X), "true K": truth, "NeurCAM choose_k": choice.k,
           "runner-up": choice.runner_up["k"] if choice.runner_up else "", "sure": "yes" if choice.sure else "no",
           "best silhouette (Lloyd)": sil, "gap statistic (Lloyd)": gap, "choose_k seconds": round(seconds, 1)}
    print(row, flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the generated mixtures only")
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA, help="folder with pendigits.csv.gz, letters.csv.gz")
    ap.add_argument("--design", action="store_true", help="only the rule's design grid (40 other mixtures, KMeans)")
    ap.add_argument("--design-tables", type=int, default=0, metavar="N",
                    help="only choose_k's per-K tables on the first N design mixtures (NeurCAM's own figures)")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "choose_k.md")
    args = ap.parse_args()
    if args.design_tables:
        rng = np.random.default_rng(12345)
        drawn = [(int(rng.integers(2, 13)), float(rng.uniform(1.0, 3.0))) for _ in range(40)]
        for i, (k, sep) in list(enumerate(drawn))[:args.design_tables]:
            X, y = mixture(k, sep, seed=1000 + i)
            choice = choose_k(X, y, k=range(2, 13), verbose=False)
            TABLES.append({"table": f"design {i}: K={k}, separation {sep:.2f}", "true K": k, "per K": choice.table})
            print(TABLES[-1]["table"], "->", choice.k, flush=True)
        write_atomic(args.out.with_name("choose_k_design_tables.json"), json.dumps(TABLES, indent=1, default=float))
        return
    if args.design:
        rows = design()
        text = "\n".join(["# Choosing K: the rule's design grid (benchmarks/choose_k.py --design)", "", machine(), "",
                          markdown_table(rows), ""])
        write_atomic(args.out.with_name("choose_k_design.md"), text)
        print(text)
        return
    mixed = [compare(f"mixture K={k}, separation {sep}", *mixture(k, sep, seed=i), range(2, 13), k)
             for i, (k, sep) in enumerate(mixtures())]
    hits = {m: sum(r[m] == r["true K"] for r in mixed)
            for m in ("NeurCAM choose_k", "best silhouette (Lloyd)", "gap statistic (Lloyd)")}
    public = []
    if not args.quick:
        from sklearn.datasets import load_breast_cancer, load_wine
        tables = [("wine", *load_wine(return_X_y=True, as_frame=True)),
                  ("breast cancer", *load_breast_cancer(return_X_y=True, as_frame=True))]
        tables += [(name, *load_dataset(name, args.data_dir)) for name in ("digits", "pendigits", "letters")]
        for name, X, y in tables:
            y = np.asarray(y)
            classes = len(np.unique(y))
            public.append(compare(f"{name} (classes)", X, y, range(2, max(12, classes + 4) + 1), classes))
    lines = ["# Choosing K (benchmarks/choose_k.py)", "", machine(), "",
             "## Generated mixtures (3,000 rows x 8 features)", "",
             markdown_table(mixed), "",
             "True K found: " + ", ".join(f"{m} {v} of {len(mixed)}" for m, v in hits.items()), ""]
    if public:
        lines += ["## Labelled public tables (proposed K against the number of classes)", "",
                  markdown_table(public), ""]
    write_atomic(args.out, "\n".join(lines))
    write_atomic(args.out.with_suffix(".json"), json.dumps(TABLES, indent=1, default=float))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
