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

import json
import os
import socket
import time
import uuid

import numpy as np

from .. import tracking
from . import history, runs
from ..clusterids import match_ids, size_shift, top_terms_overlap
from ..config import ConfigError, JobConfig, ReclusterConfig, coerce_config
from ..data import DataError
from ..data.snapshots import pick_snapshot
from ..distributed.compare import compare
from ..distributed.events import log
from ..explain.assignments import met_line
from ..redaction import redact
from ..signals import process_gone
from ..storage import write_text_atomic
from ..storage.published import read_text
from ..uris import as_path, join

RECORD = "recluster.json"
TOP_TERMS = 10


def recluster(config) -> dict:
    """Run one re-clustering as ``config`` says; returns the ``recluster.json`` record."""
    cfg = coerce_config(config)
    rc = cfg.recluster or ReclusterConfig()
    if cfg.tracking is None or not cfg.tracking.model_name:
        raise ConfigError("recluster needs tracking.model_name: the registered model whose champion the new "
                          "model is compared with (add a tracking: section with model_name)")
    path, snapshot = pick_snapshot(cfg.data.path, rc.snapshot, say=lambda m: log(f"warning: {m}"))
    log(f"snapshot {snapshot!r}: {path}")
    cfg = cfg.model_copy(update={"data": cfg.data.model_copy(update={"path": path})})
    name = cfg.tracking.model_name
    started, t0 = history.now()
    record: dict = {"promoted": False, "outcome": None, "reason": None, "policy": rc.policy,
                    "min_improvement": rc.min_improvement, "model_name": name, "snapshot": snapshot,
                    "data_path": redact(path), "champion_version": None, "challenger_version": None,
                    "started_at": started, "search": f"search-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}",
                    "host": socket.gethostname(), "pid": os.getpid()}
    _note_killed_run(cfg, record)
    # recluster.json names this run from its start: a run killed at any point (its model already
    # in OUTPUT/current, its MLflow logging cut short) leaves the record of the same search
    write_text_atomic(as_path(join(cfg.output, RECORD)),
                      json.dumps({**record, "outcome": "running", "reason": "running (or killed: see the history)"},
                                 indent=1, default=str))
    try:
        _run(cfg, rc, name, record)
    except BaseException as exc:
        record["outcome"] = "failed"
        if record["reason"] is None:
            record["reason"] = f"failed, the champion was not touched: {type(exc).__name__}: {redact(exc)}"[:2000]
        _write(cfg, rc, record, t0)
        raise
    _write(cfg, rc, record, t0)
    gone = history.prune_runs(cfg.output, cfg.storage_path(), rc.keep_runs, log=log)
    if gone:
        log(f"deleted the folders of {len(gone)} older search(es) (recluster.keep_runs={rc.keep_runs})")
    return record


def _run(cfg: JobConfig, rc: ReclusterConfig, name: str, record: dict) -> None:
    """The champion, the search with the challenger's stable ids, the registration and the
    policy's decision, filling ``record`` as it goes (steps 1-4 of the module docstring). The
    champion found at the start (``seen``) is the one the promotion's compare-and-set checks."""
    seen, compared, champion, lineage_next = _champion(cfg, name, record)
    record["snapshot_fingerprint"] = fingerprint = history.fingerprint(cfg.data.path)
    if not rc.force and _already_trained(cfg, name, record, compared, fingerprint):
        return
    log(f"champion of {name}: " + (f"version {compared} (cluster ids {champion.cluster_ids_.tolist()})" if compared
                                   else "none yet (this model becomes the first)"))
    found: dict = {}
    prepare_winner = _winner_ids(cfg, champion, compared, lineage_next, found)
    result = runs.search(cfg, name=record["search"], prepare_winner=prepare_winner)
    version = (result.tracking or {}).get("version")
    record["challenger_version"] = version
    if version:
        with runs.mlflow_lines(cfg):
            from mlflow import MlflowClient
            MlflowClient().set_model_version_tag(name, version, history.FINGERPRINT_TAG, fingerprint)
    _challenger_record(record, result, found)
    _decide_and_promote(cfg, rc, name, version, seen, compared, record, found)


def _champion(cfg: JobConfig, name: str, record: dict):
    """``(seen, compared, champion, lineage_next)``: the champion's version now, the version the
    challenger is compared with (the former champion when none holds the alias), that model, and
    the lineage's next unused cluster id; ``record`` gets the first two."""
    with runs.mlflow_lines(cfg):   # a new local store's set-up lines, say
        tracking.use(cfg.tracking.uri, cfg.tracking.experiment, say=log)
        seen = tracking.champion_version(name)
        record["champion_version"] = seen
        compared, note = (seen, None) if seen else tracking.former_champion(name)
        record["compared_with"] = compared
        champion = tracking.load_estimator(f"models:/{name}/{compared}") if compared else None
        lineage_next = tracking.lineage_next_id(name)
    if note:
        record["note"] = note
        log(f"warning: {note}")
    return seen, compared, champion, lineage_next


