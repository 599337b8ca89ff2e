"""The steps a new user takes, in the order they take them: fit a table with a text id column,
fit it again into the same place, read the report and the progress in a log."""
from __future__ import annotations

import os
import subprocess
import sys

from pathlib import Path

import pandas as pd
import pytest

from neurcam_dist import cli

from .conftest import ROOT, doc_blocks

FAST = ["--hidden", "16", "--n-bases", "8", "--epochs", "12", "--warmup-epochs", "4"]


def run(capsys, *argv):
    capsys.readouterr()
    rc = cli.main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture(scope="module")
def wine(tmp_path_factory):
    from sklearn.datasets import load_wine
    frame = load_wine(as_frame=True).frame.drop(columns="target")
    frame.insert(0, "cid", [f"C{i:05d}" for i in range(len(frame))])
    path = tmp_path_factory.mktemp("wine") / "wine.csv"
    frame.to_csv(path, index=False)
    return path


def test_fitting_again_into_the_same_folder_replaces_the_run_and_leaves_no_dangling_link(wine, tmp_path, capsys):
    out = tmp_path / "runs" / "k2"
    for extra in ([], ["--report"], []):
        rc, _, err = run(capsys, "fit", "--input", wine, "--output", out, "--n-clusters", 2, "--quiet", *FAST, *extra)
        assert rc == 0, err
    names = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    assert names == ["assignments.csv", "config.json", "current", "metrics.json", "model"]   # no report link left
    assert all(p.exists() for p in out.iterdir())                                              # nothing dangles
    assert len(pd.read_csv(out / "assignments.csv")) == 178
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    rc, _, err = run(capsys, "fit", "--input", wine, "--output", mine, "--n-clusters", 2, "--quiet", *FAST)
    assert rc == 2 and "notes.txt" in err and (mine / "notes.txt").read_text() == "mine"


def test_fit_id_names_the_rows_in_the_assignments_and_the_report_and_says_where_it_is(wine, tmp_path, capsys):
    rc, out, err = run(capsys, "fit", "--input", wine, "--output", tmp_path / "o", "--n-clusters", 3, "--id", "cid",
                       "--report", "--quiet", *FAST)
    assert rc == 0, err
    assert "id: cid" in err and "features (13)" in err            # --quiet keeps what was used
    report = tmp_path / "o" / "report" / "report.html"
    assert f"open the report: {report.absolute().as_uri()}" in out
    assigned = pd.read_csv(tmp_path / "o" / "assignments.csv")
    assert list(assigned.columns[:3]) == ["cid", "cluster", "probability"]
    page = report.read_text()
    assert "C00" in page and ">row 0<" not in page
    rc, _, err = run(capsys, "fit", "--input", wine, "--output", tmp_path / "p", "--n-clusters", 3, "--id", "cidd")
    assert rc == 2 and "did you mean 'cid'" in err, err


def test_progress_in_a_log_is_a_few_lines_that_end_with_what_ran(wine, tmp_path):
    done = subprocess.run([sys.executable, "-m", "neurcam_dist.cli", "fit", "--input", str(wine), "--output",
                           str(tmp_path / "o"), "--n-clusters", "3", "--id", "cid"],
                          capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "80"})
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("NeurCAM:")]
    metrics = __import__("json").loads(done.stdout.splitlines()[0])
    assert 2 <= len(lines) <= 24 and "\r" not in done.stderr, done.stderr
    assert lines[-1].startswith(f"NeurCAM: done: {metrics['epochs']} epochs in ")


