"""Drift seen through the model (issue 69): the reference kept with the model, a snapshot compared
with it through ``NeurCAM.monitor`` and ``neurcam monitor`` (drift.json, monitor.html, the exit
status a cronjob acts on), each injected change named first and clean snapshots left quiet."""
import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from neurcam_dist import NeurCAM
from neurcam_dist.cli import DRIFT_ALERT, main

CENTRES = np.array([[0.0, 0.0, 0.0], [4.0, 0.0, 3.0], [0.0, 4.0, -3.0]])
PLANS = [["basic"] * 8 + ["plus"] * 2, ["plus"] * 8 + ["pro"] * 2, ["pro"] * 8 + ["basic"] * 2]
MODEL = dict(n_clusters=3, n_single=4, hidden=(16,), n_bases=8, epochs=12, warmup_epochs=4, verbose=False,
             random_state=0)


def snapshot(n: int, seed: int, weights=(1, 1, 1)) -> tuple[pd.DataFrame, np.ndarray]:
    """Rows of three groups: three numerics, a plan whose level follows the group, and noise."""
    rng = np.random.default_rng(seed)
    w = np.asarray(weights, dtype=float)
    g = rng.choice(3, n, p=w / w.sum())
    x = CENTRES[g] + rng.normal(0, 1, (n, 3))
    plan = [PLANS[k][i] for k, i in zip(g, rng.integers(0, 10, n), strict=False)]
    return pd.DataFrame({"tenure": x[:, 0], "spend": x[:, 1], "visits": x[:, 2], "plan": plan,
                         "noise": rng.normal(0, 1, n)}), g


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    X, g = snapshot(3000, 0)
    est = NeurCAM(**MODEL).fit(X)
    path = tmp_path_factory.mktemp("monitor") / "model"
    est.save(path)
    return est, path, g


def changed(kind: str, used: list[str]) -> tuple[pd.DataFrame, str]:
    """A snapshot with one injected change, and the feature it changed (None: a share change)."""
    numeric = [f for f in ("tenure", "spend", "visits") if f in used]
    df, _ = snapshot(1000, 7, (2, 1, 1) if kind == "share" else (1, 1, 1))
    if kind == "shift":
        df[numeric[0]] += df[numeric[0]].std()
        return df, numeric[0]
    if kind == "level":
        df.loc[df.sample(frac=0.25, random_state=0).index, "plan"] = "enterprise"
        return df, "plan"
    if kind == "blank":
        df.loc[df.sample(frac=0.35, random_state=0).index, numeric[-1]] = np.nan
        return df, numeric[-1]
    return df, None


def test_clean_snapshots_raise_at_most_one_alarm(fitted):
    est, _, _ = fitted
    drifts = [est.monitor(snapshot(1000, 100 + s)[0]) for s in range(20)]
    assert sum(d.alert for d in drifts) <= 1, [d.summary() for d in drifts if d.alert]
    # the quiet is not blindness: every record is complete and measured
    d = drifts[0]
    assert {f["name"] for f in d.features} == {"tenure", "spend", "visits", "plan", "noise"}
    assert all(0 <= f["score"] < 0.2 for f in d.features)
    assert abs(sum(c["share_now"] for c in d.clusters) - 1) < 1e-9
    assert 0 <= d.borderline["now"] <= 1 and 0 <= d.borderline["reference"] <= 1


