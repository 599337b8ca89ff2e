"""What a fit costs as the table grows, in memory, with defaults: epochs of ``epoch_rows`` rows
(``neurcam_dist.params``) against epochs that are whole passes (``epoch_rows=0``, the schedule
before epochs were bounded), and the loss the plateaus watch on a large table (a fixed sample's,
the default, against the epochs' own).

    python benchmarks/epochs.py                   # writes benchmarks/results/epochs.md
    python benchmarks/epochs.py --quick           # 20,000 and 80,000 rows only

Rows: seeded Gaussian mixtures of 10 clusters over 16 features (``defaults.mixture``: unequal
sizes and widths), from 10,000 to 320,000 rows, one seed. Columns: the epochs, the passes over
the rows they add up to, the whole fit's seconds (k-means init and labels included) and its
inertia over Lloyd KMeans' (k-means++, n_init=10) in the standardized features, and what ended
the run.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from sklearn.cluster import KMeans

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, machine, markdown_table, standardized, write_atomic
from defaults import mixture

from neurcam_dist import NeurCAM, metrics
from neurcam_dist.model import loop
from neurcam_dist.params import DEFAULTS

K, D = 10, 16


def fit_row(X, x, lloyd: float, label: str, **params) -> dict:
    """One default fit of ``X`` (``params`` changed), timed whole, measured as the table says."""
    t0 = time.perf_counter()
    est = NeurCAM(n_clusters=K, random_state=0, verbose=False, **params).fit(X)
    seconds = time.perf_counter() - t0
    h = est.history_
    rows = sum(r["rows"] for r in h["epochs"])
    return {"rows": f"{len(X):,}", "epochs": label, "n_epochs": h["n_epochs"], "passes": round(rows / len(X), 2),
            "fit s": round(seconds, 1), "inertia / Lloyd": round(metrics.inertia(x, est.predict(X)) / lloyd, 4),
            "stop": h["stop_reason"][:40]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "results" / "epochs.md"))
    args = ap.parse_args()
    sizes = (20_000, 80_000) if args.quick else (10_000, 20_000, 40_000, 80_000, 160_000, 320_000)
    passes_at = {20_000, 80_000, 320_000}          # whole-pass epochs too (slow: a pass is an epoch)
    rows = []
    for n in sizes:
        X, _ = mixture(n, D, K, 3.0, 7)
        x = standardized(X)
        t0 = time.perf_counter()
        lloyd = metrics.inertia(x, KMeans(n_clusters=K, n_init=10, random_state=0).fit_predict(x))
        lloyd_s = time.perf_counter() - t0
        found = [fit_row(X, x, lloyd, f"{DEFAULTS['epoch_rows']:,} rows (default)")]
        if n > DEFAULTS["epoch_rows"]:
            kept = loop.WATCH_ROWS
            loop.WATCH_ROWS = 0   # the plateaus watch the epochs' own loss
            try:
                found.append(fit_row(X, x, lloyd, f"{DEFAULTS['epoch_rows']:,} rows, epochs' own loss watched"))
            finally:
                loop.WATCH_ROWS = kept
        if n in passes_at and n > DEFAULTS["epoch_rows"]:
            found.append(fit_row(X, x, lloyd, "whole passes (epoch_rows=0)", epoch_rows=0))
        for r in found:
            r["Lloyd s"] = round(lloyd_s, 1)
            print(r, flush=True)
        rows += found
    default = [r for r in rows if "(default)" in r["epochs"]]
    first = next(r for r in default if r["rows"] == "20,000")
    last = default[-1]
    text = (f"# Epochs of a bounded size: a fit's cost against the table's rows\n\n"
            f"`python benchmarks/epochs.py` ({time.strftime('%Y-%m-%d')}, {machine()}, one seed; "
            f"`loop.WATCH_ROWS` = {loop.WATCH_ROWS:,}).\n\n{markdown_table(rows)}\n"
            f"- {last['rows']} rows against 20,000, defaults: {last['fit s'] / first['fit s']:.2f}x the seconds "
            f"({last['n_epochs']} and {first['n_epochs']} epochs).\n")
    write_atomic(Path(args.out), text)
    print(text)


if __name__ == "__main__":
    main()