def _already_trained(cfg: JobConfig, name: str, record: dict, compared, fingerprint: str) -> bool:
    """True (and ``record`` says it is skipped) when a version of ``name`` was trained on the same
    snapshot files."""
    with runs.mlflow_lines(cfg):
        from mlflow import MlflowClient
        same = sorted((int(mv.version) for mv in MlflowClient().search_model_versions(f"name = '{name}'")
                       if mv.tags.get(history.FINGERPRINT_TAG) == fingerprint), reverse=True)
    if not same:
        return False
    which = "the champion" if str(same[0]) == str(compared) else f"version {same[0]}"
    record.update(outcome="skipped", reason=(
        f"skipped: snapshot {record['snapshot']!r} has the same files as the one {which} of {name} was "
        f"trained on: no new version (recluster.force, or --force, runs anyway)"))
    log(record["reason"])
    return True


def _winner_ids(cfg: JobConfig, champion, compared, lineage_next: int, found: dict):
    """The search's ``prepare_winner``: stable ids for the challenger, from its agreement with the
    champion on this snapshot (``found`` gets the comparison); it returns what adds the comparison
    with the champion to the challenger's report."""
    def prepare_winner(est, plan):
        k = est.n_clusters_
        if champion is None:
            est.set_cluster_ids(np.arange(k), max(k, lineage_next))
            return
        first_new = max(lineage_next, champion.next_cluster_id_)
        try:
            cmp = compare(est.scoring_model(), champion.scoring_model(), plan,
                          batch_size=cfg.train.score_batch_size, concurrency=cfg.train.num_workers)
        except DataError as exc:
            found["unscorable"] = str(exc)
            log(f"warning: {exc}; the challenger gets new cluster ids")
            est.set_cluster_ids(np.arange(k) + first_new, first_new + k)
            return
        ids, next_id = match_ids(cmp["table"], champion.cluster_ids_, first_new)
        est.set_cluster_ids(ids, next_id)
        sizes_new = {int(i): n for i, n in zip(ids, cmp["sizes_challenger"]) if n}
        sizes_old = {int(i): n for i, n in zip(champion.cluster_ids_, cmp["sizes_champion"]) if n}
        found.update(cmp=cmp, sizes_new=sizes_new, sizes_old=sizes_old)
        return lambda expl: _compare_with_champion(expl, est, champion, compared, found)
    return prepare_winner


def _challenger_record(record: dict, result, found: dict) -> None:
    """The challenger's ids, inertia, sizes and agreement with the champion, into ``record``."""
    est = result.estimator
    record["mapping"] = {str(raw): int(i) for raw, i in enumerate(est.cluster_ids_)}
    record["next_cluster_id"] = int(est.next_cluster_id_)
    cmp = found.get("cmp")
    record.update(
        inertia_challenger=float(cmp["inertia_challenger"] if cmp else result.metrics["inertia"]),
        inertia_champion=float(cmp["inertia_champion"]) if cmp else None,
        agreement_ari=float(cmp["agreement_ari"]) if cmp else None,
        size_shift=size_shift(found["sizes_new"], found["sizes_old"]) if cmp else None,
        sizes_challenger=found.get("sizes_new") or dict(zip(map(str, est.cluster_ids_.tolist()),
                                                             result.metrics.get("cluster_sizes", []))),
        sizes_champion=found.get("sizes_old"),
        top_terms_overlap=found.get("overlap"), n_rows=result.plan.n_rows,
        run_id=(result.tracking or {}).get("run_id"),
        unseen_levels_champion=cmp.get("unseen_champion") if cmp else None)
    if cmp and cmp.get("unseen_champion"):
        log("the champion: " + met_line({"unseen": cmp["unseen_champion"]}))
    if cmp:
        record["improvement"] = 1.0 - record["inertia_challenger"] / record["inertia_champion"]