@pytest.mark.parametrize("kind", ["shift", "level", "blank", "share"])
def test_each_injected_change_raises_the_alert_and_is_named_first(fitted, kind):
    est, _, g = fitted
    used = sorted(set(est.selected_features_))
    assert "plan" in used and [f for f in used if f in ("tenure", "spend", "visits")], used   # a used numeric to change
    df, feature = changed(kind, used)
    d = est.monitor(df)
    assert d.alert, d.summary()
    if feature is not None:
        assert d.drifted_features()[0] == feature, d.summary()
        assert d.features[0]["used"]
    if kind == "shift":
        assert d.terms[0]["name"] == feature   # the moved term of the shifted feature ranks first
        assert d.features[0]["shift_sd"] == pytest.approx(1.0, abs=0.25)
    if kind == "level":
        assert d.features[0]["unseen_now"] == pytest.approx(0.25) and d.features[0]["unseen_reference"] == 0
    if kind == "blank":
        assert d.features[0]["missing_now"] == pytest.approx(0.35) and d.features[0]["missing_reference"] == 0
    if kind == "share":   # group 0 doubled: the cluster most of its training rows joined grew, and is flagged
        grown = int(np.bincount(est.labels_[g == 0]).argmax())
        record = {c["id"]: c for c in d.clusters}[grown]
        assert record["drifted"] and record["share_now"] > record["share_reference"] * 1.25, d.summary()
        assert record["interval"][0] <= record["share_now"] <= record["interval"][1]
        shares = [t["share"] for t in record["because"]]
        assert shares and all(v > 0 for v in shares) and shares == sorted(shares, reverse=True)
        assert sum(shares) <= 1 + 1e-9


def test_a_drifted_column_the_model_ignores_is_reported_but_raises_no_alert(fitted):
    est, _, _ = fitted
    unused = [f for f in ("tenure", "spend", "visits", "noise") if f not in est.selected_features_]
    if not unused:
        pytest.fail(f"the model reads every column ({est.selected_features_}): the test needs one it ignores")
    df, _ = snapshot(1000, 11)
    df[unused[0]] += 10 * df[unused[0]].std()
    d = est.monitor(df)
    record = next(f for f in d.features if f["name"] == unused[0])
    assert record["drifted"] and not record["used"] and not d.alert, d.summary()


def test_the_margin_shift_splits_exactly_into_the_terms(fitted):
    est, _, _ = fitted
    df, _ = changed("shift", sorted(set(est.selected_features_)))
    d = est.monitor(df)
    for c in d.clusters:
        total = sum(t["margin_shift"][str(c["id"])] for t in d.terms)
        assert total == pytest.approx(c["margin_shift"], abs=1e-9)
    # ... and into the change of the model's own logits: each cluster's mean margin (its logit less
    # the mean logit), on the snapshot against the training rows the reference was built from
    def margins(X):
        z = est.decision_function(X)
        return (z - z.mean(axis=1, keepdims=True)).mean(axis=0)
    moved = margins(df) - margins(est.reference_)
    for k, c in enumerate(d.clusters):
        assert c["id"] == est.cluster_ids_[k]
        assert c["margin_shift"] == pytest.approx(moved[k], abs=1e-4)


def test_the_reference_travels_with_the_model_and_needs_no_rows(fitted):
    est, path, _ = fitted
    config = json.loads((path / "config.json").read_text())
    ref = config["drift_reference"]
    assert ref["version"] == 1 and ref["training_rows"] == 3000 and len(ref["cluster_shares"]) == 3
    assert len(json.dumps(ref)) < 20_000, "the reference holds summaries, not rows"
    loaded = NeurCAM.load(path)
    assert getattr(loaded, "reference_", None) is None
    df, _ = changed("level", sorted(set(est.selected_features_)))
    assert loaded.monitor(df).to_dict() == est.monitor(df).to_dict()


