"""Training on Ray: Ray Data streams the Parquet shards into Ray Train ``TorchTrainer`` DDP workers.

The driver (``train``) validates and profiles the data, draws a bounded sample for the k-means
centroid init, starts the workers (``worker.train_loop_per_worker``), and after training scores
the whole dataset with a Ray Data pass. It returns what tracking needs (``TrainResult``); MLflow
logging is the caller's (``neurcam_dist.service``, the CLI, ``jobs/``).
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from .. import data as data_mod
from ..config import JobConfig, coerce_config
from ..estimator import NeurCAM
from ..explain.report import write_report
from ..model import TrainingSpec, build_trainer
from ..model.kmeans import kmeans_centroids
from ..numerics import standardize
from ..params import check_params_for_data
from ..redaction import redact
from ..settings import cuda_graphs_enabled
from ..storage import write_run_output
from ..storage.published import local_copy
from ..uris import as_path, join
from ..validation import constant_features_note, empty_clusters_note
from .scoring import evaluate
from .console import held_stderr, routed_logs
from .session import check_resources, ensure_ray, worker_group
from .worker import STATE_FILE, WorkerConfig, expected_shard_bytes, train_loop_per_worker


@dataclass
class TrainResult:
    estimator: NeurCAM
    metrics: dict
    output: Path | str               # a local Path, or an object-store URI (str)
    plan: data_mod.Plan
    config: JobConfig
    tracking: dict | None = None     # filled by ``service.train`` when the config has ``tracking:``

    @property
    def model_path(self) -> Path | str:
        return as_path(join(self.output, "model"))


def log(msg: str) -> None:
    print(f"[neurcam] {redact(msg)}", flush=True)


def text_run(cfg: JobConfig) -> JobConfig:
    """A text run (``text:``, or data written by ``featurize-text``): featurize and embed the
    documents first (kept for the next run while the input and settings are unchanged), then the
    model's text defaults where ``model:`` sets nothing. Other runs come back unchanged."""
    if cfg.text is not None:
        from ..represent import TextJob, featurize_text
        t, d = cfg.text, cfg.data
        staged = join(cfg.storage_path(), "staging", "text")
        featurize_text(TextJob.for_config(cfg, staged), log, reuse=True)
        log(f"training on the featurized documents in {staged} (text: kept in the saved config)")
        cfg = cfg.model_copy(update={"data": d.model_copy(update={"path": staged,
                                                                  "embedding": "embedding" if t.embed else None})})
    elif data_mod.sources.find_vocabulary(cfg.data.path) is None:
        return cfg
    cfg, changed = cfg.with_text_defaults()
    if changed:
        log("text data: the paper's text settings where model: is silent: "
            + ", ".join(f"{k}={v}" for k, v in changed.items()))
    return cfg


def planned_early(cfg: JobConfig) -> data_mod.Plan | None:
    """The data's plan from the Parquet footers before Ray starts or anything is written, so that
    a wrong path, a missing column or a wrong type fails at once with nothing left behind. None
    for data that a step before training writes or joins (``text:``, ``representation:``, a
    features/embeddings join): ``prepare`` checks those after that step."""
    if cfg.text is not None or cfg.representation is not None or cfg.data.embeddings is not None:
        return None
    plan = data_mod.plan(cfg.data)
    _check_params(cfg, plan)
    return plan


def _check_params(cfg: JobConfig, plan: data_mod.Plan) -> None:
    """The hyperparameters against the data's size, from the footers alone."""
    try:
        check_params_for_data(cfg.model.estimator_params(), plan.n_rows, len(plan.features))
    except ValueError as exc:
        raise data_mod.DataError(f"model: {exc}") from None


def prepare(cfg: JobConfig, planned: data_mod.Plan | None = None) -> tuple[data_mod.Plan, data_mod.Profile]:
    """Everything that must pass before a worker starts: join, schema, values, sizes. ``planned``:
    ``planned_early``'s plan of the same ``data:``, not made again."""
    data_cfg = cfg.data
    if data_cfg.embeddings is not None:
        staging = join(cfg.storage_path(), "staging")
        log(f"joining features and embeddings on {data_cfg.embeddings.key!r} into {staging}/joined")
        data_cfg = data_mod.join_embeddings(data_cfg, staging)
    plan = planned if planned is not None else data_mod.plan(data_cfg)
    _check_params(cfg, plan)  # again: a text dataset's model defaults are filled in after the early plan
    log(f"data: {plan.describe()}")
    data_mod.sources.refuse_output_inside(cfg.output, plan.source)
    t0 = time.perf_counter()
    prof = data_mod.profile(plan)
    log(f"validated and profiled {prof.n_rows:,} rows in {time.perf_counter() - t0:.1f} s")
    try:
        note = constant_features_note(prof.constant, plan.features, cfg.model.constant_features, cfg.model.n_pairs)
    except ValueError as exc:
        raise data_mod.DataError(f"data: {exc}") from None
    if note:
        log(note)
    return plan, prof


