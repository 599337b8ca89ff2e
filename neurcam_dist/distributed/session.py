"""The Ray session: connect or start one, quiet Ray Data's bars, refuse worker groups that would
leave Ray Data no CPU (the run would hang), and the one description of a worker group that every
``TorchTrainer`` here starts with."""
from __future__ import annotations

import math
import os
from contextlib import contextmanager

from ..errors import Unreachable
from ..settings import CUBLAS_WORKSPACE, DETERMINISTIC_WORKSPACE
from ..uris import configure_s3

# Ray Train's controller looks at its workers every RAY_TRAIN_HEALTH_CHECK_INTERVAL_S (2 s by default)
# and each step of a run (workers up, first report, finished) waits for its next look: on a local Ray
# that was about 5 s of every run (12.3 s -> 7.3 s for a two-worker run that only reports, here).
# A look is one small call per worker, so a local Ray's few workers can afford it often.
LOCAL_TRAIN_POLL_S = "0.2"
TRAIN_POLL_VAR = "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"


def local_ray_defaults() -> None:
    """Environment defaults for a Ray this process starts itself, set before it starts (its
    workers, Tune's trials among them, inherit the environment then; Ray Train hands the variable
    on to each run's controller): Ray Train looks at its workers every 0.2 s instead of 2 s. A value
    the user set wins; a cluster at ``RAY_ADDRESS`` keeps its own."""
    os.environ.setdefault(TRAIN_POLL_VAR, LOCAL_TRAIN_POLL_S)


def ensure_ray(min_cpus: float = 0, **init_kwargs) -> None:
    """Connect to ``RAY_ADDRESS`` when set, else start a local Ray (once per process), first
    stopping what a killed command's local Ray left running (``leftovers``). A local Ray
    gets at least ``min_cpus`` logical CPUs, so the training workers never take every CPU slot
    and starve the Ray Data tasks that feed them. Object-store settings (``uris.configure_s3``) are
    put in the environment first, so that a local Ray's workers inherit them."""
    import ray
    configure_s3()
    if ray.is_initialized():
        return
    address = os.environ.get("RAY_ADDRESS")
    kwargs = {"include_dashboard": False, **init_kwargs}
    if address:
        kwargs.pop("num_cpus", None)
        kwargs.pop("object_store_memory", None)
        kwargs.pop("include_dashboard", None)
    else:
        kwargs.setdefault("num_cpus", max(os.cpu_count() or 1, math.ceil(min_cpus)))
    import signal

    from ..signals import is_ours, reinstall
    ours = is_ours(signal.getsignal(signal.SIGTERM))
    if not address:
        from .events import say
        from .leftovers import clean_up
        local_ray_defaults()
        clean_up(say)   # a killed command's local Ray would hold CPUs and memory (``leftovers``)
    try:
        context = ray.init(address=address or "local", **kwargs)  # "local": never attach to a stray `ray start` cluster
        if not address:
            from .leftovers import remember
            remember(context.address_info.get("session_dir", ""))
        if ours:   # Ray's handlers replaced ours (SIGTERM: a stack dump and exit 134): put it back
            reinstall()
    except ConnectionError as exc:
        if not address:
            raise
        hint = ("" if os.environ.get("RAY_AUTH_MODE") else
                "; a cluster with token authentication (Ray 2.59+ by default, the k8s manifests) refuses a "
                "driver without its token: set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN")
        raise Unreachable(f"cannot connect to the Ray cluster at RAY_ADDRESS={address}: "
                          f"{str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
                          f"{hint}") from None
    quiet_data_progress()


@contextmanager
def ray_for(min_cpus: float = 0):
    """Within the block, a Ray session (``ensure_ray``); one this block started itself (a local
    Ray, no ``RAY_ADDRESS``) is shut down at its end, inside the caller's log routing, so Ray's
    shutdown lines (its C++ core's among them) land in the log and not on the console after it."""
    import ray
    started = not ray.is_initialized()
    ensure_ray(min_cpus=min_cpus)
    try:
        yield
    finally:
        if started and not os.environ.get("RAY_ADDRESS"):
            ray.shutdown()
            from .leftovers import forget
            forget()


def quiet_data_progress() -> None:
    """Ray Data's per-operator progress bars redraw every second for every epoch's execution;
    our own per-epoch lines say what matters. ``NEURCAM_RAY_PROGRESS=1`` brings them back."""
    from ray.data import DataContext
    if os.environ.get("NEURCAM_RAY_PROGRESS") != "1":
        ctx = DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False


def check_resources(cfg, search: bool = False) -> None:
    """Refuse a job whose worker group(s) would leave Ray Data no CPU to read with (it would hang),
    or that asks for more GPUs than the cluster has (it would wait forever): ``JobConfig.check_fits``
    on this cluster's resources."""
    import ray
    res = ray.cluster_resources()
    cfg.check_fits(res.get("CPU", 0.0), res.get("GPU", 0.0), search=search)


def worker_group(tc) -> dict:
    """``TorchTrainer`` keyword arguments for ``train:``'s workers: their resources (a GPU share
    with ``use_gpu``) and an ingest that keeps the files' order. Ray Train replaces a dataset's
    execution options with its own defaults, which let blocks arrive in completion order: a
    one-worker stream would then differ from run to run."""
    from ray.train import DataConfig, ScalingConfig
    ingest = DataConfig.default_ingest_options()
    ingest.preserve_order = True
    resources = {"CPU": tc.cpus_per_worker, **({"GPU": tc.gpu_share} if tc.use_gpu else {})}
    return {"scaling_config": ScalingConfig(num_workers=tc.num_workers, use_gpu=tc.use_gpu,
                                            resources_per_worker=resources,
                                            placement_strategy=tc.placement.upper()),
            "dataset_config": DataConfig(execution_options=ingest)}



def worker_env(deterministic: bool) -> dict:
    """``RunConfig`` keyword arguments for the workers' environment: with ``model.deterministic``,
    cuBLAS's fixed workspace (the driver's ``CUBLAS_WORKSPACE_CONFIG``, else ``:4096:8``) is set
    when each worker process starts, before Ray Train's set-up first touches CUDA there."""
    if not deterministic:
        return {}
    value = os.environ.get(CUBLAS_WORKSPACE, DETERMINISTIC_WORKSPACE)
    return {"worker_runtime_env": {"env_vars": {CUBLAS_WORKSPACE: value}}}

def worker_memory(tc) -> float:
    """Bytes one training worker can count on: the ``memory`` resource of the roomiest live node
    that can hold a worker, split between the workers it would hold (``train.num_workers``, at
    most as many as its CPUs or GPUs allow)."""
    import ray
    best = 0.0
    for node in ray.nodes():
        res = node.get("Resources", {}) if node.get("Alive") else {}
        fit = res.get("CPU", 0.0) // tc.cpus_per_worker
        if tc.use_gpu:
            fit = min(fit, res.get("GPU", 0.0) // tc.gpu_share)
        if fit >= 1:
            best = max(best, res.get("memory", 0.0) / min(tc.num_workers, fit))
    return best


def check_worker_memory(job, say) -> None:
    """Refuse, before any pass over the data, a model whose training step would not fit in a
    worker's memory (``TrainingSpec.check_memory`` against ``worker_memory``), naming the estimate,
    the limit and what to lower; a wide model that fits gets a line with its estimate."""
    budget = worker_memory(job.train)
    if budget > 0:
        job.spec.check_memory(job.plan.n_rows, int(budget), say=say, where="a Ray Train worker")