def test_neurcam_monitor_writes_its_verdict_and_exits_for_a_cronjob(fitted, tmp_path, capsys):
    est, path, _ = fitted
    clean, _ = snapshot(800, 3)
    clean.to_csv(tmp_path / "clean.csv", index=False)
    df, feature = changed("shift", sorted(set(est.selected_features_)))
    df.to_parquet(tmp_path / "shifted.parquet")
    out = tmp_path / "drift"
    assert main(["monitor", "--model", str(path), "--input", str(tmp_path / "clean.csv"), "--output", str(out)]) == 0
    assert "no drift" in capsys.readouterr().out
    record = json.loads((out / "drift.json").read_text())
    assert record["schema"] == "neurcam-drift/1" and record["alert"] is False and record["n_rows"] == 800
    assert main(["monitor", "--model", str(path), "--input", str(tmp_path / "shifted.parquet"),
                 "--output", str(out)]) == DRIFT_ALERT   # an earlier verdict is replaced whole
    said = capsys.readouterr().out
    assert said.startswith("ALERT") and feature in said.splitlines()[0]
    record = json.loads((out / "drift.json").read_text())
    assert record["alert"] is True and record["features"][0]["name"] == feature
    assert feature in (out / "monitor.html").read_text()
    from prometheus_client.parser import text_string_to_metric_families
    gauges = {(m.name, m.labels.get("feature") or m.labels.get("cluster")): m.value
              for fam in text_string_to_metric_families((out / "monitor.prom").read_text()) for m in fam.samples}
    assert gauges[("neurcam_monitor_alert", None)] == 1.0 and gauges[("neurcam_monitor_rows", None)] == len(df)
    assert gauges[("neurcam_monitor_feature_psi", feature)] == pytest.approx(record["features"][0]["score"])
    assert sum(v for (name, _), v in gauges.items() if name == "neurcam_monitor_cluster_share") == pytest.approx(1)
    # a folder it did not write is never replaced
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    assert main(["monitor", "--model", str(path), "--input", str(tmp_path / "clean.csv"),
                 "--output", str(tmp_path / "mine")]) == 2
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"


def test_a_model_without_a_reference_says_how_to_add_one(fitted, tmp_path, capsys):
    est, path, _ = fitted
    old = NeurCAM.load(path)
    old.adopt(dataclasses.replace(old.fitted_, drift_reference=None))
    old.save(tmp_path / "old")   # as a release before monitoring saved it: no reference, no rows
    assert "drift_reference" not in json.loads((tmp_path / "old" / "config.json").read_text())
    train, _ = snapshot(3000, 0)
    train.to_csv(tmp_path / "train.csv", index=False)
    snapshot(500, 5)[0].to_csv(tmp_path / "new.csv", index=False)
    args = ["monitor", "--model", str(tmp_path / "old"), "--input", str(tmp_path / "new.csv"),
            "--output", str(tmp_path / "d")]
    assert main(args) == 2
    assert "--reference TABLE" in capsys.readouterr().err and not (tmp_path / "d").exists()
    assert main(args + ["--reference", str(tmp_path / "train.csv")]) == 0
    assert json.loads((tmp_path / "d" / "drift.json").read_text())["alert"] is False


@pytest.mark.parametrize("case", ["missing feature", "changed type", "text in numbers", "empty"])
def test_a_snapshot_that_cannot_be_compared_is_refused_by_name(fitted, tmp_path, capsys, case):
    _, path, _ = fitted
    df, _ = snapshot(300, 4)
    if case == "missing feature":
        df = df.drop(columns="tenure")
    elif case == "changed type":
        df["plan"] = np.arange(len(df)) % 3
    elif case == "text in numbers":
        df["tenure"] = df["tenure"].map(lambda v: f"{v:.1f} months")
    else:
        df = df.iloc[:0]
    df.to_csv(tmp_path / "snap.csv", index=False)
    out = tmp_path / "d"
    assert main(["monitor", "--model", str(path), "--input", str(tmp_path / "snap.csv"), "--output", str(out)]) == 2
    err = capsys.readouterr().err
    expected = {"missing feature": "tenure", "changed type": "plan", "text in numbers": "tenure",
                "empty": "no rows"}[case]
    assert expected in err, err
    assert not out.exists()


