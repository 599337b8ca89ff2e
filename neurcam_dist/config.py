"""Job configuration: one pydantic model, read from YAML, handed whole to the driver and workers.

Unknown keys are refused and every error names its field path (``model.n_clusters``), so a typo
in a config never silently falls back to a default.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message names the file and each bad field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=False)


Paths = str | list[str]


class EmbeddingsSource(_Strict):
    """A second Parquet dataset holding the representation, joined to the features on ``key``."""

    path: Paths
    key: str = Field(description="join key, present in both datasets")


class DataConfig(_Strict):
    path: Paths = Field(description="Parquet directory, glob, file, list of those, or a pyarrow/fsspec URI")
    features: list[str] | None = Field(None, min_length=1,
                                       description="feature columns; default: every numeric column but "
                                                   "id, label, key and the representation")
    embedding: str | list[str] | None = Field(None, description="representation: one list<float> column or "
                                                                "a set of numeric columns; default: the "
                                                                "standardized features")
    label: str | None = Field(None, description="ground truth, evaluation only")
    id: str | None = Field(None, description="row id column, carried into predictions")
    embeddings: EmbeddingsSource | None = None

    @model_validator(mode="after")
    def _join_needs_embedding(self):
        if self.embeddings is not None and self.embedding is None:
            raise ValueError("data.embeddings is set: data.embedding must name the representation column(s) "
                             "of that dataset")
        return self


class ModelConfig(_Strict):
    """The estimator's hyperparameters (``NeurCAM``'s docstring); defaults are the paper's."""

    n_clusters: int = Field(ge=2)
    n_single: int | None = Field(None, ge=0)
    n_pairs: int = Field(0, ge=0)
    m: float = Field(1.05, ge=1.0)
    gamma: float = Field(1.0, ge=0.0)
    epsilon: float = Field(0.9, gt=0.0, lt=1.0)
    warmup_epochs: int = Field(400, ge=0)
    epochs: int = Field(1000, ge=1)
    batch_size: int = Field(512, ge=1)
    lr: float = Field(2e-3, gt=0.0)
    hidden: list[int] = Field(default_factory=lambda: [256, 256], min_length=1)
    n_bases: int = Field(64, ge=1)
    standardize: bool = True
    random_state: int = 0
    init: Literal["distill", "kmeans"] = "distill"
    distill_epochs: int = Field(10, ge=0)
    lr_patience: int = Field(10, ge=0)
    early_stopping: bool = True
    n_iter_no_change: int = Field(10, ge=1)
    tol: float = Field(1e-3, ge=0.0)
    precision: Literal["fp32", "bf16", "auto"] = "fp32"

    @field_validator("hidden")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if any(h < 1 for h in v):
            raise ValueError("every hidden layer width must be >= 1")
        return v

    def estimator_params(self) -> dict:
        p = self.model_dump()
        p["hidden"] = tuple(p["hidden"])
        return p


class TrainConfig(_Strict):
    num_workers: int = Field(2, ge=1)
    use_gpu: bool = False
    cpus_per_worker: float = Field(1.0, gt=0.0, description="also the torch thread count of a CPU worker")
    checkpoint_every: int = Field(10, ge=1, description="epochs between checkpoints (the last is always kept)")
    max_failures: int = Field(2, ge=-1, description="worker failures to recover from (-1: unlimited)")
    shuffle_buffer: int = Field(20_000, ge=0, description="rows in each worker's local shuffle buffer (0: none)")
    kmeans_sample: int = Field(100_000, ge=1, description="rows sampled for the MiniBatchKMeans centroid init")
    reference_rows: int = Field(20_000, ge=1, description="feature rows kept with the result for explain()")
    storage_path: str | None = Field(None, description="Ray Train checkpoints and staging data (shared storage "
                                                       "on a multi-node cluster); default OUTPUT/_ray")
    score_batch_size: int = Field(4096, ge=1)
    cache: Literal["auto", "always", "never"] = Field(
        "auto", description="hold the training columns in Ray's object store instead of re-reading the "
                            "Parquet files every epoch; auto: when they take under 20% of the object store")


class TrackingConfig(_Strict):
    """MLflow. ``uri``: default ``MLFLOW_TRACKING_URI``, else an embedded store under the working
    directory. ``model_name``: register the model under this name, aliased ``candidate``."""

    uri: str | None = None
    experiment: str = "neurcam"
    model_name: str | None = None


class JobConfig(_Strict):
    data: DataConfig
    model: ModelConfig
    train: TrainConfig = Field(default_factory=TrainConfig)
    tracking: TrackingConfig | None = Field(None, description="log the run to MLflow (off when absent)")
    output: str

    def storage_path(self) -> str:
        s = self.train.storage_path or os.path.join(self.output, "_ray")
        return s if "://" in s else str(Path(s).resolve())


def _format_errors(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = "unknown key (not a setting of this section)" if err["type"] == "extra_forbidden" else err["msg"]
        lines.append(f"  {loc}: {msg}")
    return "\n".join(lines)


def parse_config(raw: dict, source: str = "config") -> JobConfig:
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(raw).__name__}")
    try:
        return JobConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{source} is not a valid neurcam config:\n{_format_errors(exc)}") from None


def load_config(path: str | os.PathLike, overrides: dict | None = None) -> JobConfig:
    """Read a YAML config; ``overrides`` maps dotted keys (``model.epochs``) to values."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"no config file at {p}")
    try:
        raw = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p} is not valid YAML: {exc}") from None
    raw = raw or {}
    for dotted, value in (overrides or {}).items():
        node = raw
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    return parse_config(raw, str(p))
