"""GPU measurements (issue 13), one mode per question, each printing a Markdown table:

    python benchmarks/scale/gpu.py step [--out F]               # training step rows/s: eager vs CUDA graph
    python benchmarks/scale/gpu.py fit  --data-dir D [--out F]  # in-memory pendigits fit per seed
    python benchmarks/scale/gpu.py repeat --data-dir D          # the same seed twice: reproducible?
    python benchmarks/scale/gpu.py ray  --data-dir D [--out F]  # neurcam train, 1 GPU worker, vs in memory
    python benchmarks/scale/gpu.py pack --data-dir D [--out F]  # Ray Tune: 1 trial vs 4 packed on one GPU
    python benchmarks/scale/gpu.py batch --data-dir D [--out F] # batch 512 .. 65,536: epoch, fit, inertia
    python benchmarks/scale/gpu.py large [--rows N] [--out F]   # the 1M-row, 256-dim table fitted whole

``step``, ``fit`` and ``batch --no-ray`` need only torch, entmax, numpy, pandas and scikit-learn; ``ray`` and ``pack``
need Ray too. A GPU host without Ray or network runs them with the kit of ``../shared/gpu/make_kit.sh``
(``benchmarks/scale/gpu_run.sh`` installs it and runs every mode under its own time limit).
``--device cpu`` runs the same code on a CPU with tiny sizes (a dry run of the script itself; the
captured step is then replayed by re-running it, ``graphs.RerunRecorder``).

The step mode times the paper's network (hidden (256, 256), 64 bases); the fits use the estimator's defaults
(hidden (64, 64)); K = 10 and batch 512 throughout.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from neurcam_dist.model import graphs as graphs_mod  # noqa: E402
from neurcam_dist.model.graphs import StepGraphs  # noqa: E402
from neurcam_dist.settings import CUBLAS_WORKSPACE, CUDA_GRAPHS, DETERMINISTIC_WORKSPACE  # noqa: E402
from neurcam_dist.model.network import NeurCAMNet  # noqa: E402
from neurcam_dist.params import DEFAULTS  # noqa: E402
from neurcam_dist.model.step import Batch, train_epoch  # noqa: E402
from neurcam_dist.model.trainer import make_optimizer  # noqa: E402

K, HIDDEN, BASES = 10, (256, 256), 64


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else f"CPU ({os.cpu_count()} cores)"


def report(device: torch.device, caption: str, columns: list[str], rows: list[str], notes=(),
           ray: bool = False) -> str:
    """A mode's result: the device line and caption, the table, then notes as a list."""
    head = f"Device: {device_name(device)}; torch {torch.__version__}" + (f"; Ray with {os.cpu_count()} CPUs" if ray else "")
    return "\n".join([f"{head}. {caption}", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns),
                      *rows, *(["", *[f"- {n}" for n in notes]] if notes else [])])


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def step_graphs(device: torch.device) -> StepGraphs:
    return StepGraphs(device)


class StepBench:
    """The shared epoch step (``step.train_epoch``) on random data resident on the device, anneal
    phase (relaxed gates + KL: the slowest), eager or replayed from CUDA graphs."""

    def __init__(self, n: int, d: int, r: int, p: int, device: torch.device, seed: int = 0,
                 hidden: tuple = HIDDEN, bases: int = BASES):
        g = torch.Generator(device=device).manual_seed(seed)
        self.n, self.device = n, device
        self.x = torch.randn(n, d, device=device, generator=g)
        self.xr = self.x if r == d else torch.randn(n, r, device=device, generator=g)
        self.target = torch.log_softmax(torch.randn(n, K, device=device, generator=g), 1)
        self.net = NeurCAMNet(d, K, d, p, hidden, bases, self.xr[:K].clone(), seed=seed).to(device)
        self.opt = make_optimizer(self.net.parameters(), 2e-3, device)   # the trainer's own
        self.gen = torch.Generator(device=device).manual_seed(seed + 1)

    def batches(self, batch: int, limit: int | None = None):
        perm = torch.randperm(self.n, device=self.device, generator=self.gen)
        for j, i in enumerate(range(0, self.n, batch)):
            if limit is not None and j >= limit:
                return
            idx = perm[i:i + batch]
            yield Batch(self.x[idx], self.xr[idx], self.target[idx])

    def epoch(self, batch: int, precision: str, graphs: StepGraphs | None, limit: int | None = None):
        return train_epoch(self.net, self.net.centroids, self.opt, self.batches(batch, limit), phase="anneal_single",
                           t=0.5, t2=0.5, m=1.05, gamma=1.0, precision=precision, graphs=graphs)


