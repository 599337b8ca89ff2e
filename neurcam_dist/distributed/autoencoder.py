"""``representation: {kind: dae}``: the denoising autoencoder trained on Ray, then its bottleneck
written beside the data as the representation the clustering loss uses.

The autoencoder trains in a ``TorchTrainer`` over the same Parquet stream as the clustering
(standardized features, DDP across the workers); a Ray Data pass on an actor pool then appends
the ``dae_embedding`` column to every row and writes the shards, with the autoencoder's weights in
``_dae/`` beside them, to ``train.storage_path``/staging/dae. The run's output and MLflow keep
those weights (``representation/``) beside the clustering model.
"""
from __future__ import annotations

import io
import json
import os
import tempfile
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import torch

from ..errors import TrainingError
from .. import data as data_mod
from ..data.pacing import pace
from ..config import DataConfig, JobConfig, RepresentationConfig
from ..model import dae, loop
from ..model.dae import DenoisingAutoencoder
from ..model.schedule import Plateau
from ..numerics import standardize
from ..settings import deterministic_algorithms
from ..storage.retrying import ray_storage
from ..storage import write_dataset
from ..uris import Location
from . import events
from .events import say
from .session import worker_env, worker_group
from .worker import RayGroup

DAE_COLUMN = "dae_embedding"
WEIGHTS = "weights.pt"
DAE_DIR = "_dae"          # "_": skipped by every reader of the shards


@dataclass(frozen=True)
class DaeJob:
    """What each autoencoder worker receives: the settings, the plan, the standardization, the
    seed, its threads, the shuffle buffer and where its progress records go."""
    rep: RepresentationConfig
    plan: data_mod.Plan
    mean: np.ndarray
    scale: np.ndarray
    seed: int
    threads: float
    shuffle_buffer: int
    events: events.Channel | None = None   # where the progress records go
    deterministic: bool = False            # model.deterministic: the same settings as the clustering's workers


def _build(job: DaeJob) -> DenoisingAutoencoder:
    r = job.rep
    return DenoisingAutoencoder(len(job.plan.features), tuple(r.hidden), r.bottleneck, r.dropout, seed=job.seed)


def dae_loop_per_worker(config: dict) -> None:
    """One worker under the run's ``deterministic`` setting (``_dae_loop``)."""
    job: DaeJob = config["job"]
    with deterministic_algorithms(job.deterministic):
        _dae_loop(job)


def _dae_loop(job: DaeJob) -> None:
    """Epochs over this worker's shard until ``epochs`` or a plateau, through the epoch loop and
    the group the clustering's workers use (``loop.plain_epochs``, ``worker.RayGroup``: DDP, the
    join context, the sums all-reduced); rank 0 reports the weights."""
    import ray.train
    import ray.train.torch

    events.attach(job.events)
    r = job.rep
    device = ray.train.torch.get_device()
    if device.type == "cpu":
        torch.set_num_threads(max(1, int(job.threads)))
    group = RayGroup(device)
    torch.manual_seed(job.seed * 1_000_003 + group.rank)   # the dropout masks
    net = _build(job).to(device)
    opt, sched = dae.optimizer(net, r.lr, r.lr_patience)
    features, mean, scale = job.plan.features, job.mean, job.scale
    shard = ray.train.get_dataset_shard("train")

    def batches(epoch: int):
        for batch in shard.iter_batches(batch_size=max(1, r.batch_size // group.world), batch_format="pyarrow",
                                        local_shuffle_buffer_size=job.shuffle_buffer or None,
                                        local_shuffle_seed=job.seed + epoch * 997 + group.rank
                                        if job.shuffle_buffer else None):
            yield torch.from_numpy(standardize(data_mod.matrix(batch, features, np.float64), mean, scale)).to(device)

    history, plateau, clock = [], Plateau(r.tol), {"epoch": time.perf_counter(), "said": 0.0}

    def after_epoch(epoch: int, loss: float) -> bool:
        sched.step(loss)
        history.append({"epoch": epoch, "loss": loss, "lr": opt.param_groups[0]["lr"],
                        "seconds": round(time.perf_counter() - clock["epoch"], 3)})
        clock["epoch"] = time.perf_counter()
        plateau.update(loss)
        done = epoch == r.epochs or plateau.stale >= r.n_iter_no_change
        if group.rank == 0 and (done or epoch == 1 or time.perf_counter() - clock["said"] > 20):
            clock["said"] = time.perf_counter()
            events.say(f"autoencoder epoch {epoch}: reconstruction loss {loss:.5f}")
        return done

    loop.plain_epochs(net, lambda model, epoch: dae.train_epoch(model, opt, batches(epoch)), group, r.epochs,
                      after_epoch)
    _report(net, history, group.rank)


def _report(net: DenoisingAutoencoder, history: list[dict], rank: int) -> None:
    """The run's metrics to Ray Train, and from rank 0 the weights with their history."""
    import ray.train
    metrics = {"epochs": len(history), "loss": history[-1]["loss"]}
    if rank != 0:
        ray.train.report(metrics)
        return
    with tempfile.TemporaryDirectory() as d:
        torch.save({"state": net.state_dict(), "history": history,
                    "deterministic": torch.are_deterministic_algorithms_enabled()}, os.path.join(d, WEIGHTS))
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(d))


