"""The ``neurcam`` command: fit on a file, predict with the saved model, clear errors."""
import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
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
    assert m["epochs"] <= 15  # --epochs bounds the whole run, annealing included
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


def test_predict_prints_its_own_lines_and_ray_s_go_to_the_log(fitted, data, tmp_path):
    """Fresh processes, no Ray running: small input is scored in the process without starting Ray;
    through Ray Data (forced), Ray's lines (its C++ core's too, written to fd 2) go to --log-dir."""
    import os
    X, _ = data
    fitted.save(tmp_path / "model")
    (tmp_path / "in").mkdir()
    for i, part in enumerate((X.iloc[:100], X.iloc[100:])):
        part.assign(id=np.arange(len(part)) + 100 * i).to_parquet(tmp_path / "in" / f"p{i}.parquet")
    runs = {}
    for where, limit in (("here", None), ("ray", "0")):
        env = {**os.environ, "RAY_ADDRESS": "", "NEURCAM_VERBOSE": ""}
        env.pop("NEURCAM_LOCAL_PASS_BYTES", None)
        if limit is not None:
            env["NEURCAM_LOCAL_PASS_BYTES"] = limit
        runs[where] = proc = subprocess.run(
            [sys.executable, "-m", "neurcam_dist.cli", "predict", "--model", str(tmp_path / "model"),
             "--input", str(tmp_path / "in"), "--output", str(tmp_path / where), "--log-dir", str(tmp_path / "logs")],
            capture_output=True, text=True, timeout=300, env=env)
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == "", proc.stderr
        res = pd.read_parquet(tmp_path / where).sort_values("id")
        assert res["id"].tolist() == list(range(len(X)))
        assert np.array_equal(res["cluster"].to_numpy(), fitted.predict(X))
    here = runs["here"].stdout.splitlines()
    ray = [line for line in runs["ray"].stdout.splitlines() if " rows (" not in line]   # progress, if it was slow
    assert here[0] == "[neurcam] scoring 240 rows from 2 file(s) in this process (small input: Ray not needed)"
    assert len(here) == 2 and here[1].startswith(f"wrote 240 rows in 2 Parquet file(s) to {tmp_path / 'here'}/")
    logs = list((tmp_path / "logs").glob("predict-*.log"))
    assert len(logs) == 1   # only the Ray run writes one
    assert ray[0] == f"[neurcam] Ray's own log lines go to {logs[0]} (--verbose shows them here)"
    assert ray[1].startswith("[neurcam] scoring 240 rows from 2 file(s) with Ray Data, ")
    assert len(ray) == 3 and ray[2].startswith("wrote 240 rows in ")
    assert "Started a local Ray instance" in logs[0].read_text()


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
    assert "column 'f2' holds numbers except 1 cell(s), the first at row 3 ('unknown')" in capsys.readouterr().err
    assert not out.exists()


def test_exclude_leaves_columns_out_of_the_default_selection_and_is_checked(data, tmp_path, capsys):
    """--exclude (and a job config's data.exclude) leaves a column out of the features chosen by
    default, said on the features line; a column the table lacks, or one --features also names, is refused."""
    import pyarrow.parquet as pq

    from neurcam_dist.config import DataConfig
    from neurcam_dist.data import DataError, plan
    X, _ = data
    table = X.assign(account_no=np.arange(len(X)) * 7919 % 1000)   # a second id, not id-like by name
    table.to_csv(tmp_path / "t.csv", index=False)
    fit = ["fit", "--data", str(tmp_path / "t.csv"), "--n-clusters", "3", "--epochs", "3"]
    assert main([*fit, "--out", str(tmp_path / "run"), "--exclude", "account_no"]) == 0
    assert "; not used: account_no (excluded)" in capsys.readouterr().err
    assert json.loads((tmp_path / "run" / "config.json").read_text())["features"] == [str(c) for c in X.columns]
    assert main([*fit, "--out", str(tmp_path / "bad"), "--exclude", "acount_no"]) == 2
    assert "--exclude columns ['acount_no'] are not in the data; did you mean 'account_no'?" in capsys.readouterr().err
    assert main([*fit, "--out", str(tmp_path / "bad"), "--exclude", "f0", "--features", "f0", "f1"]) == 2
    assert "--exclude names ['f0'], which --features lists" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
    (tmp_path / "pq").mkdir()
    pq.write_table(pa.Table.from_pandas(table, preserve_index=False), tmp_path / "pq" / "part-0.parquet")
    assert plan(DataConfig(path=str(tmp_path / "pq"), exclude=["account_no"])).features == [str(c) for c in X.columns]
    with pytest.raises(DataError, match=r"data.exclude names \['acount_no'\], which .* does not have; did you mean"):
        plan(DataConfig(path=str(tmp_path / "pq"), exclude=["acount_no"]))
    with pytest.raises(ValueError, match=r"data.exclude names \['f0'\], which data.features lists"):
        DataConfig(path=str(tmp_path / "pq"), features=["f0", "f1"], exclude=["f0"])


