"""The training step replayed from a CUDA graph: captured once per phase, replayed for every batch.

At the paper's batch of 512 a GPU finishes a step's arithmetic in a fraction of the time it takes
the host to launch its few hundred kernels (one H100, pendigits: 5.5 ms a step eager, 0.68 ms
replayed; ``benchmarks/results/scale_gpu_h100.md``). A graph bakes in every address and every Python number it saw, so whatever changes
between steps lives in device tensors the graph reads:

- the batch: copied into static input buffers before each replay;
- the temperatures T and T2: 0-dim device tensors, refilled when the schedule changes them, so
  annealing needs no new capture;
- the learning rate: a device tensor in Adam's param group, which ``ReduceLROnPlateau`` fills in
  place; Adam runs ``capturable`` (its step counters on the device);
- the epoch sums: accumulated inside the graph, read once at the end of the epoch.

What a graph cannot follow forces a new capture: a phase (the KL term comes or goes), a gate lock
(the gate becomes a constant and its logits stop training), another batch size (an epoch's last,
short batch has its own graph; past ``MAX_GRAPHS`` shapes in a phase, the others run eagerly) and
a restored checkpoint (new optimiser state tensors). The first
``WARMUP`` steps of each new shape run eagerly on a side stream, so lazily made state (Adam's
moments, cuBLAS workspaces) exists before the capture, as PyTorch's CUDA-graph notes require.
Data-parallel (DDP) steps are not captured: their all-reduce runs eagerly.
"""
from __future__ import annotations

import warnings

import torch

from .step import Batch, EpochStats, optimizer_step, weighted_sums

WARMUP = 2          # eager steps of a new shape before its capture
MAX_GRAPHS = 4      # per phase: a stream's odd batch sizes beyond these run eagerly


class CudaRecorder:
    """Captures into a ``torch.cuda.CUDAGraph``; warm-up steps run on a side stream."""

    def warm(self, fn):
        """Run ``fn`` on a side stream a few times before capture (CUDA graphs' rule)."""
        current = torch.cuda.current_stream()
        side = torch.cuda.Stream()
        side.wait_stream(current)
        with torch.cuda.stream(side):
            out = fn()
        current.wait_stream(side)
        return out

    def capture(self, fn):
        """``fn`` captured as a CUDA graph; returns its replay."""
        graph = torch.cuda.CUDAGraph()
        # thread_local: a Ray worker's batch thread may copy the next batch to the GPU meanwhile;
        # only this thread's calls must keep off the capture
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            fn()
        return graph.replay


class RerunRecorder:
    """Replays by running the captured function again: the graph path's buffers, temperatures and
    sums on any device (the CPU tests), without CUDA."""

    def warm(self, fn):
        """Run ``fn`` once (no capture: the CPU and tests)."""
        return fn()

    def capture(self, fn):
        """``fn`` itself: each replay runs it eagerly."""
        return fn


class _Graph:
    """One captured step: static inputs, its sums over the epoch, and how to replay it."""

    def __init__(self, batch: Batch):
        self.x = batch.x.clone()
        self.xr = batch.xr.clone()
        self.target = None if batch.target is None else batch.target.clone()
        self.sums = torch.zeros(3, dtype=torch.float64, device=batch.x.device)
        self.rows = 0
        self.replay = None

    def load(self, batch: Batch) -> None:
        self.x.copy_(batch.x, non_blocking=True)
        self.xr.copy_(batch.xr, non_blocking=True)
        if self.target is not None:
            self.target.copy_(batch.target, non_blocking=True)


class StepGraphs:
    """The captured steps of one ``Trainer``: ``begin_epoch``, ``step`` per batch, ``end_epoch``."""

    def __init__(self, device: torch.device, recorder=None):
        self.device = torch.device(device)
        # on a GPU, CUDA graphs; elsewhere each replay re-runs the step (the graph path's
        # bookkeeping checked on a CPU: tests, and benchmarks without a GPU)
        self.recorder = recorder or (CudaRecorder() if self.device.type == "cuda" else RerunRecorder())
        self.t = torch.ones((), device=self.device)
        self.t2 = torch.ones((), device=self.device)
        self._now = (None, None)
        self._graphs: dict[tuple, _Graph] = {}
        self._family = None
        self._eager_steps: dict[tuple, int] = {}
        self.captures = 0   # how many graphs were captured (tests, benchmarks)
        self.failed = ""    # why a capture failed; every later step then runs eagerly

    def reset(self) -> None:
        """Forget every graph (a restored checkpoint replaced the tensors they point at)."""
        self._graphs.clear()
        self._eager_steps.clear()
        self._family = None

    def begin_epoch(self, t: float, t2: float) -> None:
        """Set the epoch's temperatures in the captured steps' device tensors."""
        if self._now != (t, t2):  # a fill is a kernel with the value as argument: no host sync
            self.t.fill_(t)
            self.t2.fill_(t2)
            self._now = (t, t2)
        for g in self._graphs.values():
            g.sums.zero_()
            g.rows = 0

    def step(self, model, centroids, optimizer, batch: Batch, stats: EpochStats, *, m: float,
             kl_weight: float, precision: str, cluster_weight: torch.Tensor | None = None) -> None:
        """One optimiser step on ``batch``: replayed, or eager while a shape warms up (``model``:
        the bare ``NeurCAMNet``, whose gates say whether they are locked)."""
        def run(b: Batch):
            return optimizer_step(model, centroids, optimizer, b, self.t, self.t2, m, kl_weight, precision,
                                  cluster_weight)

        def eager(via=lambda f: f()) -> None:
            loss, clust, kl = via(lambda: run(batch))
            stats.add(loss, clust, kl, batch.x.shape[0])

        if self.failed:
            return eager()
        n = batch.x.shape[0]
        with_target = batch.target is not None and kl_weight > 0
        locks = (model.single.gates.is_locked, model.pairs.gates.is_locked)
        family = (kl_weight, with_target, m, precision, locks, id(optimizer), id(cluster_weight))
        if family != self._family:  # a new phase or lock: the old graphs can never replay again
            self.reset()
            self._family = family
        key = (n, batch.x.dtype, batch.xr.shape[1], batch.target is not None)
        graph = self._graphs.get(key)
        if graph is None:
            seen = self._eager_steps.get(key, 0)
            if seen < WARMUP or len(self._graphs) >= MAX_GRAPHS:
                self._eager_steps[key] = seen + 1
                return eager(self.recorder.warm)
            graph = self._graphs[key] = _Graph(batch)
            static = Batch(graph.x, graph.xr, graph.target)

            def fn():
                graph.sums.add_(weighted_sums(*run(static), n))

            optimizer.zero_grad(set_to_none=True)
            try:
                graph.replay = self.recorder.capture(fn)
            except RuntimeError as e:  # train on eagerly rather than fail a run over a speed-up
                del self._graphs[key]
                self.failed = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                warnings.warn(f"CUDA graph capture of the training step failed ({self.failed}); training "
                              f"continues with eager steps", RuntimeWarning, stacklevel=2)
                return eager()
            self.captures += 1
        graph.load(batch)
        graph.replay()
        graph.rows += n

    def end_epoch(self, stats: EpochStats) -> None:
        """Fold the captured steps' loss sums into the epoch's statistics."""
        for g in self._graphs.values():
            if g.rows:
                stats.merge(g.sums, g.rows)
