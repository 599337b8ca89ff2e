"""``neurcam recluster``: re-cluster the newest snapshot and promote only a better model.

1. pick the snapshot (``data.snapshots``) and note the current ``champion`` of
   ``tracking.model_name``;
2. run the configured search on the snapshot (the challenger);
3. before the challenger is explained and written, score both models on the snapshot in one
   Ray Data pass (``distributed.compare``) and give the challenger the champion's cluster ids by
   Hungarian matching (``clusterids``); clusters without a counterpart get ids never used before;
4. register the challenger (alias ``candidate``), decide by ``recluster.policy`` and move
   ``champion`` by compare-and-set under a registry lease (``tracking.promotion``);
5. write ``output/recluster.json``, append it to ``output/recluster-history.jsonl``, export the
   outcome for Prometheus (``ops.history``) and log the record to the search's MLflow run.

A snapshot whose files are those the champion was trained on is skipped (no search, no new
version) unless ``recluster.force``. A failure at any step leaves ``champion`` where it was, and
``recluster.json`` and the history say what failed. After a finished run the folders of all but
the ``recluster.keep_runs`` newest searches are deleted from the output.
"""
from __future__ import annotations

import dataclasses
import json
import os
import socket
from dataclasses import dataclass, field

from ..names import parse_utc, run_name, utc
from .. import tracking
from . import history, runs
from ..clusterids import size_shift
from ..config import ConfigError, JobConfig, ReclusterConfig, coerce_config
from ..data.snapshots import pick_snapshot
from ..distributed.compare import Incumbent
from ..distributed.events import say
from ..explain.assignments import met_line
from ..redaction import redact
from ..signals import process_gone
from ..storage import write_text_atomic
from ..storage.published import read_text
from ..uris import Location

RECORD = "recluster.json"


@dataclass
class Record:
    """One re-clustering's record: ``recluster.json``, a line of the history, the Prometheus
    gauges and the search's MLflow run all read it (``to_dict``). Filled step by step; every field
    is in the JSON (None until its step ran)."""

    model_name: str
    snapshot: str
    data_path: str
    policy: str
    min_improvement: float
    started_at: str
    search: str = field(default_factory=lambda: run_name("search"))
    host: str = field(default_factory=socket.gethostname)
    pid: int = field(default_factory=os.getpid)
    promoted: bool = False
    outcome: str | None = None       # running, skipped, promoted, kept, failed (killed: in the history)
    reason: str | None = None
    champion_version: str | None = None
    compared_with: str | None = None
    note: str | None = None
    snapshot_fingerprint: str | None = None
    challenger_version: str | None = None
    mapping: dict | None = None
    next_cluster_id: int | None = None
    inertia_challenger: float | None = None
    inertia_champion: float | None = None
    improvement: float | None = None
    agreement_ari: float | None = None
    size_shift: float | None = None
    sizes_challenger: dict | None = None
    sizes_champion: dict | None = None
    top_terms_overlap: float | None = None
    drift_alert: bool | None = None  # recluster.when=drift: the monitor's verdict on the snapshot
    drift: str | None = None         # ... and its summary line
    unseen_levels_champion: dict | None = None
    n_rows: int | None = None
    run_id: str | None = None
    finished_at: str | None = None
    finished_unix: float | None = None
    duration_s: float | None = None

    def to_dict(self) -> dict:
        """The record as JSON-ready values."""
        return dataclasses.asdict(self)

    def measure(self, result) -> None:
        """The challenger's ids, inertia, sizes and agreement with the champion (``result``: the
        search's ``SearchResult``)."""
        est, m = result.estimator, result.matched
        cmp = m.measures if m is not None else None
        self.challenger_version = (result.tracking or {}).get("version")
        self.mapping = {str(raw): int(i) for raw, i in enumerate(est.cluster_ids_)}
        self.next_cluster_id, self.n_rows = int(est.next_cluster_id_), result.plan.n_rows
        self.run_id = (result.tracking or {}).get("run_id")
        self.sizes_challenger = m.sizes_new if cmp else dict(zip(map(str, est.cluster_ids_.tolist()),
                                                                 result.metrics.get("cluster_sizes", []), strict=False))
        self.inertia_challenger = float(cmp["inertia_challenger"] if cmp else result.metrics["inertia"])
        self.top_terms_overlap = (result.explanation.comparison or {}).get("top_terms_overlap")
        if cmp:
            self.inertia_champion, self.agreement_ari = float(cmp["inertia_champion"]), float(cmp["agreement_ari"])
            self.size_shift, self.sizes_champion = size_shift(m.sizes_new, m.sizes_old), m.sizes_old
            self.unseen_levels_champion = cmp.get("unseen_champion")
            self.improvement = 1.0 - self.inertia_challenger / self.inertia_champion


