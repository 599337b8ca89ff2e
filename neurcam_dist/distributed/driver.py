"""Training on Ray: Ray Data streams the Parquet shards into Ray Train ``TorchTrainer`` DDP workers.

The driver (``train``) validates and profiles the data, draws a bounded sample for the k-means
centroid init, starts the workers (``worker.train_loop_per_worker``), and after training scores
the whole dataset with a Ray Data pass. It returns what tracking needs (``TrainResult``); MLflow
logging is the caller's (``neurcam_dist.service``, the CLI, ``jobs/``).
"""
from __future__ import annotations

import dataclasses
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .. import names
from ..errors import TrainingError
from .. import data as data_mod
from .. import outputs
from ..config import JobConfig, coerce_config
from ..estimator import NeurCAM
from ..model import FittedNet, loop
from ..model.start import Start, begin, finish, with_scores
from ..numerics import standardize
from ..settings import cuda_graphs_enabled
from ..redaction import redact
from ..storage.retrying import ray_storage
from ..uris import Location, is_uri, store_did_not_answer
from ..validation import empty_cluster_ids, empty_clusters_note, empty_clusters_record
from .scoring import evaluate
from . import events
from .console import held_stderr, routed_logs
from .events import say
from .job import ResolvedJob, prepare, resolve, resolve_early
from .session import check_resources, ensure_ray, worker_env, worker_group
from .worker import STATE_FILE, WorkerConfig, expected_shard_bytes, short_passes, train_loop_per_worker


@dataclass(frozen=True)
class TrainResult:
    """What ``train`` returns: the estimator, its metrics, where the outputs are, the plan,
    the config it ran, and (with ``tracking:``) what was logged."""
    estimator: NeurCAM
    metrics: dict
    output: Location                 # the job's output (a local folder or an object-store URI)
    plan: data_mod.Plan
    config: JobConfig
    tracking: dict | None = None     # what ``service.train`` logged, with ``tracking:`` (a new value)

    @property
    def model_path(self) -> Path | str:
        """The model directory of the run (``OUTPUT/model``)."""
        return (self.output / "model").path


@dataclass(frozen=True)
class InitialState:
    """What the driver computes before the workers start (all from one streaming pass and a
    sample): the fit's ``Start`` (``model.start.begin`` on the sample, as the estimator's on its
    rows), the sample, and the sample's rows the workers' plateaus watch."""

    start: Start
    sample: object = None   # pyarrow.Table: the bounded uniform random sample (features + representation)
    watched: tuple | None = None  # (x, xr) of the sample's rows whose loss the plateaus watch (``WorkerConfig.watched``)

    def without_sample(self) -> "InitialState":
        """What trials need shipped to them (the sample stays on the driver)."""
        return dataclasses.replace(self, sample=None)


def initial_state(job: ResolvedJob, prof: data_mod.Profile) -> InitialState:
    """Standardization from the profile; the ``Start`` (k-means centroids and the coding's starting
    values) on a bounded uniform random sample (``job.model.random_state`` seeds both)."""
    plan, m, tc = job.plan, job.model, job.train
    mean = prof.mean if m.standardize else np.zeros(len(plan.features))
    scale = prof.scale() if m.standardize else np.ones(len(plan.features))
    coding = prof.coding(plan, min_level_rows=m.min_level_rows, max_levels=m.max_levels, missing=m.missing,
                         missing_values=tuple(m.missing_values), categorical_weight=m.categorical_weight)
    cols = list(dict.fromkeys(plan.features + (plan.repr_columns if plan.repr_kind != "features" else [])))
    table = data_mod.sample(plan, min(tc.kmeans_sample, plan.n_rows), m.random_state, cols)
    raw = data_mod.reading.feature_matrix(table, plan.features, coding, "the k-means sample")
    x_sample = standardize(raw, mean, scale)
    xr_sample = data_mod.reading.representation(table, plan, x_sample, coding)
    if len(xr_sample) < m.n_clusters:
        raise data_mod.DataError(f"the k-means sample has {len(xr_sample)} rows, fewer than model.n_clusters="
                                 f"{m.n_clusters}: raise train.kmeans_sample")
    start = begin(job.spec, x_sample, xr_sample, raw, mean=mean, scale=scale, allowed=~prof.constant, coding=coding,
                  method=m.kmeans, n_init=m.kmeans_n_init)
    info = start.kmeans
    chosen = f", chosen by {info['chosen_by']}" if "chosen_by" in info else ""
    say(f"k-means init ({info['method']}, {info['n_init']} restarts, seed {m.random_state}{chosen}) on a "
        f"{len(xr_sample):,}-row sample in {info['seconds']:.1f} s")
    return InitialState(start=start, sample=table, watched=watched_rows(job, x_sample, xr_sample))