@dataclass
class InitialState:
    """What the driver computes before the workers start (all from one streaming pass and a sample)."""

    mean: np.ndarray
    scale: np.ndarray
    centroids: np.ndarray
    sample: object          # pyarrow.Table: the bounded uniform random sample (features + representation)
    kmeans: dict | None = None   # which k-means made the centroids (the model card records it)
    allowed: np.ndarray | None = None  # features a gate may select (constant ones are left out)

    def without_sample(self) -> "InitialState":
        """What trials need shipped to them (the sample stays on the driver)."""
        return InitialState(self.mean, self.scale, self.centroids, None, self.kmeans, self.allowed)


def initial_state(cfg: JobConfig, plan: data_mod.Plan, prof: data_mod.Profile) -> InitialState:
    """Standardization from the profile; k-means centroids on a bounded uniform random sample."""
    m, tc = cfg.model, cfg.train
    mean = prof.mean if m.standardize else np.zeros(len(plan.features))
    scale = prof.scale() if m.standardize else np.ones(len(plan.features))
    cols = list(dict.fromkeys(plan.features + (plan.repr_columns if plan.repr_kind != "features" else [])))
    table = data_mod.sample(plan, min(tc.kmeans_sample, plan.n_rows), m.random_state, cols)
    x_sample = standardize(data_mod.matrix(table, plan.features, np.float64), mean, scale)
    xr_sample = x_sample if plan.repr_kind == "features" else data_mod.representation(table, plan)
    if len(xr_sample) < m.n_clusters:
        raise data_mod.DataError(f"the k-means sample has {len(xr_sample)} rows, fewer than model.n_clusters="
                                 f"{m.n_clusters}: raise train.kmeans_sample")
    centroids, info = kmeans_centroids(xr_sample, m.n_clusters, m.random_state, method=m.kmeans,
                                       n_init=m.kmeans_n_init, batch_size=m.batch_size)
    log(f"k-means init ({info['method']}, {info['n_init']} restarts, seed {m.random_state}) on a "
        f"{len(xr_sample):,}-row sample in {info['seconds']:.1f} s")
    return InitialState(mean=mean, scale=scale, centroids=centroids, sample=table, kmeans=info,
                        allowed=~prof.constant)


def worker_config(cfg: JobConfig, plan: data_mod.Plan, init: InitialState,
                  max_epochs: int | None = None) -> WorkerConfig:
    """What every worker receives (``max_epochs`` cuts a run short: benchmarks only)."""
    tc = cfg.train
    return WorkerConfig(spec=TrainingSpec.from_params(cfg.model.estimator_params(), len(plan.features)), plan=plan,
                        mean=init.mean, scale=init.scale, centroids=init.centroids, allowed=init.allowed,
                        shuffle_buffer=tc.shuffle_buffer,
                        checkpoint_every=tc.checkpoint_every, threads=tc.cpus_per_worker, max_epochs=max_epochs,
                        resident=tc.cache if tc.cache in ("auto", "device") else "never",
                        resident_budget=None if tc.device_cache_gib is None else int(tc.device_cache_gib * 2**30),
                        gpu_share=tc.gpu_share or 1.0, cuda_graphs=cuda_graphs_enabled())


def training_dataset(cfg: JobConfig, plan: data_mod.Plan):
    """What the workers' shards come from (a search builds it once for all its trials). Small data
    (``reading.local_pass``) is read here once and held in the object store for the workers to
    slice (``HeldRows``), unless ``train.cache: never`` asks for the files to be streamed every
    epoch. Larger data is read by Ray Data (``reading.streamed_dataset``), and held in the object
    store with ``train.cache: always``."""
    tc = cfg.train
    if tc.cache != "never" and data_mod.reading.local_pass(plan, plan.columns):
        log(f"the {plan.n_rows:,} training rows are small: read here once and handed to the workers in memory")
        return data_mod.reading.held_rows(plan)
    dataset = data_mod.reading.streamed_dataset(plan)
    if tc.cache == "always":
        log(f"caching the {plan.n_rows:,} training rows in the object store (train.cache=always)")
        dataset = dataset.materialize()
    return dataset