def test_bad_sizes_are_refused_before_anything_is_written(tmp_path, capsys):
    cases = ((["demo", "--seeds", "0"], "search.seeds: at least one seed is needed"),
             (["demo", "--workers", "0"], "train.num_workers: Input should be greater than or equal to 1"),
             (["generate", "synthetic", "--rows", "-3"], "--rows must be >= 1, got -3"),
             (["generate", "synthetic", "--rows", "3"], "--files (4) is more than --rows (3)"),
             (["generate", "synthetic", "--clusters", "0"], "--clusters must be >= 1, got 0"))
    for i, (args, expected) in enumerate(cases):
        out = tmp_path / f"out{i}"
        assert main([*args, "--out", str(out)]) == 2
        assert expected in capsys.readouterr().err
        assert not out.exists()
    for flag, value in (("--batch-size", "0"), ("--concurrency", "-1")):
        with pytest.raises(SystemExit) as exit_:
            main(["predict", "--model", "m", "--input", "i", "--output", str(tmp_path / "p"), flag, value])
        assert exit_.value.code == 2 and f"argument {flag}: must be at least 1, got {value}" in capsys.readouterr().err
    assert main(["generate", "synthetic", "--rows", "40", "--features", "1", "--out", str(tmp_path / "one")]) == 0
    assert list(pd.read_parquet(tmp_path / "one").columns) == ["id", "f0", "embedding", "label"]


def test_console_script_is_installed():
    res = subprocess.run([sys.executable, "-m", "neurcam_dist.cli", "--version"], capture_output=True, text=True)
    assert res.returncode == 0 and "neurcam-dist" in res.stdout


def test_demo_runs_the_whole_service_and_again_in_its_own_folder(tmp_path, monkeypatch, capsys, ray_cluster):
    """The README's first command, lean (one seed, a short schedule; ``.ci/run`` runs the default
    demo itself, through the Quick start): a search on Ray, the local MLflow store, the registry.
    Then the normal loop: the same command again in the same folder replaces the demo's data and
    output, each whole, and registers a second version."""
    import mlflow
    import pyarrow.parquet as pq
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    out_dir = tmp_path / "runs" / "demo"
    for run in (1, 2):
        assert main(["demo", "--seeds", "1", "--set", "model.epochs=24", "--set", "model.n_pairs=2"]) == 0
        out = capsys.readouterr().out
        assert "demo data: the bundled digits (1,797 rows, 64 pixel features and a label) as 4 Parquet shards in " \
               "runs/demo-data" in out
        assert f"registered model: models:/digits-demo/{run} " in out and "mlflow ui --backend-store-uri sqlite:///" in out
        assert "explanation report: file://" in out and (out_dir / "report" / "report.html").is_file()
        summary = json.loads((out_dir / "search.json").read_text())
        assert [t["status"] for t in summary["trials"]] == ["ok"]
        sets = [p for p in (out_dir / ".versions").iterdir() if p.name != ".lock"]
        assert len(sets) == run   # the earlier run's set replaced, kept until the next run (a reader's grace)
    shards = sorted((tmp_path / "runs" / "demo-data").glob("*.parquet"))
    assert len(shards) == 4 and sum(pq.read_metadata(f).num_rows for f in shards) == 1797
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    mv = mlflow.MlflowClient().get_model_version_by_alias("digits-demo", "candidate")
    assert str(mv.version) == "2"
    assert mlflow.MlflowClient().get_run(mv.run_id).data.metrics["inertia"] == \
        pytest.approx(summary["trials"][0]["inertia"])


