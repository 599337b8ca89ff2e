"""The paper's protocol at cluster scale: Ray Tune runs one distributed training per seed and
hyperparameter setting, and the lowest hard inertia wins.

Every trial is a Tune function trainable that drives a Ray Train ``TorchTrainer`` (the pattern
Ray Train V2 documents) and ends by scoring the whole dataset; it reports that final result to
Tune itself. (Tune's ``TuneReportCallback`` would also forward every worker report, through a
queue actor that the trial polls all the time: 1.3% of a core on a 2-core machine, and a
2-thread epoch pays for such background work more than its share.) The driver validates and profiles
the data once, fits the k-means initialisation once per seed, and afterwards picks the winner,
writes it like ``neurcam train`` does (plus the explanation report and ``search.json``) and
measures how consistent the best runs' explanations are. It returns what tracking needs
(``SearchResult``); MLflow logging is the caller's (``neurcam_dist.service``).
"""
from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from ray.tune import Callback

from ..names import run_name
from ..errors import ConfigError, NeurcamError, SearchError, find_cause
from ..config import JobConfig, ModelConfig, SearchConfig, coerce_config
from ..estimator import NeurCAM
from ..explain.build import Compared
from ..numerics import fmt
from ..storage.published import read_text
from ..storage.retrying import ray_storage
from ..uris import Location
from .driver import (InitialState, finish_run, initial_state, prepare, representation_dirs, run_workers,
                     set_reference, training_dataset, unchanged_input, worker_config, write_run)
from . import events
from .compare import Incumbent, Matched, take_ids
from .console import held_stderr, routed_logs
from .events import say
from .job import ResolvedJob, resolve, resolve_early, trial_model
from .session import check_resources, ensure_ray, quiet_data_progress


@dataclass
class Trial:
    """One trial's outcome, as recorded in ``search.json`` and MLflow."""

    trial_id: str
    params: dict
    status: str                      # "ok" or "failed"
    model: dict = field(default_factory=dict)   # the trial's full model section (as validated, or as given)
    metrics: dict = field(default_factory=dict)
    error: str | None = None
    output: Location | None = None   # a finished trial's folder (``OUTPUT/trials/NAME/TRIAL``)
    reason: str | None = None        # a failed trial's own error (class: message), when it was one of ours

    @property
    def model_path(self) -> Location:
        """The trial's model (``OUTPUT/trials/NAME/TRIAL/model``)."""
        return self.output / "model"

    def failure(self) -> str:
        """Why the trial failed, in one line: the service's own error as raised, else the line
        of Ray's traceback text that names an error."""
        return self.reason or error_summary(self.error)

    @property
    def inertia(self) -> float:
        """The trial's hard inertia (the search's ranking)."""
        return float(self.metrics["inertia"])

    def row(self) -> dict:
        """The trial as one row of the trial table (id, status, parameters, figures, error)."""
        return {"trial_id": self.trial_id, "status": self.status, **self.params,
                **{k: self.metrics[k] for k in ("inertia", "ari", "nmi", "acc", "epochs", "train_seconds")
                   if k in self.metrics}, **({"error": self.error} if self.error else {})}


@dataclass(frozen=True)
class SearchResult:
    """What ``search`` returns: the winner, its metrics, every trial, the consistency of the
    best runs' explanations, where the outputs are, and the configs it ran."""
    estimator: NeurCAM               # the winner
    metrics: dict                    # the winner's metrics.json (with a "search" summary)
    trials: list[Trial]
    best: Trial
    consistency: dict
    output: Location                 # the search's output (a local folder or an object-store URI)
    plan: object
    config: JobConfig                # the resolved config with the winner's hyperparameters
    search_config: JobConfig         # the config the search ran (base model section + search space)
    tracking: dict | None = None     # what ``service.search`` logged, with ``tracking:`` (a new value)
    explanation: object = None       # the winner's report (``explain.Explanation``)
    matched: Matched | None = None   # with an incumbent: how the winner met it (``compare.take_ids``)

    @property
    def report_path(self) -> Path | str:
        """The winner's HTML report (``OUTPUT/report/report.html``)."""
        return (self.output / "report" / "report.html").path


