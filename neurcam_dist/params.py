"""The one table of NeurCAM's hyperparameters: type, default, range, choices.

The estimator checks its parameters against it, the YAML config's ``model`` section is generated
from it (``config.ModelConfig``), and the search checks every grid value through that section, so a
constraint is written once. ``check_params`` needs no data; ``check_params_for_data`` adds what
depends on the data's size (rows, features) and is what the Ray driver and the search trials call
before any work starts.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError


@dataclass(frozen=True)
class Spec:
    """One hyperparameter: its type (``int``, ``float``, ``bool``, ``str``, ``tuple`` of ints or
    ``frozenset`` of texts),
    default, bounds (``ge``/``gt``/``le``/``lt``), allowed ``choices`` and whether None is allowed.
    ``in_config``: part of a job config's ``model`` section (False for process-level settings)."""

    kind: type
    default: Any
    doc: str
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    choices: tuple | None = None
    optional: bool = False
    in_config: bool = True
    words: tuple = ()      # strings taken besides values of ``kind`` (the estimator's and fit's only, not a config's)


HYPERPARAMETERS: dict[str, Spec] = {
    "n_clusters": Spec(int, 10, "number of clusters (the estimator and neurcam fit also take 'auto': K chosen "
                       "by neurcam_dist.choose_k among 2..12 on the rows; docs/choosing-k.md)", ge=2, words=("auto",)),
    "n_single": Spec(int, None, "single-feature shape functions (None: one per feature)", ge=0, optional=True),
    "n_pairs": Spec(int, 0, "pairwise shape functions (0: NeurCAM, > 0: Neur2CAM)", ge=0),
    "m": Spec(float, 1.05, "fuzziness of the fuzzy c-means loss", ge=1.0),
    "gamma": Spec(float, 1.0, "weight of the KL term toward the model frozen after warm-up", ge=0.0),
    "epsilon": Spec(float, 0.9, "temperature decay per annealing epoch", gt=0.0, lt=1.0),
    "warmup_epochs": Spec(int, 400, "most warm-up epochs (after distillation)", ge=0),
    "epochs": Spec(int, 1000, "most epochs in all, every phase included: warm-up ends early enough to leave annealing "
                   "and the final phase their room", ge=1),
    "anneal_epochs": Spec(int, 30, "most epochs of each annealing phase; gates not one-hot by then are locked to their "
                          "argmax", ge=1),
    "max_seconds": Spec(float, None, "wall-clock budget in seconds (None: none), from the start of fit (a Ray run: of "
                        "the workers' training loop): the epoch budget is lowered while training to what fits, "
                        "and the run ends in a valid model by then", gt=0.0, optional=True),
    "batch_size": Spec(int, 512, "rows per optimiser step (global: split across Ray workers)", ge=1),
    "epoch_rows": Spec(int, 20_000, "rows of an epoch, the unit every count of epochs is in: a table of more rows "
                       "trains epochs of this many rows, each part of a pass, and its plateaus watch the loss of "
                       "a fixed sample; on a smaller table an epoch is a whole pass (0: always a whole pass)",
                       ge=0),
    "lr": Spec(float, 2e-3, "Adam learning rate", gt=0.0),
    "hidden": Spec(tuple, (64, 64), "hidden layer widths of the shared backbones (the paper: 256, 256; as good "
                   "and about 5x faster in benchmarks/defaults.py)"),
    "n_bases": Spec(int, 64, "basis functions per backbone", ge=1),
    "standardize": Spec(bool, True, "standardize the features (and the default representation)"),
    "constant_features": Spec(str, "drop", "features with one value everywhere: drop (no gate may select them; "
                              "a warning names them) or error", choices=("drop", "error")),
    "random_state": Spec(int, 0, "seed of every random choice"),
    "device": Spec(str, "auto", "torch device ('auto': CUDA when available)", in_config=False),
    "threads": Spec(int, None, "torch threads on a CPU for fit, predict and explain (None: sized to the work, "
                    "one per 1.5e9 multiply-adds of a step up to the process's own, so a small model runs on one "
                    "thread; docs/scaling.md#threads)", ge=1, optional=True, in_config=False),
    "kmeans": Spec(str, "auto", "k-means for the centroid init and the distillation target: lloyd (KMeans, "
                   "k-means++), minibatch (MiniBatchKMeans, the paper's mKMC) or auto (lloyd while rows x dims x "
                   "clusters <= 2e7, where it costs seconds; minibatch above)", choices=("auto", "lloyd", "minibatch")),
    "kmeans_n_init": Spec(int, 10, "k-means restarts (the best by inertia is kept)", ge=1),
    "init": Spec(str, "distill", "distill: KL toward the k-means assignment first; kmeans: centroids only",
                 choices=("distill", "kmeans")),
    "distill_epochs": Spec(int, 10, "distillation epochs before the warm-up (init='distill'); on a small table, enough "
                           "to make 100 optimiser steps, up to a tenth of epochs", ge=0),
    "lr_patience": Spec(int, 10, "epochs without improvement before the learning rate halves", ge=0),
    "early_stopping": Spec(bool, True, "end the warm-up and the final phase once the loss plateaus"),
    "n_iter_no_change": Spec(int, 10, "plateau length (epochs) for early stopping", ge=1),
    "tol": Spec(float, 1e-3, "relative loss improvement that counts for early stopping", ge=0.0),
    "precision": Spec(str, "fp32", "fp32, bf16 (autocast matmuls) or auto", choices=("fp32", "bf16", "auto")),
    "deterministic": Spec(bool, False, "train under torch's deterministic algorithms with a fixed cuBLAS workspace, "
                          "for GPU fits that repeat bit for bit (CPU fits repeat either way)"),
    "verbose": Spec(bool, True, "progress bar", in_config=False),
    "categorical_features": Spec(list, "from_dtype", "which columns are categorical: 'from_dtype' (text, category "
                                 "and boolean columns, as scikit-learn's), or a list of column names or positions "
                                 "(integer-coded categories) besides those", optional=True, in_config=False),
    "missing": Spec(str, "learn", "missing cells (NaN, null, blank): learn (each term learns a contribution for "
                    "them) or refuse (an error naming the columns)", choices=("learn", "refuse")),
    "missing_values": Spec(frozenset, (), "text cells read as missing besides blank ones and the CSV reader's "
                           "tokens (NA, NULL, ...): for example '?' or '-' (outer spaces aside); kept with the model, "
                           "so predict, the registry model and the exported SQL read them so too"),
    "categorical_weight": Spec(float, 1.0, "how much a categorical column weighs in the clustering space against a "
                               "standardized numeric: its scaled one-hot columns are multiplied by it (1: the same "
                               "total variance as a standardized numeric; docs/mixed.md)", gt=0.0),
    "min_level_rows": Spec(int, 5, "training rows a categorical level needs to be a level of its own; rarer levels "
                           "share (other levels)", ge=1),
    "max_levels": Spec(int, 64, "most levels of a categorical column (the most frequent; the rest share (other levels))",
                       ge=1),
}

