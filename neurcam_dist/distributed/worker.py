"""One Ray Train worker: its set-up around the epoch loop the estimator runs too (``model.loop``).

The worker builds its trainer from the fit's ``Start`` (``model.start``: made once by the driver,
shipped whole) and the same ``TrainingSpec``, as the in-memory estimator builds its own, with its
group (``RayGroup``: epoch sums and the one-hot test of the gates are all-reduced, so every worker
takes the same schedule decisions; the network is wrapped in DDP) and its feed (``ShardFeed``).
Checkpoints hold the whole ``Trainer`` state, so a restarted worker group resumes mid-phase with
the same temperatures and optimiser moments.

Device-resident shards (``train.cache: device``, or ``auto`` when the shard fits): the first epoch
streams the shard and keeps its rows on the worker's device; later epochs reshuffle them there
through the estimator's own feed (``loop.Rows``), and the frozen warm-up model's assignment is
computed once per row when warm-up ends (no second forward per batch), as in memory. A shard that
streams every epoch keeps that assignment per row key (``teacher.RowTargets``).

Small data comes as ``HeldRows`` (one Arrow table in the object store) instead of a Ray Data
shard: each worker slices its rows from it (``HeldShard``) and, when it does not keep them
resident, takes them from there every epoch.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
import time
from dataclasses import dataclass

import numpy as np
import torch
from ray.data.collate_fn import ArrowBatchCollateFn

from ..data import ROW_KEY, Plan, embedding
from ..data.reading import HeldRows, feature_matrix
from ..model import TrainingSpec, loop
from ..model.device import resolve_precision
from ..model.perf import keep_freed_memory
from ..model.start import Start
from ..model.step import Batch, batch_indices
from ..model.trainer import Trainer
from ..numerics import fmt
from ..numerics import standardize
from ..settings import deterministic_algorithms, threads_for
from . import events
from .events import say
from .teacher import RowTargets

STATE_FILE = "trainer_state.pt"
LOG_SECONDS = 20.0  # at most one epoch line this often (phase changes and the last epoch always print)
PROGRESS_SECONDS = 60.0  # within an epoch, a progress line at most this often (rank 0)
GPU_CACHE_SHARE = 0.5  # of a GPU's memory (times the worker's share of it) for a resident shard
CPU_CACHE_SHARE = 0.5  # of the node's Ray memory resource, split between the node's workers
REPORTED = ("epoch", "phase", "loss", "clust_loss", "kl", "T", "T2", "lr", "rows", "rows_per_s", "seconds")


@dataclass(frozen=True)
class WorkerConfig:
    """Everything a worker receives (typed; Ray hands it over as ``{"worker": WorkerConfig}``)."""

    spec: TrainingSpec
    plan: Plan
    start: Start                    # the fit's start (``model.start.begin`` on the driver's sample), whole
    shuffle_buffer: int
    checkpoint_every: int
    cpus_per_worker: float          # train.cpus_per_worker: a CPU worker's torch threads
    idle_cpus: float = 0.0          # more threads once its rows are in memory (``driver.idle_cpus``)
    cache: str = "auto"             # train.cache: device keeps the shard on the device after epoch 1; auto: when
                                    # it fits; always (the object store holds it) and never stream every epoch
    device_cache_gib: float | None = None  # train.device_cache_gib: a resident shard's budget (None: from the device)
    gpu_share: float = 1.0          # this worker's fraction of its GPU (train.gpus_per_worker)
    cuda_graphs: bool = True        # the driver's NEURCAM_CUDA_GRAPHS (workers may not share its environment)
    max_epochs: int | None = None   # cut a run short (benchmarks only)
    trial: str | None = None        # the search's trial id, which tags this run's records
    events: events.Channel | None = None  # where progress records go (None: printed by the worker)
    held: HeldRows | None = None    # small rows to slice, instead of a Ray Data shard
    watched: tuple | None = None    # (x, xr): rows of the k-means sample whose loss the plateaus watch when an
                                    # epoch is part of a pass (``loop.Watch``); None: epochs are whole passes


class _Collate(ArrowBatchCollateFn):
    """Arrow batch -> (standardized features, representation, row keys) tensors, in Ray's batch
    thread."""

    def __init__(self, plan: Plan, mean: np.ndarray, scale: np.ndarray, coding=None):
        self.plan, self.mean, self.scale, self.coding = plan, mean, scale, coding

    def __call__(self, table):
        x = standardize(feature_matrix(table, self.plan.features, self.coding), self.mean, self.scale)
        if self.plan.repr_kind != "features":
            xr = embedding(table, self.plan)
        else:
            xr = x if self.coding is None or self.coding.space_is_features else self.coding.clustering_space(x)
        if not xr.flags.writeable:  # a zero-copy view of Arrow memory: torch wants its own buffer
            xr = xr.copy()
        keys = np.array(table[ROW_KEY].to_numpy(), dtype=np.int64)  # Arrow's view is read-only: torch warns
        return torch.from_numpy(x), torch.from_numpy(np.ascontiguousarray(xr)), torch.from_numpy(keys)


class RayGroup:
    """This worker's place in the group and the collectives the schedule needs (the clustering's
    ``loop.run`` and the autoencoder's ``loop.plain_epochs`` alike)."""

    def __init__(self, device: torch.device):
        import ray.train
        import torch.distributed as dist
        ctx = ray.train.get_context()
        self.rank, self.world, self.device = ctx.get_world_rank(), ctx.get_world_size(), device
        self.distributed = dist.is_available() and dist.is_initialized() and self.world > 1
        self.coll_device = device if (self.distributed and dist.get_backend() == "nccl") else torch.device("cpu")

    def agree(self, flag: bool) -> bool:
        """True only when every worker says True (the gates' one-hot test)."""
        if not self.distributed:
            return bool(flag)
        import torch.distributed as dist
        t = torch.tensor([1 if flag else 0], device=self.coll_device)
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return bool(t.item())

    def slowest(self, seconds: float) -> float:
        """The largest of the workers' ``seconds`` (the time budget's clock, the same on all)."""
        if not self.distributed:
            return seconds
        import torch.distributed as dist
        t = torch.tensor([seconds], dtype=torch.float64, device=self.coll_device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    def reduce(self, sums: torch.Tensor) -> torch.Tensor:
        """The sum of every worker's epoch ``sums`` (all-reduced on NCCL's device, or the CPU)."""
        if not self.distributed:
            return sums
        import torch.distributed as dist
        sums = sums.to(self.coll_device)
        dist.all_reduce(sums)
        return sums.cpu()

    def wrap(self, net: torch.nn.Module) -> torch.nn.Module:
        """The module the steps run: ``net`` wrapped in DDP over the parameters that train now
        (the trainer wraps it again after a gate lock, since DDP fixes its set of synchronised
        parameters at construction)."""
        if not self.distributed:
            return net
        from torch.nn.parallel import DistributedDataParallel
        ids = [self.device.index] if self.device.type == "cuda" else None
        return DistributedDataParallel(net, device_ids=ids)

    def joined(self, model: torch.nn.Module):
        """DDP's join context, for shards that end after different numbers of batches."""
        return model.join() if self.distributed else contextlib.nullcontext()

    def gather(self, obj) -> list:
        """Every worker's ``obj``, by rank (a checkpoint's stream positions)."""
        if not self.distributed:
            return [obj]
        import torch.distributed as dist
        out = [None] * self.world
        dist.all_gather_object(out, obj)
        return out


class HeldShard:
    """This worker's contiguous slice of ``HeldRows``, collated once on the host: every epoch
    yields it in batches, as a stream would, reshuffled (a seeded permutation; in order with
    ``train.shuffle_buffer: 0``). The workers' slices cover every row once."""

    source = "held"

    def __init__(self, table, rank: int, world: int, collate: "_Collate", shuffle: bool = True):
        lo, hi = table.num_rows * rank // world, table.num_rows * (rank + 1) // world
        self.x, self.xr, self.keys = collate(table.slice(lo, hi - lo))
        self.shuffle = shuffle

    def batches(self, batch_size: int, device: torch.device, seed: int):
        """This worker's rows in batches on ``device``, reshuffled with ``seed``."""
        gen = torch.Generator().manual_seed(seed) if self.shuffle else None
        for idx in batch_indices(self.keys.shape[0], batch_size, gen):
            yield self.x[idx].to(device), self.xr[idx].to(device), self.keys[idx].to(device)

    def release(self) -> None:
        """Once the rows are resident, the host slice is a second copy nobody reads."""
        self.x = self.xr = self.keys = None


class StreamedShard:
    """This worker's Ray Data shard, read through ``stream`` every epoch."""

    source = "stream"

    def __init__(self, shard, collate: "_Collate", shuffle_buffer: int):
        self.shard, self.collate, self.shuffle_buffer = shard, collate, shuffle_buffer

    def batches(self, batch_size: int, device: torch.device, seed: int):
        """This worker's Ray Data shard read once, in batches on ``device``."""
        return stream(self.shard, batch_size, self.collate, device, self.shuffle_buffer, seed)

    def release(self) -> None:
        """Nothing to let go: a stream holds no rows between epochs."""
        pass  # a stream holds no rows between epochs


def _restore(trainer: Trainer, device: torch.device, group: "RayGroup") -> tuple[list[dict], list[int], dict]:
    """Resume from Ray Train's latest checkpoint, if any: (history records, resume epochs, this
    worker's stream position). A checkpoint of another number of workers (or one written before
    positions were kept) resumes at the pass its epoch count gives."""
    import ray.train
    ckpt = ray.train.get_checkpoint()
    if ckpt is None:
        return [], [], {}
    with ckpt.as_directory() as d:
        state = torch.load(os.path.join(d, STATE_FILE), map_location=device, weights_only=True)
    trainer.load_state_dict(state["trainer"])
    streams = state.get("streams") or []
    position = streams[group.rank] if len(streams) == group.world else {"pass": trainer.schedule.epoch}
    if group.rank == 0:
        where = (f", pass {position['pass'] + 1} after {position['done']:,} of its batches"
                 if position.get("done") else "")
        say(f"resumed from checkpoint at epoch {trainer.schedule.epoch} (phase {trainer.schedule.phase}){where}")
    return list(state["records"]), list(state["resumes"]) + [trainer.schedule.epoch], position


def stream(shard, batch_size: int, collate: "_Collate", device: torch.device, shuffle_buffer: int, seed: int):
    """This worker's shard read once from Ray Data as (features, representation, row key) tensors on
    ``device`` (the training feed; ``benchmarks/scale/run.py --feed-only`` times it alone)."""
    return shard.iter_torch_batches(batch_size=batch_size, collate_fn=collate, device=device,
                                    local_shuffle_buffer_size=shuffle_buffer or None,
                                    local_shuffle_seed=seed if shuffle_buffer else None)


class ShardFeed:
    """A worker's feed (``model.loop``): its shard streamed, or taken from the held rows, in
    batches of its part of the global batch, each with the KL term's target (distillation's
    computed per batch, the teacher's from ``rows_cache``); kept on the device as the first pass
    goes when ``keep`` is active, and from then on a ``loop.Rows`` that reshuffles the rows there.
    Each pass read from the shard is shuffled by a seed of its own (the run's seed, the pass, the
    rank), so a resumed worker reads a pass as it was read before. A heartbeat line on long
    passes."""

    def __init__(self, shard: HeldShard | StreamedShard, batch_size: int, seed: int, group, keep: "_Resident",
                 rows_cache: RowTargets | None, aims: loop.Targets, in_memory=lambda: None):
        self.shard, self.batch_size, self.seed, self.group = shard, batch_size, seed, group
        self.keep, self.rows_cache, self.aims = keep, rows_cache, aims
        self.resident: loop.Rows | None = None
        self.in_memory = in_memory   # called once the rows no longer come from Ray Data
        self.resumed: dict | None = None   # a checkpoint's position, until the resident rows are rebuilt
        if shard.source == "held":
            in_memory()

    @property
    def source(self) -> str:
        """Where this epoch's rows come from: resident, held or stream."""
        return self.resident.source if self.resident is not None else self.shard.source

    def pass_batches(self, trainer: Trainer, index: int, skip: int = 0):
        """Pass ``index`` over this worker's rows, after its first ``skip`` batches (``loop.Stream``)."""
        if index > 0 and self.resident is None and self.keep.active and not self.keep.ready:
            self._rebuild(trainer)   # resumed past the first pass: its rows go back on the device first
        if self.resident is not None:
            return self.resident.pass_batches(trainer, index, skip)
        return self._read(trainer, index, skip)

    def position(self) -> dict:
        """What draws the current pass again: the resident rows' shuffling state (a pass read from
        the shard is drawn from its index)."""
        return self.resident.position() if self.resident is not None else {}

    def seek(self, position: dict) -> None:
        """Take a checkpoint's ``position``: the resident rows' shuffling state, once they are rebuilt."""
        self.resumed = position

    def counted(self) -> dict:
        """This worker's teacher forwards in the epoch (``teacher_rows``) and its torch threads."""
        return {"teacher_rows": self.rows_cache.take_computed() if self.rows_cache is not None else 0,
                "threads": torch.get_num_threads()}

    def _rebuild(self, trainer: Trainer) -> None:
        """A worker resumed after the first pass: read that pass again (no training) to put the
        rows back on the device in the order the first pass kept them."""
        for _ in self._read(trainer, 0, skip=None):
            pass
        if self.resident is not None and self.resumed is not None:
            self.resident.seek(self.resumed)

    def _read(self, trainer: Trainer, index: int, skip: int | None = 0):
        """Pass ``index`` read from the shard, kept on the device as it goes (the first pass), after
        ``skip`` batches (None: every batch skipped, only kept)."""
        s, group = trainer.schedule, self.group
        seed = self.seed * 1_000_003 + index * 997 + group.rank
        rows, start, last = 0, time.perf_counter(), time.perf_counter()
        for j, (x, xr, key) in enumerate(self.shard.batches(self.batch_size, group.device, seed)):
            self.keep.add(x, xr)
            if skip is None or j < skip:
                continue
            target = (self.rows_cache.targets(trainer.teacher, x, key) if s.annealing
                      else self.aims.of(trainer, x, xr))
            yield Batch(x, xr, target)
            rows += x.shape[0]
            if group.rank == 0 and time.perf_counter() - last > PROGRESS_SECONDS:
                last = time.perf_counter()
                say(f"epoch {s.epoch + 1} ({s.phase}): {rows * group.world:,} rows so far, "
                    f"{rows * group.world / (last - start):,.0f} rows/s")
        if self.keep.seal():
            self.resident = loop.Rows(self.keep.x, self.keep.xr, self.batch_size, self.keep.gen, self.aims,
                                      source="resident")
            self.shard.release()
            self.in_memory()


def resident_budget(c: WorkerConfig, device: torch.device, local_world: int) -> int:
    """Bytes this worker may hold: ``train.device_cache_gib``, else a share of its GPU's memory,
    else of its node's memory as Ray counts it (cgroup limits included)."""
    if c.device_cache_gib is not None:
        return int(c.device_cache_gib * 2**30)
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory * GPU_CACHE_SHARE * min(c.gpu_share, 1.0))
    import ray
    node = ray.get_runtime_context().get_node_id()
    memory = next((n["Resources"].get("memory", 0.0) for n in ray.nodes() if n["NodeID"] == node), 0.0)
    return int(memory * CPU_CACHE_SHARE / max(local_world, 1))