def _decide_and_promote(cfg: JobConfig, rc: ReclusterConfig, name: str, version, seen, compared, record: dict,
                        found: dict) -> None:
    """The policy's decision and, when it promotes, the compare-and-set of the champion alias
    against ``seen`` (the champion this run began with); ``record`` gets the outcome."""
    want, reason = decide(rc, name, version, compared, record, found.get("unscorable"))
    with runs.mlflow_lines(cfg):
        if want:
            moved, now = tracking.promote_if_unchanged(name, version, seen, wait_s=rc.lease_wait_s, log=log)
            if moved:
                reason += f"; {name}@champion -> version {version}"
            else:
                want = False
                reason = (f"not promoted: the champion moved from {_v(seen)} to {_v(now)} while this run was "
                          f"going (another re-clustering promoted first), and this challenger was compared with "
                          f"{_v(seen)}; it stays registered as version {version} (alias candidate)")
        record["promoted"], record["reason"] = bool(want), reason
        record["outcome"] = "promoted" if want else "kept"
        record["finished_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        _log_to_mlflow(record)
    log(f"{'PROMOTED' if want else 'not promoted'}: {reason}")


def _compare_with_champion(expl, est, champion, compared, found: dict) -> None:
    """The challenger's report gets how the reference rows moved from the champion's cluster ids to
    the challenger's and which terms now drive each cluster (``explain.compare``); ``found`` gets
    the overlap of their top terms. Rows of features the champion does not read: no comparison."""
    ref = est.reference_
    cols = [str(c) for c in champion.feature_names_in_]
    if not set(cols) <= set(map(str, ref.columns)):
        return
    from ..explain.build import build_explanation
    from ..explain.compare import comparison
    before = build_explanation(champion, ref[cols], typical=0)
    found["overlap"] = top_terms_overlap([r["term"] for r in expl.importance], [r["term"] for r in before.importance],
                                         TOP_TERMS)
    expl.comparison = comparison(expl, before, est.predict(ref), champion.predict(ref[cols]),
                                 old_name=f"the champion (version {compared})", new_name="this challenger")


STALE_S = 12 * 3600   # a "running" record from another host older than this was killed


def _note_killed_run(cfg: JobConfig, record: dict) -> None:
    """A ``recluster.json`` still saying "running" from a process that is gone (SIGKILL, an
    evicted pod): its run was killed; the history gets a line saying so."""
    try:
        previous = json.loads(read_text(join(cfg.output, RECORD)))
    except (OSError, ValueError):
        return
    if previous.get("outcome") != "running":
        return
    import calendar
    try:
        started = calendar.timegm(time.strptime(previous["started_at"], "%Y-%m-%dT%H:%M:%SZ"))
    except (KeyError, ValueError):
        return
    if not process_gone(previous.get("host"), previous.get("pid"), started, STALE_S):
        return                                             # still running (another re-clustering)
    previous.update(outcome="killed", reason=f"killed before it finished (found by the run started at "
                                              f"{record['started_at']}); its decision was never recorded: see "
                                              f"{record['model_name']}@champion")
    history.append_history(cfg.output, previous)
    log(f"the re-clustering started at {previous.get('started_at')} was killed before it finished: noted in "
        f"{history.HISTORY}")


def _v(version) -> str:
    return "no champion" if version is None else f"version {version}"


def decide(rc: ReclusterConfig, name: str, version, seen, record: dict, unscorable: str | None) -> tuple[bool, str]:
    """Whether the policy wants the challenger promoted, and why (before the compare-and-set)."""
    if rc.policy == "manual":
        return False, (f"policy manual: registered as version {version} (alias candidate); promote it with "
                       f"'neurcam promote {name} {version}'")
    if seen is None:
        return True, f"the first model of {name} (policy {rc.policy})"
    if rc.policy == "always":
        return True, "policy always"
    if unscorable:
        return False, f"the champion cannot be scored on this snapshot ({unscorable}): compare and promote by hand"
    new, old = record["inertia_challenger"], record["inertia_champion"]
    gain = record["improvement"]
    if gain >= rc.min_improvement:
        return True, (f"inertia {new:.6g} is {gain:.2%} below the champion's {old:.6g} on the same data "
                      f"(at least {rc.min_improvement:.2%} needed)")
    return False, (f"inertia {new:.6g} vs the champion's {old:.6g} on the same data: {gain:.2%} better, "
                   f"{rc.min_improvement:.2%} needed (policy improve)")


def _write(cfg: JobConfig, rc: ReclusterConfig, record: dict, t0: float) -> None:
    """``recluster.json`` (replaced), a line of the history (appended), the Prometheus metrics."""
    record["finished_at"], record["finished_unix"] = history.now()
    record["duration_s"] = round(record["finished_unix"] - t0, 2)
    path = join(cfg.output, RECORD)
    write_text_atomic(as_path(path), json.dumps(record, indent=1, default=str))
    history.append_history(cfg.output, record)
    log(f"decision written to {path} (and appended to {join(cfg.output, history.HISTORY)})")
    try:
        history.export_metrics(cfg.output, record, history.read_history(cfg.output), rc.pushgateway)
    except Exception as exc:  # noqa: BLE001 - the decision is recorded; metrics are a report of it
        log(f"warning: the Prometheus metrics were not exported: {type(exc).__name__}: {redact(exc)}")


def _log_to_mlflow(record: dict) -> None:
    """The record beside the search's parent run (artifact, metrics, tags) and on the version."""
    from mlflow import MlflowClient
    client = MlflowClient()
    run_id = record.get("run_id")
    if run_id:
        client.log_dict(run_id, record, RECORD)
        for key in ("inertia_challenger", "inertia_champion", "agreement_ari", "size_shift", "top_terms_overlap"):
            if record.get(key) is not None:
                client.log_metric(run_id, f"recluster.{key}", float(record[key]))
        client.set_tag(run_id, "recluster.promoted", str(record["promoted"]).lower())
        client.set_tag(run_id, "recluster.reason", record["reason"][:5000])
        client.set_tag(run_id, "recluster.mapping", json.dumps(record["mapping"]))
    if record.get("challenger_version"):
        client.set_model_version_tag(record["model_name"], record["challenger_version"], "recluster.promoted",
                                     str(record["promoted"]).lower())
