"""Clustering quality under the paper's protocol: several seeds, keep the lowest-inertia run.

    python benchmarks/quality.py [--datasets pendigits letters] [--seeds 5] [--precision fp32]
                                 [--init distill kmeans] [--kmeans auto|lloyd|minibatch] [--paper-protocol]

On each data set (standardized, X_repr = X) it scores MiniBatchKMeans (the paper's mKMC settings),
scikit-learn's KMeans (Lloyd, k-means++, n_init=10: the k-means optimum), CART trees of depth 5 and
7 fitted to the k-means labels (the paper's TAO initialisation, an interpretable baseline), NeurCAM
and Neur2CAM (P = D), with ARI / NMI / ACC / inertia from ``neurcam_dist.metrics``. It prints every
run and writes a markdown table (``benchmarks/results/quality.md``) with the targets: inertia within
1% of KMeans (n_init=10), ARI >= 0.95 of KMeans', and lower inertia than both CART trees. Data sets:
pendigits and letters (UCI, ``--data-dir``), ``digits`` (scikit-learn's bundled 8x8 digits) and
``heavytail`` (a seeded table of Gaussian clusters with a few rows 30-60 standard deviations out, on
which KMeans spends clusters on single outliers). ``--paper-protocol`` trains the paper's full
schedule (400 warm-up epochs, 1000 epochs, 1100 for Neur2CAM, no early stopping, no distillation,
learning-rate patience 100): meant for a GPU machine.

``--tune`` compares the two ways of running the protocol on the same data and settings: the
in-memory estimator looping over the seeds, and ``neurcam tune`` (the data written as Parquet
shards, a Ray Tune search over the seeds, each trial a Ray Train run with ``--workers`` workers).
It reports both best inertias (measured the same way, on the benchmark's standardized X) and the
wall time of each, in ``benchmarks/results/quality_tune.md``.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
from sklearn.cluster import KMeans, MiniBatchKMeans
from sklearn.tree import DecisionTreeClassifier

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import DEFAULT_DATA, load_dataset, machine, markdown_table, standardized, write_atomic

from neurcam_dist import NeurCAM, metrics


def best_of(runs: list[dict]) -> dict:
    return min(runs, key=lambda r: r["inertia"])


def mkmc_runs(x, k, seeds):
    runs = []
    for s in seeds:
        t = time.perf_counter()
        km = MiniBatchKMeans(n_clusters=k, batch_size=512, init_size=min(len(x), 2560), n_init=5, random_state=s).fit(x)
        runs.append({"seed": s, "labels": km.predict(x), "seconds": time.perf_counter() - t})
    return runs


def lloyd_runs(x, k, seeds):
    """scikit-learn's KMeans (Lloyd, k-means++, n_init=10) per seed: the k-means optimum to compare with."""
    runs = []
    for s in seeds:
        t = time.perf_counter()
        km = KMeans(n_clusters=k, n_init=10, random_state=s).fit(x)
        runs.append({"seed": s, "labels": km.labels_, "seconds": time.perf_counter() - t})
    return runs


# The paper's "AE" columns (appendix, tabular results: ARI, NMI, ACC, inertia on the DAE embedding).
PAPER_AE = {"pendigits": {"NeurCAM": (0.506, 0.629, 0.698, 1.344), "Neur2CAM": (0.502, 0.643, 0.653, 1.355),
                          "mKMC": (0.489, 0.624, 0.677, 1.330)},
            "letters": {"NeurCAM": (0.151, 0.373, 0.260, 1.844), "Neur2CAM": (0.173, 0.402, 0.299, 1.624),
                        "mKMC": (0.156, 0.384, 0.286, 1.403)}}


