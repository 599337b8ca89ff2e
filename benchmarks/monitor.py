"""``NeurCAM.monitor`` beside Evidently's ``DataDriftPreset`` on the same snapshots (issue 69).

    python benchmarks/monitor.py            # writes benchmarks/results/monitor.md
    python benchmarks/monitor.py --quick    # fewer repeats, a smaller timing snapshot

Evidently 0.7 imports a pandas 2 internal: run this where ``evidently`` and ``pandas<3`` are
installed (``python -m venv --system-site-packages v && v/bin/pip install evidently "pandas<3"``).

The table: ``data.synthetic.mixed_table`` (three customer segments set by ``plan``, with ``usage``
shifted by segment; ``region``, ``paperless``, ``tenure``, ``income`` beside; blank cells), a model
fitted on 3,000 rows, both monitors given the same training rows as reference. Snapshots of 1,000
rows, each with one injected change: ``usage`` shifted by one standard deviation, a new ``plan`` level
in 25% of the rows, ``usage`` blank in 35% of the rows, the first segment twice as frequent; and
clean snapshots from the same generator.

Columns: for each scenario and repeat, whether each monitor alerts, and whether the changed column
is the one it names first (NeurCAM: its drifted features, most drifted first; Evidently: its drifted
columns, smallest p-value / largest distance first). Evidently alerts in two ways: *dataset drift*
(its preset's rule: at least half the columns drifted) and *any column* drifted (what a nightly job
watching columns would act on). A second table: seconds per million rows of each monitor on one
large snapshot (Evidently: the preset's report; NeurCAM: ``monitor``, encoding and the network pass
included).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, machine, markdown_table, write_atomic

from neurcam_dist import NeurCAM
from neurcam_dist.data.synthetic import mixed_table

FEATURES = ["plan", "region", "paperless", "usage", "tenure", "income"]


def snapshot(n: int, seed: int, kind: str) -> tuple[pd.DataFrame, str | None]:
    """A snapshot with the injected change ``kind`` and the column it changed (None: none or shares)."""
    df, _ = mixed_table(n, seed=seed, weights=(2, 1, 1) if kind == "share" else None)
    df = df[FEATURES]
    rng = np.random.default_rng(seed + 1000)
    if kind == "shift":
        df["usage"] += df["usage"].std()
        return df, "usage"
    if kind == "level":
        df.loc[rng.random(n) < 0.25, "plan"] = "enterprise"
        return df, "plan"
    if kind == "blank":
        df.loc[rng.random(n) < 0.35, "usage"] = np.nan
        return df, "usage"
    return df, None


def evidently_verdict(reference: pd.DataFrame, current: pd.DataFrame) -> dict:
    """Evidently's DataDriftPreset: drifted columns (most drifted first) and its dataset drift."""
    from evidently import Report
    from evidently.presets import DataDriftPreset
    out = Report([DataDriftPreset()]).run(current_data=current, reference_data=reference).dict()["metrics"]
    share = next(m["value"]["share"] for m in out if m["metric_name"].startswith("DriftedColumnsCount"))
    drifted = []
    for m in out:
        cfg = m["config"]
        if cfg.get("type", "").endswith("ValueDrift"):
            value, threshold = float(m["value"]), float(cfg["threshold"])
            p_value = "p_value" in cfg["method"]
            if (value < threshold) if p_value else (value >= threshold):
                drifted.append((value if p_value else -value, cfg["column"]))
    names = [c for _, c in sorted(drifted)]
    return {"dataset": share >= 0.5, "any": bool(names), "first": names[0] if names else None}


def detections(est, reference: pd.DataFrame, repeats: int) -> list[dict]:
    rows = []
    for kind in ("clean", "shift", "level", "blank", "share"):
        counts = {"ours": 0, "ours_first": 0, "ev_dataset": 0, "ev_any": 0, "ev_first": 0}
        for r in range(repeats):
            df, changed = snapshot(1000, 100 + r, kind)
            d = est.monitor(df)
            ev = evidently_verdict(reference, df)
            counts["ours"] += d.alert
            counts["ev_dataset"] += ev["dataset"]
            counts["ev_any"] += ev["any"]
            if changed is not None:
                counts["ours_first"] += (d.drifted_features() or [None])[0] == changed
                counts["ev_first"] += ev["first"] == changed
            elif kind == "share":
                counts["ours_first"] += bool(d.drifted_clusters())
        rows.append({"snapshot": kind, "repeats": repeats, "NeurCAM alerts": counts["ours"],
                     "NeurCAM: changed column first (share: a cluster flagged)":
                         counts["ours_first"] if kind != "clean" else "-",
                     "Evidently dataset drift": counts["ev_dataset"], "Evidently any column": counts["ev_any"],
                     "Evidently: changed column first": counts["ev_first"] if kind not in ("clean", "share") else "-"})
    return rows


def timings(est, reference: pd.DataFrame, n: int) -> list[dict]:
    df, _ = snapshot(n, 7, "shift")
    t0 = time.perf_counter()
    est.monitor(df)
    ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    evidently_verdict(reference, df)
    theirs = time.perf_counter() - t0
    return [{"monitor": "NeurCAM.monitor", "rows": n, "seconds": round(ours, 2), "s per 1M rows": round(ours * 1e6 / n, 1)},
            {"monitor": "Evidently DataDriftPreset", "rows": n, "seconds": round(theirs, 2),
             "s per 1M rows": round(theirs * 1e6 / n, 1)}]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    import evidently
    train, _ = mixed_table(3000, seed=0)
    train = train[FEATURES]
    est = NeurCAM(n_clusters=3, random_state=0, verbose=False).fit(train)
    repeats = 3 if args.quick else 20
    found = detections(est, train, repeats)
    timed = timings(est, train, 100_000 if args.quick else 1_000_000)
    text = (f"# The monitor beside Evidently\n\n{machine()}; NeurCAM (defaults, 3 clusters, terms: "
            f"{', '.join(dict.fromkeys(est.selected_features_))}) fitted on 3,000 rows of `mixed_table`; Evidently "
            f"{evidently.__version__} with pandas {pd.__version__}. `python benchmarks/monitor.py`.\n\n"
            f"## Detections ({repeats} snapshots of 1,000 rows each)\n\n{markdown_table(found)}\n\n"
            f"## Time\n\n{markdown_table(timed)}\n")
    print(text)
    if not args.quick:
        write_atomic(ROOT / "results" / "monitor.md", text)


if __name__ == "__main__":
    main()