def test_every_command_speaks_one_vocabulary_with_help_and_defaults(capsys):
    """``--input``, ``--output``, ``--config``, ``--id``, ``--seed`` on every command that takes
    them; the old spellings work hidden, with a deprecation line; every flag has help text and
    the model flags come from the hyperparameter table."""
    import argparse

    from neurcam_dist.cli import build_parser
    from neurcam_dist.params import HYPERPARAMETERS
    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    old = {"--out", "--data", "--id-column"}
    for name, sub in commands.items():
        visible = [a for a in sub._actions if a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)]
        for action in visible:
            assert action.help, f"neurcam {name}: {action.option_strings or action.dest} has no help"
        shown = {o for a in visible for o in a.option_strings}
        assert not shown & old, f"neurcam {name} shows {shown & old}"
        with pytest.raises(SystemExit) as info:
            parser.parse_args([name, "--help"])
        assert info.value.code == 0
        assert name in capsys.readouterr().out
    for name in ("fit", "explain", "sample", "featurize-text", "predict"):
        assert "--input" in {o for a in commands[name]._actions for o in a.option_strings}, name
    for name in ("fit", "explain", "sample", "featurize-text", "predict", "generate", "demo"):
        assert "--output" in {o for a in commands[name]._actions for o in a.option_strings}, name
    for name in ("train", "tune", "recluster", "validate", "submit", "predict"):
        assert "--config" in {o for a in commands[name]._actions for o in a.option_strings}, name
    fit_flags = {a.dest for a in commands["fit"]._actions}
    assert {n for n, s in HYPERPARAMETERS.items() if s.in_config} <= fit_flags
    # an old spelling still works, says what to use, and satisfies a required flag
    args = parser.parse_args(["fit", "--data", "x.csv", "--out", "runs/x", "--n-clusters", "3", "--epsilon", "0.5"])
    assert (args.input, args.output, args.epsilon) == ("x.csv", "runs/x", 0.5)
    assert "--data is deprecated" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["fit", "--n-clusters", "3", "--output", "runs/x"])
    assert info.value.code == 2 and "the following arguments are required: --input" in capsys.readouterr().err


def test_deterministic_flag_sets_the_model_field_for_train_and_tune(tmp_path):
    from neurcam_dist.cli import _load_config, build_parser
    cfg = tmp_path / "job.yaml"
    cfg.write_text(f"data: {{path: {tmp_path}}}\nmodel: {{n_clusters: 3}}\noutput: {tmp_path / 'out'}\n")
    for command in ("train", "tune"):
        args = build_parser().parse_args([command, "--config", str(cfg), "--deterministic"])
        assert _load_config(args).model.deterministic is True
        args = build_parser().parse_args([command, "--config", str(cfg)])
        assert _load_config(args).model.deterministic is False


def test_config_flags_are_typed_overrides_applied_after_set_and_leave_set_as_given(tmp_path):
    """``--deterministic`` and ``--force`` set their config field as a value (never as ``--set``
    text parsed back): the flag wins over a ``--set`` of the same key, and ``--set`` is untouched."""
    from neurcam_dist.cli import CONFIG_FLAGS, _load_config, build_parser
    cfg = tmp_path / "job.yaml"
    cfg.write_text(f"data: {{path: {tmp_path}}}\nmodel: {{n_clusters: 3}}\noutput: {tmp_path / 'out'}\n"
                   f"tracking: {{model_name: m}}\n")
    for command, flag, field in (("train", "--deterministic", ("model", "deterministic")),
                                 ("recluster", "--force", ("recluster", "force"))):
        key = ".".join(field)
        assert CONFIG_FLAGS[flag.lstrip("-")] == key
        args = build_parser().parse_args([command, "--config", str(cfg), "--set", f"{key}=false", flag,
                                          "--set", "model.epochs=7"])
        loaded = _load_config(args)
        assert getattr(getattr(loaded, field[0]), field[1]) is True and loaded.model.epochs == 7
        assert args.set == [f"{key}=false", "model.epochs=7"]
        args = build_parser().parse_args([command, "--config", str(cfg), "--set", f"{key}=false"])
        assert getattr(getattr(_load_config(args), field[0]), field[1]) is False


@pytest.fixture(scope="module")
def mixed_csv(tmp_path_factory):
    """20,000 rows: six numeric features and a categorical of 400 levels."""
    from .conftest import blobs
    X, _ = blobs(n=20000, d=6)
    X["shop"] = [f"shop {i}" for i in np.random.default_rng(0).integers(0, 400, len(X))]
    path = tmp_path_factory.mktemp("mixed") / "x.csv"
    X.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("phase", ["features (", "starting point", "phase distill", "phase warmup"])
