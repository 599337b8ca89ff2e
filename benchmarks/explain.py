"""Table-only scorer vs the neural model: agreement and scoring speed.

    python benchmarks/explain.py [--datasets pendigits letters] [--n-pairs 0] [--precision bf16]

Fits NeurCAM (seed 0, default schedule) on each data set, builds its explanation, and compares
``Explanation.to_scorer()`` (numpy, tables only) with the network: hard-assignment agreement, the
largest |difference| of any probability, and rows/s of ``predict_proba`` for each on the whole
data set (best of 3). Writes ``benchmarks/results/explain.md`` and one HTML report per data set.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_DATA, load_dataset, machine, markdown_table, write_atomic

from neurcam_dist import NeurCAM
from neurcam_dist.explain.report import write_report


def best_time(fn, reps: int = 3) -> float:
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=["pendigits", "letters"])
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--n-pairs", type=int, default=0)
    ap.add_argument("--precision", default="bf16", choices=["fp32", "bf16", "auto"])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = ap.parse_args()
    rows = []
    for ds in args.datasets:
        df, y = load_dataset(ds, args.data_dir)
        k = len(np.unique(y))
        t = time.perf_counter()
        est = NeurCAM(n_clusters=k, n_pairs=args.n_pairs, precision=args.precision, random_state=0,
                      verbose=False).fit(df)
        fit_s = time.perf_counter() - t
        t = time.perf_counter()
        expl = est.explain(df)
        explain_s = time.perf_counter() - t
        scorer = expl.to_scorer()
        p_net, p_tab = est.predict_proba(df), scorer.predict_proba(df)
        net_s = best_time(lambda est=est, df=df: est.predict_proba(df))
        tab_s = best_time(lambda scorer=scorer, df=df: scorer.predict_proba(df))
        report = write_report(expl, args.out / f"report_{ds}")
        row = {"data": ds, "rows": len(df), "terms": len(expl.terms), "fit s": fit_s, "explain s": explain_s,
               "hard agreement": float((p_net.argmax(1) == p_tab.argmax(1)).mean()),
               "max |d proba|": float(np.abs(p_net - p_tab).max()),
               "neural rows/s": len(df) / net_s, "table rows/s": len(df) / tab_s, "table / neural speed": net_s / tab_s,
               "report": str(report.relative_to(args.out))}
        rows.append(row)
        print(row, flush=True)
    text = (f"# Table-only scorer vs neural model\n\nMachine: {machine()}\n\n" + markdown_table(rows))
    write_atomic(args.out / "explain.md", text)
    print(text)


if __name__ == "__main__":
    main()