def test_the_monitor_page_shows_what_moved_in_chromium(fitted, tmp_path):
    from playwright.sync_api import sync_playwright

    from .test_report_browser import ARGS, chromium
    est, path, _ = fitted
    df, feature = changed("blank", sorted(set(est.selected_features_)))
    df.to_csv(tmp_path / "snap.csv", index=False)
    assert main(["monitor", "--model", str(path), "--input", str(tmp_path / "snap.csv"),
                 "--output", str(tmp_path / "d")]) == DRIFT_ALERT
    requests, errors = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium(), args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 1500})
            page.on("request", lambda r: requests.append(r.url))
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto((tmp_path / "d" / "monitor.html").as_uri(), wait_until="load")
            alert = page.locator("#alert")
            assert alert.is_visible() and feature in alert.inner_text()
            first = page.locator("#features ~ table tbody tr").first.inner_text()
            assert first.startswith(feature) and "drifted" in first
            heading = page.locator("h3").first.inner_text()
            assert heading.startswith(feature)
            # the missing bin's two bars: none then, 35% now
            widths = page.evaluate("""() => { const rows = Array.from(document.querySelectorAll('h3 + p + table tr'));
                const m = rows.find(r => r.cells[0].innerText === 'missing');
                return Array.from(m.querySelectorAll('div')).map(d => d.getBoundingClientRect().width); }""")
            assert widths[0] == 0 and widths[1] > 20, widths
            ids = page.evaluate("() => Array.from(document.querySelectorAll('a[href^=\"#\"]')).map(a => a.hash.slice(1))")
            for target in ids:
                assert page.locator(f"#{target}").count() == 1, target
            page.screenshot(path=str(tmp_path / "monitor.png"), full_page=True)
        finally:
            browser.close()
    assert errors == [] and all(u.startswith("file://") for u in requests), (errors, requests)


def test_a_parquet_snapshot_streams_through_ray_to_the_same_verdict(fitted, ray_cluster, tmp_path, monkeypatch):
    """A snapshot in several Parquet files, reduced block by block by Ray Data actors (forced),
    gives the verdict the whole snapshot gives in memory: bins, shares and term shifts add up."""
    est, path, _ = fitted
    df, feature = changed("level", sorted(set(est.selected_features_)))
    folder = tmp_path / "snapshot"
    folder.mkdir()
    for i, part in enumerate(np.array_split(np.arange(len(df)), 4)):
        df.iloc[part].to_parquet(folder / f"part-{i}.parquet", index=False)
    monkeypatch.setenv("NEURCAM_LOCAL_PASS_BYTES", "0")
    out = tmp_path / "drift"
    assert main(["monitor", "--model", str(path), "--input", str(folder), "--output", str(out)]) == DRIFT_ALERT
    by_ray = json.loads((out / "drift.json").read_text())
    here = est.monitor(df).to_dict()
    assert by_ray["n_rows"] == here["n_rows"] == len(df) and by_ray["alert"] is here["alert"] is True
    assert [f["name"] for f in by_ray["features"]] == [f["name"] for f in here["features"]]
    assert by_ray["features"][0]["name"] == feature
    for a, b in zip(by_ray["features"], here["features"], strict=False):
        assert a["bins"]["now"] == pytest.approx(b["bins"]["now"], abs=1e-12) and a["score"] == pytest.approx(b["score"])
    assert [c["share_now"] for c in by_ray["clusters"]] == [c["share_now"] for c in here["clusters"]]
    assert [t["name"] for t in by_ray["terms"]] == [t["name"] for t in here["terms"]]
    for a, b in zip(by_ray["terms"], here["terms"], strict=False):
        assert a["margin_shift"] == pytest.approx(b["margin_shift"], abs=1e-6)


