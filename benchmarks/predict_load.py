"""Load: ``neurcam predict`` on many rows, its memory and its rate over the run.

    python benchmarks/predict_load.py [--rows 2000000 20000000] [--features 8] [--files 40]

For each size: synthetic Parquet shards (``data.synthetic``; float32 features and an id), a model
fitted in memory on 20,000 rows of the same kind, then ``neurcam predict`` as a user runs it (its
own process, a local Ray, the default 2 scoring actors), its progress lines every 10 s. A sampler
sums the resident memory (RSS) and the proportional set size (PSS: shared pages counted once
across processes, the object store's included) of the command and every process of its Ray
session twice a second. Prints one Markdown table: rows, input MiB, seconds, mean rows/s, the
slowest and fastest 10-s window's rate, peak RSS and PSS of the process tree; and checks that the
output holds every input row once.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pandas as pd
import psutil
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from neurcam_dist import NeurCAM
from neurcam_dist.data.synthetic import write_shards

from common import markdown_table

PROGRESS = re.compile(r"([\d,]+) of ([\d,]+) rows")


class TreeMemory(threading.Thread):
    """Peak RSS and PSS (bytes) summed over a process and its descendants (Ray's processes are
    the command's descendants), sampled every ``every`` seconds."""

    def __init__(self, pid: int, every: float = 0.5):
        super().__init__(daemon=True)
        self.root, self.every, self.rss, self.pss, self.done = psutil.Process(pid), every, 0, 0, False

    def run(self) -> None:
        while not self.done:
            rss = pss = 0
            try:
                procs = [self.root, *self.root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            for p in procs:
                try:
                    info = p.memory_full_info()
                    rss, pss = rss + info.rss, pss + info.pss
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    pass
            self.rss, self.pss = max(self.rss, rss), max(self.pss, pss)
            time.sleep(self.every)


def run_predict(model: Path, data: Path, out: Path) -> dict:
    """``neurcam predict`` in its own process: seconds, progress (time, rows) points, peak memory."""
    env = {**os.environ, "NEURCAM_PREDICT_PROGRESS_S": "10"}
    cmd = [sys.executable, "-m", "neurcam_dist.cli", "predict", "--model", str(model), "--input", str(data),
           "--output", str(out), "--log-dir", str(out.parent / "logs")]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    mem = TreeMemory(proc.pid)
    mem.start()
    points, lines = [], []
    for line in proc.stdout:
        lines.append(line)
        m = PROGRESS.search(line)
        if m:
            points.append((time.perf_counter() - t0, int(m.group(1).replace(",", ""))))
    proc.wait()
    seconds = time.perf_counter() - t0
    mem.done = True
    if proc.returncode != 0:
        raise SystemExit("".join(lines[-30:]))
    return {"seconds": seconds, "points": points, "rss": mem.rss, "pss": mem.pss}


def window_rates(points: list[tuple[float, int]]) -> list[float]:
    """Rows/s between consecutive progress lines."""
    return [(b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(points, points[1:], strict=False) if b[0] > a[0]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[2_000_000, 20_000_000])
    ap.add_argument("--features", type=int, default=8)
    ap.add_argument("--files", type=int, default=40)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="neurcam-load-"))
    table = []
    try:
        features = [f"f{i}" for i in range(args.features)]
        write_shards(work / "fit", 20_000, n_features=args.features, repr_dim=0, n_clusters=5, n_files=1, seed=0)
        NeurCAM(n_clusters=5, random_state=0, verbose=False).fit(
            pd.read_parquet(work / "fit", columns=features)).save(work / "model")
        for n in args.rows:
            data = work / f"data-{n}"
            write_shards(data, n, n_features=args.features, repr_dim=0, n_clusters=5, n_files=args.files, seed=0)
            mib = sum(f.stat().st_size for f in data.glob("*.parquet")) / 2**20
            r = run_predict(work / "model", data, work / f"out-{n}" / "predictions")
            out = work / f"out-{n}" / "predictions"
            ids = pd.concat([pq.read_table(f, columns=["id"]).to_pandas() for f in sorted(out.glob("*.parquet"))])
            assert len(ids) == n and ids["id"].is_unique, f"{len(ids)} rows, {ids['id'].nunique()} ids, expected {n}"
            rates = window_rates(r["points"])[1:-1]   # whole windows: not the first (actors starting), not the last
            first = r["points"][0][0] if r["points"] else float("nan")
            table.append({"rows": f"{n:,}", "input MiB on disk": f"{mib:,.0f}", "s": f"{r['seconds']:.1f}",
                          "first progress line, s": f"{first:.1f}", "rows/s": f"{n / r['seconds']:,.0f}",
                          "10-s windows after the first: slowest / median / fastest rows/s": (
                              f"{min(rates):,.0f} / {sorted(rates)[len(rates) // 2]:,.0f} / {max(rates):,.0f}"
                              if rates else "-"),
                          "peak RSS, GiB (sum)": f"{r['rss'] / 2**30:.2f}",
                          "peak PSS, GiB": f"{r['pss'] / 2**30:.2f}"})
            shutil.rmtree(data)
            shutil.rmtree(work / f"out-{n}")
            print(table[-1], "windows:", [round(x) for x in window_rates(r["points"])], flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{args.features} float32 features + id in {args.files} Parquet files; `neurcam predict` defaults "
          f"(2 scoring actors, batch 4096); every output row checked present once\n")
    print(markdown_table(table))


if __name__ == "__main__":
    main()