@dataclass(frozen=True)
class Champion:
    """The champion a re-clustering starts from: its version now (``seen``: what the promotion's
    compare-and-set expects), the version compared with (the former champion when none holds the
    alias), that model, the lineage's next unused cluster id, and a note when the alias was empty."""
    seen: str | None
    compared: str | None
    model: object | None
    lineage_next: int
    note: str | None = None

    def incumbent(self) -> Incumbent:
        """What the search's winner takes its ids from and is compared with."""
        return Incumbent(self.model, f"the champion (version {self.compared})", self.lineage_next)


def recluster(config) -> dict:
    """Run one re-clustering as ``config`` says (its ``recluster:`` section and ``tracking:``, which
    names the registered model); returns the ``recluster.json`` record.

    Examples
    --------
    The first re-clustering of a model has no champion to beat: its challenger becomes the
    champion. The snapshots are the folders ``date=...`` under ``data.path``; the newest is used.

    >>> import tempfile; from pathlib import Path; from neurcam_dist import service
    >>> from neurcam_dist.data.synthetic import write_shards
    >>> d = Path(tempfile.mkdtemp())
    >>> _ = write_shards(d / "events" / "date=2026-12-01", 400, n_features=4, repr_dim=0, n_clusters=3)
    >>> record = service.recluster({"data": {"path": str(d / "events"), "label": "label", "id": "id"},
    ...     "output": str(d / "rc"), "search": {"seeds": 1}, "train": {"num_workers": 1},
    ...     "model": {"n_clusters": 3, "epochs": 4, "warmup_epochs": 2, "hidden": [8]},
    ...     "tracking": {"uri": f"sqlite:///{d / 'mlflow.db'}", "model_name": "events"},
    ...     "recluster": {"policy": "improve"}})  # doctest: +ELLIPSIS
    [neurcam] ...
    >>> record["snapshot"], record["promoted"], record["champion_version"], record["challenger_version"]
    ('2026-12-01', True, None, '1')
    """
    cfg, rc = _checked(config)
    path, snapshot = pick_snapshot(cfg.data.path, rc.snapshot, say=lambda m: say(f"warning: {m}"))
    say(f"snapshot {snapshot!r}: {path}")
    cfg = cfg.model_copy(update={"data": cfg.data.model_copy(update={"path": path})})
    started, t0 = history.now()
    out = cfg.output_location()   # where every record of this run goes
    record = Record(model_name=cfg.tracking.model_name, snapshot=snapshot, data_path=redact(path),
                    policy=rc.policy, min_improvement=rc.min_improvement, started_at=started)
    _note_killed_run(out, record)
    _write_running(out, record)
    try:
        _run(cfg, rc, record)
    except BaseException as exc:
        record.outcome = "failed"
        if record.reason is None:
            record.reason = f"failed, the champion was not touched: {type(exc).__name__}: {redact(exc)}"[:2000]
        _write(out, rc, record, t0)
        raise
    _write(out, rc, record, t0)
    gone = history.prune_runs(out, cfg.storage_path(), rc.keep_runs, log=say)
    if gone:
        say(f"deleted the folders of {len(gone)} older search(es) (recluster.keep_runs={rc.keep_runs})")
    return record.to_dict()


def _checked(config) -> tuple[JobConfig, ReclusterConfig]:
    """The config and its ``recluster:`` section (defaults when absent); a config without the
    registered model to compare with is refused."""
    cfg = coerce_config(config)
    if cfg.tracking is None or not cfg.tracking.model_name:
        raise ConfigError("recluster needs tracking.model_name: the registered model whose champion the new "
                          "model is compared with (add a tracking: section with model_name)")
    return cfg, cfg.recluster or ReclusterConfig()


def _write_running(out: Location, record: Record) -> None:
    """``recluster.json`` names this run from its start: a run killed at any point (its model
    already in OUTPUT/current, its MLflow logging cut short) leaves the record of the same search."""
    running = {**record.to_dict(), "outcome": "running", "reason": "running (or killed: see the history)"}
    write_text_atomic(out / RECORD, json.dumps(running, indent=1, default=str))