# ---------------------------------------------------------------------------- search space
def param_space(s: SearchConfig) -> dict:
    """Tune's ``param_space``: seeds and lists as grids, mappings as Tune distributions."""
    from ray import tune
    space = {"random_state": tune.grid_search(list(s.seeds))}
    for key, entry in s.space().items():
        if isinstance(entry, list):
            space[key] = tune.grid_search(entry)
        else:
            (kind, args), = entry.items()
            space[key] = tune.choice(args) if kind == "choice" else getattr(tune, kind)(*args)
    return space


def n_trials(s: SearchConfig) -> int:
    """How many trials a search runs: seeds x grid points x samples."""
    grid = len(s.seeds) * int(np.prod([len(v) for v in s.space().values() if isinstance(v, list)] or [1]))
    return grid * s.num_samples


# ---------------------------------------------------------------------------- one trial
def _trial(params: dict, shared: dict) -> None:
    """A Tune trial: one distributed training (``TorchTrainer``) then the full-data scoring pass.
    ``shared``: what every trial gets (the resolved job, the k-means inits, the dataset)."""
    from ray import tune

    quiet_data_progress()
    trial_id = tune.get_context().get_trial_id()
    events.attach(shared["events"], trial=trial_id)
    out = shared["trials_dir"] / trial_id
    # the trial's values, checked as a model: section and against the data: a clear failure of this trial
    job: ResolvedJob = shared["job"].for_trial(trial_id, params, out)
    init = shared["inits"][(job.model.n_clusters, job.model.random_state)]
    wcfg = worker_config(job, init)   # tagged with the trial; records to the channel attached above
    run_name = f"{shared['name']}-{trial_id}"
    t0 = time.perf_counter()
    result = run_workers(job, wcfg, run_name, dataset=shared["dataset"])
    est, metrics = finish_run(job, wcfg, init, result, time.perf_counter() - t0, run_name)
    metrics["trial_id"] = trial_id
    metrics["params"] = params
    write_run(out, est, metrics, job)
    final = {k: float(metrics[k]) for k in ("inertia", "ari", "nmi", "acc", "train_seconds") if k in metrics}
    tune.report({**final, "epochs": int(metrics["epochs"]), "output": str(out), "done": True})


class _Progress(Callback):
    """One line per trial start and end (Tune's own status table is off: it repeats every few seconds)."""

    def __init__(self, total: int):
        self.total, self.done = total, 0

    def on_trial_start(self, iteration, trials, trial, **info):
        say(f"trial {trial.trial_id} started: {_plain(trial.config)}")

    def on_trial_complete(self, iteration, trials, trial, **info):
        self.done += 1
        r = trial.last_result or {}
        say(f"trial {trial.trial_id} finished ({self.done}/{self.total}): inertia={r.get('inertia', float('nan')):.6g}"
             + (f" ari={r['ari']:.4f}" if "ari" in r else "") + f" after {r.get('epochs', '?')} epochs")

    def on_trial_recover(self, iteration, trials, trial, **info):
        say(f"trial {trial.trial_id} failed (its process or node was lost); it runs again and its training "
            f"resumes from its last checkpoint")

    def on_trial_error(self, iteration, trials, trial, **info):
        self.done += 1
        say(f"trial {trial.trial_id} FAILED ({self.done}/{self.total}); the search goes on")


def _plain(config: dict) -> dict:
    return {k: (v.item() if hasattr(v, "item") else v) for k, v in (config or {}).items()}