def watched_rows(job: ResolvedJob, x_sample: np.ndarray, xr_sample: np.ndarray) -> tuple | None:
    """When an epoch is part of a pass (``TrainingSpec.epoch_steps``): the rows of the uniform
    k-means sample whose loss the workers' plateaus watch (``loop.watched_indices``, drawn as the
    estimator draws from its rows), as the workers see rows (standardized features,
    representation); else None."""
    pick = loop.watched_indices(len(x_sample), job.spec.epoch_steps(job.plan.n_rows), job.spec.random_state + 1)
    if pick is None:
        return None
    pick = pick.numpy()
    return np.ascontiguousarray(x_sample[pick], np.float32), np.ascontiguousarray(xr_sample[pick], np.float32)


def worker_config(job: ResolvedJob, init: InitialState, max_epochs: int | None = None) -> WorkerConfig:
    """What every worker receives: the job's ``TrainingSpec`` and ``train:`` settings under their
    own names (``max_epochs`` cuts a run short: benchmarks only)."""
    tc = job.train
    return WorkerConfig(spec=job.spec, plan=job.plan, start=init.start, shuffle_buffer=tc.shuffle_buffer,
                        checkpoint_every=tc.checkpoint_every, cpus_per_worker=tc.cpus_per_worker,
                        idle_cpus=idle_cpus(job), max_epochs=max_epochs, cache=tc.cache,
                        device_cache_gib=tc.device_cache_gib, gpu_share=tc.gpu_share or 1.0,
                        cuda_graphs=cuda_graphs_enabled(), events=events.current_channel(), trial=job.trial,
                        watched=init.watched)


def idle_cpus(job: ResolvedJob) -> float:
    """CPUs per worker that the fit check keeps for Ray Data (``JobConfig.check_fits``) and that a
    lone CPU run's workers may take as torch threads once their rows are in memory
    (``train.take_idle_cpus``): none for a search trial (trials share them) or a GPU run."""
    tc = job.train
    if job.trial is not None or tc.use_gpu or not tc.take_idle_cpus:
        return 0.0
    import ray
    return max(0.0, ray.cluster_resources().get("CPU", 0.0) - tc.num_workers * tc.cpus_per_worker) / tc.num_workers


def training_dataset(job: ResolvedJob):
    """What the workers' shards come from (a search builds it once for all its trials). Small data
    (``reading.local_pass``) is read here once and held in the object store for the workers to
    slice (``HeldRows``), unless ``train.cache: never`` asks for the files to be streamed every
    epoch. Larger data is read by Ray Data (``reading.streamed_dataset``), and held in the object
    store with ``train.cache: always``."""
    tc, plan = job.train, job.plan
    if tc.cache != "never" and data_mod.reading.local_pass(plan, plan.columns):
        say(f"the {plan.n_rows:,} training rows are small: read here once and handed to the workers in memory")
        return data_mod.reading.held_rows(plan)
    dataset = data_mod.reading.streamed_dataset(plan)
    if tc.cache == "always":
        say(f"caching the {plan.n_rows:,} training rows in the object store (train.cache=always)")
        dataset = dataset.materialize()
    return dataset