def step_rate(n, d, r, p, precision, batch, epochs, device, graphed: bool, **net) -> tuple[float, str]:
    b = StepBench(n, d, r, p, device, **net)
    graphs = step_graphs(device) if graphed else None
    times = []
    # untimed: kernels, the allocator, and each batch shape's warm-up steps and capture (an epoch of
    # two batches captures in its third epoch)
    warm = graphs_mod.WARMUP + 1
    for e in range(epochs + warm):
        sync(device)
        t = time.perf_counter()
        b.epoch(batch, precision, graphs)
        sync(device)
        if e >= warm:
            times.append(time.perf_counter() - t)
    how = "" if graphs is None else (f"capture failed: {graphs.failed}" if graphs.failed else f"{graphs.captures} captures")
    return n / statistics.median(times), how


def host_syncs(device: torch.device) -> str:
    """Run eager and captured epochs with CUDA's sync debug mode set to error: any host sync in
    the step (a tensor read by Python, a blocking copy) raises."""
    if device.type != "cuda":
        return "not checked (CPU)"
    out = []
    for graphed in (False, True):
        b = StepBench(4096, 16, 16, 4, device)
        graphs = step_graphs(device) if graphed else None
        b.epoch(512, "fp32", graphs)   # warm-up and captures, outside the check
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            b.epoch(512, "fp32", graphs)
            out.append(f"{'graph' if graphed else 'eager'}: none")
        except RuntimeError as e:
            out.append(f"{'graph' if graphed else 'eager'}: {str(e).splitlines()[0][:120]}")
        finally:
            torch.cuda.set_sync_debug_mode(0)
    return "; ".join(out)


def graph_vs_eager(device: torch.device, precision: str) -> float:
    """Largest parameter difference after 3 epochs of the same batches, eager vs captured."""
    states = []
    for graphed in (False, True):
        b = StepBench(4096, 16, 16, 4, device)
        graphs = step_graphs(device) if graphed else None
        for _ in range(3):
            b.epoch(512, precision, graphs)
        states.append(b.net.state_dict())
    return largest_difference(*states)


def mode_step(args, device) -> str:
    small = device.type == "cpu"
    cases = [("pendigits-size", 10_992 if not small else 2_048, 16, 16, 0),
             ("pendigits-size", 10_992 if not small else 2_048, 16, 16, 16)]
    big = ("1M rows, 256-dim embedding", 1_000_000 if not small else 16_384, 16, 256)
    rows, failures = [], set()
    for label, n, d, r, p in cases + [(big[0], big[1], big[2], big[3], 0), (big[0], big[1], big[2], big[3], 16)]:
        batches = (512, 8192) if n < 100_000 else (8192,)   # eager batch 512 on 1M rows takes minutes
        for precision in ("fp32", "bf16"):
            for batch in batches:
                rates = {}
                for graphed in (False, True):
                    t0 = time.perf_counter()
                    rates[graphed], how = step_rate(n, d, r, p, precision, batch, args.epochs, device, graphed)
                    print(f"  {label} P={p} {precision} batch {batch} {'graph' if graphed else 'eager'}: "
                          f"{rates[graphed]:,.0f} rows/s ({time.perf_counter() - t0:.1f} s) {how}", flush=True)
                    if how.startswith("capture failed"):
                        failures.add(how)
                rows.append(f"| {label} | {n:,} | {'Neur2CAM (P=16)' if p else 'NeurCAM'} | {precision} | {batch} "
                            f"| {rates[False]:,.0f} | {rates[True]:,.0f} | {rates[True] / rates[False]:.2f}x "
                            f"| {batch / rates[False] * 1e3:.2f} | {batch / rates[True] * 1e3:.2f} |")
    checks = [*sorted(failures), f"host syncs inside an epoch (CUDA sync debug mode 'error'): {host_syncs(device)}"]
    for precision in ("fp32", "bf16"):
        checks.append(f"largest parameter difference, graph vs eager, 3 epochs of the same batches ({precision}): "
                      f"{graph_vs_eager(device, precision):.3g}")
    return report(device, f"The shared epoch step on data resident on the device, anneal phase (relaxed gates + KL, "
                          f"the slowest); rows/s = median of {args.epochs} epochs after {graphs_mod.WARMUP + 1} untimed "
                          f"ones (which hold the captures).",
                  ["data", "rows", "model", "precision", "batch", "eager rows/s", "graph rows/s", "speed-up",
                   "eager ms/step", "graph ms/step"], rows, checks)