# ---------------------------------------------------------------------------- the driver
def search(config, *, name: str | None = None, incumbent: Incumbent | None = None) -> SearchResult:
    """Run the search ``config`` describes (a ``JobConfig``, a dict or a YAML path; a missing
    ``search:`` section means 5 seeds). Writes the winner to ``output/`` like ``train`` does,
    plus ``output/report/`` and ``output/search.json``. Raises ``SearchError`` when every trial
    failed. MLflow logging (a ``tracking:`` section) is ``service.search``'s.
    ``incumbent`` (a re-clustering's champion): before the winner is explained and written it
    takes its stable cluster ids from that model (``compare.take_ids``, while the input is still
    checked), and its report compares the two (``result.matched`` has the measures)."""
    cfg, early, held, t_start = _begin(config, lambda c: c.search or SearchConfig())
    s, tc = cfg.search, cfg.train
    name = name or run_name("search")
    say(f"search {name}: {n_trials(s)} trial(s) (seeds {s.seeds}" + "".join(f" x {k} {v}" for k, v in s.space().items())
        + (f" x {s.num_samples} samples" if s.num_samples > 1 else "")
        + f"), at most {s.max_concurrent_trials} at a time, each on {tc.num_workers} worker(s)")
    with routed_logs(cfg.output_location(), say, earlier=held):
        return _search(resolve(cfg, early), name, t_start, incumbent)


def _begin(config, search_of) -> tuple:
    """A search's start: the config with its ``search_of(config)`` section, the checks made before
    Ray, Ray up with room for the concurrent trials: ``(config, early, held stderr, start time)``."""
    cfg = coerce_config(config)
    cfg = cfg.model_copy(update={"search": search_of(cfg)})
    s, tc = cfg.search, cfg.train
    t_start = time.perf_counter()
    early = resolve_early(cfg)
    with held_stderr() as start:
        ensure_ray(min_cpus=s.max_concurrent_trials * (tc.num_workers * tc.cpus_per_worker + s.trial_cpus) + 1)
        check_resources(cfg, search=True)
    return cfg, early, start.text, t_start


def _search(job: ResolvedJob, name: str, t_start: float, incumbent: Incumbent | None) -> SearchResult:
    s, tc = job.config.search, job.train
    job, prof = prepare(job)
    plan = job.plan
    with unchanged_input(plan):
        inits = {(job.model.n_clusters, seed): initial_state(job.with_seed(seed), prof) for seed in s.seeds}
        t_search = time.perf_counter()
        trials = run_trials(job, inits, name)
        search_seconds = time.perf_counter() - t_search
        ranked = rank(trials, name)
    best = ranked[0]

    def load(t: Trial) -> NeurCAM:
        est = NeurCAM.load(t.model_path)
        seed = int(t.params["random_state"])
        set_reference(est, inits[(job.model.n_clusters, seed)], plan, tc.reference_rows, seed)
        return est

    est = load(best)
    matched = None
    if incumbent is not None:
        with unchanged_input(plan):
            matched = take_ids(est, incumbent, plan, batch_size=tc.score_batch_size, concurrency=tc.num_workers)
    # the winner's report, on its reference rows, measured against the next best runs
    expl = est.explain(runs=[load(t) for t in ranked[1:s.consistency_runs]], compared=_compared(est, incumbent, matched))
    consistency = {k: v for k, v in expl.stability.items() if k.startswith(("consistency", "top"))}
    if expl.stability["warning"]:
        say("warning: " + expl.stability["warning"])
    best_job = job.with_params(best.params)
    metrics = {**best.metrics, "total_seconds": round(time.perf_counter() - t_start, 2),
               "search": {"name": name, "n_trials": len(trials), "n_failed": len(trials) - len(ranked),
                          "best_trial": best.trial_id, "best_params": best.params,
                          "search_seconds": round(search_seconds, 2), **consistency}}
    summary = {"name": name, "rule": "lowest hard inertia", "space": {"seeds": s.seeds, **s.space()},
               "best_trial": best.trial_id, "consistency": consistency, "trials": [t.row() for t in trials]}
    out = job.output
    failed = write_run(out, est, metrics, best_job, extra={"search.json": json.dumps(summary, indent=1, default=str)},
                       report=expl, dirs=representation_dirs(job.config))
    say(f"winner's model in {out}/model, every trial in {out}/search.json, "
        + (f"report FAILED ({failed}; see {out}/report/error.txt)" if failed else f"report {out}/report/report.html"))
    return SearchResult(estimator=est, metrics=metrics, trials=trials, best=best, consistency=consistency,
                        output=out, plan=plan, config=best_job.effective_config(),
                        search_config=job.effective_config(), explanation=expl, matched=matched)


