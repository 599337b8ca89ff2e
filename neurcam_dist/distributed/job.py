"""A job resolved once: the config as given, the data and model settings in effect, the data's
plan and the ``TrainingSpec`` the step uses, checked together in one place.

``resolve_early`` does it from the Parquet footers before Ray starts, so a wrong path, column or
hyperparameter fails at once with nothing written; a job whose data a step writes first (``text:``
documents, ``representation: dae``, a features/embeddings join) is resolved by ``resolve`` after
that step. Nothing downstream rewrites the config: the staged data and the text model defaults
are fields of the ``ResolvedJob``; a search's trials get a derived copy (``for_trial``); workers get
its ``TrainingSpec``. Each hyperparameter keeps its YAML name from the file to the step.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

from .. import data as data_mod
from ..columns import FLAG_RULE, OTHER
from ..config import DataConfig, JobConfig, ModelConfig
from ..data.profiling import LEVEL_CAP
from ..data.tables import PLAIN_NUMBERS, category_reason, written_as_numbers
from ..errors import DataError
from ..storage import check_writable, refuse_overwrite
from ..validation import constant_features_note, first_names
from ..model import TrainingSpec
from ..uris import Location
from .events import say
from .session import check_worker_memory


@dataclass(frozen=True)
class ResolvedJob:
    """An immutable, checked job.

    Attributes
    ----------
    config : JobConfig
        As the user gave it (after ``--set`` and the environment); never rewritten.
    data : DataConfig
        The data the model trains on: ``config.data``, or what a step before training wrote.
    model : ModelConfig
        The model section in effect: ``config.model`` with the paper's text settings where it is
        silent on text data (``text_defaults`` says which), or a trial's values.
    plan : data.Plan
        Files, rows, column roles and the representation, from the footers.
    spec : TrainingSpec
        The model's settings as the training step uses them, checked against the data's size.
    output : Location
        Where this run writes (a search trial's own folder, else ``config.output``), resolved
        once here: every output below it is ``output / "name"``.
    text_defaults : dict
        The model settings filled in for text data.
    trial : str or None
        A search trial's id (its job neither searches nor tracks).
    """

    config: JobConfig
    data: DataConfig
    model: ModelConfig
    plan: data_mod.Plan
    spec: TrainingSpec
    output: Location
    text_defaults: dict = field(default_factory=dict)
    trial: str | None = None

    @property
    def train(self):
        """The ``train:`` section: workers, resources, caching, checkpoints."""
        return self.config.train

    def storage_path(self) -> Location:
        """Ray Train's checkpoints and the staged data (``train.storage_path``, else OUTPUT/_ray)."""
        return self.config.storage_path()

    def effective_config(self) -> JobConfig:
        """The config as the run used it (staged data, model settings in effect, this output):
        what ``config.json`` and MLflow record."""
        update = {"data": self.data, "model": self.model, "output": str(self.output)}
        if self.trial is not None:
            update.update(search=None, tracking=None)
        cfg = self.config.model_copy(update=update)
        cfg._notes = self.config.notes()
        return cfg

    def public_json(self) -> str:
        """``effective_config`` as saved beside the outputs: credentials redacted."""
        return self.effective_config().public_json()

    def with_seed(self, seed: int) -> "ResolvedJob":
        """This job with another ``model.random_state`` (a search's k-means inits, one a seed; the
        seeds were validated with the ``search:`` section, and nothing else changes)."""
        return dataclasses.replace(self, model=self.model.model_copy(update={"random_state": int(seed)}),
                                   spec=dataclasses.replace(self.spec, random_state=int(seed)))

    def with_params(self, params: dict) -> "ResolvedJob":
        """This job with ``params`` over its model (validated as a ``model:`` section and against
        the data): the winner of a search, say.

        Raises
        ------
        ConfigError, DataError
            A value the ``model:`` section refuses, or one the data cannot take.
        """
        model = trial_model(self.model, params)
        return dataclasses.replace(self, model=model, spec=spec_for(model, self.plan))

    def for_trial(self, trial: str, params: dict, output: Location) -> "ResolvedJob":
        """A search trial's job: ``with_params``, writing to the trial's ``output``."""
        return dataclasses.replace(self.with_params(params), output=output, trial=trial)


def trial_model(model: ModelConfig, params: dict) -> ModelConfig:
    """``model`` with a trial's hyperparameters (Tune hands numbers as numpy scalars and floats),
    validated as a ``model:`` section."""
    clean = {k: (int(v) if k in ("n_single", "n_pairs", "random_state", "n_clusters") else float(v))
             for k, v in params.items()}
    return ModelConfig.model_validate({**model.model_dump(), **clean})


def spec_for(model: ModelConfig, plan: data_mod.Plan) -> TrainingSpec:
    """The ``TrainingSpec`` of ``model`` on ``plan``'s data: the one data-aware check of the
    hyperparameters (``params.check_params_for_data``), from the footers alone."""
    try:
        return TrainingSpec.for_data(model.estimator_params(), plan.n_rows, len(plan.features))
    except ValueError as exc:
        raise DataError(f"model: {exc}") from None


def needs_staging(cfg: JobConfig) -> bool:
    """True when a step must write the training data first (documents, an autoencoder, a join)."""
    return cfg.text is not None or cfg.representation is not None or cfg.data.embedding_table is not None


def resolve_early(cfg: JobConfig) -> ResolvedJob | None:
    """The job from the footers, before Ray starts or anything is written (the output checked
    writable first: the one check of it on the train and search paths); None when a step must
    write the data first (``resolve`` then runs it)."""
    check_writable(cfg.output_location())
    if needs_staging(cfg):
        return None
    return _resolved(cfg, cfg.data)


def resolve(cfg: JobConfig, early: ResolvedJob | None = None) -> ResolvedJob:
    """The job, running first the steps that write its training data (``early``: what
    ``resolve_early`` gave, returned as it is)."""
    if early is not None:
        return early
    return _resolved(cfg, staged_data(cfg))


def staged_data(cfg: JobConfig) -> DataConfig:
    """The data a config asks the service to compute before training, computed: text documents
    featurized (and embedded), the autoencoder's embedding, features joined with embeddings; else
    ``cfg.data``. Kept under the storage path's ``staging/`` (text: reused while unchanged)."""
    data = cfg.data
    if cfg.text is not None:
        from ..text import TextJob, featurize_text
        staged = cfg.storage_path() / "staging" / "text"
        featurize_text(TextJob.for_config(cfg, staged), say, reuse=True)
        say(f"training on the featurized documents in {staged} (text: kept in the saved config)")
        data = data.model_copy(update={"path": str(staged), "embedding": "embedding" if cfg.text.embed else None})
    if cfg.representation is not None:
        from .autoencoder import dae_data
        data = dae_data(cfg, lambda: prepare(_resolved(cfg, cfg.data)))
    if data.embedding_table is not None:
        staging = cfg.storage_path() / "staging"
        say(f"joining features and embeddings on {data.embedding_table.key!r} into {staging}/joined")
        data = data_mod.join_embeddings(data, staging)
    return data


def model_in_effect(cfg: JobConfig, data: DataConfig) -> tuple[ModelConfig, dict]:
    """``cfg.model``, with the paper's text settings (``JobConfig.with_text_defaults``) where it is silent
    when the data is text (documents, or data written by ``featurize-text``); and what was filled."""
    if cfg.text is None and data_mod.sources.find_vocabulary(data.path) is None:
        return cfg.model, {}
    with_defaults, filled = cfg.with_text_defaults()
    return with_defaults.model, filled


def _resolved(cfg: JobConfig, data: DataConfig) -> ResolvedJob:
    plan = data_mod.plan(data)
    model, filled = model_in_effect(cfg, data)
    if filled:
        say("text data: the paper's text settings where model: is silent: "
            + ", ".join(f"{k}={v}" for k, v in filled.items()))
    return ResolvedJob(config=cfg, data=data, model=model, plan=plan, spec=spec_for(model, plan),
                       output=cfg.output_location(), text_defaults=filled)


def prepare(job: ResolvedJob) -> tuple[ResolvedJob, data_mod.Profile]:
    """The pass that must succeed before a worker starts: the training step against a worker's
    memory (``session.check_worker_memory``, before reading anything), every value of every file
    checked, the standardization moments, the text columns that are no category left out when
    the features were chosen from the schema (``not_categories``), the constant features (named,
    or refused with ``constant_features: error``). Returns the job (on the features it trains
    on) and the profile."""
    plan, m = job.plan, job.model
    check_worker_memory(job, say)
    say(f"data: {plan.describe()}")
    # against the data the config names: a step's staged data (documents featurized, an autoencoder's
    # embedding, a join) lies in the output's storage folder by design
    refuse_overwrite(job.output, inputs=job.config.data.inputs(), what="output")
    t0 = time.perf_counter()
    prof = data_mod.profile(plan, missing=m.missing, min_level_rows=m.min_level_rows,
                            missing_values=tuple(m.missing_values))
    say(f"validated and profiled {prof.n_rows:,} rows in {time.perf_counter() - t0:.1f} s")
    left_out = not_categories(job, prof)
    if left_out:
        say("not used: " + ", ".join(f"{c} ({why})" for c, why in left_out.items()))
        if len(left_out) == len(plan.features):
            raise data_mod.DataError("no feature columns left: name them in data.features")
        plan, prof = plan.without(left_out), prof.without(left_out)
        job = dataclasses.replace(job, plan=plan, spec=spec_for(m, plan))
        say(f"features ({len(plan.features)}): {first_names(plan.features)}")
    numeric = set(job.data.numeric or [])   # flags the config reads as numbers
    flags = [] if plan.text else [f for f in prof.flags if f not in numeric]   # a text's terms are frequencies
    if flags:   # as fit reads a table's 0/1 columns (columns.FLAG_RULE)
        say(f"categorical, {FLAG_RULE}: {first_names(flags)}")
        plan, prof = plan.as_categorical(flags), prof.as_categorical(flags)
        job = dataclasses.replace(job, plan=plan)
    for line in hollow_notes(prof):
        say(line)
    try:
        note = constant_features_note(prof.constant, plan.features, m.constant_features, m.n_pairs)
    except ValueError as exc:
        raise data_mod.DataError(f"data: {exc}") from None
    if note:
        say(note)
    return job, prof


def not_categories(job: ResolvedJob, prof: data_mod.Profile) -> dict[str, str]:
    """The text, dictionary and boolean features a job took from the schema (no ``data.features``)
    that the profile pass found to be no category, with why (``tables.category_reason``, as
    ``fit``'s "not used" line in memory): nothing in them, one value in every row, or more
    distinct values than ``max_levels`` (free text, ids, amounts written as text)."""
    out = {}
    for c in job.plan.judged(job.data):
        counts = prof.levels.get(c, {})
        why = category_reason(counts, prof.missing.get(c, 0), job.model.max_levels,
                              at_least=len(counts) >= LEVEL_CAP, id_flag="data.id")
        if why:
            out[c] = why
    return out


def hollow_notes(prof: data_mod.Profile) -> list[str]:
    """A line for each categorical feature none of whose values is in ``min_level_rows`` rows:
    in (other levels) in every row, so constant and no gate may select it; what it looks like (numbers
    written as text, else free text or ids) and what to do."""
    lines, k = [], prof.min_level_rows
    for name, counts in prof.levels.items():
        if not counts or any(n >= k for n in counts.values()):
            continue
        numbers = written_as_numbers(list(counts))
        why = (f"{numbers}: {PLAIN_NUMBERS}" if numbers else
               "free text or ids are no category: list the features in data.features without it (`neurcam "
               "featurize-text` for text)")
        lines.append(f"{name}: none of its {len(counts):,} distinct values is in min_level_rows={k} rows, "
                     f"so it is in {OTHER} in every row and no gate may select it; {why}")
    return lines