def load(args, device):
    """(features, labels, schedule): the whole dataset on a GPU (or with ``--full``); on a CPU dry
    run its first 1,500 rows and a short schedule."""
    from common import load_dataset
    df, y = load_dataset(args.dataset, Path(args.data_dir))
    if device.type == "cpu" and not args.full:
        return df.iloc[:1500], y[:1500], {"epochs": 12, "warmup_epochs": 4}
    return df, y, {}


def warm_up(df, y, device) -> None:
    """A tiny fit first: CUDA's context and the kernels' first loads stay out of the timings."""
    fit_once(df.iloc[:600], y[:600], seed=0, n_pairs=0, precision="fp32", graphed=True, device=device,
             epochs=3, warmup_epochs=2)


def largest_difference(a: dict, b: dict) -> float:
    """Largest absolute difference between two state dicts' floating-point entries."""
    return max(float((u.float() - v.float()).abs().max()) for u, v in zip(a.values(), b.values(), strict=False)
               if u.is_floating_point() and u.numel())


def standardized(df) -> np.ndarray:
    """The features standardized: the space every inertia here is measured in."""
    a = df.to_numpy(np.float64)
    return (a - a.mean(0)) / a.std(0)


def scored(est, df, y) -> dict:
    """A fitted model's labels of ``df``, their inertia in the standardized features and ARI."""
    from neurcam_dist import metrics
    labels = est.predict(df)
    return {"labels": labels, "inertia": metrics.inertia(standardized(df), labels), "ari": metrics.ari(y, labels),
            "est": est}


def fit_once(df, y, *, seed: int, n_pairs: int, precision: str, graphed: bool, device, **extra):
    from neurcam_dist import NeurCAM
    os.environ[CUDA_GRAPHS] = "1" if graphed else "0"
    est = NeurCAM(n_clusters=K, n_pairs=n_pairs, random_state=seed, precision=precision, device=str(device),
                  verbose=False, **extra)
    sync(device)
    t0 = time.perf_counter()
    est.fit(df)
    sync(device)
    wall = time.perf_counter() - t0
    secs = [r["seconds"] for r in est.history_["epochs"]]
    return {"seed": seed, "wall": wall, "epochs": len(secs), "epoch_s": statistics.median(secs),
            "rows_s": len(df) * len(secs) / sum(secs), **scored(est, df, y)}


def mode_fit(args, device) -> str:
    from neurcam_dist import metrics
    df, y, quick = load(args, device)
    warm_up(df, y, device)
    plan = [("NeurCAM", 0, "fp32", True, args.seeds), ("NeurCAM", 0, "fp32", False, [0]),
            ("NeurCAM", 0, "bf16", True, [0]),
            ("Neur2CAM (P=16)", 16, "fp32", True, [0]), ("Neur2CAM (P=16)", 16, "bf16", True, [0])]
    rows, kept = [], {}
    for label, p, precision, graphed, seeds in plan:
        for s in seeds:
            r = fit_once(df, y, seed=s, n_pairs=p, precision=precision, graphed=graphed, device=device, **quick)
            kept[(label, precision, graphed, s)] = r
            rows.append(f"| {label} | {precision} | {'graph' if graphed else 'eager'} | {s} | {r['wall']:.1f} "
                        f"| {r['epochs']} | {r['epoch_s'] * 1e3:.1f} | {r['rows_s']:,.0f} | {r['inertia']:.4g} "
                        f"| {r['ari']:.3f} |")
            print(rows[-1], flush=True)
    notes = []
    for precision in ("fp32", "bf16"):
        a, b = kept.get(("NeurCAM", precision, True, 0)), kept.get(("NeurCAM", precision, False, 0))
        if a and b:
            diff = largest_difference(a["est"].net_.state_dict(), b["est"].net_.state_dict())
            notes.append(f"seed 0 {precision}, graph vs eager: {a['epochs']} vs {b['epochs']} epochs, largest "
                         f"parameter difference {diff:.3g}, ARI between their labels "
                         f"{metrics.ari(a['labels'], b['labels']):.4f}")
    return report(device, f"In-memory `NeurCAM(n_clusters=10, device='cuda')` on {args.dataset} ({len(df):,} rows), "
                          f"default schedule and batch 512; wall = the whole `fit` (k-means init included); rows/s = "
                          f"rows x epochs / the epochs' own seconds.",
                  ["model", "precision", "step", "seed", "fit s", "epochs", "median ms/epoch", "rows/s", "inertia",
                   "ARI"], rows, notes)


