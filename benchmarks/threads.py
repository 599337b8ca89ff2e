"""The measurement behind ``settings.THREAD_WORK``: a training step on 1 torch thread and on all of
them, on a quiet machine and beside a CPU-bound process, for models of 4 to 256 channels.

    python benchmarks/threads.py                  # writes benchmarks/results/threads.md

Each row fits ``NeurCAM(n_clusters=4)`` on 2,048 rows of Gaussian noise with ``d`` features (one
channel each, the default model) for 12 epochs of 4 steps of 512 rows, with the thread count set
(``threads``), and reports the median step (the first two epochs left out), the step's
multiply-adds (``TrainingSpec.step_work``) and the threads the rule gives it (``sized_threads``
with the process's threads). A row where all threads are slower than one beside a busy process,
and not much faster on a quiet machine, should get one thread from the rule.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, busy_neighbour, machine, markdown_table, write_atomic

from neurcam_dist import NeurCAM
from neurcam_dist.model import TrainingSpec
from neurcam_dist.settings import THREAD_WORK, threads_for

ROWS, BATCH = 2048, 512


def step_ms(d: int, threads: int) -> float:
    x = np.random.default_rng(0).normal(size=(ROWS, d))
    warnings.simplefilter("ignore", UserWarning)   # noise has fewer than 4 clusters: the step is what is timed
    est = NeurCAM(n_clusters=4, verbose=False, epochs=12, warmup_epochs=12, early_stopping=False, init="kmeans",
                  threads=threads).fit(x)
    return statistics.median(r["seconds"] for r in est.history_["epochs"][2:]) / (ROWS / BATCH) * 1000


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--features", default="4,16,32,64,128,256")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "threads.md")
    args = ap.parse_args(argv)
    every = torch.get_num_threads()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    NeurCAM(n_clusters=2, verbose=False, epochs=2).fit(np.random.default_rng(0).normal(size=(20, 2)))  # imports
    rows = []
    for d in map(int, args.features.split(",")):
        work = TrainingSpec.for_data({"n_clusters": 4}, ROWS, d).step_work(ROWS)
        quiet = {n: step_ms(d, n) for n in (1, every)}
        with busy_neighbour():
            busy = {n: step_ms(d, n) for n in (1, every)}
        rows.append({"channels": d, "multiply-adds a step": f"{work:.2g}",
                     "quiet 1 thread ms": round(quiet[1], 1), f"quiet {every} threads ms": round(quiet[every], 1),
                     "busy 1 thread ms": round(busy[1], 1), f"busy {every} threads ms": round(busy[every], 1),
                     f"{every} threads / 1, quiet": round(quiet[every] / quiet[1], 2),
                     f"{every} threads / 1, busy": round(busy[every] / busy[1], 2),
                     "the rule's threads": threads_for(work, every)})
        print(markdown_table(rows[-1:]).splitlines()[-1], flush=True)
    text = (f"# Torch threads for a training step, quiet and beside a busy process\n\nRun {started} on "
            f"{machine()}. A step of 512 rows; `busy`: a CPU-bound process (one thread) runs beside the fit. "
            f"The rule (`settings.threads_for`): one thread per {THREAD_WORK:.2g} multiply-adds of a step, "
            f"at least 1, at most the process's threads.\n\n" + markdown_table(rows))
    write_atomic(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
