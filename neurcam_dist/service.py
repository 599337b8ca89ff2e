"""The front door: every thing the service does, as one function each, in one table.

The ``neurcam`` command parses its arguments and calls these; the Ray Job entrypoints (``jobs/``)
go through the command; a Python user can call them directly. Each validates its input up front
and raises a class of ``neurcam_dist.errors`` (a ``ValueError`` for bad input, nothing done; a
``RuntimeError`` for a run that failed). The work itself lives below this door: in memory in
``local/`` (one module an entry point), on Ray in ``ops/`` and ``distributed/``.

| entry point | what it does | where it lives |
| --- | --- | --- |
| ``fit`` | fit in memory on a CSV or Parquet table; write the run folder | ``local.fitting`` |
| ``choose_k`` | fit each K a few times and pick one, with the evidence | ``local.fitting`` |
| ``explain`` | shape graphs, importance and the HTML report of a model over a table | ``local.explaining`` |
| ``monitor`` | drift of a snapshot against the model's reference | ``local.monitoring`` |
| ``export`` | the model as SQL or rules, checked against ``predict`` | ``local.exporting`` |
| ``predict`` | score rows (in this process when small, else with Ray Data) | ``local.predicting`` |
| ``train`` | train on Ray over sharded Parquet as a job config says (MLflow with ``tracking:``) | ``ops.runs`` |
| ``search`` | the Ray Tune search of seeds and hyperparameters; lowest inertia wins | ``ops.runs`` |
| ``choose_k_on_ray`` | ``choose_k`` as a Ray Tune search | ``distributed.tuner`` |
| ``recluster`` | re-cluster the newest snapshot; promote only a better model, ids kept stable | ``ops.recluster`` |
| ``demo`` | the whole service on the bundled digits | ``local.demo`` |
| ``validate`` | check a job config without running it | ``ops.validate`` |
| ``promote`` | move a registry alias | ``tracking`` |
| ``submit`` | run a job on a Ray cluster and follow it | ``ops.submit`` |
| ``featurize_text`` | documents to term columns and sentence embeddings | ``local.datasets`` |
| ``generate`` | bundled or synthetic example data as Parquet shards | ``local.datasets`` |
| ``sample`` | a seeded (per-class) sample of a table as Parquet shards | ``local.datasets`` |
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .errors import ConfigError
from .local.common import load_fitted, load_model, say
from .local.datasets import featurize_text, generate, sample
from .local.demo import demo, demo_config, demo_data
from .local.explaining import ExplainResult, explain
from .local.exporting import EXPORT_MIN_AGREEMENT, EXPORT_MIN_ROWS, ExportResult, export
from .local.fitting import FitResult, choose_k, fit
from .local.monitoring import monitor
from .local.predicting import PredictSettings, predict, predict_settings
from .uris import Where

__all__ = ["EXPORT_MIN_AGREEMENT", "EXPORT_MIN_ROWS", "ExplainResult", "ExportResult", "FitResult", "PredictSettings",
           "choose_k", "choose_k_on_ray", "demo", "demo_config", "demo_data", "explain", "export", "featurize_text",
           "fit", "generate", "history", "history_table", "load_config", "load_fitted", "load_model", "monitor",
           "parse_overrides", "predict", "predict_settings", "promote", "recluster", "sample", "search",
           "submit", "train", "unreachable", "validate", "validate_manifests"]


# ---------------------------------------------------------------- configs
def load_config(path: Where, overrides: dict | None = None):
    """A job config from YAML with the environment's and ``overrides``' values applied.

    Parameters
    ----------
    path : str or PathLike
        The YAML file (a local one).
    overrides : dict, optional
        ``{"model.epochs": 50, ...}`` (``--set``).

    Returns
    -------
    JobConfig
        Validated; its ``notes()`` say which environment variables applied.

    Examples
    --------
    >>> import tempfile; from pathlib import Path; from neurcam_dist import service
    >>> job = Path(tempfile.mkdtemp()) / "job.yaml"
    >>> _ = job.write_text("data: {path: data/events}\\nmodel: {n_clusters: 4}\\noutput: runs/events\\n")
    >>> cfg = service.load_config(str(job), {"model.epochs": 50})
    >>> cfg.model.n_clusters, cfg.model.epochs
    (4, 50)
    """
    from .config import load_config as _load
    return _load(path, overrides or {})


# ---------------------------------------------------------------- on Ray
# The doors on Ray live in modules that import Ray (seconds), so each is imported the first time it
# is asked for (PEP 562), and ``import neurcam_dist.service`` (every ``neurcam`` command) stays quick.
# Each is the function itself, its docstring and Examples where it is defined.
ON_RAY = {"train": "ops.runs", "search": "ops.runs", "recluster": "ops.recluster",
          "choose_k_on_ray": "distributed.tuner"}
if TYPE_CHECKING:   # what type checkers and the API reference read; at run time __getattr__ imports them
    from .distributed.tuner import choose_k_on_ray
    from .ops.recluster import recluster
    from .ops.runs import search, train


def __getattr__(name: str):
    """One of the doors on Ray (``ON_RAY``), imported from its module when first asked for."""
    if name not in ON_RAY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    door = getattr(importlib.import_module(f"{__package__}.{ON_RAY[name]}"), name)
    globals()[name] = door   # once: later lookups find it without coming here
    return door


def history(output: Where, say=None) -> list[dict]:
    """The re-clustering decisions recorded in ``output`` (``recluster-history.jsonl``), oldest
    first; each line that cannot be read is left out and named through ``say`` (else a warning).

    Examples
    --------
    >>> import json, tempfile; from pathlib import Path; from neurcam_dist import service
    >>> out = Path(tempfile.mkdtemp())
    >>> _ = (out / "recluster-history.jsonl").write_text(json.dumps({"snapshot": "date=2026-01-02",
    ...     "promoted": True, "outcome": "promoted", "reason": "first model"}) + "\\n")
    >>> service.history_table(service.history(str(out)))[["snapshot", "promoted", "reason"]].to_dict("records")
    [{'snapshot': 'date=2026-01-02', 'promoted': True, 'reason': 'first model'}]
    """
    from .ops.history import read_history
    from .uris import Location
    return read_history(Location(output), say)


def history_table(records: list[dict]):
    """Decisions as a DataFrame: finished, snapshot, champion, challenger, inertia ratio,
    agreement, promoted, outcome, reason.

    Examples
    --------
    >>> from neurcam_dist import service
    >>> table = service.history_table([{"snapshot": "date=2026-01-02", "promoted": False, "outcome": "kept"}])
    >>> table[["snapshot", "promoted", "outcome"]].to_dict("records")
    [{'snapshot': 'date=2026-01-02', 'promoted': False, 'outcome': 'kept'}]
    """
    from .ops.history import history_table as _table
    return _table(records)


# ---------------------------------------------------------------- operations
def validate(config, *, check_tracking: bool = False, address: str | None = None) -> list[str]:
    """Check a job config (a ``JobConfig``, a dict or a YAML path) without running it
    (``ops.validate``); the lines say what was checked. With ``address`` (a Ray job server), also
    whether the job's workers fit that cluster.

    Examples
    --------
    >>> import tempfile; from pathlib import Path; from neurcam_dist import service
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = service.generate("synthetic", str(d / "events"), files=2, rows=400, features=4, clusters=3)
    >>> print("\\n".join(service.validate({"data": {"path": str(d / "events")}, "model": {"n_clusters": 3},
    ...                                     "output": str(d / "run")})[:2]))
    schema: ok (data, model, train)
    data: 400 rows in 2 file(s) (1 hidden, '_' or non-Parquet entries skipped); 4 features (f0, f1, f2, f3); ...
    """
    from .config import coerce_config
    from .ops.validate import validate as _validate
    return _validate(coerce_config(config), check_tracking=check_tracking, address=address)


def parse_overrides(pairs: list[str]) -> dict:
    """``--set KEY=VALUE`` strings as the dotted overrides every command takes (``config``).

    Examples
    --------
    >>> from neurcam_dist import service
    >>> service.parse_overrides(["model.epochs=50", "search.seeds=[0, 1]"])
    {'model.epochs': 50, 'search.seeds': [0, 1]}
    """
    from .config import parse_overrides as _parse
    return _parse(pairs)


def unreachable(exc: BaseException, output: Where | None = None) -> str:
    """One line for an object store or server that did not answer (an ``OSError`` from pyarrow's
    file systems), or a full or read-only disk (naming the file or ``output``), saying what to check.

    Examples
    --------
    >>> from neurcam_dist import service
    >>> service.unreachable(OSError(28, "No space left on device"), "runs/x")
    'no space left on the device while writing runs/x: free space there, or write elsewhere (--output); nothing was published'
    """
    from .ops.validate import unreachable as _unreachable
    return _unreachable(exc, output)


def validate_manifests(folder: Where) -> list[str]:
    """Build a kustomize folder (``kubectl kustomize``) and check what neurcam can check of it
    (``ops.manifests``); the lines say what was checked.

    Examples
    --------
    >>> from pathlib import Path; import neurcam_dist; from neurcam_dist import service
    >>> service.validate_manifests(Path(neurcam_dist.__file__).parents[1] / "k8s" / "overlays" / "dev")[:2]
    ['build: 7 objects (...)', 'schedule: CronJob neurcam-recluster-submit']
    """
    from .ops.manifests import check_manifests
    return check_manifests(folder)


def promote(name: str, version: str, alias: str = "champion", tracking_uri: str | None = None) -> None:
    """Move ``alias`` of registered model ``name`` to ``version`` (the name, alias and version
    checked before the registry is called: ``config.check_alias``).

    Examples
    --------
    >>> import tempfile; from pathlib import Path; from mlflow import MlflowClient; from neurcam_dist import service
    >>> uri = f"sqlite:///{Path(tempfile.mkdtemp()) / 'mlflow.db'}"; client = MlflowClient(uri, uri)
    >>> _ = client.create_registered_model("segments")
    >>> _ = [client.create_model_version("segments", source=f"file:///tmp/segments/{v}") for v in (1, 2)]
    >>> service.promote("segments", "2", "champion", tracking_uri=uri)
    >>> int(client.get_model_version_by_alias("segments", "champion").version)
    2
    """
    from . import tracking
    from .config import check_alias, check_model_name
    check_model_name(name)
    check_alias(alias)
    if not str(version).isdigit() or int(version) < 1:
        raise ConfigError(f"version {version!r}: a registered model's version is a whole number from 1")
    tracking.uri.point_at(tracking_uri)
    tracking.promote(name, version, alias)


def submit(address: str | None, job: str, config: str, overrides: list[str], *, working_dir: str | None = ".",
           wait: bool = True, timeout: float | None = None, log=None) -> int:
    """Run ``job`` (train, tune, predict, recluster) on the Ray cluster at ``address`` and follow
    it (``ops.submit``); returns the exit status: 0 the job succeeded, 1 it failed, 143 this
    command got SIGTERM and stopped the job, 124 ``timeout`` seconds passed and it stopped the job,
    130 Ctrl-C (the job goes on).

    Examples
    --------
    ``address`` is a Ray cluster's job server (``ray start --head`` serves one at
    http://127.0.0.1:8265); the working directory (``jobs/`` and the config) is uploaded with the job:

    >>> import shutil, tempfile, yaml; from pathlib import Path; from neurcam_dist import service
    >>> from neurcam_dist.data.synthetic import write_shards
    >>> d = Path(tempfile.mkdtemp()); _ = write_shards(d / "data", 400, n_features=4, repr_dim=0, n_clusters=3)
    >>> _ = shutil.copytree("jobs", d / "work" / "jobs")   # from the repository's root (the image: /app)
    >>> _ = (d / "work" / "job.yaml").write_text(yaml.safe_dump({"output": str(d / "run"), "train": {"num_workers": 1},
    ...     "data": {"path": str(d / "data"), "label": "label", "id": "id"}, "model": {"n_clusters": 3, "epochs": 4}}))
    >>> import contextlib, io; said, shown = [], io.StringIO()
    >>> with contextlib.redirect_stdout(shown):   # the job's own output streams to standard output
    ...     code = service.submit(address, "train", "job.yaml", [], working_dir=str(d / "work"), log=said.append)
    >>> code, said[-1], "model and metrics in" in shown.getvalue(), (d / "run" / "model").is_dir()  # doctest: +ELLIPSIS
    (0, 'job neurcam-train-...: SUCCEEDED', True, True)
    """
    from .ops.submit import submit as _submit
    if not address:
        raise ConfigError("submit needs --address (the Ray job server, e.g. http://127.0.0.1:8265) or RAY_JOB_ADDRESS")
    return _submit(address, job, config, overrides, working_dir=working_dir, wait=wait, timeout=timeout,
                   log=log or say)