def repeat_row(run: str, a: dict, b: dict, df) -> str:
    """One line of the repeat table: two fits of one seed side by side."""
    diff = largest_difference(a["est"].net_.state_dict(), b["est"].net_.state_dict())
    same = bool(np.array_equal(a["labels"], b["labels"]))
    row = (f"| {run} | {a['epochs']} / {b['epochs']} | {diff:.3g} | {'yes' if same else 'no'} "
           f"({int((a['labels'] != b['labels']).sum())} of {len(df):,} differ) "
           f"| {a['inertia']:.9g} / {b['inertia']:.9g} | {'yes' if a['inertia'] == b['inertia'] else 'no'} |")
    print(row, flush=True)
    return row


def ray_fit(args, tmp: str, df, y, cache: str = "device") -> dict:
    """``neurcam train`` on 1 worker, as ``fit_once`` reports an in-memory fit (``wall``: the whole
    call; ``secs``: the worker's epoch seconds; ``train_s``: its training loop)."""
    from neurcam_dist.distributed import train
    t0 = time.perf_counter()
    res = train(job(args, tmp, df, y, cache=cache))
    wall = time.perf_counter() - t0
    h = res.estimator.history_
    return {"wall": wall, "secs": [r["seconds"] for r in h["epochs"]], "epochs": len(h["epochs"]),
            "train_s": res.metrics["train_seconds"], "deterministic": h.get("deterministic"),
            **scored(res.estimator, df, y)}


def mode_repeat(args, device) -> str:
    """The same seed twice: is a GPU fit reproducible? The default, then (``--deterministic``) the
    ``deterministic=True`` hyperparameter in memory and on Ray (1 worker, cache: device)."""
    df, y, quick = load(args, device)
    warm_up(df, y, device)
    rows, notes = [], []
    plan = [] if args.only_deterministic else [("in memory, graph", True, False)] + [("in memory, eager", False, False)] * args.eager
    if args.deterministic:
        plan += [("in memory, graph, deterministic", True, True)]
    for run, graphed, det in plan:
        a, b = (fit_once(df, y, seed=0, n_pairs=0, precision="fp32", graphed=graphed, device=device,
                         deterministic=det, **quick) for _ in range(2))
        rows.append(repeat_row(run, a, b, df))
        if det:
            notes.append(f"{run}: history_['deterministic'] = {a['est'].history_.get('deterministic')}")
    if args.deterministic:
        os.environ[CUDA_GRAPHS] = "1"
        args.model = {**quick, "deterministic": True}
        start_ray(device)
        with tempfile.TemporaryDirectory() as tmp:
            a, b = (ray_fit(args, tmp, df, y) for _ in range(2))
        rows.append(repeat_row("`neurcam train --deterministic`, 1 worker, cache: device", a, b, df))
        notes.append(f"Ray runs: history_['deterministic'] = {a['deterministic']}")
    notes.append(f"{CUBLAS_WORKSPACE}={os.environ.get(CUBLAS_WORKSPACE)!r} in this process from its start")
    return report(device, f"`NeurCAM(n_clusters=10)` on {args.dataset}, seed 0, fp32, the same run twice, "
                          f"in one process (Ray: one driver, two runs).",
                  ["run", "epochs (1st / 2nd)", "largest parameter difference", "labels identical",
                   "inertia (1st / 2nd)", "inertia identical"], rows, notes, ray=args.deterministic)


def start_ray(device) -> None:
    import ray

    from neurcam_dist.distributed.session import local_ray_defaults
    if not ray.is_initialized():
        local_ray_defaults()   # as the product's own local Ray: Ray Train looks at its workers every 0.2 s
        cpus = os.cpu_count() if device.type == "cuda" else max(os.cpu_count(), 6)  # a CPU dry run oversubscribes
        ray.init(num_cpus=cpus, include_dashboard=False,
                 num_gpus=1 if device.type == "cuda" else 0, log_to_driver=False)