class _Resident:
    """This worker's shard on its device: filled while the first epoch streams, then reshuffled
    every epoch from there. Gives up (and the worker streams as before) past ``budget`` bytes.
    Rows are copied into buffers sized for the expected shard (grown if it is larger, never past
    the budget), so the device never holds the shard twice, as a list of batches and their
    concatenation would."""

    def __init__(self, enabled: bool, budget: int, seed: int, rank: int, say, repr_is_x: bool = False,
                 expected_rows: int = 0):
        self.active, self.budget, self.say, self.repr_is_x = enabled, budget, say, repr_is_x
        self.expected_rows = expected_rows
        self.rows, self.bytes, self.ready = 0, 0, False
        self._x = self._xr = None
        self.x = self.xr = None
        self.gen = torch.Generator().manual_seed(seed * 1_000_003 + 7919 * rank + 1)

    def add(self, x: torch.Tensor, xr: torch.Tensor) -> None:
        if not self.active or self.ready:
            return
        self.bytes += x.numel() * x.element_size() + (0 if self.repr_is_x else xr.numel() * xr.element_size())
        if self.bytes > self.budget:
            self.say(f"the shard passed the resident budget of {self.budget / 2**30:.2f} GiB on its device: "
                     f"streaming every epoch (raise train.device_cache_gib, or add workers)")
            self.active, self._x, self._xr = False, None, None
            return
        n = x.shape[0]
        if self._x is None or self.rows + n > self._x.shape[0]:
            # never reserve past the budget: a shard that will not fit must not exhaust the device first
            row_bytes = x[0].numel() * x.element_size() + (0 if self.repr_is_x else xr[0].numel() * xr.element_size())
            fits = max(self.budget // max(row_bytes, 1), self.rows + n)
            self._grow(min(max(self.expected_rows, 2 * self.rows, self.rows + n), fits), x, xr)
        self._x[self.rows:self.rows + n] = x
        if not self.repr_is_x:
            self._xr[self.rows:self.rows + n] = xr
        self.rows += n

    def _grow(self, capacity: int, x: torch.Tensor, xr: torch.Tensor) -> None:
        def bigger(old, like):
            new = torch.empty((capacity, *like.shape[1:]), dtype=like.dtype, device=like.device)
            if old is not None:
                new[:self.rows] = old[:self.rows]
            return new
        self._x = bigger(self._x, x)
        self._xr = None if self.repr_is_x else bigger(self._xr, xr)

    def seal(self) -> bool:
        """After the first epoch: the rows kept, if every one was; True when they are resident."""
        if self.active and not self.ready and self.rows:
            self.x = self._x[:self.rows]
            self.xr = self.x if self.repr_is_x else self._xr[:self.rows]
            self.ready = True
            self.say(f"{self.rows:,} rows resident on {self.x.device} ({self.bytes / 2**20:,.1f} MiB): "
                     f"later epochs train from there")
        return self.ready


def _report(trainer: Trainer, rec: dict, state: dict, group: RayGroup, stream: loop.Stream) -> None:
    """Metrics with a checkpoint (rank 0) every ``checkpoint_every`` epochs and at the end. A
    Train v2 report is a round trip through the controller, so reports go with checkpoints only;
    the per-epoch history travels in the state (what a report costs: ``benchmarks/results/scale.md``).
    The checkpoint holds every worker's place in its stream (``loop.Stream.position``, by rank), so
    an epoch that ended mid-pass resumes on the same batches."""
    import ray.train
    metrics = {k: rec[k] for k in REPORTED}
    metrics["finished"] = trainer.finished
    positions = group.gather(stream.position())
    if group.rank != 0:
        ray.train.report(metrics)
        return
    with tempfile.TemporaryDirectory() as d:
        torch.save({"trainer": trainer.state_dict(), **state, "streams": positions}, os.path.join(d, STATE_FILE))
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(d))