def dae_embedding(x: np.ndarray, epochs: int, seed: int = 0) -> np.ndarray:
    """The paper's denoising autoencoder (``neurcam_dist.model.dae``, the module the service trains
    on Ray for ``representation: {kind: dae}``) trained here in memory with the same settings (Adam,
    batch 512, lr 0.002 halved on a plateau; the same epoch step, ``dae.train_epoch``), and its 8-dim
    bottleneck for every row."""
    import torch

    from neurcam_dist.model import dae
    torch.manual_seed(seed)
    xt = torch.from_numpy(np.ascontiguousarray(x, np.float32))
    net = dae.DenoisingAutoencoder(x.shape[1], seed=seed)
    opt, sched = dae.optimizer(net, lr=2e-3, lr_patience=10)
    g = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        loss, rows = (float(v) for v in dae.train_epoch(net, opt, (xt[i] for i in torch.randperm(len(xt), generator=g).split(512))))
        sched.step(loss / rows)
    print(f"autoencoder: {epochs} epochs, reconstruction loss {loss / rows:.4f}", flush=True)
    net.eval()
    with torch.no_grad():
        return net.encode(xt).numpy().astype(np.float64)


def neurcam_params(args, k, p, paper: bool) -> dict:
    params = dict(n_clusters=k, n_pairs=p, precision=args.precision, verbose=False, device=args.device,
                  kmeans=args.kmeans)
    if paper:
        params.update(warmup_epochs=400, epochs=1100 if p else 1000, early_stopping=False, init="kmeans",
                      lr_patience=100)
    return params


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=["pendigits", "letters"])
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--models", nargs="+", default=["NeurCAM", "Neur2CAM"])
    ap.add_argument("--init", nargs="+", default=["distill"], choices=["distill", "kmeans"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--kmeans", default="auto", choices=["auto", "lloyd", "minibatch"],
                    help="NeurCAM's k-means init (the references are always both)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--paper-protocol", action="store_true")
    ap.add_argument("--out", type=Path, default=None, help="default: results/quality.md (quality_tune.md with --tune)")
    ap.add_argument("--tune", action="store_true", help="in-memory protocol vs neurcam tune (Ray), same seeds")
    ap.add_argument("--workers", type=int, default=2, help="--tune: Ray Train workers per trial")
    ap.add_argument("--cpus-per-worker", type=float, default=1.0, help="--tune: CPUs (torch threads) per worker")
    ap.add_argument("--concurrent", type=int, default=1,
                    help="--tune: trials at once (search.max_concurrent_trials)")
    ap.add_argument("--repr", default="features", choices=["features", "dae"],
                    help="cluster in the standardized features, or in the paper's DAE embedding (the 'AE' columns)")
    ap.add_argument("--dae-epochs", type=int, default=100)
    args = ap.parse_args()
    results = Path(__file__).resolve().parent / "results"
    if args.tune:
        args.out = args.out or results / "quality_tune.md"
        return tune_mode(args)
    args.out = args.out or results / ("quality.md" if args.repr == "features" else "quality_dae.md")
    seeds = list(range(args.seeds))
    table, runs_table = [], []
    started = time.perf_counter()
    for ds in args.datasets:
        df, y = load_dataset(ds, args.data_dir)
        xf = standardized(df)
        k, d = len(np.unique(y)), xf.shape[1]
        # x: where inertia is measured and the references cluster (the representation)
        x = xf if args.repr == "features" else dae_embedding(xf, args.dae_epochs)
        x_repr = None if args.repr == "features" else x

        def row(method, labels, extra, ds=ds, x=x, y=y):
            r = {"data": ds, "method": method, **{m: v for m, v in metrics.scores(x, labels, y).items()
                                                    if m != "n_clusters_used"}, **extra}
            paper = PAPER_AE.get(ds, {}).get(method.split(" ")[0]) if args.repr == "dae" else None
            if paper:
                r.update({"paper AE ARI": paper[0], "paper AE NMI": paper[1], "paper AE ACC": paper[2],
                          "paper AE inertia": paper[3]})
            table.append(r)
            print(r, flush=True)
            return r

        km_runs = mkmc_runs(x, k, seeds)
        for r in km_runs:
            r["inertia"] = metrics.inertia(x, r["labels"])
        km_best = best_of(km_runs)
        ref = row("mKMC", km_best["labels"], {"seconds/run": float(np.mean([r["seconds"] for r in km_runs]))})
        ll_runs = lloyd_runs(x, k, seeds)
        for r in ll_runs:
            r["inertia"] = metrics.inertia(x, r["labels"])
        ll_best = best_of(ll_runs)
        lloyd = row("KMeans (n_init=10)", ll_best["labels"],
                    {"seconds/run": float(np.mean([r["seconds"] for r in ll_runs])),
                     "smallest cluster": int(np.bincount(ll_best["labels"], minlength=k).min())})
        cart = {}
        for depth in (5, 7):
            tree = DecisionTreeClassifier(max_depth=depth, random_state=0).fit(xf, ll_best["labels"])
            cart[depth] = row(f"CART-{depth} (k-means labels)", tree.predict(xf), {})
        for model in args.models:
            p = d if model == "Neur2CAM" else 0
            for init in args.init:
                runs = []
                for s in seeds:
                    params = neurcam_params(args, k, p, args.paper_protocol)
                    if not args.paper_protocol:
                        params["init"] = init
                    t = time.perf_counter()
                    est = NeurCAM(random_state=s, **params).fit(df, X_repr=x_repr)
                    labels = est.predict(df)
                    run = {"data": ds, "model": model, "init": params["init"],
                           "kmeans": est.history_["init"]["method"], "kmeans_s": est.history_["init"]["seconds"],
                           "seed": s,
                           "inertia": metrics.inertia(x, labels), "ari": metrics.ari(y, labels),
                           "epochs": est.n_iter_, "seconds": time.perf_counter() - t,
                           "stop": est.history_["stop_reason"], "labels": labels}
                    runs.append(run)
                    runs_table.append({k_: v for k_, v in run.items() if k_ != "labels"})
                    print({k_: v for k_, v in run.items() if k_ != "labels"}, flush=True)
                best = best_of(runs)
                name = (f"{model} ({params['init']}{', paper protocol' if args.paper_protocol else ''}"
                        f"{'' if args.kmeans == 'auto' else ', kmeans=' + args.kmeans})")
                r = row(name, best["labels"], {"epochs (best run)": best["epochs"],
                                               "seconds/run": float(np.mean([q["seconds"] for q in runs])),
                                               "smallest cluster": int(np.bincount(best["labels"], minlength=k).min())})
                r["inertia / mKMC"] = r["inertia"] / ref["inertia"]
                r["inertia / KMeans"] = r["inertia"] / lloyd["inertia"]
                r["ARI / KMeans"] = r["ari"] / lloyd["ari"]
                r["beats CART-5,7"] = bool(r["inertia"] < min(cart[5]["inertia"], cart[7]["inertia"]))
                r["targets met"] = bool(r["inertia / KMeans"] <= 1.01 and r["ARI / KMeans"] >= 0.95
                                        and r["beats CART-5,7"])
                write_results(args, seeds, table, runs_table, started, done=False)
    print(write_results(args, seeds, table, runs_table, started, done=True))


def write_results(args, seeds, table, runs_table, started, done: bool) -> str:
    """Rewrite the results file after every method, so an interrupted run still leaves its tables."""
    total = time.perf_counter() - started
    state = "total wall time" if done else "INCOMPLETE, wall time so far"
    rep = "standardized X" if args.repr == "features" else f"the DAE embedding ({args.dae_epochs} epochs)"
    text = (f"# Clustering quality (best of {len(seeds)} seeds by inertia, X_repr = {rep})\n\n"
            f"Machine: {machine()}; precision {args.precision}; {state} {total / 60:.1f} min\n\n"
            + markdown_table(table) + "\n## Every run\n\n" + markdown_table(runs_table))
    write_atomic(args.out, text)
    return text


def tune_mode(args) -> None:
    """The protocol twice: the in-memory estimator over the seeds, then ``tune.search`` on Ray."""
    import tempfile

    import ray

    from neurcam_dist.data.bundled import write_frame_shards
    from neurcam_dist.service import search

    seeds = list(range(args.seeds))
    rows, runs_table = [], []
    started = time.perf_counter()
    for ds in args.datasets:
        df, y = load_dataset(ds, args.data_dir)
        x = standardized(df)
        k, d = len(np.unique(y)), x.shape[1]
        for model in args.models:
            params = neurcam_params(args, k, d if model == "Neur2CAM" else 0, args.paper_protocol)
            if not args.paper_protocol:
                params["init"] = args.init[0]
            t0 = time.perf_counter()
            mem = []
            for s in seeds:
                est = NeurCAM(random_state=s, **params).fit(df)
                labels = est.predict(df)
                mem.append({"seed": s, "inertia": metrics.inertia(x, labels), "ari": metrics.ari(y, labels),
                            "epochs": est.n_iter_})
                runs_table.append({"data": ds, "model": model, "mode": "in-memory", **mem[-1]})
                print(runs_table[-1], flush=True)
            mem_seconds = time.perf_counter() - t0
            with tempfile.TemporaryDirectory() as tmp:
                write_frame_shards(df.assign(label=y), f"{tmp}/data", 4)
                model_cfg = {k_: v for k_, v in params.items() if k_ not in ("verbose", "device")}
                job = {"data": {"path": f"{tmp}/data", "label": "label", "id": "id"},
                       "model": {**model_cfg, "hidden": list(model_cfg.get("hidden", (256, 256)))},
                       "train": {"num_workers": args.workers, "cpus_per_worker": args.cpus_per_worker},
                       "search": {"seeds": seeds, "max_concurrent_trials": args.concurrent}, "output": f"{tmp}/out"}
                t0 = time.perf_counter()
                res = search(job)
                tune_seconds = time.perf_counter() - t0
                labels = res.estimator.predict(df)
                for t in res.trials:
                    runs_table.append({"data": ds, "model": model, "mode": "neurcam tune",
                                       "seed": t.params["random_state"], "inertia": t.metrics.get("inertia"),
                                       "ari": t.metrics.get("ari"), "epochs": t.metrics.get("epochs"),
                                       "status": t.status})
            ray.shutdown()
            # per epoch, since the seeds stop after different numbers of epochs in the two modes
            mem_epochs = sum(r["epochs"] for r in mem)
            tune_epochs = sum(t.metrics.get("epochs") or 0 for t in res.trials) or 1
            best_mem = min(mem, key=lambda r: r["inertia"])
            tune_inertia = metrics.inertia(x, labels)
            rows.append({"data": ds, "model": model, "seeds": len(seeds),
                         "in-memory best inertia": best_mem["inertia"], "in-memory best seed": best_mem["seed"],
                         "in-memory ARI": best_mem["ari"], "in-memory wall s": round(mem_seconds, 1),
                         "tune best inertia": tune_inertia, "tune best seed": res.best.params["random_state"],
                         "tune ARI": metrics.ari(y, labels), "tune wall s": round(tune_seconds, 1),
                         "tune / in-memory inertia": tune_inertia / best_mem["inertia"],
                         "tune / in-memory wall": round(tune_seconds / mem_seconds, 2),
                         "in-memory s/epoch": round(mem_seconds / mem_epochs, 3),
                         "tune s/epoch": round(tune_seconds / tune_epochs, 3),
                         "tune / in-memory s/epoch": round((tune_seconds / tune_epochs) / (mem_seconds / mem_epochs), 2),
                         "tune workers/trial": args.workers, "CPUs/worker": args.cpus_per_worker,
                         "trials at once": args.concurrent})
            text = (f"# Paper protocol in memory vs `neurcam tune` (best of {len(seeds)} seeds by inertia)\n\n"
                    f"Machine: {machine()}; precision {args.precision}; total wall time "
                    f"{(time.perf_counter() - started) / 60:.1f} min\n\n" + markdown_table(rows)
                    + "\n## Every run\n\n" + markdown_table(runs_table))
            write_atomic(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