def job(args, tmp: str, df, y, **train) -> dict:
    from neurcam_dist.data.bundled import write_frame_shards
    data = Path(tmp) / "data"
    if not data.exists():
        write_frame_shards(df.assign(label=y), str(data), 4)
    gpu = {"use_gpu": True} if args.device == "cuda" else {}
    return {"data": {"path": str(data), "label": "label", "id": "id"},
            "model": {"n_clusters": K, "random_state": 0, "precision": "fp32", **args.model},
            "train": {"num_workers": 1, "cpus_per_worker": 2 if gpu else 1, **gpu, **train},
            "output": f"{tmp}/out-{time.monotonic_ns()}"}


def mode_ray(args, device) -> str:
    df, y, args.model = load(args, device)
    mem = fit_once(df, y, seed=0, n_pairs=0, precision="fp32", graphed=True, device=device, **args.model)
    # the cost model's resident epoch (docs/scaling.md): n / R_step(512), R_step measured here on the
    # same rows' shape in the anneal phase (the slowest: an upper bound for an average epoch)
    rate, _ = step_rate(len(df), df.shape[1], df.shape[1], 0, "fp32", 512, 3, device, graphed=True,
                        hidden=DEFAULTS["hidden"], bases=DEFAULTS["n_bases"])   # the fits' network
    predicted = len(df) / rate * 1e3
    start_ray(device)
    rows = [f"| in memory (estimator) | {mem['wall']:.1f} | | {mem['epochs']} | | {mem['epoch_s'] * 1e3:.1f} "
            f"| {predicted:.1f} | 1.00x | {mem['inertia']:.4g} | | {mem['ari']:.3f} |"]
    with tempfile.TemporaryDirectory() as tmp:
        for cache in args.caches:
            r = ray_fit(args, tmp, df, y, cache)
            secs = r["secs"]
            med = statistics.median(secs[1:] or secs)   # epoch 1 fills a resident shard: apart
            pred = f"{predicted:.1f}" if cache == "device" else "streamed: see iterate.py"
            rows.append(f"| `neurcam train`, 1 worker, cache: {cache} | {r['wall']:.1f} | {r['train_s']:.1f} "
                        f"| {len(secs)} | {secs[0] * 1e3:.1f} | {med * 1e3:.1f} | {pred} | {med / mem['epoch_s']:.2f}x "
                        f"| {r['inertia']:.4g} | {(r['inertia'] / mem['inertia'] - 1) * 100:+.2f}% "
                        f"| {r['ari']:.3f} |")
            print(rows[-1], flush=True)
    return report(device, f"{args.dataset}, NeurCAM seed 0, fp32, default schedule"
                          f"{'' if not args.model else f' {args.model}'}; ms/epoch = median of the worker's epoch "
                          f"seconds after the first (rank 0, the epoch's reduce included); predicted = the cost "
                          f"model's resident epoch n / R_step(512), R_step measured in this run ({rate:,.0f} rows/s, "
                          f"anneal phase, captured step).",
                  ["run", "wall s", "train s", "epochs", "epoch 1 ms", "median ms/epoch", "predicted ms/epoch",
                   "vs in memory", "inertia", "inertia vs in memory", "ARI"], rows, ray=True)


def mode_pack(args, device) -> str:
    from neurcam_dist.distributed.tuner import search
    df, y, args.model = load(args, device)
    if device.type == "cuda":
        args.model = {"warmup_epochs": 20, "epochs": 40}   # the same bounded schedule in both searches
    start_ray(device)
    share = {"gpus_per_worker": 1.0 / args.trials} if device.type == "cuda" else {}
    rows, walls = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for trials in (1, args.trials):
            cfg = job(args, tmp, df, y, cache="device", **(share if trials > 1 else {}))
            cfg["search"] = {"seeds": list(range(trials)), "max_concurrent_trials": trials}
            t0 = time.perf_counter()
            res = search(cfg)
            walls[trials] = time.perf_counter() - t0
            epochs = [t.metrics.get("epochs") for t in res.trials]
            rows.append(f"| {trials} | {share.get('gpus_per_worker', 1.0) if trials > 1 else 1.0:g} | {walls[trials]:.1f} "
                        f"| {walls[trials] / walls[1]:.2f}x | {epochs} | {sum(t.status == 'ok' for t in res.trials)} |")
            print(rows[-1], flush=True)
    return report(device, f"`neurcam tune` ({{search: seeds}}) on {args.dataset}, NeurCAM fp32, 1 worker x 2 CPUs per "
                          f"trial, cache: device, schedule {args.model}; wall = the whole search (planning, trials, "
                          f"scoring, the winner's run output).",
                  ["trials", "GPU per trial", "wall s", "vs 1 trial", "epochs per trial", "trials ok"], rows, ray=True)


