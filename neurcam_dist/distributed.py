"""Training on Ray: Ray Data streams the Parquet shards into Ray Train ``TorchTrainer`` DDP workers.

The driver (``train``) validates and profiles the data, draws a bounded sample for the k-means
centroid init, starts the workers, and after training scores the whole dataset with a Ray Data
pass. Each worker (``train_loop_per_worker``) runs the very ``Trainer`` the in-memory estimator
uses; only the reductions differ: epoch sums and the one-hot test of the gates are all-reduced,
so every worker takes the same schedule decisions. Checkpoints hold the whole ``Trainer`` state,
so a restarted worker group resumes mid-phase with the same temperatures and optimiser moments.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from ray.data.collate_fn import ArrowBatchCollateFn

from . import data as data_mod
from .config import JobConfig, load_config, parse_config
from .epoch import Batch, EpochStats
from .estimator import NeurCAM, kmeans_centroids, resolve_precision
from .loss import fcm_log_membership, squared_distances
from .nbm import NeurCAMNet
from .persist import atomic_directory, write_text_atomic
from .schedule import Schedule
from .training import Trainer

STATE_FILE = "trainer_state.pt"
LOG_EVERY = 10  # epochs between progress lines (phase changes are always printed)
PROGRESS_SECONDS = 60.0  # within an epoch, a progress line at most this often (rank 0)


# ---------------------------------------------------------------------------- Ray session
def ensure_ray(min_cpus: float = 0, **init_kwargs) -> None:
    """Connect to ``RAY_ADDRESS`` when set, else start a local Ray (once per process). A local Ray
    gets at least ``min_cpus`` logical CPUs, so the training workers never take every CPU slot
    and starve the Ray Data tasks that feed them."""
    import math

    import ray
    if ray.is_initialized():
        return
    address = os.environ.get("RAY_ADDRESS")
    kwargs = {"include_dashboard": False, **init_kwargs}
    if address:
        kwargs.pop("num_cpus", None)
        kwargs.pop("object_store_memory", None)
    else:
        kwargs.setdefault("num_cpus", max(os.cpu_count() or 1, math.ceil(min_cpus)))
    ray.init(address=address or None, **kwargs)
    quiet_data_progress()


def quiet_data_progress() -> None:
    """Ray Data's per-operator progress bars redraw every second for every epoch's execution;
    our own per-epoch lines say what matters. ``NEURCAM_RAY_PROGRESS=1`` brings them back."""
    from ray.data import DataContext
    if os.environ.get("NEURCAM_RAY_PROGRESS") != "1":
        ctx = DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False


def check_resources(num_workers: int, cpus_per_worker: float, use_gpu: bool) -> None:
    """Refuse a worker group that would leave Ray Data no CPU to read with (it would hang)."""
    import ray
    res = ray.cluster_resources()
    cpus, gpus = res.get("CPU", 0.0), res.get("GPU", 0.0)
    need = num_workers * cpus_per_worker
    if cpus - need < 1:
        raise ValueError(f"train.num_workers x train.cpus_per_worker = {need:g} CPUs leaves "
                         f"{max(cpus - need, 0):g} of the cluster's {cpus:g} CPUs for Ray Data to read the "
                         f"shards (at least 1 is needed): lower train.cpus_per_worker or add CPUs")
    if use_gpu and gpus < num_workers:
        raise ValueError(f"train.use_gpu with train.num_workers={num_workers} needs {num_workers} GPUs; "
                         f"the cluster has {gpus:g}")


# ---------------------------------------------------------------------------- the worker
def _build(c: dict) -> tuple[NeurCAMNet, Schedule]:
    net = NeurCAMNet(c["n_features"], c["n_clusters"], c["n_single"], c["n_pairs"], tuple(c["hidden"]),
                     c["n_bases"], torch.tensor(np.asarray(c["centroids"], np.float32)), seed=c["seed"])
    sched = Schedule(epochs=c["epochs"], warmup_epochs=c["warmup_epochs"], distill_epochs=c["distill_epochs"],
                     epsilon=c["epsilon"], has_pairs=c["n_pairs"] > 0, early_stopping=c["early_stopping"],
                     n_iter_no_change=c["n_iter_no_change"], tol=c["tol"])
    return net, sched


def _new_trainer(c: dict, net: NeurCAMNet, sched: Schedule, precision: str, agree=bool) -> Trainer:
    return Trainer(net, sched, m=c["m"], gamma=c["gamma"], lr=c["lr"], lr_patience=c["lr_patience"],
                   precision=precision, agree=agree)


class _Collate(ArrowBatchCollateFn):
    """Arrow batch -> (standardized features, representation) tensors, in Ray's batch thread."""

    def __init__(self, plan: data_mod.Plan, mean: np.ndarray, scale: np.ndarray):
        self.plan, self.mean, self.scale = plan, mean, scale

    def __call__(self, table):
        x = (data_mod.matrix(table, self.plan.features) - self.mean) / self.scale
        xr = x if self.plan.repr_kind == "features" else data_mod.representation(table, self.plan)
        if not xr.flags.writeable:  # a zero-copy view of Arrow memory: torch wants its own buffer
            xr = xr.copy()
        return torch.from_numpy(np.ascontiguousarray(x, np.float32)), torch.from_numpy(np.ascontiguousarray(xr))


