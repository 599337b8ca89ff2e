"""The ``neurcam`` command: fit on a file, predict with the saved model, clear errors."""
import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from neurcam_dist import NeurCAM
from neurcam_dist.cli import main


def test_fit_then_predict_from_files(data, tmp_path, capsys, ray_cluster):
    X, y = data
    table = X.assign(label=y, id=np.arange(len(X)))
    csv = tmp_path / "table.csv"
    table.to_csv(csv, index=False)
    out = tmp_path / "run"
    rc = main(["fit", "--data", str(csv), "--out", str(out), "--n-clusters", "3", "--label", "label",
               "--warmup-epochs", "5", "--epochs", "15", "--quiet"])
    assert rc == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["n_rows"] == 240 and m["n_features"] == 4  # id and label are not features
    assert {"inertia", "ari", "nmi", "acc"} <= set(m)
    est = NeurCAM.load(out / "model")
    assert list(est.feature_names_in_) == ["f0", "f1", "f2", "f3"]
    assert m["inertia"] == est.inertia(X)

    table.to_parquet(tmp_path / "table.parquet")
    scored = tmp_path / "scored"
    assert main(["predict", "--model", str(out / "model"), "--input", str(tmp_path / "table.parquet"),
                 "--output", str(scored), "--carry", "label"]) == 0
    res = pd.read_parquet(scored).sort_values("id")
    assert len(res) == 240 and res["id"].tolist() == list(range(240))
    assert np.array_equal(res["cluster"].to_numpy(), est.predict(X))
    assert np.array_equal(res["label"].to_numpy(), y)
    np.testing.assert_allclose(res[[f"proba_{k}" for k in range(3)]].sum(1), 1.0, atol=1e-9)


def test_errors_exit_nonzero_and_write_nothing(data, tmp_path, capsys):
    X, _ = data
    csv = tmp_path / "t.csv"
    X.to_csv(csv, index=False)
    out = tmp_path / "run"
    rc = main(["fit", "--data", str(csv), "--out", str(out), "--n-clusters", "3", "--label", "truth", "--quiet"])
    assert rc == 2
    assert "label column 'truth' is not in the data" in capsys.readouterr().err
    assert not out.exists()
    rc = main(["fit", "--data", str(csv), "--out", str(out), "--n-clusters", "3", "--features", "F0", "f1", "f2x", "--quiet"])
    assert rc == 2 and not out.exists()
    assert ("feature columns ['F0', 'f2x'] are not in the data; did you mean 'f0' for 'F0', 'f2' for 'f2x'?; "
            f"columns: {[str(c) for c in X.columns]}") in capsys.readouterr().err
    X.assign(f2=X.f2.astype(str).where(X.index != 3, "unknown")).to_csv(csv, index=False)
    rc = main(["fit", "--data", str(csv), "--out", str(out), "--n-clusters", "3", "--features", "f0", "f2", "--quiet"])
    assert rc == 2
    assert "non-numeric columns ['f2']" in capsys.readouterr().err
    assert not out.exists()


def test_console_script_is_installed():
    res = subprocess.run([sys.executable, "-m", "neurcam_dist.cli", "--version"], capture_output=True, text=True)
    assert res.returncode == 0 and "neurcam-dist" in res.stdout


@pytest.mark.slow
def test_demo_runs_the_whole_service_on_embedded_defaults(tmp_path, monkeypatch, capsys, ray_cluster):
    """The README's first command (about 5 minutes on 2 cores): search, local store, registry."""
    import mlflow
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "mlflow ui --backend-store-uri sqlite:///" in out and "report/report.html" in out
    summary = json.loads((tmp_path / "runs" / "demo" / "search.json").read_text())
    assert len(summary["trials"]) == 3 and all(t["status"] == "ok" for t in summary["trials"])
    assert (tmp_path / "runs" / "demo" / "report" / "report.html").exists()
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    mv = mlflow.MlflowClient().get_model_version_by_alias("digits-demo", "candidate")
    best = min(summary["trials"], key=lambda t: t["inertia"])
    assert mlflow.MlflowClient().get_run(mv.run_id).data.metrics["inertia"] == pytest.approx(best["inertia"])