# The learning rate of a batch b: Adam's square-root rule from the default's (lr at batch 512) ---
# lr(b) = lr(512) * sqrt(b / 512) (Hoffer et al. 2017; Malladi et al. 2022 derive it for adaptive
# optimisers), so the gradient noise per step stays about the same as the batch grows.
REFERENCE_BATCH = 512


def lr_for_batch(batch: int, lr: float | None = None) -> float:
    """``lr`` (default: the hyperparameter table's) scaled from batch 512 to ``batch`` by the
    square-root rule."""
    base = DEFAULTS["lr"] if lr is None else lr
    return base * (batch / REFERENCE_BATCH) ** 0.5


def lloyd_inertia(df) -> float:
    """Lloyd KMeans (n_init=10, K clusters) in the standardized features, measured as ``scored``
    measures (``metrics.inertia``: the mean squared distance to the cluster means)."""
    from sklearn.cluster import KMeans

    from neurcam_dist import metrics
    x = standardized(df)
    return metrics.inertia(x, KMeans(n_clusters=K, n_init=10, random_state=0).fit_predict(x))


def batch_row(run: str, batch: int, lr: float, r: dict, secs: list[float], predicted: float, lloyd: float,
              ref: dict | None) -> str:
    """One line of the batch table (``ref``: batch 512's result of the same kind of run)."""
    med = statistics.median(secs[1:] or secs)   # epoch 1 of a Ray run fills its resident shard: apart
    vs = "" if ref is None else f"{ref['wall'] / r['wall']:.2f}x"
    inertia_vs = "" if ref is None else f"{r['inertia'] / ref['inertia']:.4f}"
    row = (f"| {run} | {batch:,} | {lr:.3g} | {med * 1e3:.1f} | {predicted:.1f} | {len(secs)} "
           f"| {r['wall']:.1f} | {vs} | {r['inertia'] / lloyd:.4f} | {inertia_vs} | {r['ari']:.3f} |")
    print(row, flush=True)
    return row


def mode_batch(args, device) -> str:
    """The batch a GPU worker needs (issue 56): the in-memory estimator and ``neurcam train`` (1
    worker, cache: device) at each of ``--batches``, the learning rate by ``lr_for_batch``; the
    median epoch beside the cost model's resident epoch n / R_step(b) (R_step measured in this run),
    the epochs to the end, the whole fit and the inertia against Lloyd KMeans'. The notes name the
    largest batch whose inertia stays within 1.005x of batch 512's, and its speed-up per fit."""
    df, y, quick = load(args, device)
    warm_up(df, y, device)
    lloyd = lloyd_inertia(df)
    rows, results = [], {}
    lr = {b: lr_for_batch(min(b, len(df))) for b in args.batches}
    ray_results: dict[int, dict] = {}   # a batch past the rows is all of them
    for b in args.batches:
        rate, _ = step_rate(len(df), df.shape[1], df.shape[1], 0, "fp32", min(b, len(df)), 3, device, graphed=True,
                            hidden=DEFAULTS["hidden"], bases=DEFAULTS["n_bases"])
        predicted = len(df) / rate * 1e3
        r = fit_once(df, y, seed=0, n_pairs=0, precision="fp32", graphed=True, device=device, batch_size=b,
                     lr=lr[b], **quick)
        secs = [e["seconds"] for e in r["est"].history_["epochs"]]
        results[("memory", b)] = (r, predicted)
        rows.append(batch_row("in memory (estimator)", b, lr[b], r, secs, predicted, lloyd,
                              None if b == args.batches[0] else results[("memory", args.batches[0])][0]))
    if args.ray:
        os.environ[CUDA_GRAPHS] = "1"
        start_ray(device)
        with tempfile.TemporaryDirectory() as tmp:
            for b in args.ray_batches or args.batches:
                args.model = {**quick, "batch_size": b, "lr": lr[b]}
                r = ray_results[b] = ray_fit(args, tmp, df, y)
                rows.append(batch_row("`neurcam train`, 1 worker, cache: device", b, lr[b], r, r["secs"],
                                      results[("memory", b)][1], lloyd,
                                      None if b == args.batches[0] else ray_results.get(args.batches[0])))
    base = results[("memory", args.batches[0])][0]
    kept = [b for b in args.batches if results[("memory", b)][0]["inertia"] <= 1.005 * base["inertia"]]
    best = max(kept)
    notes = [f"Lloyd KMeans (n_init=10) inertia in the standardized features: {lloyd:.6g}",
             f"largest batch within 1.005x of batch {args.batches[0]:,}'s inertia (in memory): {best:,}, "
             f"{base['wall'] / results[('memory', best)][0]['wall']:.2f}x faster per fit"]
    if args.ray:   # issue 56's first target, at the first batch: the Ray epoch against the in-memory one
        ray_first = ray_results[args.batches[0]]
        notes.append(f"batch {args.batches[0]:,}: `neurcam train` (cache: device) median epoch "
                     f"{statistics.median(ray_first['secs'][1:] or ray_first['secs']) / base['epoch_s']:.2f}x the "
                     f"in-memory one, inertia {(ray_first['inertia'] / base['inertia'] - 1) * 100:+.2f}%")
    return report(device, f"{args.dataset} ({len(df):,} rows), NeurCAM seed 0, fp32, default schedule"
                          f"{'' if not quick else f' {quick}'}; lr = {DEFAULTS['lr']:g} x sqrt(batch / 512); "
                          f"ms/epoch = median epoch (a Ray run's first, which fills its resident shard, apart); "
                          f"predicted = the cost model's resident epoch n / R_step(b), R_step measured here (anneal "
                          f"phase, captured step); fit s = the whole fit; vs 512 = batch 512's fit s / this one's; a batch "
                          f"past the rows is all of them (its lr by the rows).",
                  ["run", "batch", "lr", "median ms/epoch", "predicted ms/epoch", "epochs", "fit s", "vs 512",
                   "inertia / Lloyd", "inertia / batch 512's", "ARI"], rows, notes, ray=args.ray)