def run_workers(cfg: JobConfig, plan: data_mod.Plan, wcfg: WorkerConfig, run_name: str, dataset=None):
    """Start the ``TorchTrainer`` and wait for it; returns Ray's ``Result`` (raises on failure).
    ``dataset``: ``training_dataset``'s, when the caller built it already."""
    from ray.train import CheckpointConfig, FailureConfig, RunConfig
    from ray.train.torch import TorchTrainer

    tc = cfg.train
    if dataset is None:
        dataset = training_dataset(cfg, plan)
    if tc.cache in ("auto", "device"):
        log(f"train.cache={tc.cache}: each worker keeps its shard of the {plan.n_rows:,} rows on its device after "
            f"the first epoch{' when it fits' if tc.cache == 'auto' else ''} (about "
            f"{expected_shard_bytes(wcfg, tc.num_workers) / 2**20:,.1f} MiB per worker)")
    held = isinstance(dataset, data_mod.reading.HeldRows)
    if held:
        wcfg = dataclasses.replace(wcfg, held=dataset)
    trainer = TorchTrainer(
        train_loop_per_worker, train_loop_config={"worker": wcfg},
        **worker_group(tc),
        run_config=RunConfig(name=run_name, storage_path=cfg.storage_path(),
                             failure_config=FailureConfig(max_failures=tc.max_failures),
                             checkpoint_config=CheckpointConfig(num_to_keep=2)),
        datasets={} if held else {"train": dataset},
    )
    log(f"training on {tc.num_workers} worker(s) ({'GPU' if tc.use_gpu else 'CPU'}); run {run_name} "
        f"in {cfg.storage_path()}")
    try:
        result = trainer.fit()
    except Exception as exc:  # noqa: BLE001 - Ray wraps worker errors; say what failed and where
        raise RuntimeError(f"distributed training failed (run {run_name}, storage {cfg.storage_path()}): "
                           f"{exc}") from exc
    if result.error is not None:
        raise RuntimeError(f"distributed training failed (run {run_name}): {result.error}")
    return result


def train(config, *, name: str | None = None) -> TrainResult:
    """Train on Ray as ``config`` (a ``JobConfig``, a dict or a YAML path) says; writes
    ``output/model`` (loadable by ``NeurCAM.load``), ``metrics.json`` and ``config.json``
    atomically. Uses the running Ray, else ``RAY_ADDRESS``, else starts a local one. MLflow
    logging (a ``tracking:`` section) is ``service.train``'s."""
    cfg = coerce_config(config)
    t_start = time.perf_counter()
    tc = cfg.train
    if cfg.search is not None:
        log("the config's search: section is for neurcam tune; this trains one run with the model: section")
    planned = planned_early(cfg)
    with held_stderr() as start:
        ensure_ray(min_cpus=tc.num_workers * tc.cpus_per_worker + 1)
        check_resources(tc.num_workers, tc.cpus_per_worker, tc.gpu_share)
    with routed_logs(cfg.output, log, earlier=start.text):
        return _train(cfg, name, t_start, planned)


def computed_representation(cfg: JobConfig) -> JobConfig:
    """The representations a config asks the service to compute (text features and embeddings,
    the autoencoder), computed; the config of the data they were written to."""
    cfg = text_run(cfg)
    if cfg.representation is not None:
        from .representation import dae_run
        cfg = dae_run(cfg, log, prepare)
    return cfg


def _train(cfg: JobConfig, name: str | None, t_start: float, planned: data_mod.Plan | None = None) -> TrainResult:
    cfg = computed_representation(cfg)
    plan, prof = prepare(cfg, planned)
    with unchanged_input(plan):
        init = initial_state(cfg, plan, prof)
        wcfg = worker_config(cfg, plan, init)
        run_name = name or f"neurcam-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        t_train = time.perf_counter()
        result = run_workers(cfg, plan, wcfg, run_name)
        est, metrics = finish_run(cfg, plan, wcfg, init, result, time.perf_counter() - t_train, run_name)
    metrics["total_seconds"] = round(time.perf_counter() - t_start, 2)
    out = as_path(cfg.output)
    write_run(out, est, metrics, cfg, dirs=representation_dirs(cfg))
    log(f"inertia={metrics['inertia']:.5f}" + "".join(f" {k}={metrics[k]:.4f}" for k in ("ari", "nmi", "acc")
                                                     if k in metrics) + f"; model and metrics in {out}/")
    return TrainResult(estimator=est, metrics=metrics, output=out, plan=plan, config=cfg)


@contextmanager
def unchanged_input(plan: data_mod.Plan):
    """Fail with the file named, and nothing written, when an input file is deleted or rewritten
    between validation and the end of training (a failure it causes, or a silent change)."""
    stamp = plan.source.stamp()
    try:
        yield
    except Exception as exc:
        changed = plan.source.changed_since(stamp)
        if changed:
            raise data_mod.DataError(data_mod.sources.listing(
                "input file(s) changed after validation; nothing was written", changed)) from exc
        raise
    changed = plan.source.changed_since(stamp)
    if changed:
        raise data_mod.DataError(data_mod.sources.listing(
            "input file(s) changed during the run; nothing was written", changed))