DEFAULTS: dict[str, Any] = {name: spec.default for name, spec in HYPERPARAMETERS.items()}


def _fmt(v) -> str:
    return repr(v) if isinstance(v, str) else f"{v}"


def check_value(name: str, value) -> None:
    """Raise ``ValueError`` naming ``name`` and ``value`` when ``value`` breaks the table."""
    spec = HYPERPARAMETERS[name]
    if isinstance(value, str) and value in spec.words:
        return
    if value is None:
        if spec.optional:
            return
        raise ConfigError(f"{name} must not be None")
    if spec.kind is list:
        if isinstance(value, str):
            if value != spec.default:
                raise ConfigError(f"{name} must be {spec.default!r}, None or a list of column names or positions, "
                                  f"got {value!r}")
            return
        try:
            items = list(value)
        except TypeError:
            raise ConfigError(f"{name} must be {spec.default!r}, None or a list of column names or positions, "
                              f"got {value!r}") from None
        if any(not isinstance(v, (str, numbers.Integral)) or isinstance(v, bool) for v in items):
            raise ConfigError(f"{name} must list column names (text) or positions (integers), got {value!r}")
        return
    if spec.kind is frozenset:
        items = [] if isinstance(value, (str, bytes)) else list(value) if hasattr(value, "__iter__") else []
        if isinstance(value, (str, bytes)) or any(not isinstance(v, str) or not v.strip(" ") for v in items):
            raise ConfigError(f"{name} must be a list of texts (each not blank, such as '?'), got {value!r}")
        return
    if spec.kind is tuple:
        try:
            items = tuple(value)
        except TypeError:
            items = None
        if (not items or isinstance(value, (str, bytes))
                or any(isinstance(h, bool) or not isinstance(h, numbers.Integral) or h < 1 for h in items)):
            raise ConfigError(f"{name} must be a non-empty sequence of positive integers, got {value!r}")
        return
    if spec.kind is bool:
        is_bool = isinstance(value, bool) or (type(value).__module__ == "numpy"
                                              and type(value).__name__ in ("bool", "bool_"))
        if not is_bool and not (isinstance(value, numbers.Integral) and value in (0, 1)):
            raise ConfigError(f"{name} must be True or False, got {value!r}")
        return
    if spec.kind is str:
        if spec.choices is not None and value not in spec.choices:
            raise ConfigError(f"{name} must be one of {spec.choices}, got {value!r}")
        if not isinstance(value, str):
            raise ConfigError(f"{name} must be a string, got {value!r}")
        return
    integer = spec.kind is int
    ok_type = isinstance(value, numbers.Integral) if integer else isinstance(value, numbers.Real)
    if isinstance(value, bool) or not ok_type or (not integer and not math.isfinite(float(value))):
        raise ConfigError(f"{name} must be {'an integer' if integer else 'a finite number'}, got {value!r}")
    for bound, fails, sign in ((spec.ge, lambda b: value < b, ">="), (spec.gt, lambda b: value <= b, ">"),
                               (spec.le, lambda b: value > b, "<="), (spec.lt, lambda b: value >= b, "<")):
        if bound is not None and fails(bound):
            raise ConfigError(f"{name} must be {sign} {_fmt(bound)}, got {value!r}")