def mode_large(args, device) -> str:
    """The scale benchmark's table (``generate.py``: 16 features, a 256-dim embedding, 10 clusters)
    at ``--rows`` rows fitted end to end with defaults, in memory on the device and with ``neurcam
    train`` on 1 worker (``cache: device``), each against MiniBatchKMeans' inertia in the same
    embedding (the paper's mKMC: batch 1,024, n_init 3); beside them the cost model's training time
    (epochs x epoch_rows / R_step(512), R_step measured here on an epoch's rows)."""
    import pyarrow.parquet as pq
    from sklearn.cluster import MiniBatchKMeans

    from neurcam_dist import NeurCAM, metrics
    from neurcam_dist.data.synthetic import write_shards
    from neurcam_dist.distributed import train
    rows = args.rows if device.type == "cuda" else min(args.rows, 40_000)
    tmp = tempfile.mkdtemp(prefix="neurcam-large-")
    t0 = time.perf_counter()
    write_shards(f"{tmp}/data", rows, n_features=16, repr_dim=256, n_clusters=K, n_files=8, informative=4)
    table = pq.read_table(f"{tmp}/data")
    X = table.select([f"f{j}" for j in range(16)]).to_pandas()
    emb = np.stack(table.column("embedding").to_numpy(zero_copy_only=False)).astype(np.float32)
    made = time.perf_counter() - t0
    print(f"  {rows:,} rows written and read back in {made:.1f} s", flush=True)
    t0 = time.perf_counter()
    mbk = MiniBatchKMeans(n_clusters=K, batch_size=1024, n_init=3, random_state=0).fit(emb)
    ref = metrics.inertia(emb, mbk.labels_)
    ref_s = time.perf_counter() - t0
    print(f"  MiniBatchKMeans: inertia {ref:.5g} in {ref_s:.1f} s", flush=True)
    epoch_rows = DEFAULTS["epoch_rows"]
    rate, _ = step_rate(min(epoch_rows, rows), 16, 256, 0, "fp32", 512, 3, device, graphed=True,
                        hidden=DEFAULTS["hidden"], bases=DEFAULTS["n_bases"])
    out = []
    sync(device)
    t0 = time.perf_counter()
    est = NeurCAM(n_clusters=K, random_state=0, device=str(device), verbose=False).fit(X, X_repr=emb)
    sync(device)
    wall = time.perf_counter() - t0
    h = est.history_
    out.append(("in memory (estimator)", wall, h, metrics.inertia(emb, est.predict(X))))
    print(f"  in memory: {wall:.1f} s, {h['n_epochs']} epochs", flush=True)
    os.environ[CUDA_GRAPHS] = "1"
    start_ray(device)
    gpu = {"use_gpu": True, "cpus_per_worker": 2} if device.type == "cuda" else {"cpus_per_worker": 1}
    t0 = time.perf_counter()
    res = train({"data": {"path": f"{tmp}/data", "embedding": "embedding", "label": "label", "id": "id"},
                 "model": {"n_clusters": K, "random_state": 0},
                 "train": {"num_workers": 1, "cache": "device", **gpu}, "output": f"{tmp}/out"})
    wall = time.perf_counter() - t0
    out.append(("`neurcam train`, 1 worker, cache: device", wall, res.estimator.history_, res.metrics["inertia"]))
    lines = []
    for run, wall, h, inertia in out:
        trained = sum(r["rows"] for r in h["epochs"])
        epoch_s = sum(r["seconds"] for r in h["epochs"])
        predicted = h["n_epochs"] * min(epoch_rows, rows) / rate
        lines.append(f"| {run} | {wall:.1f} | {h['n_epochs']} | {trained / rows:.2f} | {epoch_s:.1f} | "
                     f"{predicted:.1f} | {inertia:.6g} | {inertia / ref:.4f} | {h['stop_reason'][:40]} |")
        print(lines[-1], flush=True)
    return report(device, f"The scale benchmark's table: {rows:,} rows x (16 features + a 256-dim embedding), 10 "
                          f"clusters, clustered in the embedding; defaults (epochs of {epoch_rows:,} rows); fit s = "
                          f"the whole fit end to end (k-means init, training, labels; for `neurcam train` also "
                          f"Ray's start, the profile and scoring passes); predicted = epochs x {epoch_rows:,} / "
                          f"R_step(512), R_step {rate:,.0f} rows/s measured here; MiniBatchKMeans (batch 1,024, "
                          f"n_init 3): inertia {ref:.6g} in {ref_s:.1f} s; the table written and read in {made:.0f} s.",
                  ["run", "fit s", "epochs", "passes", "epochs' s", "predicted epochs' s", "inertia", "/ MiniBatchKMeans",
                   "stop"], lines, ray=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("step", "fit", "repeat", "ray", "pack", "batch", "large"))
    ap.add_argument("--out", default=None, help="also write the table here")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--epochs", type=int, default=3, help="step: timed epochs per case")
    ap.add_argument("--data-dir", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--dataset", default="pendigits")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="fit: seeds of the graph fp32 runs")
    ap.add_argument("--caches", nargs="+", default=["device", "always"], help="ray: train.cache values")
    ap.add_argument("--deterministic", action="store_true",
                    help="repeat: also the deterministic=True hyperparameter, in memory and on Ray")
    ap.add_argument("--eager", type=int, default=0, choices=(0, 1), help="repeat: also an eager pair (1)")
    ap.add_argument("--trials", type=int, default=4, help="pack: trials sharing the GPU")
    ap.add_argument("--batches", type=int, nargs="+", default=[512, 4096, 16384, 65536],
                    help="batch: global batch sizes, the first the reference")
    ap.add_argument("--no-ray", dest="ray", action="store_false", help="batch: the estimator only")
    ap.add_argument("--ray-batches", type=int, nargs="+", default=None,
                    help="batch: the batches `neurcam train` runs (default: all of --batches; the first must be "
                         "the first of --batches)")
    ap.add_argument("--full", action="store_true", help="with --device cpu: the whole dataset, default schedule")
    ap.add_argument("--rows", type=int, default=1_000_000, help="large: rows of the table (a CPU dry run: 40,000 at most)")
    ap.add_argument("--only-deterministic", action="store_true",
                    help="repeat: the deterministic=True pairs alone (no default pair)")
    args = ap.parse_args()
    args.model = {}
    if args.deterministic:   # before the first cuBLAS handle is made (cuBLAS reads it once)
        os.environ.setdefault(CUBLAS_WORKSPACE, DETERMINISTIC_WORKSPACE)
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: pass --device cpu for a dry run")
    device = torch.device(args.device)
    table = {"step": mode_step, "fit": mode_fit, "repeat": mode_repeat, "ray": mode_ray, "pack": mode_pack,
             "batch": mode_batch, "large": mode_large}[args.mode](args, device)
    print(table, flush=True)
    if args.out:
        Path(args.out).write_text(table + "\n")


if __name__ == "__main__":
    main()