class _Encoder:
    """A Ray Data actor: appends the bottleneck of every row as ``dae_embedding``."""

    def __init__(self, state: dict, job: DaeJob):
        torch.set_num_threads(1)
        self.net = _build(job)
        self.net.load_state_dict(state)
        self.net.eval()
        self.job = job

    def __call__(self, table: pa.Table) -> pa.Table:
        j = self.job
        x = torch.from_numpy(standardize(data_mod.matrix(table, j.plan.features, np.float64), j.mean, j.scale))
        with torch.no_grad():
            z = self.net.encode(x).numpy().astype(np.float32)
        col = pa.FixedSizeListArray.from_arrays(pa.array(z.reshape(-1), pa.float32()), z.shape[1])
        return table.append_column(DAE_COLUMN, col)


def dae_data(cfg: JobConfig, prepare) -> DataConfig:
    """Train the autoencoder and write the data with its embedding; the ``data:`` of that data.
    ``prepare()``: the checks and profile pass of the input, ``(job, profile)`` (``job.prepare``)."""
    from ray.train import RunConfig
    from ray.train.torch import TorchTrainer

    r, tc, m = cfg.representation, cfg.train, cfg.model
    resolved, prof = prepare()
    plan = resolved.plan
    if plan.categorical or any(prof.missing.values()):
        missing = [c for c, n in prof.missing.items() if n]
        raise data_mod.DataError(f"representation: the denoising autoencoder reads numbers without missing cells; the "
                                 f"data has categorical feature(s) {plan.categorical[:10]} and missing cells in "
                                 f"{missing[:10]}: leave representation: out (the clustering space of a mixed "
                                 f"table is documented in docs/mixed.md), or give those features as numbers")
    mean = prof.mean if m.standardize else np.zeros(len(plan.features))
    scale = prof.scale() if m.standardize else np.ones(len(plan.features))
    job = DaeJob(rep=r, plan=plan, mean=mean, scale=scale, seed=m.random_state, threads=tc.cpus_per_worker,
                 shuffle_buffer=tc.shuffle_buffer, events=events.current_channel(), deterministic=m.deterministic)
    say(f"training the denoising autoencoder ({len(plan.features)}-{'-'.join(map(str, r.hidden))}-{r.bottleneck}, "
        f"input dropout {r.dropout}) on {tc.num_workers} worker(s), at most {r.epochs} epochs")
    t0 = time.perf_counter()
    dataset = pace(data_mod.read(plan, plan.features, ordered=True).materialize())
    trainer = TorchTrainer(dae_loop_per_worker, train_loop_config={"job": job},
                           **worker_group(tc),
                           run_config=RunConfig(name=f"dae-{time.strftime('%Y%m%d-%H%M%S')}",
                                                **ray_storage(cfg.storage_path()), **worker_env(m.deterministic)),
                           datasets={"train": dataset})
    try:
        result = trainer.fit()
    except Exception as exc:
        raise TrainingError(f"the autoencoder's training failed: {exc}") from exc
    with result.checkpoint.as_directory() as d:
        saved = torch.load(os.path.join(d, WEIGHTS), map_location="cpu", weights_only=True)
    history = saved["history"]
    say(f"autoencoder: {len(history)} epochs in {time.perf_counter() - t0:.1f} s, reconstruction loss "
        f"{history[0]['loss']:.5f} -> {history[-1]['loss']:.5f}")
    staged = cfg.storage_path() / "staging" / "dae"
    source = data_mod.read_source(plan.source, _all_columns(plan), ordered=True)
    encoded = data_mod.reading.map_with_actors(source, _Encoder, tc.score_batch_size, tc.num_workers,
                                               state=saved["state"], job=job)

    def write(root: str, fs) -> None:
        data_mod.reading.run_pass(encoded.write_parquet, root, filesystem=fs)
        fs.create_dir(f"{root}/{DAE_DIR}")
        with fs.open_output_stream(f"{root}/{DAE_DIR}/{WEIGHTS}") as out:
            buf = io.BytesIO()
            torch.save(saved["state"], buf)
            out.write(buf.getvalue())
        card = {"kind": r.kind, **r.model_dump(), "features": plan.features, "mean": mean.tolist(),
                "scale": scale.tolist(), "seed": m.random_state, "history": history,
                "deterministic": bool(saved.get("deterministic", False))}
        with fs.open_output_stream(f"{root}/{DAE_DIR}/config.json") as out:
            out.write(json.dumps(card, indent=1).encode())

    write_dataset(staged, write, marker=DAE_DIR)
    say(f"wrote the data with its {r.bottleneck}-dim {DAE_COLUMN} to {staged}")
    return cfg.data.model_copy(update={"path": str(staged), "embedding": DAE_COLUMN, "features": plan.features})


def _all_columns(plan: data_mod.Plan) -> list[str]:
    return list(dict.fromkeys([*plan.features, *(c for c in (plan.id, plan.label) if c)]))


def dae_artifacts(cfg: JobConfig) -> Location | None:
    """Where a run's autoencoder weights and card are (``representation/`` of its output)."""
    if cfg.representation is None:
        return None
    return cfg.storage_path() / "staging" / "dae" / DAE_DIR