def _run(cfg: JobConfig, rc: ReclusterConfig, record: Record) -> None:
    """The steps of the module docstring: the champion, the search (whose winner takes the
    champion's cluster ids), the measures, the decision."""
    champion = _champion(cfg, record)
    record.snapshot_fingerprint = history.fingerprint(cfg.data.path)
    if not rc.force and _already_trained(cfg, record, champion.compared):
        return
    if rc.when == "drift" and _no_drift(cfg, record, champion):
        return
    say(f"champion of {record.model_name}: " + (
        f"version {champion.compared} (cluster ids {champion.model.cluster_ids_.tolist()})" if champion.compared
        else "none yet (this model becomes the first)"))
    result = _search(cfg, record, champion)
    record.measure(result)
    if result.matched is not None and record.unseen_levels_champion:
        say("the champion: " + met_line({"unseen": record.unseen_levels_champion}))
    _decide_and_promote(cfg, rc, record, champion, result.matched.unscorable if result.matched else None)


def _champion(cfg: JobConfig, record: Record) -> Champion:
    """The champion now, and the model the challenger is compared with; ``record`` gets both
    versions."""
    name = record.model_name
    with runs.mlflow_lines(cfg):   # a new local store's set-up lines, say
        tracking.use(cfg.tracking.uri, cfg.tracking.experiment, say=say)
        seen = tracking.champion_version(name)
        compared, note = (seen, None) if seen else tracking.former_champion(name)
        model = tracking.load_estimator(f"models:/{name}/{compared}") if compared else None
        champion = Champion(seen, compared, model, tracking.lineage_next_id(name), note)
    record.champion_version, record.compared_with, record.note = seen, compared, note
    if note:
        say(f"warning: {note}")
    return champion


def _already_trained(cfg: JobConfig, record: Record, compared) -> bool:
    """True (and ``record`` says it is skipped) when a version of the model was trained on the
    same snapshot files."""
    with runs.mlflow_lines(cfg):
        same = tracking.versions_trained_on(record.model_name, record.snapshot_fingerprint)
    if not same:
        return False
    which = "the champion" if str(same[0]) == str(compared) else f"version {same[0]}"
    record.outcome, record.reason = "skipped", (
        f"skipped: snapshot {record.snapshot!r} has the same files as the one {which} of {record.model_name} was "
        f"trained on: no new version (recluster.force, or --force, runs anyway)")
    say(record.reason)
    return True


def _no_drift(cfg: JobConfig, record: Record, champion: Champion) -> bool:
    """``recluster.when=drift``: the snapshot monitored against the champion (``OUTPUT/drift/``);
    True (and ``record`` says it is skipped) when the monitor raised no alert. Without a champion,
    or a champion saved without a drift reference, the snapshot is re-clustered, and that is said."""
    if champion.model is None:
        record.drift = "no champion to monitor against: re-clustering"
        say(record.drift)
        return False
    try:
        champion.model.drift_reference()
    except AttributeError:
        record.drift = (f"version {champion.compared} carries no drift reference (saved before monitoring): "
                        f"re-clustering; the next champion will carry one")
        say(f"warning: {record.drift}")
        return False
    from ..distributed.monitoring import monitor_parquet
    from ..monitor.page import write_monitor
    drift = monitor_parquet(champion.model, cfg.data.path, log=say)
    record.drift_alert, record.drift = drift.alert, drift.summary()
    write_monitor(cfg.output_location() / "drift", {"model": f"models:/{record.model_name}/{champion.compared}",
                                                     "snapshot": record.data_path, **drift.to_dict()},
                  drift, f"Drift: snapshot {record.snapshot}")
    say(f"monitor against the champion (version {champion.compared}): {drift.summary()}")
    if drift.alert:
        return False
    record.outcome, record.reason = "skipped", (
        f"skipped: no drift alert on snapshot {record.snapshot!r} against the champion (version "
        f"{champion.compared}): {drift.summary()} (recluster.when=drift re-clusters on an alert only)")
    return True


def _search(cfg: JobConfig, record: Record, champion: Champion):
    """The configured search on the snapshot, its winner given the champion's cluster ids and
    compared with it, registered; the version tagged with the snapshot it was trained on."""
    result = runs.search(cfg, name=record.search, incumbent=champion.incumbent())
    version = (result.tracking or {}).get("version")
    if version:
        with runs.mlflow_lines(cfg):
            tracking.tag_snapshot(record.model_name, version, record.snapshot_fingerprint)
    return result


