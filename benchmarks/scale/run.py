"""Streaming and scaling of the Ray trainer on Parquet shards written by ``generate.py``.

    python benchmarks/scale/run.py --data /tmp/scale [--workers 2] [--scaling-files 8] [--out FILE.md]
    python benchmarks/scale/run.py --data /tmp/scale --feed-only [--epochs 2]   # the feed alone, no model
    python benchmarks/scale/run.py --data /tmp/scale --resident                 # streamed vs resident epoch
    python benchmarks/scale/run.py --data /tmp/small --cache-compare --epochs 12  # cache: always vs never
    python benchmarks/scale/run.py --data /tmp/scale --whole                    # a default fit vs one epoch

Feed only: the workers read their shards through the training feed (``worker.stream``: Ray Data,
Arrow -> numpy -> standardized tensors, the local shuffle buffer) and do nothing else; rows/s
and MB/s per CPU say what the feed can give a model. Resident: two epochs with ``train.cache:
device``: the first streams the files, the second trains from the rows the workers kept in
memory, so one run measures the streamed and the in-memory rate of the same workers. Cache
compare: the same epochs with ``train.cache: always`` (rows in Ray's object store) and ``never``
(the Parquet files read again every epoch), on small data where the per-epoch start shows.

Whole: one streamed pass as ``--resident``'s first epoch (the modes above measure passes), then
a whole ``neurcam train`` with nothing set but ``n_clusters: 10`` (profile pass, k-means init,
training in epochs of ``epoch_rows`` rows, the scoring pass, the outputs) timed end to end with
the memory sampler on, and MiniBatchKMeans (the paper's mKMC, batch 1,024, n_init 3) in the same
representation for its inertia.

Streaming: validate + profile the dataset (one Ray Data pass), then train ONE full epoch with
the paper's hyperparameters (hidden (256, 256), 64 bases, batch 512, K = 10, k-means init) on
``--workers`` Ray Train workers of 1 CPU / 1 thread each, while a sampler adds up the resident
memory (RSS, and PSS which counts shared pages once) of every Ray process and the driver every
0.5 s. The target: the peak stays far below the dataset's size (the run streams, it never holds
the data). Scaling: one epoch with 1 and with 2 workers on the first ``--scaling-files`` shards.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from neurcam_dist.distributed import driver as distributed
from neurcam_dist.distributed import quiet_data_progress
from neurcam_dist.config import parse_config
from neurcam_dist.data import resolve

GiB = 2**30


class MemorySampler(threading.Thread):
    """Peak of the summed RSS / PSS of the driver and every Ray process, sampled every 0.5 s."""

    def __init__(self, period: float = 0.5):
        super().__init__(daemon=True)
        self.period, self.peak_rss, self.peak_pss, self.stop_flag = period, 0, 0, False
        self.shmem_at_peak = 0   # of the peak PSS: shared memory (Ray's object store, mapped by its users)
        self.samples = 0
        self.at_peak: list[tuple[str, int]] = []

    @staticmethod
    def _ray_processes():
        me = os.getpid()
        for p in psutil.process_iter(["pid", "cmdline", "name"]):
            text = " ".join(p.info["cmdline"] or []) + " " + (p.info["name"] or "")
            if p.info["pid"] == me or "ray" in text.lower():
                yield p

    @staticmethod
    def _label(cmdline: list[str]) -> str:
        """A Ray worker's title (``ray::SplitCoordinator``, ``ray::IDLE``, ``ray::IDLE_SpillWorker``), else the program."""
        title = " ".join(cmdline)
        if title.startswith("ray::"):
            return title.split()[0]
        return os.path.basename(cmdline[0].split()[0]) if cmdline and cmdline[0] else "?"

    @staticmethod
    def _rollup(pid: int) -> dict[str, int]:
        """Rss, Pss and Pss_Shmem (the object store's pages it maps) of a process, in bytes: one
        read of the kernel's summary, not of every mapping (``psutil.memory_full_info``)."""
        out = {}
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("Rss", "Pss", "Pss_Shmem"):
                    out[key] = int(rest.split()[0]) * 1024
        return out

    def run(self) -> None:
        while not self.stop_flag:
            rss = pss = shmem = 0
            parts = []
            for p in self._ray_processes():
                try:
                    mem = self._rollup(p.info["pid"])
                except OSError:   # gone, or not ours to read
                    continue
                rss, pss, shmem = rss + mem.get("Rss", 0), pss + mem.get("Pss", 0), shmem + mem.get("Pss_Shmem", 0)
                parts.append((self._label(p.info["cmdline"] or [p.info["name"] or "?"]), mem.get("Pss", 0)))
            if pss > self.peak_pss:
                self.at_peak, self.shmem_at_peak = sorted(parts, key=lambda t: -t[1]), shmem
            self.peak_rss, self.peak_pss = max(self.peak_rss, rss), max(self.peak_pss, pss)
            self.samples += 1
            time.sleep(self.period)