def _ddp(net: NeurCAMNet, device: torch.device):
    """(Re)wrap in DDP over the parameters that train now: rebuilt after a gate lock, since DDP
    fixes its set of synchronised parameters at construction."""
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        return net
    from torch.nn.parallel import DistributedDataParallel
    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(net, device_ids=ids)


def _freeze_unused(net: NeurCAMNet) -> None:
    for kind in (net.single, net.pairs):
        if kind.n == 0:
            for p in kind.parameters():
                p.requires_grad_(False)


def train_loop_per_worker(c: dict) -> None:
    """One Ray Train worker: stream this worker's shard every epoch through the shared Trainer."""
    import ray.train
    import ray.train.torch
    import torch.distributed as dist
    from .perf import keep_freed_memory

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    device = ray.train.torch.get_device()
    if device.type == "cpu":
        torch.set_num_threads(max(1, int(c["threads"])))
        keep_freed_memory()
    precision = resolve_precision(c["precision"], device)
    torch.manual_seed(c["seed"])
    distributed = dist.is_available() and dist.is_initialized() and world > 1
    coll_device = device if (distributed and dist.get_backend() == "nccl") else torch.device("cpu")

    def agree(flag: bool) -> bool:
        if not distributed:
            return bool(flag)
        t = torch.tensor([1 if flag else 0], device=coll_device)
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return bool(t.item())

    net, sched = _build(c)
    net.to(device)
    _freeze_unused(net)
    trainer = _new_trainer(c, net, sched, precision, agree)
    records: list[dict] = []
    resumes: list[int] = []
    ckpt = ray.train.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as d:
            state = torch.load(os.path.join(d, STATE_FILE), map_location=device, weights_only=True)
        trainer.load_state_dict(state["trainer"])
        records, resumes = list(state["records"]), list(state["resumes"]) + [trainer.schedule.epoch]
        if rank == 0:
            print(f"[neurcam] resumed from checkpoint at epoch {trainer.schedule.epoch} "
                  f"(phase {trainer.schedule.phase})", flush=True)
    if distributed:
        trainer.model = _ddp(net, device)

    plan = c["plan"]
    collate = _Collate(plan, np.asarray(c["mean"], np.float32), np.asarray(c["scale"], np.float32))
    shard = ray.train.get_dataset_shard("train")
    init_centroids = torch.tensor(np.asarray(c["centroids"], np.float32), device=device)
    # model.batch_size is the global batch: the same steps per epoch whatever the worker count
    local_batch = max(1, c["batch_size"] // world)

    def target_fn(batch: Batch) -> torch.Tensor:
        with torch.no_grad():
            if trainer.schedule.phase == "distill":
                return fcm_log_membership(squared_distances(batch.xr, init_centroids), c["m"])
            return torch.log_softmax(trainer.teacher(batch.x, 1.0, 1.0).float(), dim=1)

    def batches():
        it = shard.iter_torch_batches(batch_size=local_batch, collate_fn=collate, device=device,
                                      local_shuffle_buffer_size=c["shuffle_buffer"] or None,
                                      local_shuffle_seed=c["seed"] * 1_000_003 + trainer.schedule.epoch * 997 + rank
                                      if c["shuffle_buffer"] else None)
        rows, start, last = 0, time.perf_counter(), time.perf_counter()
        for x, xr in it:
            yield Batch(x, xr)
            rows += x.shape[0]
            if rank == 0 and time.perf_counter() - last > PROGRESS_SECONDS:  # long epochs: a heartbeat
                last = time.perf_counter()
                print(f"[neurcam] epoch {trainer.schedule.epoch + 1} ({trainer.schedule.phase}): {rows * world:,} "
                      f"rows so far, {rows * world / (last - start):,.0f} rows/s", flush=True)

    epochs_run = 0
    while not trainer.finished and (c.get("max_epochs") is None or epochs_run < c["max_epochs"]):
        epochs_run += 1
        t0 = time.perf_counter()
        phase_before = trainer.schedule.phase
        if distributed:
            with trainer.model.join():
                stats = trainer.run_epoch(batches(), target_fn)
        else:
            stats = trainer.run_epoch(batches(), target_fn)
        sums = stats.sums()
        if distributed:
            sums = sums.to(coll_device)
            dist.all_reduce(sums)
            sums = sums.cpu()
        means = EpochStats.means_of(sums)
        seconds = time.perf_counter() - t0
        rec, action = trainer.end_epoch(means, seconds)
        rec["rows"], rec["rows_per_s"] = means["rows"], means["rows"] / max(seconds, 1e-9)
        records.append(rec)
        if action in ("lock_pairs", "lock_single") and distributed:
            trainer.model = _ddp(net, device)
        s = trainer.schedule
        if rank == 0 and (s.epoch % LOG_EVERY == 0 or s.phase != phase_before or trainer.finished):
            print(f"[neurcam] epoch {s.epoch} {phase_before}{'->' + s.phase if s.phase != phase_before else ''} "
                  f"loss={rec['loss']:.5f} T={s.t:.3g} T2={s.t2:.3g} {rec['rows_per_s']:,.0f} rows/s", flush=True)
        metrics = {k: rec[k] for k in ("epoch", "phase", "loss", "clust_loss", "kl", "T", "T2", "lr", "rows",
                                       "rows_per_s", "seconds")}
        metrics["finished"] = trainer.finished
        # Reports go with checkpoints only: a Train v2 report is a round trip through the controller
        # (about 1.5 s here), longer than a small epoch; the per-epoch history travels in the state.
        cut_short = c.get("max_epochs") is not None and epochs_run >= c["max_epochs"]
        if trainer.finished or cut_short or s.epoch % c["checkpoint_every"] == 0:
            if rank == 0:
                with tempfile.TemporaryDirectory() as d:
                    torch.save({"trainer": trainer.state_dict(), "records": records, "resumes": resumes,
                                "precision": precision, "world_size": world}, os.path.join(d, STATE_FILE))
                    ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(d))
            else:
                ray.train.report(metrics)