def _decide_and_promote(cfg: JobConfig, rc: ReclusterConfig, record: Record, champion: Champion,
                        unscorable: str | None) -> None:
    """The policy's decision and, when it promotes, the compare-and-set of the champion alias
    against the champion this run began with; ``record`` gets the outcome."""
    name, version, seen = record.model_name, record.challenger_version, champion.seen
    want, reason = decide(rc, name, version, champion.compared, record.inertia_challenger, record.inertia_champion,
                          unscorable)
    with runs.mlflow_lines(cfg):
        if want:
            moved, now = tracking.promote_if_unchanged(name, version, seen, wait_s=rc.lease_wait_s, log=say)
            if moved:
                reason += f"; {name}@champion -> version {version}"
            else:
                want = False
                reason = (f"not promoted: the champion moved from {_v(seen)} to {_v(now)} while this run was "
                          f"going (another re-clustering promoted first), and this challenger was compared with "
                          f"{_v(seen)}; it stays registered as version {version} (alias candidate)")
        record.promoted, record.reason = bool(want), reason
        record.outcome = "promoted" if want else "kept"
        record.finished_at = utc()
        tracking.log_decision(record.to_dict(), RECORD)
    say(f"{'PROMOTED' if want else 'not promoted'}: {reason}")


STALE_S = 12 * 3600   # a "running" record from another host older than this was killed


def _note_killed_run(out: Location, record: Record) -> None:
    """A ``recluster.json`` still saying "running" from a process that is gone (SIGKILL, an
    evicted pod): its run was killed; the history gets a line saying so."""
    try:
        previous = json.loads(read_text(out / RECORD))
    except (OSError, ValueError):
        return
    if previous.get("outcome") != "running":
        return
    try:
        started = parse_utc(previous["started_at"])
    except (KeyError, ValueError):
        return
    if not process_gone(previous.get("host"), previous.get("pid"), started, STALE_S):
        return                                             # still running (another re-clustering)
    previous.update(outcome="killed", reason=f"killed before it finished (found by the run started at "
                                              f"{record.started_at}); its decision was never recorded: see "
                                              f"{record.model_name}@champion")
    history.append_history(out, previous)
    say(f"the re-clustering started at {previous.get('started_at')} was killed before it finished: noted in "
        f"{history.HISTORY}")


def _v(version) -> str:
    return "no champion" if version is None else f"version {version}"


def decide(rc: ReclusterConfig, name: str, version, seen, new: float | None, old: float | None,
           unscorable: str | None) -> tuple[bool, str]:
    """Whether the policy wants the challenger promoted, and why (before the compare-and-set):
    ``new`` and ``old`` are the challenger's and the champion's inertias on the same rows."""
    if rc.policy == "manual":
        return False, (f"policy manual: registered as version {version} (alias candidate); promote it with "
                       f"'neurcam promote {name} {version}'")
    if seen is None:
        return True, f"the first model of {name} (policy {rc.policy})"
    if rc.policy == "always":
        return True, "policy always"
    if unscorable:
        return False, f"the champion cannot be scored on this snapshot ({unscorable}): compare and promote by hand"
    gain = 1.0 - new / old
    if gain >= rc.min_improvement:
        return True, (f"inertia {new:.6g} is {gain:.2%} below the champion's {old:.6g} on the same data "
                      f"(at least {rc.min_improvement:.2%} needed)")
    return False, (f"inertia {new:.6g} vs the champion's {old:.6g} on the same data: {gain:.2%} better, "
                   f"{rc.min_improvement:.2%} needed (policy improve)")


def _write(out: Location, rc: ReclusterConfig, record: Record, t0: float) -> None:
    """``recluster.json`` (replaced), a line of the history (appended), the Prometheus metrics."""
    record.finished_at, record.finished_unix = history.now()
    record.duration_s = round(record.finished_unix - t0, 2)
    data = record.to_dict()
    write_text_atomic(out / RECORD, json.dumps(data, indent=1, default=str))
    history.append_history(out, data)
    say(f"decision written to {out / RECORD} (and appended to {out / history.HISTORY})")
    try:
        history.export_metrics(out, data, history.read_history(out), rc.pushgateway)
    except Exception as exc:  # noqa: BLE001 - the decision is recorded; metrics are a report of it
        say(f"warning: the Prometheus metrics were not exported: {type(exc).__name__}: {redact(exc)}")