def fresh(name: str) -> str:
    """A run name never used before: Ray Train resumes a run whose name it finds in storage."""
    return f"{name}-{time.strftime('%H%M%S')}-{os.getpid()}"


SHUFFLE_BUFFER: int | None = None   # --shuffle-buffer (None: the config's default)


def job(files: list[str], workers: int, cache: str = "auto", out: str = "/tmp/neurcam-scale-out",
        model: dict | None = None, **train_kw):
    """The paper's hyperparameters (K = 10, k-means init) on ``workers`` one-CPU workers; the
    ``embedding`` column is the representation when the files have one, else the features."""
    import pyarrow.parquet as pq
    train = {"num_workers": workers, "cpus_per_worker": 1, "kmeans_sample": 50_000, "cache": cache, **train_kw}
    if SHUFFLE_BUFFER is not None:
        train["shuffle_buffer"] = SHUFFLE_BUFFER
    embedding = "embedding" if "embedding" in pq.read_schema(files[0]).names else None
    return parse_config({
        "data": {"path": files, "embedding": embedding, "label": "label", "id": "id"},
        # an epoch is a whole pass here: these modes measure passes (``epoch_rows: 0``)
        "model": {"n_clusters": 10, "init": "kmeans", "distill_epochs": 0, "epoch_rows": 0, **(model or {})},
        "train": train,
        "output": out})


def one_epoch(files: list[str], workers: int, out: str, label: str) -> dict:
    rjob = distributed.resolve(job(files, workers, cache="never", out=out))  # streaming: the peak must not hold the data
    t0 = time.perf_counter()
    rjob, prof = distributed.prepare(rjob)
    t_prepare = time.perf_counter() - t0
    init = distributed.initial_state(rjob, prof)
    t1 = time.perf_counter()
    result = distributed.run_workers(rjob, distributed.worker_config(rjob, init, max_epochs=1),
                                     fresh(f"scale-{label}-{workers}w"))
    wall = time.perf_counter() - t1
    m = result.metrics
    return {"rows": prof.n_rows, "prepare_s": t_prepare, "epoch_s": m["seconds"], "rows_per_s": m["rows_per_s"],
            "wall_s": wall, "seen": m["rows"]}