def check_params(params: dict) -> None:
    """Every value of ``params`` (a subset of the table's names) against the table."""
    unknown = sorted(set(params) - set(HYPERPARAMETERS))
    if unknown:
        raise ConfigError(f"unknown hyperparameter(s) {unknown}; known: {sorted(HYPERPARAMETERS)}")
    for name, value in params.items():
        check_value(name, value)


def check_params_for_data(params: dict, n_rows: int, n_features: int) -> None:
    """``check_params`` plus what depends on the data: enough rows for the clusters, enough features
    for pairs, at least one shape function. The Ray driver calls it from the Parquet footers alone."""
    full = {**DEFAULTS, **params}
    check_params(full)
    if full["n_clusters"] != "auto" and full["n_clusters"] > n_rows:
        raise ConfigError(f"n_clusters={full['n_clusters']} is larger than the number of rows ({n_rows})")
    if full["n_pairs"] > 0 and n_features < 2:
        raise ConfigError(f"n_pairs={full['n_pairs']} needs at least 2 features, X has {n_features}")
    if resolved_n_single(full, n_features) + full["n_pairs"] == 0:
        raise ConfigError("n_single=0 and n_pairs=0: the model needs at least one shape function")


def resolved_n_single(params: dict, n_features: int) -> int:
    """``n_single=None`` means one single-feature channel per feature."""
    n = params.get("n_single", DEFAULTS["n_single"])
    return n_features if n is None else int(n)