def _compared(est: NeurCAM, incumbent: Incumbent | None, matched: Matched | None) -> Compared | None:
    """What the winner's report compares it with: the incumbent, on the winner's reference rows,
    when the two were matched on the data and the incumbent reads those rows' columns."""
    if incumbent is None or matched is None or matched.measures is None:
        return None
    cols = [str(c) for c in incumbent.model.feature_names_in_]
    ref = est.reference_
    if not set(cols) <= set(map(str, ref.columns)):
        return None
    return Compared(incumbent.model, ref[cols], old_name=incumbent.name, new_name="this challenger")


def run_trials(job: ResolvedJob, inits: dict[tuple[int, int], InitialState], name: str,
               space: dict | None = None) -> list[Trial]:
    """The Tune run: one ``_trial`` per grid point and sample; every trial's outcome, failed ones
    included. ``inits``: the k-means init of each (n_clusters, seed); ``space``: more of Tune's
    ``param_space`` (``choose_k``'s grid over ``n_clusters``)."""
    from ray import tune
    from ray.tune.search.basic_variant import BasicVariantGenerator

    cfg = job.config
    s = cfg.search
    shared = {"job": job, "name": name,
              "trials_dir": (job.output / "trials" / name).resolved(),
              "inits": {k: v.without_sample() for k, v in inits.items()},
              "dataset": training_dataset(job),   # read (or cached) once for every trial
              "events": events.current_channel()}
    trainable = tune.with_resources(tune.with_parameters(_trial, shared=shared), {"CPU": s.trial_cpus})
    tuner = tune.Tuner(
        trainable, param_space={**param_space(s), **(space or {})},
        # the generator limits concurrency (TuneConfig's max_concurrent_trials would only warn that it
        # ignores itself beside a SearchGenerator)
        tune_config=tune.TuneConfig(num_samples=s.num_samples,
                                    search_alg=BasicVariantGenerator(random_state=s.sampler_seed,
                                                                     max_concurrent=s.max_concurrent_trials)),
        # a trial whose own actor died (its node lost) runs again, up to train.max_failures times; its
        # TorchTrainer, with the same run name and storage, resumes from the trial's last checkpoint
        run_config=tune.RunConfig(name=name, **ray_storage(cfg.storage_path()), verbose=0,
                                  failure_config=tune.FailureConfig(max_failures=cfg.train.max_failures),
                                  callbacks=[_Progress(n_trials(s) * int(np.prod(
                                      [len(v["grid_search"]) for v in (space or {}).values()] or [1])))]))
    trials = collect(tuner.fit(), job.model)
    for t in trials:
        say(f"trial {t.trial_id} {t.params}: " + (f"inertia={t.inertia:.6g}" if t.status == "ok"
                                                  else f"FAILED: {t.failure()}"))
    return trials


def rank(trials: list[Trial], name: str) -> list[Trial]:
    """The finished trials, lowest hard inertia first; ``SearchError`` when none finished."""
    ok = [t for t in trials if t.status == "ok"]
    if not ok:
        raise SearchError(f"every one of the {len(trials)} trial(s) of search {name} failed:\n"
                          + "\n".join(f"  {t.trial_id} {t.params}: {t.failure()}" for t in trials))
    ranked = sorted(ok, key=lambda t: t.inertia)
    best = ranked[0]
    say(f"winner: trial {best.trial_id} {best.params} with the lowest hard inertia {best.inertia:.6g} "
        f"({len(ok)} of {len(trials)} trial(s) finished)")
    return ranked


