"""NeurCAM beside the interpretable clustering trees and k-means, on k-means' own measure.

    python benchmarks/peers.py [--data-dir ../shared/data] [--quick] [--seed 0]

For every table the benchmarks use (scikit-learn's iris, wine, breast cancer and digits, seeded
Gaussian mixtures, the seeded heavy-tailed tables of ``defaults.py``, UCI pendigits and letters
from ``--data-dir``) and for generated heavy-tailed tables of several shapes
(``common.heavy_shapes``: a few far rows, Student-t features, log-normal features, a mix), on
the same standardized rows: Lloyd's KMeans (k-means++, ``n_init=10``: the unit of inertia),
MiniBatchKMeans, IMM (a threshold tree with K leaves on Lloyd's clusters), ExKMC (IMM's tree
grown to 2K leaves; both in ``trees.py``) and NeurCAM with its defaults (``NeurCAM(n_clusters=K)``).
Each figure is the inertia over Lloyd's; ``smallest`` is Lloyd's smallest cluster as a share of
the rows. Targets: NeurCAM at most IMM everywhere, and at most 1.01x Lloyd where Lloyd has no
cluster under 1% of the rows. Writes ``benchmarks/results/peers.md``.
"""
from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.cluster import KMeans, MiniBatchKMeans

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (DEFAULT_DATA, ROOT, heavy_shapes, heavy_tailed, load_dataset, machine,
                    markdown_table, standardized, write_atomic)
from defaults import mixture
from trees import exkmc, imm

from neurcam_dist import NeurCAM, metrics

SHAPES = ((8000, 10, 12, "far", 0), (8000, 8, 6, "far", 1), (8000, 10, 12, "t", 2), (8000, 8, 6, "t", 3),
          (8000, 10, 12, "lognormal", 4), (8000, 8, 6, "lognormal", 5), (8000, 10, 12, "mix", 6),
          (8000, 8, 6, "mix", 7))


def tables(args):
    """(name, features DataFrame, K) of every table."""
    import sklearn.datasets as skd
    for name, k in (("iris", 3), ("wine", 3), ("breast_cancer", 2)):
        yield name, getattr(skd, f"load_{name}")(as_frame=True).data, k
    yield "digits", load_dataset("digits")[0], 10
    for n, d, k, spread, seed in ((3000, 5, 4, 4.0, 0), (6000, 10, 8, 3.0, 1), (4000, 20, 6, 2.0, 2)):
        yield f"mixture n={n} d={d} k={k}", mixture(n, d, k, spread, seed)[0], k
    for n, d, k, rate, seed in ((6000, 8, 6, 0.003, 0), (8000, 12, 8, 0.003, 1), (5000, 6, 5, 0.01, 2)):
        yield f"heavytail n={n} d={d} k={k} outliers={rate:g}", heavy_tailed(n, d, k, rate, seed)[0], k
    for n, d, k, shape, seed in SHAPES[: 4 if args.quick else None]:
        yield f"{shape} n={n} d={d} k={k} seed={seed}", heavy_shapes(n, d, k, shape, seed)[0], k
    if args.quick:
        return
    for name, k in (("pendigits", 10), ("letters", 26)):
        if (Path(args.data_dir) / f"{name}.csv.gz").exists():
            yield name, load_dataset(name, args.data_dir)[0], k


def row(name, df, k, seed) -> dict:
    x = standardized(df).astype(np.float64)
    km = KMeans(k, n_init=10, random_state=seed).fit(x)
    unit = km.inertia_ / len(x)
    mb = MiniBatchKMeans(k, batch_size=512, init_size=min(len(x), 2560), n_init=10, random_state=seed).fit(x)
    t = time.perf_counter()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        est = NeurCAM(n_clusters=k, random_state=seed, verbose=False).fit(df)
    seconds = time.perf_counter() - t
    labels = est.predict(df)
    ratio = {"KMeans": 1.0, "MiniBatchKMeans": metrics.inertia(x, mb.labels_) / unit,
             "IMM": metrics.inertia(x, imm(x, km.cluster_centers_)) / unit,
             "ExKMC 2K": metrics.inertia(x, exkmc(x, km.cluster_centers_)) / unit,
             "NeurCAM": metrics.inertia(x, labels) / unit}
    smallest = np.bincount(km.labels_, minlength=k).min() / len(x)
    met = ratio["NeurCAM"] <= ratio["IMM"] and (smallest < 0.01 or ratio["NeurCAM"] <= 1.01)
    empty = [str(w.message) for w in said if "hold training rows" in str(w.message)]
    return {"data": name, "rows": len(x), "K": k, "smallest": f"{smallest:.2%}",
            **{key: round(v, 4) for key, v in ratio.items()}, "NeurCAM clusters": len(np.unique(labels)),
            "NeurCAM s": round(seconds, 1), "init": f"{est.history_['init']['method']}", "target": "yes" if met else "NO",
            **({"note": empty[0]} if empty else {})}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=str(DEFAULT_DATA))
    ap.add_argument("--quick", action="store_true", help="leave out pendigits, letters and half the generated shapes")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "results" / "peers.md"))
    args = ap.parse_args()
    rows = []
    for name, df, k in tables(args):
        rows.append(row(name, df, k, args.seed))
        print({key: v for key, v in rows[-1].items() if key != "note"}, flush=True)
    met = sum(r["target"] == "yes" for r in rows)
    text = (f"# NeurCAM beside IMM, ExKMC and k-means (inertia / Lloyd's KMeans)\n\n{machine()}, seed {args.seed}; "
            f"NeurCAM with its defaults. Target met on {met} of {len(rows)} tables: NeurCAM at most IMM, and at "
            f"most 1.01x Lloyd where Lloyd's smallest cluster holds 1% of the rows or more.\n\n"
            + markdown_table([{key: v for key, v in r.items() if key != "note"} for r in rows]) + "\n")
    notes = [f"- {r['data']}: {r['note']}" for r in rows if "note" in r]
    if notes:
        text += "\nEmpty clusters:\n\n" + "\n".join(notes) + "\n"
    write_atomic(Path(args.out), text)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