def test_a_registry_model_is_monitored_into_mlflow_and_a_pushgateway(fitted, mlflow_server, tmp_path, monkeypatch):
    """``models:/NAME@ALIAS``: the verdict becomes a run of the experiment neurcam-monitor (metrics,
    tags, drift.json and monitor.html) on a real MLflow server, and the gauges are pushed to a
    Pushgateway (a stand-in server on 127.0.0.1 that records what is PUT)."""
    import mlflow

    from neurcam_dist import tracking

    from .conftest import pushgateway_stub
    est, _, _ = fitted
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    tracking.use(mlflow_server, experiment="monitored-models")
    X, _ = snapshot(200, 1)
    with mlflow.start_run():
        tracking.log_model(est, X, registered_name="monitored")
    df, feature = changed("level", sorted(set(est.selected_features_)))
    df.to_csv(tmp_path / "snap.csv", index=False)
    with pushgateway_stub() as (address, received):
        assert main(["monitor", "--model", "models:/monitored@candidate", "--input", str(tmp_path / "snap.csv"),
                     "--output", str(tmp_path / "d"), "--pushgateway", address]) == DRIFT_ALERT
    (path, body), = received
    assert path.startswith("/metrics/job/neurcam-monitor/model")
    assert 'neurcam_monitor_alert{model="models:/monitored@candidate"} 1.0' in body
    client = mlflow.MlflowClient()
    exp = client.get_experiment_by_name("neurcam-monitor")
    run, = client.search_runs([exp.experiment_id])
    assert run.data.tags["neurcam.model"] == "models:/monitored@candidate" and run.data.tags["drift.alert"] == "true"
    assert run.data.metrics["drift.alert"] == 1.0 and run.data.metrics[f"drift.psi.{feature}"] > 0.2
    assert sorted(a.path for a in client.list_artifacts(run.info.run_id)) == ["drift.json", "monitor.html"]


def test_the_monitor_page_examples_run_as_written(capsys, tmp_path):
    """docs/monitor.md's Python example as printed, and its alert rules on the gauges the monitor writes."""
    import re

    import yaml

    from neurcam_dist.ops.history import drift_gauges
    from prometheus_client import generate_latest

    from .conftest import doc_blocks
    (code,) = doc_blocks("docs/monitor.md")
    space: dict = {}
    exec(compile(code.replace("NeurCAM(n_clusters=2, random_state=0)", "NeurCAM(n_clusters=2, random_state=0, "
                              "verbose=False)"), "monitor.md", "exec"), space)
    first = capsys.readouterr().out.splitlines()[0]
    assert first == "True ['tenure']", first
    assert space["record"]["schema"] == "neurcam-drift/1"
    (rules,) = doc_blocks("docs/monitor.md", "yaml")
    exported = generate_latest(drift_gauges(space["record"], "m")).decode()
    names = set(re.findall(r"^(neurcam_\w+)\{", exported, re.M))
    used = {n for r in yaml.safe_load(rules)["groups"][0]["rules"] for n in re.findall(r"neurcam_\w+", r["expr"])}
    assert used and used <= names, used - names


def test_cells_near_float64s_limit_leave_the_verdict_finite(fitted):
    """Amounts of 1e308 in a snapshot (an export's sentinel) move rows to the top bin and the
    shapes' tails, and every figure of drift.json stays a finite number."""
    est, _, _ = fitted
    df, _ = snapshot(1000, 12)
    used = [f for f in ("tenure", "spend", "visits") if f in est.selected_features_]
    df.loc[df.sample(frac=0.3, random_state=0).index, used[0]] = 1e308
    d = est.monitor(df)
    text = json.dumps(d.to_dict(), allow_nan=False)   # raises on NaN or inf
    assert d.alert and d.drifted_features()[0] == used[0] and "Infinity" not in text
    record = next(f for f in d.features if f["name"] == used[0])
    assert record["bins"]["now"][-2] == pytest.approx(0.3 + 0.7 * 0.1, abs=0.03) and record["mean_now"] is None


def test_the_ray_job_entrypoint_exits_with_the_verdict(fitted, tmp_path):
    """``jobs/monitor.py`` (what ``ray job submit -- python jobs/monitor.py ...`` runs) is the command:
    its exit status is the verdict's, 4 on an alert, which Ray reports as a failed job."""
    import subprocess
    import sys
    from pathlib import Path
    est, path, _ = fitted
    df, _ = changed("shift", sorted(set(est.selected_features_)))
    df.to_parquet(tmp_path / "snap.parquet")
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, str(root / "jobs" / "monitor.py"), "--model", str(path), "--input",
                           str(tmp_path / "snap.parquet"), "--output", str(tmp_path / "d")],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == DRIFT_ALERT, done.stderr[-2000:]
    assert done.stdout.startswith("ALERT") and (tmp_path / "d" / "drift.json").is_file()
