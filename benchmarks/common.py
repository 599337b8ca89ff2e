"""Shared helpers for the benchmark scripts: data loading and writing result tables."""
from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import torch

ROOT = Path(__file__).resolve().parent
DEFAULT_DATA = ROOT.parent.parent / "shared" / "data"


def heavy_tailed(n: int = 6000, d: int = 8, k: int = 6, outlier_rate: float = 0.003, seed: int = 0):
    """Gaussian clusters plus a few rows pushed tens of standard deviations out on one feature:
    the table on which Lloyd's k-means spends clusters on single outliers (seeded, no download)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 3, size=(k, d))
    y = rng.integers(0, k, size=n)
    x = centers[y] + rng.normal(size=(n, d))
    out = rng.random(n) < outlier_rate
    cols = rng.integers(0, d, size=out.sum())
    x[np.flatnonzero(out), cols] += rng.choice([-1, 1], size=out.sum()) * rng.uniform(30, 60, size=out.sum()) * x.std(0)[cols]
    return pd.DataFrame(x, columns=[f"f{j}" for j in range(d)]), y


def heavy_shapes(n: int, d: int, k: int, shape: str, seed: int):
    """Seeded Gaussian clusters given a heavy tail of one ``shape``: ``far`` (``k // 2`` rows pushed
    20-80 standard deviations out on one feature), ``t`` (the first quarter of the features
    Student-t with 1.5 degrees of freedom about their cluster's centre), ``lognormal`` (the first
    third log-normal, as incomes and counts are) or ``mix`` (a t feature and far rows)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 3, size=(k, d))
    y = rng.integers(0, k, size=n)
    x = centers[y] + rng.normal(size=(n, d))
    heavy = max(1, d // (3 if shape == "lognormal" else 4))
    if shape in ("t", "mix"):
        x[:, :heavy] = centers[y, :heavy] + rng.standard_t(1.5, size=(n, heavy))
    if shape == "lognormal":
        x[:, :heavy] = np.exp(centers[y, :heavy] / 3 + 1.2 * rng.normal(size=(n, heavy)))
    if shape in ("far", "mix"):
        rows, cols = rng.choice(n, k // 2, replace=False), rng.integers(0, d, size=k // 2)
        x[rows, cols] += rng.choice([-1, 1], size=len(rows)) * rng.uniform(20, 80, size=len(rows)) * x.std(0)[cols]
    return pd.DataFrame(x, columns=[f"f{j}" for j in range(d)]), y


def load_dataset(name: str, data_dir: Path = DEFAULT_DATA):
    """(features DataFrame, labels) of a UCI table in ``data_dir`` (label column split off), of
    scikit-learn's bundled ``digits``, or of the seeded ``heavytail`` table."""
    if name == "digits":
        from neurcam_dist.data.bundled import digits_frame
        df = digits_frame()
        return df.drop(columns="label"), df["label"].to_numpy()
    if name == "heavytail":
        return heavy_tailed()
    path = Path(data_dir) / f"{name}.csv.gz"
    if not path.exists():
        raise SystemExit(f"{path} not found: pass --data-dir pointing at the folder with {name}.csv.gz")
    df = pd.read_csv(path)
    y = df.pop("label").to_numpy()
    return df, y


def standardized(df: pd.DataFrame) -> np.ndarray:
    x = df.to_numpy(np.float64)
    sd = x.std(0)
    return ((x - x.mean(0)) / np.where(sd > 0, sd, 1)).astype(np.float32)


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return f"{cpu}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.get_num_threads()} threads), {gpu}"


def markdown_table(rows: list[dict]) -> str:
    if not rows:
        return "(no rows)\n"
    cols = list(rows[0])
    for r in rows[1:]:
        cols += [c for c in r if c not in cols]
    fmt = lambda v: f"{v:.4g}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(fmt(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def write_atomic(path: Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


@contextmanager
def busy_neighbour():
    """A CPU-bound process (one thread, a Python loop) running beside the body: what a shared
    machine (a CI runner, a notebook server, a Ray node with other tasks) looks like to a fit."""
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    time.sleep(0.5)   # running before the body starts
    try:
        yield
    finally:
        spinner.kill()
        spinner.wait()
