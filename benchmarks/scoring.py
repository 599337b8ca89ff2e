"""Batch scoring (``neurcam predict``): the in-process pass against Ray Data's actor pool.

    python benchmarks/scoring.py [--rows 100000 700000] [--features 10] [--files 4] [--concurrency 2]

For each size: synthetic Parquet shards, and one model fitted in memory on 5,000 rows of the same
kind (NeurCAM + 4 pairs, few epochs: the scoring cost does not depend on how well it fits), then
``predict_parquet`` twice on the same files, in this process and through Ray Data (forced with
``NEURCAM_LOCAL_PASS_BYTES=0``; Ray started before the clock). Prints a Markdown table of seconds
and rows/s and checks that both outputs hold the same rows.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from neurcam_dist import NeurCAM
from neurcam_dist.data import footers, resolve
from neurcam_dist.data.sources import column_bytes
from neurcam_dist.data.synthetic import write_shards
from neurcam_dist.distributed import ensure_ray, predict_parquet


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[100_000, 700_000])
    ap.add_argument("--features", type=int, default=10)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=4096)
    args = ap.parse_args()
    ensure_ray(min_cpus=args.concurrency + 1)
    work = Path(tempfile.mkdtemp(prefix="neurcam-scoring-"))
    rows = []
    try:
        features = [f"f{i}" for i in range(args.features)]
        write_shards(work / "fit", 5_000, n_features=args.features, repr_dim=0, n_clusters=5, n_files=1, seed=0)
        est = NeurCAM(n_clusters=5, n_pairs=4, epochs=20, warmup_epochs=5, epsilon=0.5, random_state=0,
                      verbose=False).fit(pd.read_parquet(work / "fit", columns=features))
        for n in args.rows:
            data = work / f"data-{n}"
            write_shards(data, n, n_features=args.features, repr_dim=0, n_clusters=5, n_files=args.files, seed=0)
            src = resolve(str(data))
            foot = footers(src)
            mib = column_bytes(src, foot[0][1], n, features + ["id"]) / 2**20
            took = {}
            for where, limit in (("here", None), ("ray", "0")):
                if limit is None:
                    os.environ.pop("NEURCAM_LOCAL_PASS_BYTES", None)
                else:
                    os.environ["NEURCAM_LOCAL_PASS_BYTES"] = limit
                t = time.perf_counter()
                summary = predict_parquet(est, str(data), work / f"out-{n}-{where}", batch_size=args.batch_size,
                                          concurrency=args.concurrency)
                took[where] = (time.perf_counter() - t, summary["files"])
                assert summary["where"] == where, summary
            os.environ.pop("NEURCAM_LOCAL_PASS_BYTES", None)
            a = pd.read_parquet(work / f"out-{n}-here").sort_values("id").reset_index(drop=True)
            b = pd.read_parquet(work / f"out-{n}-ray").sort_values("id").reset_index(drop=True)
            pd.testing.assert_frame_equal(a, b, check_exact=True)
            for where, (s, files) in took.items():
                rows.append((n, mib, "this process" if where == "here" else f"Ray Data, {args.concurrency} actors",
                             files, s, n / s))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{args.features} features, {args.files} input files, batch {args.batch_size}; the same rows both ways\n")
    print("| rows | input MiB | where | output files | s | rows/s |")
    print("|---|---|---|---|---|---|")
    for n, mib, where, files, s, rate in rows:
        print(f"| {n:,} | {mib:.0f} | {where} | {files} | {s:.1f} | {rate:,.0f} |")


if __name__ == "__main__":
    main()