# ---------------------------------------------------------------------------- the driver
@dataclass
class TrainResult:
    estimator: NeurCAM
    metrics: dict
    output: Path
    plan: data_mod.Plan
    tracking: dict | None = None

    @property
    def model_path(self) -> Path:
        return self.output / "model"


def _coerce(config) -> JobConfig:
    if isinstance(config, JobConfig):
        return config
    if isinstance(config, dict):
        return parse_config(config)
    return load_config(config)


def _log(msg: str) -> None:
    print(f"[neurcam] {msg}", flush=True)


def prepare(cfg: JobConfig) -> tuple[data_mod.Plan, data_mod.Profile]:
    """Everything that must pass before a worker starts: join, schema, values, sizes."""
    data_cfg = cfg.data
    if data_cfg.embeddings is not None:
        staging = os.path.join(cfg.storage_path(), "staging")
        _log(f"joining features and embeddings on {data_cfg.embeddings.key!r} into {staging}/joined")
        data_cfg = data_mod.join_embeddings(data_cfg, staging)
    plan = data_mod.plan(data_cfg)
    try:  # the estimator's own checks of the hyperparameters against the data's size
        NeurCAM(**cfg.model.estimator_params())._check_params(plan.n_rows, len(plan.features))
    except ValueError as exc:
        raise data_mod.DataError(f"model: {exc}") from None
    _log(f"data: {plan.describe()}")
    t0 = time.perf_counter()
    prof = data_mod.profile(plan)
    _log(f"validated and profiled {prof.n_rows:,} rows in {time.perf_counter() - t0:.1f} s")
    return plan, prof


