"""Write N rows of synthetic clustered data (D features + an R-dim embedding) as Parquet shards.

    python benchmarks/scale/generate.py --out /tmp/scale --rows 4000000 --features 16 --dim 256 --files 64

One shard is in memory at a time (row groups of 64k rows), so any N fits. See
``neurcam_dist.synthetic`` for the data model; the ``label`` column holds the true cluster.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from neurcam_dist.data.synthetic import write_shards


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--features", type=int, default=16)
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--clusters", type=int, default=10)
    ap.add_argument("--files", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    t = time.perf_counter()
    files = write_shards(args.out, args.rows, n_features=args.features, repr_dim=args.dim, n_clusters=args.clusters,
                         n_files=args.files, seed=args.seed, informative=min(4, args.features), progress=True)
    size = sum(Path(f).stat().st_size for f in files)
    print(f"{args.rows:,} rows in {len(files)} files, {size / 2**30:.2f} GiB on disk, "
          f"{time.perf_counter() - t:.0f} s")


if __name__ == "__main__":
    main()