def expected_shard_bytes(c: WorkerConfig, world: int) -> int:
    """A worker's resident rows (features, representation, teacher assignment in float32), with
    a quarter of margin for shards of unequal size."""
    p = c.plan
    width = len(p.features) + (p.repr_dim if p.repr_kind != "features" else 0) + c.spec.n_clusters
    return int(p.n_rows / max(world, 1) * width * 4 * 1.25)


def _say_epoch(s, rec: dict, pairs: bool) -> None:
    """The epoch's progress record: epoch, phase (``warmup->anneal`` when it moved), loss, the
    gates' temperatures (the pairs' only for a model with pairs), rate."""
    moved = rec["phase"] + (f"->{s.phase}" if s.phase != rec["phase"] else "")
    t2 = f" T2={fmt(s.t2)}" if pairs else ""
    say(f"epoch {s.epoch} {moved} loss={rec['loss']:.5f} T={fmt(s.t)}{t2} {rec['rows_per_s']:,.0f} rows/s",
        epoch=s.epoch, phase=moved, loss=rec["loss"], rows_per_s=rec["rows_per_s"])


class _AfterEpoch:
    """What a worker does between epochs: keep the history, say a progress line (rank 0; at most
    every ``LOG_SECONDS``, and at a phase change and the end), report with a checkpoint every
    ``checkpoint_every`` epochs, at the end and when ``max_epochs`` cuts the run short."""

    def __init__(self, trainer: Trainer, c: WorkerConfig, group: "RayGroup", state: dict, stream: loop.Stream):
        self.trainer, self.c, self.group, self.state, self.stream = trainer, c, group, state, stream
        self.epochs_run, self.last_line = 0, 0.0

    def __call__(self, rec: dict, action) -> None:
        self.epochs_run += 1
        self.state["records"].append(rec)
        trainer, s = self.trainer, self.trainer.schedule
        if self.group.rank == 0 and (time.monotonic() - self.last_line >= LOG_SECONDS or s.phase != rec["phase"]
                                     or trainer.finished):
            self.last_line = time.monotonic()
            _say_epoch(s, rec, self.c.spec.n_pairs > 0)
        cut_short = self.c.max_epochs is not None and self.epochs_run >= self.c.max_epochs
        if trainer.finished or cut_short or s.epoch % self.c.checkpoint_every == 0:
            _report(trainer, rec, self.state, self.group, self.stream)