@dataclass
class InitialState:
    """What the driver computes before the workers start (all from one streaming pass and a sample)."""

    mean: np.ndarray
    scale: np.ndarray
    centroids: np.ndarray
    sample: object          # pyarrow.Table: the bounded random sample (features + representation)


def initial_state(cfg: JobConfig, plan: data_mod.Plan, prof: data_mod.Profile) -> InitialState:
    """Standardization from the profile; MiniBatchKMeans centroids on a bounded random sample."""
    m, tc = cfg.model, cfg.train
    mean = prof.mean.astype(np.float32) if m.standardize else np.zeros(len(plan.features), np.float32)
    scale = prof.scale() if m.standardize else np.ones(len(plan.features), np.float32)
    cols = list(dict.fromkeys(plan.features + (plan.repr_columns if plan.repr_kind != "features" else [])))
    table = data_mod.sample(plan, min(tc.kmeans_sample, plan.n_rows), m.random_state, cols)
    x_sample = (data_mod.matrix(table, plan.features) - mean) / scale
    xr_sample = x_sample if plan.repr_kind == "features" else data_mod.representation(table, plan)
    if len(xr_sample) < m.n_clusters:
        raise data_mod.DataError(f"the k-means sample has {len(xr_sample)} rows, fewer than model.n_clusters="
                                 f"{m.n_clusters}: raise train.kmeans_sample")
    centroids = kmeans_centroids(xr_sample, m.n_clusters, m.batch_size, m.random_state)
    _log(f"k-means init on a {len(xr_sample):,}-row sample")
    return InitialState(mean=mean, scale=scale, centroids=centroids, sample=table)


def worker_config(cfg: JobConfig, plan: data_mod.Plan, init: InitialState, max_epochs: int | None = None) -> dict:
    """The plain dict every worker receives (``max_epochs`` cuts a run short: benchmarks only)."""
    m, tc = cfg.model, cfg.train
    distill = m.init == "distill" and m.distill_epochs > 0
    return {
        "plan": plan, "mean": init.mean.tolist(), "scale": init.scale.tolist(), "centroids": init.centroids.tolist(),
        "n_features": len(plan.features), "n_clusters": m.n_clusters,
        "n_single": len(plan.features) if m.n_single is None else m.n_single, "n_pairs": m.n_pairs,
        "hidden": list(m.hidden), "n_bases": m.n_bases, "seed": m.random_state, "m": m.m, "gamma": m.gamma,
        "epsilon": m.epsilon, "lr": m.lr, "lr_patience": m.lr_patience, "epochs": m.epochs,
        "warmup_epochs": m.warmup_epochs, "distill_epochs": m.distill_epochs if distill else 0,
        "early_stopping": m.early_stopping, "n_iter_no_change": m.n_iter_no_change, "tol": m.tol,
        "batch_size": m.batch_size, "precision": m.precision, "shuffle_buffer": tc.shuffle_buffer,
        "checkpoint_every": tc.checkpoint_every, "threads": tc.cpus_per_worker, "max_epochs": max_epochs,
    }


