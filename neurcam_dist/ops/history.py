"""What every re-clustering leaves for the people and the alerts that watch it.

- ``OUTPUT/recluster-history.jsonl``: one line per decision (time, snapshot, versions, figures,
  promoted, reason), appended, never rewritten in place; ``neurcam history`` prints it.
- ``OUTPUT/recluster.prom``: the outcome in Prometheus' text format (node_exporter's textfile
  collector reads it), and the same pushed to a Pushgateway when ``recluster.pushgateway`` is set.
- the snapshot's fingerprint (its files' names, sizes and modification times), tagged on the
  version it trained, so that a re-run on an unchanged snapshot is skipped.
- retention: the search's ``trials/NAME`` and Ray Train's ``_ray/NAME-*`` folders of all but the
  newest searches are deleted.
"""
from __future__ import annotations

import hashlib
import json
import os
import time

from ..names import run_age_s, utc
from ..redaction import redact
from ..uris import Location

HISTORY = "recluster-history.jsonl"
METRICS = "recluster.prom"


# ---------------------------------------------------------------- history
def append_history(output: Location, record: dict) -> str:
    """Add ``record`` as one line of ``OUTPUT/recluster-history.jsonl``; returns its path. Locally
    one ``write`` of the whole line to a file opened for appending (after a newline when a killed
    writer left the last line torn); on an object store (which has no append) the file is read and
    written back whole, as one object."""
    line = json.dumps(record, default=str, sort_keys=True) + "\n"
    path = output / HISTORY
    if not path.is_uri:
        p = path.path
        p.parent.mkdir(parents=True, exist_ok=True)
        with open(p, "a+b") as f:
            end = f.seek(0, os.SEEK_END)
            if end and (f.seek(end - 1), f.read(1))[1] != b"\n":
                line = "\n" + line     # after a line a kill cut short: that one stays torn, this one whole
            f.write(line.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        return str(p)
    from ..storage.published import put_text
    text = _read_text(path)
    put_text(text + ("\n" if text and not text.endswith("\n") else "") + line, str(path))
    return str(path)


def _read_text(path: Location) -> str:
    """The file's text, or "" when there is none yet."""
    from ..storage.published import read_text
    try:
        return read_text(path)
    except FileNotFoundError:
        return ""


def inertia_ratio(record: dict) -> float | None:
    """Challenger / champion inertia on the same snapshot, when both were measured."""
    new, old = record.get("inertia_challenger"), record.get("inertia_champion")
    return new / old if new and old else None


NUMBERS = ("inertia_challenger", "inertia_champion", "agreement_ari", "finished_unix", "started_unix")


def read_history(output: Location, say=None) -> list[dict]:
    """The decisions recorded under ``output``, oldest first. A line that is not a JSON object
    with numbers where numbers belong (a torn write, a hand edit: ``null``, ``"x"`` for an
    inertia) is left out and named: ``say(message)`` once per line, or a ``UserWarning`` when no
    ``say`` is given; the torn last line of a run still writing is left out the same way."""
    import warnings
    out = []
    lines = _read_text(output / HISTORY).splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        why = _unreadable(line)
        if why is None:
            out.append(json.loads(line))
            continue
        message = (f"{HISTORY} line {number} of {len(lines)} could not be read ({why}): left out"
                   + (" (a run still writing it?)" if number == len(lines) else ""))
        (say or (lambda m: warnings.warn(m, stacklevel=3)))(message)
    return out


def _unreadable(line: str) -> str | None:
    """Why a history line is not a record, or None."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        return f"not JSON: {exc.msg} at column {exc.colno}"
    if not isinstance(record, dict):
        return f"a JSON {type(record).__name__}, not a record"
    bad = [k for k in NUMBERS if record.get(k) is not None
           and (isinstance(record[k], bool) or not isinstance(record[k], (int, float)))]
    return f"{', '.join(bad)} not a number" if bad else None


def history_table(records: list[dict]):
    """The decisions as a DataFrame, the columns ``neurcam history`` prints."""
    import pandas as pd
    rows = []
    for r in records:
        rows.append({"finished": r.get("finished_at"), "snapshot": r.get("snapshot"),
                     "champion": r.get("compared_with") or r.get("champion_version"),
                     "challenger": r.get("challenger_version"), "inertia_ratio": inertia_ratio(r),
                     "agreement_ari": r.get("agreement_ari"), "drift_alert": r.get("drift_alert"),
                     "promoted": r.get("promoted"), "outcome": r.get("outcome"), "reason": r.get("reason")})
    return pd.DataFrame(rows, columns=["finished", "snapshot", "champion", "challenger", "inertia_ratio",
                                       "agreement_ari", "drift_alert", "promoted", "outcome", "reason"])


# ---------------------------------------------------------------- Prometheus
def export_metrics(output: Location, record: dict, history: list[dict], pushgateway: str | None = None) -> str:
    """Write the run's outcome as Prometheus metrics to ``OUTPUT/recluster.prom`` (and push them
    to ``pushgateway`` when given); returns the text. ``history`` (this run's line included) gives
    the last successful run's time across failures."""
    from prometheus_client import CollectorRegistry, Gauge, generate_latest
    registry = CollectorRegistry()
    labels = {"model": record.get("model_name") or ""}

    def gauge(name: str, doc: str, value) -> None:
        if value is None:
            return
        g = Gauge(name, doc, list(labels), registry=registry)
        g.labels(**labels).set(float(value))

    finished = [r for r in history if r.get("outcome") not in ("failed", "killed")]
    gauge("neurcam_recluster_last_run_timestamp_seconds", "When the last re-clustering ended (Unix time).",
          record.get("finished_unix"))
    gauge("neurcam_recluster_last_success_timestamp_seconds",
          "When the last re-clustering that did not fail ended (Unix time).",
          finished[-1].get("finished_unix") if finished else None)
    gauge("neurcam_recluster_failed", "1 when the last re-clustering failed.", record.get("outcome") == "failed")
    gauge("neurcam_recluster_skipped", "1 when the last re-clustering skipped an unchanged snapshot.",
          record.get("outcome") == "skipped")
    gauge("neurcam_recluster_promoted", "1 when the last re-clustering promoted its model.", bool(record.get("promoted")))
    gauge("neurcam_recluster_inertia_ratio", "Challenger inertia / champion inertia on the same snapshot.",
          inertia_ratio(record))
    gauge("neurcam_recluster_agreement_ari", "Agreement (ARI) of challenger and champion on the snapshot.",
          record.get("agreement_ari"))
    gauge("neurcam_recluster_size_shift", "Total variation distance of the cluster size shares.",
          record.get("size_shift"))
    gauge("neurcam_recluster_duration_seconds", "How long the last re-clustering took.", record.get("duration_s"))
    gauge("neurcam_recluster_rows", "Rows in the last re-clustering's snapshot.", record.get("n_rows"))
    gauge("neurcam_recluster_drift_alert", "1 when the monitor run first (recluster.when=drift) raised an alert.",
          record.get("drift_alert"))
    text = generate_latest(registry).decode()
    from ..storage import write_text_atomic
    write_text_atomic(output / METRICS, text)   # a local file replaced whole, or one object put
    if pushgateway:
        from prometheus_client import push_to_gateway
        push_to_gateway(pushgateway, job="neurcam-recluster", grouping_key=labels, registry=registry)
    return text


DRIFT_METRICS = "monitor.prom"


def drift_gauges(record: dict, model: str):
    """``neurcam monitor``'s verdict (``drift.json``'s ``record``) as a Prometheus registry of
    gauges labelled with the ``model``: the alert, when it ran, the rows, the drifted features and
    clusters, each feature's PSI and missing share and each cluster's share now and at training."""
    import time

    from prometheus_client import CollectorRegistry, Gauge
    registry = CollectorRegistry()

    def gauge(name: str, doc: str, values: dict, label: str | None = None) -> None:
        g = Gauge(name, doc, ["model"] + ([label] if label else []), registry=registry)
        for key, value in values.items():
            (g.labels(model=model, **{label: key}) if label else g.labels(model=model)).set(float(value))

    gauge("neurcam_monitor_alert", "1 when the last monitor raised a drift alert.", {None: record["alert"]})
    gauge("neurcam_monitor_last_run_timestamp_seconds", "When the last monitor ran (Unix time).", {None: time.time()})
    gauge("neurcam_monitor_rows", "Rows in the last monitored snapshot.", {None: record["n_rows"]})
    gauge("neurcam_monitor_drifted_features", "Drifted features in the last snapshot.",
          {None: sum(f["drifted"] for f in record["features"])})
    gauge("neurcam_monitor_drifted_clusters", "Drifted clusters in the last snapshot.",
          {None: sum(c["drifted"] for c in record["clusters"])})
    gauge("neurcam_monitor_feature_psi", "Population stability index of each feature against training.",
          {f["name"]: f["score"] for f in record["features"]}, "feature")
    gauge("neurcam_monitor_feature_missing_share", "Share of missing cells of each feature now.",
          {f["name"]: f["missing_now"] for f in record["features"]}, "feature")
    gauge("neurcam_monitor_cluster_share", "Each cluster's share of the snapshot.",
          {str(c["id"]): c["share_now"] for c in record["clusters"]}, "cluster")
    gauge("neurcam_monitor_cluster_share_reference", "Each cluster's share of the training rows.",
          {str(c["id"]): c["share_reference"] for c in record["clusters"]}, "cluster")
    gauge("neurcam_monitor_borderline_share", "Share of borderline rows in the snapshot.",
          {None: record["borderline"]["now"]})
    return registry


def push_drift(registry, pushgateway: str, model: str) -> None:
    """The monitor's gauges pushed to a Pushgateway (``host:9091``) as job ``neurcam-monitor``."""
    from prometheus_client import push_to_gateway
    push_to_gateway(pushgateway, job="neurcam-monitor", grouping_key={"model": model}, registry=registry)


# ---------------------------------------------------------------- snapshots and retention
def fingerprint(data_path: str) -> str:
    """sha256 of a snapshot's data files (``data.path``, as the config gives it: the data layer
    resolves it): their paths below it, sizes and modification times (an unchanged snapshot has
    the same one; a rewritten or added file changes it)."""
    from ..data import resolve
    src, root = resolve(data_path), str(data_path)
    h = hashlib.sha256()
    for f, stamp in sorted(src.stamp().items()):
        h.update(f"{f.removeprefix(root)}\0{stamp}\n".encode())
    return h.hexdigest()


def _subfolders(folder: Location) -> list[str]:
    """The names of the folders directly in ``folder`` (none when it is missing or unreadable)."""
    from pyarrow.fs import FileSelector, FileType
    fs, root = folder.filesystem()
    try:
        infos = fs.get_file_info(FileSelector(root.rstrip("/"), allow_not_found=True))
    except OSError:
        return []
    return sorted(i.path.rstrip("/").rsplit("/", 1)[-1] for i in infos if i.type == FileType.Directory)


def _delete(folder: Location, names: list[str], log=None) -> None:
    for name in names:
        fs, path = (folder / name).filesystem()
        try:
            fs.delete_dir(path)
        except OSError as exc:
            if log:
                log(f"warning: could not delete {redact(folder / name)}: {exc}")


UNRECORDED_S = 12 * 3600   # a search folder without a history line older than this was killed


def prune_runs(output: Location, storage: Location, keep: int, log=None) -> list[str]:
    """Keep the ``keep`` newest searches' folders: ``OUTPUT/trials/search-*`` (names sort by age:
    they start with the search's UTC time) and their trials' Ray Train folders
    ``STORAGE/search-*-TRIAL`` (``_ray/staging`` and other names are left alone). Only a search
    the history records as ended is deleted: one still running (another re-clustering into the same
    output) is never pulled from under it; one with no line after ``UNRECORDED_S`` was killed and
    goes too. Returns the search names deleted."""
    trials = output / "trials"
    searches = [n for n in _subfolders(trials) if n.startswith("search-")]
    ended = {r.get("search") for r in read_history(output)}
    old = searches[:-keep] if keep > 0 else searches
    gone = [n for n in old if n in ended or run_age_s(n, "search") > UNRECORDED_S]
    if gone:
        _delete(trials, gone, log)
        _delete(storage, [n for n in _subfolders(storage) if any(n.startswith(g + "-") for g in gone)], log)
    return gone


def now() -> tuple[str, float]:
    """``(ISO UTC time, Unix time)``."""
    t = time.time()
    return utc(t), round(t, 3)