def _feed(c: WorkerConfig, device: torch.device, group: "RayGroup") -> ShardFeed:
    """This worker's feed: its shard, kept resident when ``train.cache`` allows and it fits its
    budget, and its cache of the frozen model's per-row assignments (for a shard that streams
    every epoch)."""
    import ray.train
    local_world = ray.train.get_context().get_local_world_size()
    budget = resident_budget(c, device, local_world)
    expected = expected_shard_bytes(c, group.world)
    short = short_passes(c.spec, c.plan.n_rows)   # a long pass streams (the driver said why)
    wanted = c.cache == "device" or (c.cache == "auto" and expected <= budget and short)
    if group.rank == 0 and c.cache == "auto" and short and not wanted:
        say(f"the shard (about {expected / 2**30:.2f} GiB per worker) exceeds the resident budget of "
            f"{budget / 2**30:.2f} GiB: " + ("taken from the held rows" if c.held is not None else "streaming")
            + " every epoch")
    keep = _Resident(wanted, budget, c.spec.random_state, group.rank, lambda msg: say(f"worker {group.rank}: {msg}"),
                     repr_is_x=c.plan.repr_kind == "features" and (c.start.coding is None
                                                                   or c.start.coding.space_is_features),
                     expected_rows=int(c.plan.n_rows / group.world * 1.05) + c.spec.batch_size)
    rows_cache = RowTargets(c.plan.n_rows, c.spec.n_clusters, device, budget,
                            lambda msg: say(f"worker {group.rank}: {msg}") if group.rank == 0 else None)  # rank 0 says it
    aims = loop.Targets(torch.tensor(np.asarray(c.start.centroids, np.float32), device=device), c.spec.m)
    return ShardFeed(_shard(c, group), max(1, c.spec.batch_size // group.world), c.spec.random_state, group, keep,
                     rows_cache, aims, in_memory=lambda: _take_idle_cpus(c, device, local_world, group))


RESIDENT_PASS_EPOCHS = 10   # train.cache auto keeps the rows on the device when a pass is at most this many epochs


def short_passes(spec, n_rows: int) -> bool:
    """Whether a pass over ``n_rows`` rows takes at most ``RESIDENT_PASS_EPOCHS`` epochs (always
    when epochs are whole passes). A fit runs a few dozen epochs, so keeping the rows of a longer
    pass would fill the device while the first pass streams and seldom be read back."""
    steps = spec.epoch_steps(n_rows)
    return steps is None or n_rows <= RESIDENT_PASS_EPOCHS * steps * spec.batch_size


def _take_idle_cpus(c: WorkerConfig, device: torch.device, local_world: int, group: "RayGroup") -> None:
    """A CPU worker whose rows are in memory: ``cpus_per_worker`` torch threads plus its share of
    the CPUs kept for Ray Data (``WorkerConfig.idle_cpus``), at most its node's CPUs over the
    workers on that node and at most what its steps are worth (``settings.threads_for``: a
    worker's steps of a small model gain nothing from more threads and lose much beside other
    work)."""
    if device.type != "cpu" or c.idle_cpus <= 0:
        return
    node = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = int(min(c.cpus_per_worker + c.idle_cpus, node / max(1, local_world)))
    threads = max(torch.get_num_threads(), threads_for(c.spec.step_work(c.spec.batch_size // group.world), threads))
    if threads > torch.get_num_threads():
        torch.set_num_threads(threads)
        if group.rank == 0:
            say(f"rows in memory: each worker now trains on {threads} torch threads (the CPUs Ray Data read "
                f"with; train.take_idle_cpus)")


def train_loop_per_worker(config: dict) -> None:
    """The Ray Train entry point: ``_train_loop`` under the run's ``deterministic`` setting."""
    c: WorkerConfig = config["worker"]
    with deterministic_algorithms(c.spec.deterministic):
        _train_loop(c)


def _device(c: WorkerConfig) -> torch.device:
    """The device Ray Train gave this worker; on a CPU, ``cpus_per_worker`` torch threads."""
    import ray.train.torch
    device = ray.train.torch.get_device()
    if device.type == "cpu":
        torch.set_num_threads(max(1, int(c.cpus_per_worker)))
        keep_freed_memory()
    return device


def _worker_trainer(c: WorkerConfig, device: torch.device, group: "RayGroup", precision: str):
    """This worker's ``Trainer``, built from the fit's ``Start`` as the estimator builds its own."""
    return c.start.trainer(c.spec, precision=precision, device=device, group=group, cuda_graphs=c.cuda_graphs)


def _shard(c: WorkerConfig, group: "RayGroup"):
    """This worker's rows: its Ray Data shard streamed, or its slice of the held rows."""
    import ray
    import ray.train
    collate = _Collate(c.plan, np.asarray(c.start.mean, np.float64), np.asarray(c.start.scale, np.float64),
                       c.start.coding)
    if c.held is None:
        return StreamedShard(ray.train.get_dataset_shard("train"), collate, c.shuffle_buffer)
    return HeldShard(ray.get(c.held.table), group.rank, group.world, collate, shuffle=c.shuffle_buffer > 0)


def _train_loop(c: WorkerConfig) -> None:
    """Build, restore, then the epoch loop (``model.loop.run``) until the schedule finishes.

    Ray Train's examples keep one plain training function per worker; its set-up is in
    ``_worker_trainer``, ``_feed`` and ``_AfterEpoch``, its epochs are the estimator's."""
    events.attach(c.events, trial=c.trial)
    device = _device(c)
    precision = resolve_precision(c.spec.precision, device)
    torch.manual_seed(c.spec.random_state)
    group = RayGroup(device)
    trainer = _worker_trainer(c, device, group, precision)
    records, resumes, position = _restore(trainer, device, group)
    state = {"records": records, "resumes": resumes, "precision": precision, "world_size": group.world,
             "deterministic": torch.are_deterministic_algorithms_enabled()}
    feed = _feed(c, device, group)
    stream = loop.Stream(feed, c.spec.epoch_steps(c.plan.n_rows))
    if position:
        stream.seek(position)
    loop.run(trainer, stream, group, after_epoch=_AfterEpoch(trainer, c, group, state, stream),
             max_epochs=c.max_epochs, watch=_watch(c, device, group, feed.aims))


def _watch(c: WorkerConfig, device: torch.device, group: "RayGroup", aims: loop.Targets) -> loop.Watch | None:
    """This worker's part of the fixed rows whose loss the plateaus watch when epochs are parts of
    a pass (``WorkerConfig.watched``; every worker a different part, the sums all-reduced)."""
    if c.watched is None:
        return None
    x, xr = (torch.from_numpy(np.ascontiguousarray(a[group.rank::group.world], np.float32)).to(device)
             for a in c.watched)
    return loop.Watch(x, xr, aims)