def test_every_list_flag_takes_commas_or_spaces(wine, tmp_path, capsys):
    for features in (["alcohol,proline"], ["alcohol", "proline"], ["alcohol,", "proline"]):
        rc, _, err = run(capsys, "fit", "--input", wine, "--output", tmp_path / "o", "--n-clusters", 2, "--quiet",
                         "--features", *features, "--hidden", "16,16", "--n-bases", 8, "--epochs", 8)
        assert rc == 0 and "features (2): alcohol, proline" in err, err
    import json
    assert json.loads((tmp_path / "o" / "config.json").read_text())["params"]["hidden"] == [16, 16]
    with pytest.raises(SystemExit) as exit_:   # argparse's own exit, as for any bad flag value
        cli.main(["fit", "--input", str(wine), "--output", str(tmp_path / "o"), "--n-clusters", "2", "--hidden", "16,x"])
    assert exit_.value.code == 2 and "--hidden: expected whole numbers" in capsys.readouterr().err


def test_help_shows_the_flags_checked_as_required_as_required(capsys):
    with pytest.raises(SystemExit):
        cli.main(["export", "--help"])
    text = capsys.readouterr().out
    assert "--model MODEL --input INPUT" in text and "[--input" not in text and "(required)" in text


def test_a_small_predict_needs_no_ray_writes_csv_and_has_fits_columns(wine, tmp_path):
    out = tmp_path / "o"
    rc = cli.main(["fit", "--input", str(wine), "--output", str(out), "--n-clusters", "3", "--id", "cid", "--quiet",
                   *FAST])
    assert rc == 0
    small = tmp_path / "small.csv"
    pd.read_csv(wine).head(30).to_csv(small, index=False)
    pd.read_csv(wine).head(30).to_parquet(tmp_path / "small.parquet")
    code = ("import sys; sys.modules['ray'] = None\n"          # as on a machine without Ray installed
            "from neurcam_dist.cli import main\n"
            "sys.exit(main(sys.argv[1:]))\n")
    fitted = pd.read_csv(out / "assignments.csv", dtype={"cid": str})
    for src, dest in ((small, tmp_path / "p.csv"), (tmp_path / "small.parquet", tmp_path / "q.csv"),
                      (small, tmp_path / "pq")):
        done = subprocess.run([sys.executable, "-c", code, "predict", "--model", str(out / "model"), "--input",
                               str(src), "--output", str(dest), "--id", "cid"], capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        scored = pd.read_csv(dest, dtype={"cid": str}) if dest.suffix == ".csv" else pd.read_parquet(dest)
        assert list(scored.columns) == list(fitted.columns)                    # fit and predict: one layout
        pd.testing.assert_series_equal(scored["cluster"].astype("int64"), fitted["cluster"].head(30),
                                       check_names=False)


def test_a_first_tracked_run_says_it_is_creating_the_local_store(tmp_path, monkeypatch):
    from neurcam_dist import tracking
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    said: list[str] = []
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracking.use(uri, "first", say=said.append)
    assert len(said) == 2 and said[0].startswith("creating the local MLflow store") and "ready in" in said[1]
    said.clear()
    tracking.use(uri, "first", say=said.append)   # the store exists: nothing to wait for, nothing said
    assert not said


def test_the_report_reads_clean_pushes_above_noise_numbers_short_moves_whole(tmp_path):
    import re

    from sklearn.datasets import load_digits

    from neurcam_dist import NeurCAM
    from neurcam_dist.explain.build import PUSH_SHARE
    from neurcam_dist.explain.report import _value, write_report
    X = load_digits().data[:300]                       # pixel levels: whole numbers
    est = NeurCAM(n_clusters=4, random_state=0, verbose=False, hidden=(16,), n_bases=8, epochs=30).fit(X)
    expl = est.explain(X)
    for p in expl.profiles:
        pushes = [abs(q["mean_relative_contribution"]) for q in p["into"] + p["out_of"]]
        assert all(v >= PUSH_SHARE * max(pushes) for v in pushes)
    moves = est.counterfactuals(X[:30]).dropna(subset=["new_value"])
    assert len(moves) and (moves["new_value"] == moves["new_value"].round()).all()
    for i, r in moves.iterrows():                       # and each move still lands in its target
        x = X[i].copy()
        x[list(est.feature_names_in_).index(r["feature"])] = r["new_value"]
        assert est.predict(x[None])[0] == r["target"]
    assert _value({"lloyd": 7.179373408971208, "minibatch": 7.2}) == "lloyd: 7.18, minibatch: 7.2"
    page = write_report(expl, tmp_path / "r").read_text()
    shown = re.sub(r"<(script|style)[^>]*>.*?</\1>", " ", page, flags=re.S)   # what a reader sees
    long_numbers = [n for n in re.findall(r"(?<![\w.])\d+\.\d+(?![\w.])", re.sub(r"<[^>]+>", " ", shown))
                    if len(n.replace(".", "").lstrip("0")) > 3]
    assert not long_numbers, long_numbers[:5]


def test_the_report_carries_plotlys_partial_bundle_with_every_trace_it_draws(fitted, data, tmp_path):
    import base64
    import fnmatch
    import gzip
    import re
    import tomllib

    from neurcam_dist.explain.report import PLOTLY_BUNDLE, write_report
    from neurcam_dist.explain.report_script import SCRIPT
    bundle = PLOTLY_BUNDLE.read_bytes()
    registered = set(re.findall(rb'moduleType:"trace",name:"(\w+)"', bundle))
    drawn = {t.encode() for t in re.findall(r"\{type: '(\w+)'", SCRIPT)} | {b"scatter"}   # traces with a mode
    assert drawn >= {b"bar", b"heatmap", b"scatter"} and drawn <= registered, drawn - registered
    assert b"cartesian" in bundle[:200]                          # the partial bundle, not the full one
    page = write_report(fitted.explain(data[0]), tmp_path / "r").read_text()
    packed = re.search(r"id='neurcam-plotly'>([^<]+)</script>", page).group(1)
    assert gzip.decompress(base64.b64decode(packed)) == bundle   # carried whole, nothing fetched
    assert len(page) < 1_500_000, len(page)                      # the full bundle alone packs to 1.96 MB
    # and every file the package reads that is not Python is declared, so a wheel carries it
    repo = PLOTLY_BUNDLE.parents[3]
    declared = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    for f in (repo / "neurcam_dist").rglob("*"):
        if f.is_file() and f.suffix not in (".py", ".pyc") and "__pycache__" not in f.parts:
            rel = f.relative_to(repo)
            assert any(rel.is_relative_to(Path(*package.split("."))) and fnmatch.fnmatch(
                str(rel.relative_to(Path(*package.split(".")))), g) for package, gs in declared.items() for g in gs), rel


def test_sample_all_turns_a_csv_into_parquet_shards_with_every_row_in_order(wine, tmp_path, capsys):
    for flags in (["--all"], ["--rows", "0"]):
        out = tmp_path / flags[-1].strip("-")
        rc, _, err = run(capsys, "sample", "--input", wine, "--output", out, "--files", 3, "--id", "cid", *flags)
        assert rc == 0, err
        shards = sorted(out.glob("*.parquet"))
        back = pd.concat([pd.read_parquet(f) for f in shards], ignore_index=True)
        assert len(shards) == 3
        pd.testing.assert_frame_equal(back, pd.read_csv(wine, dtype={"cid": str}).astype(back.dtypes.to_dict()))


# ------------------------------------------------------------------ the docs, run as written


def test_the_getting_started_steps_on_your_own_csv_run_as_written(tmp_path):
    import shutil
    page = (ROOT / "docs" / "getting-started.md").read_text()
    assert '--8<-- "docs/examples/own-csv.sh"' in page        # the page shows the file this test runs
    shutil.copytree(ROOT / "docs" / "examples", tmp_path / "docs" / "examples")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "neurcam").write_text(f"#!/bin/sh\nexec {sys.executable} -m neurcam_dist.cli \"$@\"\n")
    (bin_dir / "neurcam").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(["bash", "-e", "docs/examples/own-csv.sh"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "categorical: plan, region, paperless" in done.stderr and "id: customer_id" in done.stderr
    assigned = pd.read_csv(tmp_path / "runs" / "customers" / "assignments.csv")
    scored = pd.read_csv(tmp_path / "runs" / "customers-scored.csv")
    assert list(assigned.columns) == list(scored.columns) and assigned["customer_id"].iloc[0] == "C000000"
    assert (tmp_path / "runs" / "customers" / "report" / "report.html").is_file()
    assert (tmp_path / "runs" / "customers.sql").read_text().startswith("-- NeurCAM")
    assert "C000017" in (tmp_path / "runs" / "customers-rows" / "report.html").read_text()


def test_the_python_blocks_of_the_table_explanation_and_tracking_pages_run_as_written(tmp_path, monkeypatch):
    """tables.md's block on a CSV of the user's, then explanations.md's on its model, then
    tracking.md's (the local store; the pyfunc from the registry, its server swapped for it)."""
    from sklearn.datasets import load_wine
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    load_wine(as_frame=True).frame.drop(columns="target").to_csv("my_table.csv", index=False)
    space: dict = {}
    (tables,) = doc_blocks("docs/tables.md")
    exec(compile(tables.replace("random_state=0)", "random_state=0, verbose=False)"), "tables.md", "exec"), space)
    assert space["est"].n_features_in_ == 13
    (explanations,) = doc_blocks("docs/explanations.md")
    exec(compile(explanations, "explanations.md", "exec"), space)
    assert (tmp_path / "report" / "report.html").is_file() and (tmp_path / "e.json").is_file()
    first, second = doc_blocks("docs/tracking.md")
    exec(compile(first, "tracking.md", "exec"), space)
    from neurcam_dist import service
    service.promote("segments", "1", "champion")
    space["df"] = space["X"]
    exec(compile(second.replace('"http://mlflow:5000"', f'"sqlite:///{tmp_path / "mlflow.db"}"'), "tracking.md",
                 "exec"), space)
    assert "cluster" in space["scored"].columns and "term_1" in space["why"].columns


def test_the_documented_defaults_are_the_tables(capsys):
    import re

    from neurcam_dist.params import HYPERPARAMETERS as H
    model = (ROOT / "docs" / "model.md").read_text()
    hidden = H["hidden"].default
    assert f"`hidden={hidden}`" in model and f"`n_bases={H['n_bases'].default}`" in model
    assert f"1 -> {' -> '.join(map(str, hidden))} -> {H['n_bases'].default}" in model
    faq = (ROOT / "docs" / "faq.md").read_text()
    assert f"`n_clusters={H['n_clusters'].default}`" in faq and "is required" not in faq.split("##")[1]
    with pytest.raises(SystemExit):
        cli.main(["fit", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "the paper's defaults)" not in text and re.search(r"--hidden WIDTH \[WIDTH \.\.\.\]\s.*default: "
                                                              + " ".join(map(str, hidden)), text)


def test_every_neurcam_command_line_in_the_docs_is_one_the_cli_takes(capsys):
    """Each ``neurcam ...`` line of a bash block (README and docs/): its command and flags exist
    and its required flags are there (``[...]`` parts included, the first of ``a|b``)."""
    import re
    import shlex

    from neurcam_dist.cli import _check_required, build_parser
    lines = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```(?:bash|sh)\n(.*?)```", page.read_text(), re.S):
            for raw in block.splitlines():
                for part in raw.split(" #")[0].split("&&"):
                    if part.strip().startswith("neurcam "):
                        lines.append((page.name, part.strip()))
    assert len(lines) >= 30
    for page, line in lines:
        argv = shlex.split(re.sub(r"(\w+)\|(\w+)", r"\1", re.sub(r"[\[\]]", " ", line)))[1:]
        parser = build_parser()
        try:
            _check_required(parser, parser.parse_args(argv))
        except SystemExit:
            raise AssertionError(f"{page}: {line}: {capsys.readouterr().err.strip()}") from None