def test_sigterm_in_every_phase_ends_the_command_within_seconds_with_143_and_writes_nothing(mixed_csv, tmp_path,
                                                                                            phase):
    """SIGTERM (kill, a pod stopping) in each phase of a fit (reading the table, the starting
    point, the distillation, the warm-up) unwinds the command within seconds: exit 143, no output."""
    import os
    import signal
    import time

    from neurcam_dist.signals import UNWIND_S
    proc = subprocess.Popen([sys.executable, "-m", "neurcam_dist.cli", "fit", "--input", str(mixed_csv),
                             "--output", str(tmp_path / "out"), "--n-clusters", "3", "--epochs", "5000",
                             "--warmup-epochs", "4000", "--no-early-stopping", "--distill-epochs", "30"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "NEURCAM_VERBOSE": ""})
    said = []
    for line in proc.stdout:           # until the phase has begun
        said.append(line)
        if phase in line:
            break
    assert proc.poll() is None, "".join(said) + proc.stdout.read()
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    took = time.monotonic() - sent
    out = "".join(said) + out
    assert proc.returncode == 143, out[-2000:]
    assert "neurcam: terminated (SIGTERM)" in out and "library call" not in out, out[-2000:]
    assert took < UNWIND_S, (took, out[-2000:])
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_sigterm_inside_a_long_library_call_still_ends_the_command_within_seconds(tmp_path):
    """A library call that does not return on a signal (here libc's system(), which waits out its
    child) holds Python's handler back; the watcher ends the command UNWIND_S seconds after SIGTERM."""
    import contextlib
    import os
    import signal
    import time

    from neurcam_dist.signals import UNWIND_S
    code = ("import ctypes\nfrom neurcam_dist.signals import sigterm_as_exit\nwith sigterm_as_exit():\n"
            "    print('inside', flush=True)\n    ctypes.CDLL(None).system(b'sleep 40')\nprint('returned')\n")
    log = tmp_path / "log"
    with open(log, "w") as sink:   # a file, not a pipe: the orphaned `sleep` would hold a pipe open
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)
    deadline = time.monotonic() + 120
    while "inside" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
        took = time.monotonic() - sent
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)   # the `sleep` left behind
    out = log.read_text()
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert "still inside a library call" in out and "returned" not in out, out
    assert UNWIND_S - 1 < took < UNWIND_S + 10, took