def representation_dirs(cfg: JobConfig) -> dict[str, str]:
    """A computed representation's model (the autoencoder's weights), kept with the run as
    ``representation/``."""
    from .representation import dae_artifacts
    where = dae_artifacts(cfg)
    return {"representation": where} if where else {}


def write_run(out: Path | str, est: NeurCAM, metrics: dict, cfg: JobConfig, extra: dict[str, str] | None = None,
              report=None, dirs: dict[str, str] | None = None) -> None:
    """``model/``, ``metrics.json``, ``config.json``, ``extra`` JSON texts, ``dirs`` (name -> a
    folder or published URI, copied) and (given an ``Explanation``) ``report/`` into ``out``,
    published together (``storage.write_run_output``)."""
    def write(tmp: Path) -> None:
        for name, src in (dirs or {}).items():
            with local_copy(src) as copy:
                shutil.copytree(copy, tmp / name)
        est.save(tmp / "model")
        (tmp / "metrics.json").write_text(json.dumps(metrics, indent=1, default=str))
        (tmp / "config.json").write_text(cfg.public_json())
        for name, text in (extra or {}).items():
            (tmp / name).write_text(text)
        if report is not None:
            write_report(report, tmp / "report")

    write_run_output(out, write, extra=tuple(extra or ()) + tuple(dirs or ()) + (("report",) if report is not None else ()))


def finish_run(cfg: JobConfig, plan: data_mod.Plan, wcfg: WorkerConfig, init: InitialState, result,
               train_seconds: float, run_name: str) -> tuple[NeurCAM, dict]:
    """After the workers: the estimator from the final checkpoint, then a Ray Data pass over the
    whole dataset for the hard assignments, the inertia and (with labels) ARI/NMI/ACC."""
    with result.checkpoint.as_directory() as d:
        state = torch.load(os.path.join(d, STATE_FILE), map_location="cpu", weights_only=True)
    est = assemble(cfg, plan, wcfg, state, train_seconds, init.kmeans)
    if init.sample is not None:
        set_reference(est, init, plan, cfg.train.reference_rows, cfg.model.random_state)
    log("scoring the whole dataset (hard assignments, inertia)")
    tc = cfg.train
    scores = evaluate(est.scoring_model(), plan, batch_size=tc.score_batch_size, concurrency=tc.num_workers, log=log)
    est.channel_means_ = scores.pop("channel_means")
    est.history_["n_clusters_used"] = scores["n_clusters_used"]
    note = empty_clusters_note(scores["n_clusters_used"], cfg.model.n_clusters)
    if note:
        log(f"warning: {note}")
    metrics = {
        "n_rows": plan.n_rows, "n_files": len(plan.source.files), "n_features": len(plan.features),
        "repr_dim": plan.repr_dim, **scores, "epochs": est.n_iter_, "stop_reason": est.history_["stop_reason"],
        "resumed_at_epochs": est.history_["resumes"], "num_workers": tc.num_workers,
        "precision": est.precision_, "train_seconds": round(train_seconds, 2), "schema_hash": plan.schema_hash,
        "selected_features": est.selected_features_, "selected_pairs": [list(p) for p in est.selected_pairs_],
        "run_name": run_name,
    }
    return est, metrics


def set_reference(est: NeurCAM, init: InitialState, plan: data_mod.Plan, rows: int, seed: int) -> None:
    """Rows ``explain()`` uses by default: a uniform random subset of the (uniform) k-means sample,
    so explanations describe every file alike, not the first ones."""
    n = init.sample.num_rows
    keep = np.sort(np.random.default_rng(seed).choice(n, min(rows, n), replace=False))
    est.reference_ = pd.DataFrame(data_mod.matrix(init.sample, plan.features, np.float64)[keep],
                                  columns=plan.features)


def assemble(cfg: JobConfig, plan: data_mod.Plan, wcfg: WorkerConfig, state: dict, seconds: float,
             init_info: dict | None = None) -> NeurCAM:
    """The in-memory estimator type, from the final checkpoint: ``explain``/``save`` work on it."""
    trainer = build_trainer(wcfg.spec, wcfg.centroids, precision=state["precision"], allowed=wcfg.allowed)
    trainer.load_state_dict(state["trainer"])
    est = NeurCAM(**cfg.model.estimator_params(), device="cpu", verbose=False)
    est.set_trained(trainer.net, trainer.teacher, trainer.schedule, list(state["records"]), seconds,
                    feature_names=list(plan.features), mean=wcfg.mean, scale=wcfg.scale, repr_dim=plan.repr_dim,
                    uses_features_as_repr=plan.repr_kind == "features", precision=state["precision"],
                    init_info=init_info)
    if plan.text is not None:    # new documents are featurized with the training data's vocabulary
        est.text_ = plan.text
    est.history_["resumes"] = list(state["resumes"])
    est.history_["world_size"] = int(state["world_size"])
    return est