def collect(grid, base: ModelConfig) -> list[Trial]:
    """Tune's ``ResultGrid`` as ``Trial`` records: finished trials have a final ``done`` report."""
    trials = []
    for res in grid:
        m = dict(res.metrics or {})
        params = _plain(res.config)
        trial_id = m.get("trial_id") or Path(res.path).name
        try:
            model = trial_model(base, params).model_dump()
        except ValueError:  # parameters the model refused: record them as given
            model = {**base.model_dump(), **params}
        if res.error is None and m.get("done"):
            where = Location(m["output"])   # text in Tune's report: a place once here
            metrics = json.loads(read_text(where / "metrics.json"))
            trials.append(Trial(metrics["trial_id"], params, "ok", model, metrics, output=where))
        else:
            err = res.error if res.error is not None else "the trial ended without its final report"
            cause = find_cause(err, NeurcamError) if isinstance(err, BaseException) else None
            trials.append(Trial(str(trial_id), params, "failed", model, error=_error_text(err),
                                reason=f"{type(cause).__name__}: {cause.message}" if cause else None))
    return trials


def _error_text(err) -> str:
    import re
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(err)).strip()  # Ray colours its wrapper lines
    return text[-4000:]


def error_summary(text: str | None) -> str:
    """The line of a trial's (Ray-wrapped) traceback that says what went wrong."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "Error" in ln or "error" in ln:
            return ln[:500]
    return (lines[-1] if lines else "unknown error")[:500]


# ---------------------------------------------------------------------------- choosing K on Ray
def choose_k_on_ray(config, *, k="2-12", seeds: int = 3, name: str | None = None):
    """``choose_k`` for data on Ray (``neurcam choose-k --config``), as a job config (a
    ``JobConfig``, a dict or a YAML path) says: a Ray Tune search with one trial per (K, seed),
    each a Ray Train run on every row like ``neurcam train``; then each K is measured on the
    driver (``choosing.measure``: every trial's model scores the same sample of the first seed's
    k-means sample) and one K proposed (``choosing.decide``). A bad ``k`` or ``seeds`` is refused
    before Ray starts. Writes ``OUTPUT/choice/`` (``choice.json``, ``choice.html``) and each
    trial's model under ``OUTPUT/trials/NAME/``. Returns the ``KChoice``. The config's ``search:``
    section gives only ``max_concurrent_trials``.

    Examples
    --------
    Each trial's ``model.n_clusters`` is its K (the config's own is replaced), and of the
    ``search:`` section only its concurrency counts (its ``m`` list is not searched here):

    >>> import tempfile; from pathlib import Path; from neurcam_dist import service
    >>> from neurcam_dist.data.synthetic import write_shards
    >>> d = Path(tempfile.mkdtemp()); _ = write_shards(d / "data", 400, n_features=4, repr_dim=0, n_clusters=3)
    >>> choice = service.choose_k_on_ray({"data": {"path": str(d / "data"), "label": "label", "id": "id"},
    ...                                   "output": str(d / "k"), "train": {"num_workers": 1},
    ...                                   "search": {"max_concurrent_trials": 2, "m": [1.05, 1.1]},
    ...                                   "model": {"n_clusters": 2, "epochs": 16, "warmup_epochs": 4, "hidden": [8]}},
    ...                                  k="2-3", seeds=2)  # doctest: +ELLIPSIS
    [neurcam] ...
    >>> choice.k in (2, 3), (d / "k" / "choice" / "choice.json").is_file()
    (True, True)
    """
    from ..choosing import check_request, k_range
    ks = k_range(k)
    check_request(ks, seeds)
    cfg, early, held, t_start = _begin(config, lambda c: SearchConfig(
        seeds=list(range(seeds)), max_concurrent_trials=c.search.max_concurrent_trials if c.search else 1))
    s, tc = cfg.search, cfg.train
    name = name or run_name("choose-k")
    say(f"choose-k {name}: K = {ks[0]}..{ks[-1]} x {seeds} seeds = {len(ks) * seeds} trial(s), at most "
        f"{s.max_concurrent_trials} at a time, each on {tc.num_workers} worker(s)")
    with routed_logs(cfg.output_location(), say, earlier=held):
        return _choose_k(resolve(cfg, early), ks, name, t_start)


def _choose_k(job: ResolvedJob, ks: list[int], name: str, t_start: float):
    from ray import tune

    from ..choosing import MAX_ROWS, SILHOUETTE_ROWS, choice_html, decide, describe_clusters, fit_record, measure
    from ..data.reading import representation
    from ..storage import atomic_directory
    s, tc = job.config.search, job.train
    job, prof = prepare(job)
    plan = job.plan
    if ks[-1] >= min(tc.kmeans_sample, plan.n_rows):
        raise ConfigError(f"k goes up to {ks[-1]}, but the k-means sample has {min(tc.kmeans_sample, plan.n_rows)} "
                          f"rows: use K below that, or raise train.kmeans_sample")
    with unchanged_input(plan):
        inits = {(kk, seed): initial_state(job.with_params({"n_clusters": kk, "random_state": seed}), prof)
                 for kk in ks for seed in s.seeds}
        trials = run_trials(job, inits, name, space={"n_clusters": tune.grid_search(list(ks))})
    failed = [t for t in trials if t.status != "ok"]
    if failed:
        raise SearchError(f"{len(failed)} of the {len(trials)} trial(s) of {name} failed, so their K cannot be "
                          f"measured:\n" + "\n".join(f"  {t.trial_id} {t.params}: {t.failure()}" for t in failed))
    first = inits[(ks[0], s.seeds[0])]
    sample = first.sample
    keep = np.sort(np.random.default_rng(0).permutation(sample.num_rows)[:MAX_ROWS])
    rows = sample.take(keep)
    X = rows.select(plan.features).to_pandas()
    fits: dict[int, list[dict]] = {kk: [] for kk in ks}
    first_seed: dict[int, NeurCAM] = {}          # each K's first seed: the proposal's is described
    space = None
    for t in sorted(trials, key=lambda t: (int(t.params["n_clusters"]), int(t.params["random_state"]))):
        est = NeurCAM.load(t.model_path)
        set_reference(est, first, plan, tc.reference_rows, 0)
        if space is None:
            space = representation(rows, plan, X, est)
        kk = int(t.params["n_clusters"])
        fits[kk].append(fit_record(est, X, t.metrics.get("train_seconds", 0.0)))
        first_seed.setdefault(kk, est)
    sil_rows = np.sort(np.random.default_rng(0).permutation(len(X))[:SILHOUETTE_ROWS])
    table = [measure(kk, fits[kk], space, sil_rows) for kk in ks]
    for r in table:
        say(f"K={r['k']}: silhouette {r['silhouette']:.3f}, stability {r['stability']:.3f}, inertia {fmt(r['inertia'])}")
    proposal = decide(table, len(s.seeds), len(X), 0.0, how="on every row")
    choice = dataclasses.replace(proposal, seconds=time.perf_counter() - t_start,
                                 clusters=describe_clusters(first_seed[proposal.k], X))
    record = json.dumps({"config": str(job.config.output), "trials": f"trials/{name}", **choice.to_dict()},
                        indent=1, default=float)

    def write(tmp: Path) -> None:
        (tmp / "choice.json").write_text(record + "\n")
        (tmp / "choice.html").write_text(choice_html(choice, title=f"Choosing K: {name}"))
    out = job.output / "choice"
    atomic_directory(out, write, marker="choice.json")
    say(f"proposed K = {choice.k}; the table in {out}/choice.json, the page {out}/choice.html")
    return choice
