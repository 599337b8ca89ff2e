"""What one epoch of Ray Data's iterator costs on its own, on a small dataset held in the object
store (pendigits, 10,992 rows x 16 float32, as small runs handed it to the workers until they
took it from the held rows), against the held rows' own batches (``worker.HeldShard``, what a
small run's worker now iterates), with a consumer that does nothing:

    python benchmarks/scale/iterate.py [--data-dir ../shared/data] [--epochs 6]

This is the floor of a ``cache: always`` epoch, whatever the device: on a GPU that trains such an
epoch in about 15 ms (``scale_gpu_h100.md``) it decides the epoch time. Rows: a streaming split of
one (what a Ray Train worker's shard is), the dataset's own iterator, and ``iter_batches`` in
Arrow format (no conversion to tensors), the streaming split again with the training feeds'
pacing of Ray Data's idle scheduling loop, and the held rows. Median of the epochs after the first.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def timed(epochs: int, run) -> tuple[float, float, int]:
    times, n = [], 0
    for _ in range(epochs):
        t0 = time.perf_counter()
        n = sum(1 for _ in run())
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:]), times[0], n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--files", type=int, default=4, help="blocks (the bundled writer's shards)")
    args = ap.parse_args()

    import os

    import pyarrow as pa
    import ray
    from common import load_dataset

    from neurcam_dist.data.pacing import pace
    from neurcam_dist.distributed.session import quiet_data_progress

    df, _ = load_dataset("pendigits", Path(args.data_dir))
    table = pa.Table.from_pandas(df.astype("float32"), preserve_index=False)
    ray.init(num_cpus=max(os.cpu_count() or 1, 3), include_dashboard=False, log_to_driver=False)
    quiet_data_progress()
    step = -(-table.num_rows // args.files)
    blocks = [table.slice(i, step) for i in range(0, table.num_rows, step)]
    ds = ray.data.from_arrow(blocks)
    split = ds.streaming_split(1)[0]
    paced = pace(ray.data.from_arrow(blocks)).streaming_split(1)[0]   # what the training feeds use
    plain = ds.iterator()
    import numpy as np
    import torch

    from neurcam_dist.distributed.worker import HeldShard

    def collate(t):   # the rows as the worker's collate leaves them: float32 features, int64 keys
        x = torch.from_numpy(np.column_stack([c.to_numpy() for c in t.columns]))
        return x, x, torch.arange(t.num_rows)
    held = HeldShard(ray.get(ray.put(table)), 0, 1, collate)
    cases = [("streaming split of 1, `iter_torch_batches`", 512, lambda: split.iter_torch_batches(batch_size=512)),
             ("the same, its idle loop paced (`data/pacing.py`)", 512, lambda: paced.iter_torch_batches(batch_size=512)),
             ("streaming split of 1, `iter_torch_batches`, prefetch 4", 512,
              lambda: split.iter_torch_batches(batch_size=512, prefetch_batches=4)),
             ("streaming split of 1, `iter_torch_batches`", 2048, lambda: split.iter_torch_batches(batch_size=2048)),
             ("the dataset's iterator, `iter_torch_batches`", 512, lambda: plain.iter_torch_batches(batch_size=512)),
             ("`Dataset.iter_batches`, Arrow", 512, lambda: ds.iter_batches(batch_size=512, batch_format="pyarrow")),
             ("the held rows (`HeldShard.batches`, reshuffled)", 512,
              lambda: held.batches(512, torch.device("cpu"), 0))]
    timed(args.epochs, cases[0][2])   # untimed: the first epochs of a process run slower, whichever case is first
    rows = []
    for label, batch, run in cases:
        med, first, n = timed(args.epochs, run)
        rows.append(f"| {label} | {batch} | {n} | {first * 1e3:.1f} | {med * 1e3:.1f} |")
        print(rows[-1], flush=True)
    print("\n".join([f"\n{table.num_rows:,} rows x {table.num_columns} float32 in {args.files} blocks, "
                     f"{os.cpu_count()} CPUs, Ray {ray.__version__}; a consumer that does nothing.", "",
                     "| iteration | batch | batches | first epoch ms | median epoch ms |", "|---|---|---|---|---|", *rows]))


if __name__ == "__main__":
    main()
