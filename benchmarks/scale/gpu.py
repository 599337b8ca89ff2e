"""Training rows/s on one GPU: the shared epoch step (``epoch.train_epoch``) on data resident on
the device, for a pendigits-size table and a 1M-row table with a 256-dim embedding.

    python benchmarks/scale/gpu.py [--out gpu.md] [--epochs 3]

This is the per-worker compute of a ``use_gpu: true`` Ray Train run (each worker runs this step on
its shard); Ray is not needed here, so the script runs on a bare CUDA machine with torch, entmax,
numpy, scikit-learn and pandas. Paper hyperparameters: hidden (256, 256), 64 bases, batch 512,
K = 10; also batch 8192, the size at which the GPU, not kernel launches, sets the pace.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from neurcam_dist.model.step import Batch, train_epoch  # noqa: E402
from neurcam_dist.model.network import NeurCAMNet  # noqa: E402

K, HIDDEN, BASES = 10, (256, 256), 64


def run(n: int, d: int, r: int, p: int, precision: str, batch: int, epochs: int, device) -> float:
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(n, d, device=device, generator=g)
    xr = x if r == d else torch.randn(n, r, device=device, generator=g)
    net = NeurCAMNet(d, K, d, p, HIDDEN, BASES, xr[:K].clone(), seed=0).to(device)
    opt = torch.optim.Adam(net.parameters(), lr=2e-3)
    target = torch.log_softmax(torch.randn(n, K, device=device, generator=g), 1)

    def batches():
        perm = torch.randperm(n, device=device, generator=g)
        for i in range(0, n, batch):
            idx = perm[i:i + batch]
            yield Batch(x[idx], xr[idx], target[idx])

    times = []
    for e in range(epochs + 1):  # the first epoch warms up kernels and the allocator
        torch.cuda.synchronize()
        t = time.perf_counter()
        train_epoch(net, net.centroids, opt, batches(), phase="anneal_single", t=0.5, t2=0.5, m=1.05, gamma=1.0,
                    precision=precision)
        torch.cuda.synchronize()
        if e:
            times.append(time.perf_counter() - t)
    return n / sorted(times)[len(times) // 2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--epochs", type=int, default=3)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device: this benchmark needs a GPU")
    device = torch.device("cuda")
    name = torch.cuda.get_device_name(0)
    cases = [("pendigits-size", 10_992, 16, 16, 0), ("pendigits-size", 10_992, 16, 16, 16),
             ("1M rows, 256-dim embedding", 1_000_000, 16, 256, 0),
             ("1M rows, 256-dim embedding", 1_000_000, 16, 256, 16)]
    rows = []
    for label, n, d, r, p in cases:
        for precision in ("fp32", "bf16"):
            for batch in (512, 8192):
                t0 = time.perf_counter()
                rps = run(n, d, r, p, precision, batch, args.epochs, device)
                line = (f"| {label} | {n:,} | {'Neur2CAM (P=16)' if p else 'NeurCAM'} | {precision} | {batch} "
                        f"| {rps:,.0f} |")
                print(line, f"({time.perf_counter() - t0:.1f} s)", flush=True)
                rows.append(line)
    table = "\n".join([f"GPU: {name}; torch {torch.__version__}; one process, data resident on the GPU; "
                       f"rows/s = median of {args.epochs} epochs (after one warm-up epoch); phase: anneal "
                       f"(relaxed gates + KL), the slowest.", "",
                       "| data | rows | model | precision | batch | rows/s |", "|---|---|---|---|---|---|", *rows])
    print(table)
    if args.out:
        Path(args.out).write_text(table + "\n")


if __name__ == "__main__":
    main()