def run_workers(job: ResolvedJob, wcfg: WorkerConfig, run_name: str, dataset=None):
    """Start the ``TorchTrainer`` and wait for it; returns Ray's ``Result`` (raises on failure).
    ``dataset``: ``training_dataset``'s, when the caller built it already. A ``run_name`` that Ray
    Train finds in the storage goes on from that run's latest checkpoint, every worker at its place
    in its stream."""
    from ray.train import CheckpointConfig, FailureConfig, RunConfig
    from ray.train.torch import TorchTrainer

    tc, plan = job.train, job.plan
    if dataset is None:
        dataset = training_dataset(job)
    if tc.cache == "auto" and not short_passes(wcfg.spec, plan.n_rows):
        say(f"train.cache=auto: the rows stream (a pass over the {plan.n_rows:,} rows spans "
            f"{plan.n_rows / wcfg.spec.epoch_rows:,.0f} epochs of {wcfg.spec.epoch_rows:,} rows, more than a fit is "
            f"likely to run; train.cache: device keeps them all the same)")
    elif tc.cache in ("auto", "device"):
        say(f"train.cache={tc.cache}: each worker keeps its shard of the {plan.n_rows:,} rows on its device after "
            f"the first pass{' when it fits' if tc.cache == 'auto' else ''} (about "
            f"{expected_shard_bytes(wcfg, tc.num_workers) / 2**20:,.1f} MiB per worker)")
    held = isinstance(dataset, data_mod.reading.HeldRows)
    if held:
        wcfg = dataclasses.replace(wcfg, held=dataset)
    storage = job.storage_path()
    trainer = TorchTrainer(
        train_loop_per_worker, train_loop_config={"worker": wcfg},
        **worker_group(tc),
        run_config=RunConfig(name=run_name, **ray_storage(storage),
                             failure_config=FailureConfig(max_failures=tc.max_failures),
                             checkpoint_config=CheckpointConfig(num_to_keep=2), **worker_env(wcfg.spec.deterministic)),
        datasets={} if held else {"train": dataset},
    )
    say(f"training on {tc.num_workers} worker(s) ({'GPU' if tc.use_gpu else 'CPU'}); run {run_name} in {storage}")
    try:
        result = trainer.fit()
    except Exception as exc:
        raise TrainingError(f"distributed training failed (run {run_name}, storage {redact(storage)})"
                            f"{store_hint(exc, storage)}: {redact(exc)}") from exc
    if result.error is not None:
        raise TrainingError(f"distributed training failed (run {run_name}){store_hint(result.error, storage)}: "
                            f"{redact(result.error)}")
    return result


def store_hint(error, storage: str) -> str:
    """What to do when the object store holding the checkpoints stopped answering mid-run (Ray
    Train's controller fails the run when it cannot write its checkpoint record)."""
    if not (is_uri(storage) and store_did_not_answer(error)):
        return ""
    return (f"; the object store holding the checkpoints ({redact(storage)}) did not answer during the run: "
            f"nothing was written to the output (a previous model there is untouched); check the store "
            f"(AWS_ENDPOINT_URL) and run again. What Ray said")


def train(config, *, name: str | None = None) -> TrainResult:
    """Train on Ray as ``config`` (a ``JobConfig``, a dict or a YAML path) says; writes
    ``output/model`` (loadable by ``NeurCAM.load``), ``metrics.json`` and ``config.json``
    atomically. Uses the running Ray, else ``RAY_ADDRESS``, else starts a local one. MLflow
    logging (a ``tracking:`` section) is ``ops.runs.train``'s.

    The job is resolved once (``job.resolve_early``: before Ray starts, from the footers; or
    after the step that writes its data), then profiled, initialised, trained and scored.
    """
    cfg = coerce_config(config)
    t_start = time.perf_counter()
    tc = cfg.train
    if cfg.search is not None:
        say("the config's search: section is for neurcam tune; this trains one run with the model: section")
    early = resolve_early(cfg)
    with held_stderr() as start:
        ensure_ray(min_cpus=tc.num_workers * tc.cpus_per_worker + 1)
        check_resources(cfg, search=False)
    with routed_logs(cfg.output_location(), say, earlier=start.text):
        return _train(resolve(cfg, early), name, t_start)


def _train(job: ResolvedJob, name: str | None, t_start: float) -> TrainResult:
    job, prof = prepare(job)
    plan = job.plan
    with unchanged_input(plan):
        init = initial_state(job, prof)
        wcfg = worker_config(job, init)
        run_name = name or names.run_name("neurcam")
        t_train = time.perf_counter()
        result = run_workers(job, wcfg, run_name)
        est, metrics = finish_run(job, wcfg, init, result, time.perf_counter() - t_train, run_name)
    metrics["total_seconds"] = round(time.perf_counter() - t_start, 2)
    write_run(job.output, est, metrics, job, dirs=representation_dirs(job.config))
    say(f"inertia={metrics['inertia']:.5f}" + "".join(f" {k}={metrics[k]:.4f}" for k in ("ari", "nmi", "acc")
                                                     if k in metrics) + f"; model and metrics in {job.output}/")
    return TrainResult(estimator=est, metrics=metrics, output=job.output, plan=plan,
                       config=job.effective_config())


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