def feed_loop(config: dict) -> None:
    """A Ray Train worker that reads its shard through the training feed and nothing else."""
    import numpy as np
    import ray.train
    import torch

    from neurcam_dist.distributed.worker import _Collate, stream
    c = config["worker"]
    collate = _Collate(c.plan, np.asarray(c.mean, np.float64), np.asarray(c.scale, np.float64))
    ctx = ray.train.get_context()
    shard = ray.train.get_dataset_shard("train")
    epochs = []
    for epoch in range(config["epochs"]):
        t0, rows, nbytes = time.perf_counter(), 0, 0
        for x, xr, key in stream(shard, max(1, c.spec.batch_size // ctx.get_world_size()), collate,
                                 torch.device("cpu"), c.shuffle_buffer, epoch):
            rows += x.shape[0]
            nbytes += (x.numel() * x.element_size() + (0 if xr is x else xr.numel() * xr.element_size())
                       + key.numel() * key.element_size())
        sums = torch.tensor([rows, nbytes, time.perf_counter() - t0], dtype=torch.float64)
        if ctx.get_world_size() > 1:  # the group's rows and bytes; its slowest worker's seconds
            import torch.distributed as dist
            secs = sums[2:].clone()
            dist.all_reduce(sums)
            dist.all_reduce(secs, op=dist.ReduceOp.MAX)
            sums[2] = secs[0]
        epochs.append({"epoch": epoch + 1, "rows": int(sums[0]), "bytes": float(sums[1]), "seconds": float(sums[2])})
    if ctx.get_world_rank() == 0:  # one machine: a file is the simplest way back (Train keeps metrics with checkpoints)
        Path(config["out"]).write_text(json.dumps(epochs))


def feed_only(files: list[str], workers: int, epochs: int) -> list[dict]:
    """Per epoch: rows/s and MB/s of the whole group (each worker's report, summed)."""
    from ray.train import RunConfig
    from ray.train.torch import TorchTrainer

    from neurcam_dist.distributed.session import worker_group
    rjob = distributed.resolve(job(files, workers, cache="never"))
    rjob, prof = distributed.prepare(rjob)
    init = distributed.initial_state(rjob, prof)
    wcfg = distributed.worker_config(rjob, init)
    out = Path("/tmp/neurcam-scale-out/feed-only.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    trainer = TorchTrainer(feed_loop, train_loop_config={"worker": wcfg, "epochs": epochs, "out": str(out)},
                           run_config=RunConfig(name=fresh("feed-only"), storage_path="/tmp/neurcam-scale-out/_ray"),
                           datasets={"train": distributed.training_dataset(rjob)}, **worker_group(rjob.train))
    trainer.fit()
    per_epoch = json.loads(out.read_text())
    return [{**m, "rows_per_s": m["rows"] / m["seconds"], "mb_per_s_per_cpu": m["bytes"] / m["seconds"] / 1e6 / workers}
            for m in per_epoch]


def epoch_records(cfg, epochs: int, name: str) -> list[dict]:
    """Prepare, initialise and run ``cfg``'s workers for ``epochs`` epochs; the epoch records of
    the final checkpoint (worker 0's)."""
    import torch
    rjob = distributed.resolve(cfg)
    rjob, prof = distributed.prepare(rjob)
    init = distributed.initial_state(rjob, prof)
    result = distributed.run_workers(rjob, distributed.worker_config(rjob, init, max_epochs=epochs), fresh(name))
    with result.checkpoint.as_directory() as d:
        state = torch.load(os.path.join(d, distributed.STATE_FILE), map_location="cpu", weights_only=True)
    return list(state["records"])


def resident(files: list[str], workers: int) -> list[dict]:
    """Two epochs with ``train.cache: device``: (source, rows/s) of each."""
    records = epoch_records(job(files, workers, cache="device"), 2, f"scale-resident-{workers}w")
    return [{"epoch": r["epoch"], "source": r["source"], "rows": r["rows"], "seconds": r["seconds"],
             "rows_per_s": r["rows_per_s"]} for r in records]


def cache_compare(files: list[str], workers: int, epochs: int) -> list[dict]:
    """``epochs`` epochs with ``train.cache: always`` (the rows in Ray's object store) and with
    ``never`` (the Parquet files read every epoch): the first epoch and the median of the others."""
    import numpy as np
    out = []
    for cache in ("always", "never"):
        records = epoch_records(job(files, workers, cache=cache), epochs, f"scale-cache-{cache}-{workers}w")
        secs = [r["seconds"] for r in records]
        median = float(np.median(secs[1:]))
        out.append({"cache": cache, "rows": records[0]["rows"], "epochs": len(secs), "first_s": secs[0],
                    "median_s": median, "rows_per_s": records[0]["rows"] / median})
    return out


def teacher_compare(files: list[str], workers: int, epochs: int) -> list[dict]:
    """Streamed epochs (``cache: never``) after a one-epoch warm-up, with the frozen model's
    assignment kept per row key and without it (a budget too small for the table): every epoch's
    time and the rows the frozen model ran on (worker 0)."""
    out = []
    for how, gib in (("kept per row key", None), ("every batch (no budget)", 1e-6)):
        cfg = job(files, workers, cache="never", model={"warmup_epochs": 1, "early_stopping": False},
                  device_cache_gib=gib)
        out += [{"teacher": how, "epoch": r["epoch"], "phase": r["phase"], "rows": r["rows"], "seconds": r["seconds"],
                 "rows_per_s": r["rows_per_s"], "teacher_rows": r["teacher_rows"]}
                for r in epoch_records(cfg, epochs, f"scale-teacher-{workers}w")]
    return out


def whole(files: list[str], workers: int, out: str) -> dict:
    """One streamed pass, then a whole default fit end to end, and MiniBatchKMeans beside it."""
    import numpy as np
    import pyarrow.parquet as pq
    from sklearn.cluster import MiniBatchKMeans

    one = one_epoch(files, workers, out + "-pass", "pass")
    cfg = job(files, workers, out=out, model={"init": "distill", "distill_epochs": 10, "epoch_rows": 20_000,
                                              "kmeans": "auto"})
    sampler = MemorySampler()
    sampler.start()
    t0 = time.perf_counter()
    result = distributed.train(cfg, name=fresh("scale-whole"))
    wall = time.perf_counter() - t0
    sampler.stop_flag = True
    sampler.join()
    h = result.estimator.history_
    col = "embedding" if "embedding" in pq.read_schema(files[0]).names else None
    if col is not None:
        space = np.concatenate([np.stack(pq.read_table(f, columns=[col]).column(0).to_numpy(zero_copy_only=False))
                                .astype(np.float32) for f in files])
    else:
        space = None
    t1 = time.perf_counter()
    mbk = MiniBatchKMeans(n_clusters=10, batch_size=1024, n_init=3, random_state=0).fit(space)
    mbk_s = time.perf_counter() - t1
    # the generator's own clusters, scored the same way: what the embedding's best partition costs
    # (the features see the clusters less sharply than the embedding does: ``data.synthetic``)
    labels = np.concatenate([pq.read_table(f, columns=["label"]).column(0).to_numpy() for f in files])
    features = [n for n in pq.read_schema(files[0]).names if n.startswith("f")]
    x = np.concatenate([np.column_stack([t.column(c).to_numpy() for c in features])
                        for t in (pq.read_table(f, columns=features) for f in files)])
    # the best any function of the features can do here: each row to the nearest of the generator's
    # centres in the features (estimated as the label means; equal priors, unit noise: the Bayes rule)
    centres = np.stack([x[labels == k].mean(0) for k in range(int(labels.max()) + 1)])
    nearest = np.concatenate([((x[lo:lo + 262_144, None, :] - centres[None]) ** 2).sum(-1).argmin(1)
                              for lo in range(0, len(x), 262_144)])
    return {"pass_s": one["wall_s"] + one["prepare_s"], "fit_s": wall, "epochs": h["n_epochs"],
            "trained_rows": sum(r["rows"] for r in h["epochs"]), "rows": result.metrics["n_rows"],
            "inertia": result.metrics["inertia"], "mbk_inertia": chunked_inertia(space, mbk.labels_),
            "mbk_s": mbk_s, "label_inertia": chunked_inertia(space, labels),
            "features_inertia": chunked_inertia(space, nearest), "features_agree": float((nearest == labels).mean()),
            "peak_rss": sampler.peak_rss,
            "peak_pss": sampler.peak_pss, "stop": h["stop_reason"]}


def chunked_inertia(space, labels, chunk: int = 262_144) -> float:
    """``metrics.inertia`` from per-cluster moments added up a chunk at a time (no float64 copy of
    a 4 GiB representation)."""
    import numpy as np

    from neurcam_dist import metrics as metrics_mod
    k = int(labels.max()) + 1
    counts, sums, sumsq = np.zeros(k), np.zeros((k, space.shape[1])), np.zeros(k)
    for lo in range(0, len(space), chunk):
        x, y = space[lo:lo + chunk].astype(np.float64), labels[lo:lo + chunk]
        onehot = np.eye(k)[y]
        counts += onehot.sum(0)
        sums += onehot.T @ x
        sumsq += onehot.T @ (x * x).sum(1)
    return metrics_mod.inertia_from_moments(counts, sums, sumsq)


def plan_rows(files: list[str]) -> int:
    import pyarrow.parquet as pq
    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--scaling-files", type=int, default=8)
    ap.add_argument("--object-store-gib", type=float, default=1.0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--skip-streaming", action="store_true")
    ap.add_argument("--skip-scaling", action="store_true")
    ap.add_argument("--streaming-files", type=int, default=None, help="first N shards only (default: all)")
    ap.add_argument("--block-mib", type=float, default=None, help="Ray Data target block size (default: Ray's)")
    ap.add_argument("--feed-only", action="store_true", help="time the feed alone (no model) and stop")
    ap.add_argument("--resident", action="store_true", help="a streamed and a resident epoch (cache: device)")
    ap.add_argument("--cache-compare", action="store_true",
                    help="epochs with train.cache always and never (the object store vs the files each epoch)")
    ap.add_argument("--teacher-compare", action="store_true",
                    help="streamed annealing epochs with the frozen model's assignment kept per row and without")
    ap.add_argument("--epochs", type=int, default=2,
                    help="--feed-only: epochs to read; --cache-compare, --teacher-compare: epochs per mode")
    ap.add_argument("--shuffle-buffer", type=int, default=None, help="train.shuffle_buffer (default: the config's)")
    ap.add_argument("--whole", action="store_true", help="one streamed pass, then a whole default fit end to end")
    args = ap.parse_args()
    global SHUFFLE_BUFFER
    SHUFFLE_BUFFER = args.shuffle_buffer
    files = resolve(args.data).files
    size = sum(Path(f).stat().st_size for f in files)
    import ray
    ray.init(num_cpus=args.workers + 1, object_store_memory=int(args.object_store_gib * GiB), include_dashboard=False,
             logging_level="WARNING")
    quiet_data_progress()
    if args.block_mib:
        from ray.data import DataContext
        DataContext.get_current().target_max_block_size = int(args.block_mib * 2**20)
    lines = [f"Machine: {os.cpu_count()} cores, {psutil.virtual_memory().total / GiB:.0f} GiB; Ray "
             f"{ray.__version__}; object store capped at {args.object_store_gib:g} GiB; data: {len(files)} "
             f"Parquet files, {size / GiB:.2f} GiB on disk; local shuffle buffer "
             f"{job(files[:1], 1).train.shuffle_buffer:,} rows.", ""]
    picked = files[: args.streaming_files]
    on_disk = sum(Path(f).stat().st_size for f in picked) / GiB
    if args.feed_only or args.resident or args.cache_compare or args.teacher_compare or args.whole:
        if args.whole:
            r = whole(picked, args.workers, "/tmp/neurcam-scale-whole")
            lines += [f"## A whole default fit against one streamed pass: {args.workers} worker(s) x 1 CPU / 1 "
                      f"thread, `n_clusters: 10`, everything else the defaults (`epoch_rows` 20,000)", "",
                      "| what | value |", "|---|---|",
                      f"| one streamed pass (validate, profile, k-means sample, one epoch of every row) | "
                      f"{r['pass_s']:.1f} s |",
                      f"| the whole fit end to end (profile, init, training, scoring pass, outputs) | "
                      f"{r['fit_s']:.1f} s (**{r['fit_s'] / r['pass_s']:.2f}x** the pass) |",
                      f"| epochs, rows trained on | {r['epochs']}, {r['trained_rows']:,} of {r['rows']:,} "
                      f"({r['trained_rows'] / r['rows']:.2f} passes); {r['stop']} |",
                      f"| inertia / MiniBatchKMeans' (batch 1,024, n_init 3, {r['mbk_s']:.0f} s) | "
                      f"{r['inertia']:.5g} / {r['mbk_inertia']:.5g} = **{r['inertia'] / r['mbk_inertia']:.4f}** |",
                      f"| inertia of the generator's own clusters / MiniBatchKMeans' (the embedding's best partition) | "
                      f"{r['label_inertia']:.5g} / {r['mbk_inertia']:.5g} = {r['label_inertia'] / r['mbk_inertia']:.4f} |",
                      f"| inertia of the features' best partition (each row to the nearest generator centre in the "
                      f"features; {r['features_agree']:.2%} of rows in their own cluster) / MiniBatchKMeans' | "
                      f"{r['features_inertia']:.5g} / {r['mbk_inertia']:.5g} = "
                      f"{r['features_inertia'] / r['mbk_inertia']:.4f}; NeurCAM / it = "
                      f"**{r['inertia'] / r['features_inertia']:.4f}** |",
                      f"| peak memory of every Ray process and the driver | RSS {r['peak_rss'] / GiB:.2f} GiB, "
                      f"PSS {r['peak_pss'] / GiB:.2f} GiB |"]
        elif args.teacher_compare:
            rows = teacher_compare(picked, args.workers, args.epochs)
            lines += [f"## The frozen model's assignment in streamed epochs: {args.workers} worker(s) x 1 CPU / 1 "
                      f"thread, paper hyperparameters but a 1-epoch warm-up, `train.cache: never`", "",
                      "| teacher | epoch | phase | rows | s | rows/s | teacher rows (worker 0) |",
                      "|---|---|---|---|---|---|---|"]
            lines += [f"| {r['teacher']} | {r['epoch']} | {r['phase']} | {r['rows']:,} | {r['seconds']:.1f} | "
                      f"{r['rows_per_s']:,.0f} | {r['teacher_rows']:,} |" for r in rows]
            kept_s, every_s = (sum(later) / max(len(later), 1) for later in (
                [r["seconds"] for r in rows if r["teacher"] == how and r["epoch"] > 2]
                for how in dict.fromkeys(r["teacher"] for r in rows)))
            lines += ["", f"Mean annealing epoch after the first (epochs 3+): kept per row {kept_s:.1f} s, every "
                          f"batch {every_s:.1f} s: **{every_s / kept_s:.2f}x**"]
        elif args.cache_compare:
            rows = cache_compare(picked, args.workers, args.epochs)
            lines += [f"## `train.cache: always` vs `never`: {args.workers} worker(s) x 1 CPU / 1 thread, paper "
                      f"hyperparameters, {args.epochs} epochs each", "",
                      "| cache | rows | epoch 1 s | median s, later epochs | rows/s, later epochs |", "|---|---|---|---|---|"]
            lines += [f"| {r['cache']} | {r['rows']:,} | {r['first_s']:.2f} | {r['median_s']:.3f} | {r['rows_per_s']:,.0f} |"
                      for r in rows]
            lines += ["", f"never / always epoch time: **{rows[1]['median_s'] / rows[0]['median_s']:.2f}x**"]
        elif args.feed_only:
            sampler = MemorySampler()
            sampler.start()
            rows = feed_only(picked, args.workers, args.epochs)
            sampler.stop_flag = True
            sampler.join()
            lines += [f"## The feed alone: {args.workers} worker(s) x 1 CPU, no model, batch 512", "",
                      "| epoch | rows | s | rows/s | MB/s per CPU |", "|---|---|---|---|---|"]
            lines += [f"| {r['epoch']} | {r['rows']:,} | {r['seconds']:.1f} | {r['rows_per_s']:,.0f} | "
                      f"{r['mb_per_s_per_cpu']:.1f} |" for r in rows]
            lines += ["", f"Peak summed RSS {sampler.peak_rss / GiB:.2f} GiB, PSS {sampler.peak_pss / GiB:.2f} GiB "
                      f"(validate, profile, k-means sample and the feed), of which shared memory (the object "
                      f"store's pages) {sampler.shmem_at_peak / GiB:.2f} GiB. At the PSS peak: " + ", ".join(
                          f"{name} {pss / 2**20:.0f} MiB" for name, pss in sampler.at_peak[:12])]
        else:
            rows = resident(picked, args.workers)
            lines += [f"## Streamed and resident epochs: {args.workers} worker(s) x 1 CPU / 1 thread, paper "
                      f"hyperparameters, `train.cache: device`", "",
                      "| epoch | source | rows | s | rows/s |", "|---|---|---|---|---|"]
            lines += [f"| {r['epoch']} | {r['source']} | {r['rows']:,} | {r['seconds']:.1f} | "
                      f"{r['rows_per_s']:,.0f} |" for r in rows]
            lines += ["", f"streamed / resident rows/s: **{rows[0]['rows_per_s'] / rows[1]['rows_per_s']:.2f}x**"]
        lines[0] += f" Rows: {plan_rows(picked):,} ({on_disk:.2f} GiB on disk)."
        text = "\n".join(lines)
        print(text)
        if args.out:
            Path(args.out).write_text(text + "\n")
        return
    if not args.skip_streaming:
        sampler = MemorySampler()
        sampler.start()
        r = one_epoch(files[: args.streaming_files], args.workers, "/tmp/neurcam-scale-out", "stream")
        sampler.stop_flag = True
        sampler.join()
        lines += ["## Streaming: one full epoch, paper hyperparameters", "",
                  "| rows | workers | validate+profile s | epoch s | rows/s | peak RSS sum (GiB) | peak PSS sum (GiB) "
                  "| data on disk (GiB) |", "|---|---|---|---|---|---|---|---|",
                  f"| {r['rows']:,} | {args.workers} | {r['prepare_s']:.0f} | {r['epoch_s']:.0f} | "
                  f"{r['rows_per_s']:,.0f} | {sampler.peak_rss / GiB:.2f} | {sampler.peak_pss / GiB:.2f} | "
                  f"{sum(Path(f).stat().st_size for f in files[: args.streaming_files]) / GiB:.2f} |", "",
                  f"At the PSS peak, {len(sampler.at_peak)} processes (PSS): " + ", ".join(
                      f"{name} {pss / 2**20:.0f} MiB" for name, pss in sampler.at_peak), ""]
        print("\n".join(lines), flush=True)
    if args.skip_scaling:
        return
    subset = files[: args.scaling_files]
    rates = {}
    for w in (1, 2):
        rates[w] = one_epoch(subset, w, "/tmp/neurcam-scale-out", "scaling")
        print(f"scaling: {w} worker(s): {rates[w]['rows_per_s']:,.0f} rows/s", flush=True)
    lines += ["## Scaling: one epoch, 1 CPU and 1 torch thread per worker", "",
              "| rows | workers | epoch s | rows/s |", "|---|---|---|---|"]
    for w, r in rates.items():
        lines.append(f"| {r['rows']:,} | {w} | {r['epoch_s']:.1f} | {r['rows_per_s']:,.0f} |")
    lines += ["", f"2 workers / 1 worker: **{rates[2]['rows_per_s'] / rates[1]['rows_per_s']:.2f}x**"]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