def run_workers(cfg: JobConfig, plan: data_mod.Plan, worker_cfg: dict, run_name: str, callbacks=None):
    """Start the ``TorchTrainer`` and wait for it; returns Ray's ``Result`` (raises on failure).
    ``callbacks``: Ray Train callbacks (a Tune trial passes Tune's report callback)."""
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    tc = cfg.train
    dataset = data_mod.read(plan, ordered=True)
    if _should_cache(tc.cache, plan):
        _log(f"caching the {plan.n_rows:,} training rows in the object store (train.cache={tc.cache})")
        dataset = dataset.materialize()
    trainer = TorchTrainer(
        train_loop_per_worker, train_loop_config=worker_cfg,
        scaling_config=ScalingConfig(num_workers=tc.num_workers, use_gpu=tc.use_gpu,
                                     resources_per_worker={"CPU": tc.cpus_per_worker}),
        run_config=RunConfig(name=run_name, storage_path=cfg.storage_path(),
                             failure_config=FailureConfig(max_failures=tc.max_failures),
                             checkpoint_config=CheckpointConfig(num_to_keep=2), callbacks=callbacks),
        datasets={"train": dataset},
    )
    _log(f"training on {tc.num_workers} worker(s) ({'GPU' if tc.use_gpu else 'CPU'}); run {run_name} "
         f"in {cfg.storage_path()}")
    try:
        result = trainer.fit()
    except Exception as exc:  # noqa: BLE001 - Ray wraps worker errors; say what failed and where
        raise RuntimeError(f"distributed training failed (run {run_name}, storage {cfg.storage_path()}): "
                           f"{exc}") from exc
    if result.error is not None:
        raise RuntimeError(f"distributed training failed (run {run_name}): {result.error}")
    return result


def _should_cache(mode: str, plan: data_mod.Plan) -> bool:
    """Small data: skip the per-epoch Parquet read (Ray Data restarts a streaming read every epoch,
    seconds of fixed cost); large data keeps streaming from the files."""
    if mode != "auto":
        return mode == "always"
    import ray
    store = ray.cluster_resources().get("object_store_memory", 0.0)
    width = len(plan.features) + (plan.repr_dim if plan.repr_kind != "features" else 0)
    return plan.n_rows * width * 4 < 0.2 * store


def train(config, *, name: str | None = None) -> TrainResult:
    """Train on Ray as ``config`` (a ``JobConfig``, a dict or a YAML path) says; writes
    ``output/model`` (loadable by ``NeurCAM.load``) and ``output/metrics.json`` atomically.
    Uses the running Ray, else ``RAY_ADDRESS``, else starts a local one."""
    cfg = _coerce(config)
    t_start = time.perf_counter()
    tc = cfg.train
    ensure_ray(min_cpus=tc.num_workers * tc.cpus_per_worker + 1)
    check_resources(tc.num_workers, tc.cpus_per_worker, tc.use_gpu)
    if cfg.search is not None:
        _log("the config's search: section is for neurcam tune; this trains one run with the model: section")
    plan, prof = prepare(cfg)
    init = initial_state(cfg, plan, prof)
    worker_cfg = worker_config(cfg, plan, init)
    run_name = name or f"neurcam-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    t_train = time.perf_counter()
    result = run_workers(cfg, plan, worker_cfg, run_name)
    est, metrics = finish_run(cfg, plan, worker_cfg, init, result, time.perf_counter() - t_train, run_name)
    metrics["total_seconds"] = round(time.perf_counter() - t_start, 2)
    out = Path(cfg.output)

    def write(tmp: Path) -> None:
        est.save(tmp / "model")
        (tmp / "metrics.json").write_text(json.dumps(metrics, indent=1))
        (tmp / "config.json").write_text(cfg.model_dump_json(indent=1))

    _write_output(out, write)
    _log(f"inertia={metrics['inertia']:.5f}" + "".join(f" {k}={metrics[k]:.4f}" for k in ("ari", "nmi", "acc")
                                                      if k in metrics) + f"; model and metrics in {out}/")
    result = TrainResult(estimator=est, metrics=metrics, output=out, plan=plan)
    if cfg.tracking is not None:
        from .tracking import log_training
        try:
            result.tracking = log_training(result, cfg)
        except Exception as exc:  # noqa: BLE001 - the model is safe on disk; say what was not logged
            raise tracking_failed(cfg, out, exc, "the run") from exc
        _log(f"MLflow run {result.tracking['run_id']} in {result.tracking['tracking_uri']}"
             + (f"; registered {cfg.tracking.model_name} version {result.tracking['version']} (alias candidate)"
                if cfg.tracking.model_name else ""))
    return result


