"""The one epoch loop, driven by the estimator and by a Ray Train worker, side by side in one run.

    python benchmarks/loop.py [--data-dir ../shared/data] [--copies 4] [--epochs 12] [--out FILE.md]

Pendigits (10,992 rows) tiled ``--copies`` times with a little noise (43,968 rows by default),
written as one Parquet file. The same model and schedule (``epochs`` epochs, no early stop) is
fitted by ``NeurCAM.fit`` in memory and by ``neurcam train`` with one worker and ``train.cache:
device`` (rows resident on the worker after the first epoch):

* with the same torch thread count, the loop alone: 1 (``cpus_per_worker: 1``) and 2
  (``cpus_per_worker: 2``; the local Ray is started with 3 logical CPUs so one stays for Ray Data,
  as ``check_fits`` asks), both with ``train.take_idle_cpus: false``;
* with the defaults on both sides (``--defaults``, the issue's pairing): the estimator on torch's
  own thread count, the worker with ``cpus_per_worker: 1`` and ``train.take_idle_cpus`` (its rows
  in memory, it adds the CPU kept for Ray Data, up to the machine's CPUs).

The table has each driver's median epoch (the first left out: the worker's streams its shard),
the worker's threads after the first epoch, and the ratio.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from common import DEFAULT_DATA, load_dataset, machine, markdown_table, write_atomic

from neurcam_dist import NeurCAM

MODEL = {"n_clusters": 10, "epochs": 12, "early_stopping": False, "random_state": 0}


def table(data_dir: Path, copies: int) -> pd.DataFrame:
    X, _ = load_dataset("pendigits", data_dir)
    rng = np.random.default_rng(0)
    tiled = np.concatenate([X.to_numpy(np.float64)] * copies)
    tiled += rng.normal(scale=0.5, size=tiled.shape)
    return pd.DataFrame(tiled, columns=X.columns)


def median_epoch(records: list[dict]) -> float:
    return statistics.median(r["seconds"] for r in records[1:])


def in_memory(df: pd.DataFrame, model: dict, threads: int) -> float:
    torch.set_num_threads(threads)
    est = NeurCAM(**model).fit(df)
    return median_epoch(est.history_["epochs"])


def on_ray(path: Path, out: Path, model: dict, threads: int, take_idle: bool) -> tuple[float, list[str], int]:
    from neurcam_dist.distributed import train
    result = train({"data": {"path": str(path)}, "model": model, "output": str(out),
                    "train": {"num_workers": 1, "cpus_per_worker": threads, "cache": "device",
                              "take_idle_cpus": take_idle},
                    "tracking": {"uri": f"sqlite:///{out.parent}/mlflow.db"}})
    records = result.estimator.history_["epochs"]
    return median_epoch(records), sorted({r["source"] for r in records[1:]}), int(records[-1]["threads"])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=MODEL["epochs"])
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    import ray

    from neurcam_dist.distributed import quiet_data_progress
    own_threads = torch.get_num_threads()   # torch's default here: what a plain NeurCAM.fit uses
    model = {**MODEL, "epochs": args.epochs}
    df = table(args.data_dir, args.copies)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rows.parquet"
        df.to_parquet(path)
        ray.init(num_cpus=3, object_store_memory=512 * 2**20, include_dashboard=False, logging_level="WARNING")
        quiet_data_progress()
        for name, threads, estimator_threads, take_idle in (("same threads", 1, 1, False),
                                                            ("same threads", 2, 2, False),
                                                            ("defaults", 1, own_threads, True)):
            t0 = time.perf_counter()
            memory = in_memory(df, model, estimator_threads)
            worker, sources, used = on_ray(path, Path(tmp) / f"out{len(rows)}", model, threads, take_idle)
            rows.append({"pairing": name, "estimator threads": estimator_threads,
                         "cpus_per_worker": threads, "worker threads": used, "rows": len(df),
                         "estimator epoch (s)": round(memory, 3), "worker epoch (s)": round(worker, 3),
                         "worker sources": ", ".join(sources), "worker / estimator speed": round(memory / worker, 3),
                         "wall (s)": round(time.perf_counter() - t0, 1)})
            print(rows[-1], flush=True)
        ray.shutdown()
    text = (f"# One epoch loop: the estimator and a Ray worker (`benchmarks/loop.py`)\n\n{machine()}, torch "
            f"{torch.__version__}; {args.epochs} epochs of pendigits x {args.copies}, median epoch after the "
            f"first\n\n" + markdown_table(rows))
    print(text)
    if args.out:
        write_atomic(args.out, text)


if __name__ == "__main__":
    main()