def representation_dirs(cfg) -> dict[str, Location]:
    """A computed representation's model (the autoencoder's weights), kept with the run as
    ``representation/``."""
    from .autoencoder import dae_artifacts
    where = dae_artifacts(cfg)
    return {"representation": where} if where else {}


def write_run(out: Location, est: NeurCAM, metrics: dict, job: ResolvedJob, extra: dict[str, str] | None = None,
              report=None, dirs: dict[str, Location] | None = None) -> str | None:
    """A Ray run's outputs in ``out`` (``outputs.write_run``), with the config it ran as
    ``config.json`` (``ResolvedJob.public_json``). Returns the report's error (the model is kept)."""
    return outputs.write_run(out, est, metrics, job.public_json(), extra=extra, report=report, dirs=dirs)


def finish_run(job: ResolvedJob, wcfg: WorkerConfig, init: InitialState, result, train_seconds: float,
               run_name: str) -> tuple[NeurCAM, dict]:
    """After the workers: the fitted state from the final checkpoint, then a Ray Data pass over
    the whole dataset for the hard assignments, the inertia, each channel's mean and (with
    labels) ARI/NMI/ACC; the estimator adopts the completed state."""
    plan = job.plan
    with result.checkpoint.as_directory() as d:
        state = torch.load(os.path.join(d, STATE_FILE), map_location="cpu", weights_only=True)
    fitted, teacher = assemble(plan, wcfg, state, train_seconds)
    say("scoring the whole dataset (hard assignments, inertia)")
    tc = job.train
    scores = evaluate(fitted, plan, batch_size=tc.score_batch_size, concurrency=tc.num_workers, log=say)
    empty = empty_cluster_ids(scores["cluster_sizes"], fitted.cluster_ids)
    note = empty_clusters_note(scores["n_clusters_used"], job.model.n_clusters, empty=empty,
                               kmeans=init.start.kmeans.get("method"))
    fitted = with_scores(fitted, scores.pop("channel_means"), n_clusters_used=scores["n_clusters_used"],
                         empty_clusters=empty, empty_clusters_note=note)
    est = NeurCAM(**job.model.estimator_params(), device="cpu", verbose=False).adopt(fitted, teacher)
    scores.update(empty_clusters_record(fitted.history))
    if init.sample is not None:
        set_reference(est, init, plan, tc.reference_rows, job.model.random_state)
    if note:
        say(f"warning: {note}")
    metrics = {
        "n_rows": plan.n_rows, "n_files": len(plan.source.files), "n_features": len(plan.features),
        "repr_dim": est.repr_dim_, **scores, "epochs": est.n_iter_, "stop_reason": est.history_["stop_reason"],
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
    est.reference_ = init.sample.select(plan.features).take(keep).to_pandas()


def assemble(plan: data_mod.Plan, wcfg: WorkerConfig, state: dict,
             seconds: float) -> tuple[FittedNet, "torch.nn.Module | None"]:
    """The fitted state from the final checkpoint (and the warm-up model): the workers' trainer
    rebuilt from their ``Start`` with the checkpoint's state, finished as the in-memory fit is
    (``model.start.finish``), with the run's resumes and world size in its history."""
    start = wcfg.start
    trainer = start.trainer(wcfg.spec, precision=state["precision"])
    trainer.load_state_dict(state["trainer"])
    features_space = plan.repr_kind == "features"
    coding = start.coding
    fitted = finish(
        trainer, start, list(state["records"]), seconds, feature_names=list(plan.features),
        repr_dim=coding.space_width() if features_space and coding is not None else plan.repr_dim,
        uses_features_as_repr=features_space, precision=state["precision"],
        text=plan.text,   # new documents are featurized with the training data's vocabulary
        resumes=list(state["resumes"]), world_size=int(state["world_size"]),
        deterministic=bool(state.get("deterministic", False)), id_column=plan.id)
    return fitted, trainer.teacher