def test_sigterm_to_a_ray_run_exits_143_not_rays_abort(tmp_path):
    """A run on an in-process Ray: Ray's own SIGTERM handlers (a stack dump and abort, 134; a
    SystemExit(1) out of ray.get) do not decide the exit status: 143, and no model is published."""
    import os
    import re
    import signal
    import time

    import yaml

    from .conftest import blobs
    X, _ = blobs(n=4000, d=4)
    (tmp_path / "data").mkdir()
    X.to_parquet(tmp_path / "data" / "part-0.parquet")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({
        "data": {"path": str(tmp_path / "data")}, "output": str(tmp_path / "out"), "train": {"num_workers": 1},
        "model": {"n_clusters": 3, "hidden": [16, 16], "n_bases": 4, "warmup_epochs": 2000, "epochs": 4000,
                  "early_stopping": False}}))
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "NEURCAM_VERBOSE")}
    proc = subprocess.Popen([sys.executable, "-m", "neurcam_dist.cli", "train", "--config", str(tmp_path / "c.yaml")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    deadline = time.time() + 180
    seen = []
    for line in proc.stdout:                      # training has started on its worker (a log gets a line per
        seen.append(line)                         # phase or every few seconds: the first epoch line will do)
        if re.search(r"\bepoch \d+", line) or time.time() > deadline:
            break
    assert time.time() < deadline, "".join(seen)[-3000:]
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 143, out[-3000:]
    assert "neurcam: terminated (SIGTERM)" in out and not (tmp_path / "out" / "model").exists()
    assert "library call" not in out, out[-3000:]   # unwound (runs ended, Ray stopped), not cut short


def test_a_command_is_one_record_from_which_parser_dispatch_verbose_and_paths_derive(tmp_path, monkeypatch, capsys):
    """A toy command declared by one ``Command`` record alone parses, runs, takes ``--verbose``
    (it runs on Ray), checks its required flag, refuses the flags its record excludes before it
    runs and expands its path flag; every shipped command
    is such a record, and every flag that names a path or URI declares the path type."""
    from neurcam_dist.cli import COMMANDS, Command, Excludes, _flag, _path, build_parser
    seen = {}

    def flags(p):
        _flag(p, "--output", type=_path, required=True, help="where it goes")

    def run(args):
        seen.update(vars(args))
        return 5
    def more_flags(p):
        flags(p)
        p.add_argument("--plan", default=None)
        p.add_argument("--loud", action="store_true")
    toy = Command("hello", "say hello", more_flags, run, on_ray=True,
                  excludes=(Excludes("plan", ("loud",), "the plan says how loud: leave out {option}"),))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NEURCAM_VERBOSE", "")   # --verbose sets it to 1: recorded here, so undone after the test
    assert main(["hello", "--output", "~/x", "--verbose"], commands=COMMANDS + (toy,)) == 5
    assert os.environ["NEURCAM_VERBOSE"] == "1"
    assert seen["output"] == str(tmp_path / "x") and seen["verbose"] is True and seen["command"] == "hello"
    with pytest.raises(SystemExit):
        main(["hello"], commands=(toy,))
    assert "the following arguments are required: --output" in capsys.readouterr().err
    seen.clear()
    assert main(["hello", "--output", "x", "--plan", "p", "--loud"], commands=(toy,)) == 2   # refused before it runs
    assert "the plan says how loud: leave out --loud" in capsys.readouterr().err and seen == {}
    assert main(["hello", "--output", "x", "--plan", "p"], commands=(toy,)) == 5 and seen["plan"] == "p"
    subs = build_parser()._subparsers._group_actions[0].choices
    assert list(subs) == [c.name for c in COMMANDS]
    paths = {"input", "output", "model", "config", "config_file", "manifests", "log_dir", "working_dir", "compare",
             "reference"}
    for command in COMMANDS:
        actions = subs[command.name]._actions
        assert [a.dest for a in actions if a.dest in paths and a.type is not _path] == [], command.name
        assert any(a.dest == "verbose" for a in actions) == command.on_ray, command.name


def test_flags_that_do_not_go_together_are_refused_before_anything_is_read_or_written(tmp_path, capsys):
    """Two spellings of one choice (sample's size; explain's model; choose-k's table or job
    config) are refused by name, and the service refuses its own parameters' combinations
    before it reads the table, so a Python caller meets the same rule."""
    from neurcam_dist import service
    from neurcam_dist.errors import ConfigError
    table = tmp_path / "t.csv"
    pd.DataFrame({"a": range(20), "label": [0, 1] * 10}).to_csv(table, index=False)
    out = tmp_path / "out"
    for size in (["--all", "--rows", "5"], ["--per-class", "2", "--rows", "5"], []):
        with pytest.raises(SystemExit) as exc:
            main(["sample", "--input", str(table), "--output", str(out), *size])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and not out.exists()
        assert ("not allowed with argument" in err) if size else "one of the arguments --per-class --rows --all" in err
    for sizes, said in (({"per_class": 2, "rows": 5}, "got both"), ({}, "got neither")):
        with pytest.raises(ConfigError, match=f"per_class .--per-class. or rows .--rows.*{said}"):
            service.sample(str(tmp_path / "missing.csv"), str(out), **sizes)   # refused before the input is read
        assert not out.exists()
    for which in (["--model", str(tmp_path / "m1"), "--compare", str(tmp_path / "m0"), str(tmp_path / "m2")], []):
        with pytest.raises(SystemExit) as exc:   # --compare OLD NEW explains NEW: one of the two, as argparse says
            main(["explain", *which, "--input", str(table), "--output", str(out)])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and not out.exists()
        assert ("argument --compare: not allowed with argument --model" if which else
                "one of the arguments --model --compare is required") in err
    config = tmp_path / "job.yaml"
    config.write_text(f"data: {{path: {tmp_path}}}\noutput: {out}\n")
    assert main(["choose-k", "--config", str(config), "--features", "a"]) == 2
    assert "leave out --features" in capsys.readouterr().err
    assert main(["choose-k", "--config", str(config), "--epochs", "5"]) == 2
    assert "write --set model.epochs=... instead of --epochs" in capsys.readouterr().err and not out.exists()
    assert main(["choose-k", "--config", str(config), "--no-standardize"]) == 2   # a flag's no- form is given too
    assert "write --set model.standardize=..." in capsys.readouterr().err and not out.exists()
