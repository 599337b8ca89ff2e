"""Training throughput per phase, as a fraction of the dense-matmul FLOP/s of the same machine.

    python benchmarks/speed.py [--data-dir ../shared/data] [--epochs 3] [--compare-fit]

For NeurCAM (P = 0) and Neur2CAM (P = D) on pendigits with the paper's hyperparameters, times
``epochs`` epochs of each phase (warm-up: relaxed gates, no KL; anneal: relaxed gates at T < 1,
KL to the cached teacher assignment; final: locked one-hot gates, KL) in fp32 and bf16, and
prints rows/s and achieved FLOP/s. FLOPs are counted analytically (3 x the forward matmuls).
``--compare-fit`` also fits NeurCAM end to end in both precisions and compares the final inertia.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_DATA, load_dataset, machine, markdown_table, standardized, write_atomic

from neurcam_dist import NeurCAM, metrics
from neurcam_dist.model.step import Batch, train_epoch
from neurcam_dist.model import log_assignment
from neurcam_dist.model.kmeans import kmeans_centroids
from neurcam_dist.model.network import NeurCAMNet
from neurcam_dist.model.perf import keep_freed_memory

HIDDEN, BASES, BATCH = (256, 256), 64, 512


def matmul_peak(dtype: torch.dtype, n: int = 8192, k: int = 256, reps: int = 40) -> float:
    a, b = torch.randn(n, k).to(dtype), torch.randn(k, k).to(dtype)
    for _ in range(5):
        a @ b
    t = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * n * k * k * reps / (time.perf_counter() - t)


def forward_flops_per_row(d: int, k: int, c: int, p: int) -> float:
    def kind(n, arity):
        dims = (arity, *HIDDEN, BASES)
        mlp = sum(2 * a * b for a, b in zip(dims[:-1], dims[1:], strict=False))
        return n * (mlp + 2 * BASES * k + 2 * d * arity)
    return kind(c, 1) + kind(p, 2)


def time_phases(x: torch.Tensor, k: int, p: int, precision: str, epochs: int) -> dict:
    n, d = x.shape
    cents = torch.from_numpy(kmeans_centroids(x.numpy(), k, 0, batch_size=BATCH)[0])
    net = NeurCAMNet(d, k, d, p, HIDDEN, BASES, cents, seed=0)
    opt = torch.optim.Adam(net.parameters(), lr=2e-3)
    gen = torch.Generator().manual_seed(0)
    targets = log_assignment(net, x)

    def batches(with_targets):
        perm = torch.randperm(n, generator=gen)
        for i in range(0, n, BATCH):
            idx = perm[i:i + BATCH]
            yield Batch(x[idx], x[idx], targets[idx] if with_targets else None)

    def run(phase, t, t2):
        train_epoch(net, net.centroids, opt, batches(phase != "warmup"), phase=phase, t=t, t2=t2, m=1.05,
                    gamma=1.0, precision=precision)  # one untimed epoch: allocator and caches warm
        start = time.perf_counter()
        for _ in range(epochs):
            train_epoch(net, net.centroids, opt, batches(phase != "warmup"), phase=phase, t=t, t2=t2, m=1.05,
                        gamma=1.0, precision=precision)
        return (time.perf_counter() - start) / epochs

    out = {"warmup": run("warmup", 1.0, 1.0), "anneal": run("anneal_single", 0.3, 0.3)}
    net.single.gates.lock()
    net.pairs.gates.lock()
    out["final"] = run("final", 1e-3, 1e-3)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--compare-fit", action="store_true")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "speed.md")
    args = ap.parse_args()
    keep_freed_memory()
    df, y = load_dataset("pendigits", args.data_dir)
    x = torch.from_numpy(standardized(df))
    n, d = x.shape
    k = len(np.unique(y))
    peak = {"fp32": matmul_peak(torch.float32), "bf16": matmul_peak(torch.bfloat16)}
    print(f"dense matmul peak: fp32 {peak['fp32'] / 1e9:.0f} GFLOP/s, bf16 {peak['bf16'] / 1e9:.0f} GFLOP/s", flush=True)
    rows, secs = [], {}
    for model, p in (("NeurCAM", 0), ("Neur2CAM", d)):
        flops_row = 3 * forward_flops_per_row(d, k, d, p)
        for precision in ("fp32", "bf16"):
            times = time_phases(x, k, p, precision, args.epochs)
            for phase, s in times.items():
                secs[(model, precision, phase)] = s
                achieved = flops_row * n / s
                rows.append({"model": model, "precision": precision, "phase": phase, "epoch s": s,
                             "rows/s": n / s, "GFLOP/epoch": flops_row * n / 1e9, "GFLOP/s": achieved / 1e9,
                             "% of fp32 peak": 100 * achieved / peak["fp32"],
                             "x warm-up time": s / times["warmup"]})
                print(rows[-1], flush=True)
    for r in rows:
        if r["precision"] == "bf16":
            r["bf16 speed-up"] = secs[(r["model"], "fp32", r["phase"])] / r["epoch s"]
    text = (f"# Training speed (pendigits, {n} rows, batch {BATCH})\n\nMachine: {machine()}\n\n"
            f"Dense matmul peak in this run: fp32 {peak['fp32'] / 1e9:.0f} GFLOP/s, "
            f"bf16 {peak['bf16'] / 1e9:.0f} GFLOP/s\n\n" + markdown_table(rows))
    if args.compare_fit:
        fit_rows = []
        for precision in ("fp32", "bf16"):
            t = time.perf_counter()
            est = NeurCAM(n_clusters=k, precision=precision, random_state=0, verbose=False).fit(df)
            fit_rows.append({"precision": precision, "epochs": est.n_iter_, "seconds": time.perf_counter() - t,
                             "inertia": est.inertia(df), "ari": metrics.ari(y, est.predict(df))})
            print(fit_rows[-1], flush=True)
        fit_rows[1]["inertia vs fp32"] = fit_rows[1]["inertia"] / fit_rows[0]["inertia"]
        text += "\n## End-to-end NeurCAM fit, fp32 vs bf16 (seed 0)\n\n" + markdown_table(fit_rows)
    write_atomic(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
