"""What a new user gets with nothing set but the number of clusters: NeurCAM's defaults beside
scikit-learn's KMeans (Lloyd, k-means++, n_init=10) in the same process, on the same standardized
features (the model's own clustering space), one seed.

    python benchmarks/defaults.py                 # writes benchmarks/results/defaults.md
    python benchmarks/defaults.py --quick         # iris, wine, breast_cancer, digits, a mixture

Rows: scikit-learn's bundled iris, wine, breast_cancer and digits; pendigits and letters (UCI,
``--data-dir``); seeded Gaussian mixtures of several shapes; heavy-tailed tables (a few rows
30-60 standard deviations out, on which Lloyd spends clusters on single outliers) of several
shapes; and, with ``--text``, AG News 4,000 documents (the cached featurization of
``benchmarks/text.py``: term features, clustered in the MiniLM embeddings) and the 3,600 documents
of the same file that sample left out (featurized on their own), both with the text job defaults
(``config.TEXT_MODEL_DEFAULTS``: Neur2CAM, 128 + 128 terms, m 1.025), nothing tuned. Columns: the seconds
of each fit (KMeans and NeurCAM), NeurCAM's epochs, its inertia over KMeans' and over
MiniBatchKMeans' (the paper's mKMC), its ARI over KMeans' (against the labels, where there are
some) and which k-means target the init chose (``model/initial.py``); each fit is timed again
beside a CPU-bound process (``busy s``: what a shared machine sees). A second table times the
start-up: ``import torch``, ``import neurcam_dist``, ``from neurcam_dist import NeurCAM``,
``neurcam --help`` and a first fit in a fresh process (which pays torch's one-time optimizer import).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.cluster import KMeans, MiniBatchKMeans
from sklearn.metrics import adjusted_rand_score

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_DATA, ROOT, busy_neighbour, heavy_tailed, load_dataset, machine, markdown_table, standardized, write_atomic

from neurcam_dist import NeurCAM, metrics
from neurcam_dist.config import TEXT_MODEL_DEFAULTS


def mixture(n: int, d: int, k: int, spread: float, seed: int):
    """Seeded Gaussian blobs with unequal sizes and widths."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, spread, size=(k, d))
    y = rng.choice(k, size=n, p=rng.dirichlet(np.full(k, 3.0)))
    x = centers[y] + rng.normal(size=(n, d)) * rng.uniform(0.5, 1.5, size=k)[y, None]
    return pd.DataFrame(x, columns=[f"f{j}" for j in range(d)]), y


def datasets(args):
    """(name, features, labels or None, K, clustering space or None)."""
    import sklearn.datasets as skd
    for name, k in (("iris", 3), ("wine", 3), ("breast_cancer", 2)):
        b = getattr(skd, f"load_{name}")(as_frame=True)
        yield name, b.data, b.target.to_numpy(), k, None
    yield ("digits", *load_dataset("digits"), 10, None)
    for n, d, k, spread, seed in ((3000, 5, 4, 4.0, 0), (6000, 10, 8, 3.0, 1), (4000, 20, 6, 2.0, 2)):
        yield (f"mixture n={n} d={d} k={k}", *mixture(n, d, k, spread, seed), k, None)
    for n, d, k, rate, seed in ((6000, 8, 6, 0.003, 0), (8000, 12, 8, 0.003, 1), (5000, 6, 5, 0.01, 2)):
        yield (f"heavytail n={n} d={d} k={k} outliers={rate:g}", *heavy_tailed(n, d, k, rate, seed), k, None)
    if args.quick:
        return
    for name, k in (("pendigits", 10), ("letters", 26)):
        if (Path(args.data_dir) / f"{name}.csv.gz").exists():
            yield (name, *load_dataset(name, args.data_dir), k, None)
    if args.text:
        sys.path.insert(0, str(ROOT))
        from text import prepare
        x, emb, y, _ = prepare(Path(args.data_dir), 1000, 0, Path(args.cache))
        yield "AG News 4k, Neur2CAM (terms; MiniLM space)", x, y, 4, emb
        x, emb, y, _ = prepare(Path(args.data_dir), 1000, 0, Path(args.cache), held_out=True)
        yield f"AG News held-out {len(x) / 1000:.1f}k, Neur2CAM", x, y, 4, emb
        from text import STDLIB_GROUPS_2, stdlib_docs
        x, emb, y, _ = stdlib_docs(Path(args.cache))
        yield f"Python stdlib docstrings {len(x) / 1000:.1f}k, Neur2CAM", x, y, 4, emb
        x, emb, y, _ = stdlib_docs(Path(args.cache), groups=STDLIB_GROUPS_2, name="stdlib_docs_2")
        yield f"Python stdlib docstrings, other groups {len(x) / 1000:.1f}k, Neur2CAM", x, y, 4, emb