def finish_run(cfg: JobConfig, plan: data_mod.Plan, worker_cfg: dict, init: InitialState, result,
               train_seconds: float, run_name: str) -> tuple[NeurCAM, dict]:
    """After the workers: the estimator from the final checkpoint, then a Ray Data pass over the
    whole dataset for the hard assignments, the inertia and (with labels) ARI/NMI/ACC."""
    with result.checkpoint.as_directory() as d:
        state = torch.load(os.path.join(d, STATE_FILE), map_location="cpu", weights_only=True)
    est = _assemble(cfg, plan, worker_cfg, state, init.mean, init.scale, train_seconds)
    if init.sample is not None:
        set_reference(est, init, plan, cfg.train.reference_rows)
    _log("scoring the whole dataset (hard assignments, inertia)")
    from .scoring import evaluate
    tc = cfg.train
    scores = evaluate(est, plan, batch_size=tc.score_batch_size, concurrency=tc.num_workers)
    est.channel_means_ = scores.pop("channel_means")
    metrics = {
        "n_rows": plan.n_rows, "n_files": len(plan.source.files), "n_features": len(plan.features),
        "repr_dim": plan.repr_dim, **scores, "epochs": est.n_iter_, "stop_reason": est.history_["stop_reason"],
        "resumed_at_epochs": est.history_["resumes"], "num_workers": tc.num_workers,
        "precision": est.precision_, "train_seconds": round(train_seconds, 2), "schema_hash": plan.schema_hash,
        "selected_features": est.selected_features_, "selected_pairs": [list(p) for p in est.selected_pairs_],
        "run_name": run_name,
    }
    return est, metrics


def set_reference(est: NeurCAM, init: InitialState, plan: data_mod.Plan, rows: int) -> None:
    """Rows ``explain()`` uses by default: the head of the bounded k-means sample."""
    keep = min(rows, init.sample.num_rows)
    est._reference = pd.DataFrame(data_mod.matrix(init.sample, plan.features)[:keep].astype(np.float64),
                                  columns=plan.features)


class TrackingError(RuntimeError):
    """Training succeeded but MLflow logging did not: the CLI exits non-zero and says what is missing."""


def tracking_failed(cfg: JobConfig, out: Path, exc: Exception, runs: str) -> TrackingError:
    from .tracking import tracking_uri
    return TrackingError(f"training finished and the model is saved in {out}/model, but logging to MLflow "
                         f"({tracking_uri(cfg.tracking.uri)}) failed, so {runs}, the artifacts and the "
                         f"registered version were not recorded (nothing was registered): "
                         f"{type(exc).__name__}: {exc}")


def _write_output(out: Path, write, extra: tuple[str, ...] = ()) -> None:
    """Replace only ``model/``, ``metrics.json``, ``config.json`` (and ``extra`` files) inside
    ``out`` (which may also hold ``_ray/`` checkpoints), each through a temporary sibling and a rename."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out, prefix=".write-") as tmp:
        write(Path(tmp))
        for name in ("config.json", "metrics.json", *extra):
            write_text_atomic(out / name, (Path(tmp) / name).read_text())
        atomic_directory(out / "model", lambda d: _move_contents(Path(tmp) / "model", d), marker="manifest.json")


def _move_contents(src: Path, dst: Path) -> None:
    for f in src.iterdir():
        os.replace(f, dst / f.name)


def _assemble(cfg: JobConfig, plan, c: dict, state: dict, mean, scale, seconds: float) -> NeurCAM:
    """The in-memory estimator type, from the final checkpoint: ``explain``/``save`` work on it."""
    net, sched = _build(c)
    trainer = _new_trainer(c, net, sched, state["precision"])
    trainer.load_state_dict(state["trainer"])
    est = NeurCAM(**cfg.model.estimator_params(), device="cpu", verbose=False)
    est.feature_names_in_ = list(plan.features)
    est.n_features_in_ = len(plan.features)
    est.mean_, est.scale_ = np.asarray(mean, np.float32), np.asarray(scale, np.float32)
    est.repr_dim_ = plan.repr_dim
    est.uses_features_as_repr_ = plan.repr_kind == "features"
    est.precision_ = state["precision"]
    est._set_trained(trainer.net, trainer.teacher, trainer.schedule, list(state["records"]), seconds)
    est.history_["resumes"] = list(state["resumes"])
    est.history_["world_size"] = int(state["world_size"])
    return est