def row(name, x, y, k, rep, seed):
    space = standardized(x) if rep is None else np.asarray(rep, np.float32)
    t = time.perf_counter()
    km = KMeans(k, n_init=10, random_state=seed).fit(space)
    km_s = time.perf_counter() - t
    mb = MiniBatchKMeans(k, batch_size=512, init_size=min(len(space), 2560), n_init=10, random_state=seed).fit(space)
    t = time.perf_counter()
    text = {} if rep is None else TEXT_MODEL_DEFAULTS  # what a text job's config fills in (model: {n_clusters: K})
    est = NeurCAM(n_clusters=k, random_state=seed, verbose=False, **text).fit(x, X_repr=rep)
    nc_s = time.perf_counter() - t
    labels = est.predict(x)
    with busy_neighbour():
        t = time.perf_counter()
        busy = NeurCAM(n_clusters=k, random_state=seed, verbose=False, **text).fit(x, X_repr=rep)
        busy_s = time.perf_counter() - t
    same = np.array_equal(busy.predict(x), labels)
    inertia = metrics.inertia(space, labels) * len(space)
    init = est.history_["init"]
    out = {"data": name, "rows": len(x), "features": x.shape[1], "K": k, "KMeans s": round(km_s, 2),
           "NeurCAM s": round(nc_s, 2), "busy s": round(busy_s, 2), "threads": est.history_.get("threads"),
           "epochs": est.n_iter_, "inertia / KMeans": inertia / km.inertia_,
           "inertia / MBKM": inertia / mb.inertia_}
    if y is not None:
        out["ARI / KMeans"] = adjusted_rand_score(y, labels) / max(adjusted_rand_score(y, km.labels_), 1e-9)
    out["init"] = f"{init['method']} ({init.get('chosen_by', 'set')})"
    out["busy: same labels"] = "yes" if same else "NO"
    return out


def seconds(code: str, repeat: int = 3) -> float:
    """Best wall time of ``python -c code`` in a fresh interpreter."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
        best = min(best, time.perf_counter() - t)
    return best


def startup() -> list[dict]:
    bare = seconds("pass")
    fit = ("from sklearn.datasets import load_iris; from neurcam_dist import NeurCAM; "
           "NeurCAM(n_clusters=3, verbose=False).fit(load_iris().data)")
    rows = [("import torch", "import torch"), ("import neurcam_dist", "import neurcam_dist"),
            ("import torch, neurcam_dist", "import torch, neurcam_dist"),
            ("from neurcam_dist import NeurCAM", "from neurcam_dist import NeurCAM"),
            ("neurcam --help", "import sys; sys.argv = ['neurcam', '--help']\nfrom neurcam_dist.cli import main\n"
                               "try:\n    main(['--help'])\nexcept SystemExit:\n    pass"),
            ("iris fit in a fresh process (imports included)", fit)]
    return [{"what": what, "seconds": round(seconds(code) - bare, 2)} for what, code in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default=str(DEFAULT_DATA))
    ap.add_argument("--cache", default="/tmp/neurcam-text-cache", help="benchmarks/text.py's featurization cache")
    ap.add_argument("--text", action="store_true", help="add AG News 4k (minutes; needs the text extra)")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default=None, help="only the rows whose name contains this (no start-up table)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "results" / "defaults.md"))
    args = ap.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    NeurCAM(n_clusters=2, verbose=False, epochs=2).fit(np.random.default_rng(0).normal(size=(20, 2)))  # torch's imports
    rows = []
    for name, x, y, k, rep in datasets(args):
        if args.only and args.only not in name:
            continue
        rows.append(row(name, x, y, k, rep, args.seed))
        print(markdown_table(rows[-1:]).splitlines()[-1], flush=True)
    start = [] if args.only else startup()
    text = (f"# Defaults: NeurCAM(n_clusters=K) beside KMeans\n\nRun {started} on {machine()}, seed {args.seed}, "
            f"nothing else running. Every NeurCAM fit uses the defaults (`neurcam_dist.params`); times are "
            f"wall seconds in one process after torch's one-time imports (the start-up table has those). "
            f"`busy s`: the same fit again with a CPU-bound process (one thread) running beside it, as on a "
            f"shared machine; `threads`: the torch threads the fit ran on (`settings.sized_threads`); `busy: "
            f"same labels`: whether that fit labelled every row as the quiet one did.\n\n"
            + markdown_table(rows) + ("" if args.only else "\n## Start-up (fresh interpreter, best of 3, less a "
                                      "bare interpreter)\n\n" + markdown_table(start)))
    write_atomic(Path(args.out), text)
    print(text)


if __name__ == "__main__":
    main()
