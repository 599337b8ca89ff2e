"""Operations against real servers the tests start: a Ray head with its job server (``ray start
--head --block``), the session's ``mlflow server``; jobs submitted through ``JobSubmissionClient``
and ``neurcam submit``; two re-clusterings racing for the champion; the Kubernetes CronJob's own
command run against the local head."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from ray.job_submission import JobSubmissionClient


from .conftest import blobs

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def events(tmp_path_factory):
    """Two daily snapshots (Hive partitions) of the same 3-cluster table, with ids."""
    d = tmp_path_factory.mktemp("events")
    for day, seed in (("2026-11-25", 1), ("2026-11-26", 0)):
        X, y = blobs(n=400, d=4, k=3, seed=seed)
        (d / f"date={day}").mkdir()
        X.assign(id=np.arange(len(X)), label=y).to_parquet(d / f"date={day}" / "part-0.parquet")
    return d


def tiny(events: Path, out: Path, model_name: str, **extra) -> dict:
    return {"data": {"path": str(events), "id": "id", "label": "label"},
            "model": {"n_clusters": 3, "hidden": [16, 16], "n_bases": 4, "warmup_epochs": 3, "epochs": 6,
                      "distill_epochs": 1, "batch_size": 128, "epsilon": 0.3, "early_stopping": False,
                      "lr": 5e-3, "random_state": 0},
            "train": {"num_workers": 1, "checkpoint_every": 100, "kmeans_sample": 400, "reference_rows": 400},
            "search": {"seeds": 1}, "tracking": {"experiment": "ops", "model_name": model_name},
            "output": str(out), **extra}


def wait_for(client, job_id: str, timeout: float = 600) -> str:
    from ray.job_submission import JobStatus
    deadline = time.time() + timeout
    while time.time() < deadline:
        status = client.get_job_status(job_id)
        if status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
            return status
        time.sleep(2)
    raise TimeoutError(f"job {job_id} still {client.get_job_status(job_id)}: {client.get_job_logs(job_id)[-3000:]}")


def test_a_tune_job_registers_its_winner(ray_head, mlflow_server, events, tmp_path):
    from mlflow import MlflowClient
    snapshot = events / "date=2026-11-26"
    cfg = tiny(snapshot, tmp_path / "out", "ops-tune")
    cfg["tracking"]["uri"] = mlflow_server
    wd = tmp_path / "wd"
    shutil.copytree(ROOT / "jobs", wd / "jobs", ignore=shutil.ignore_patterns("__pycache__"))
    (wd / "tiny.yaml").write_text(yaml.safe_dump(cfg))
    client = JobSubmissionClient(ray_head["jobs"], headers=ray_head["headers"])
    job = client.submit_job(entrypoint="python jobs/tune.py --config tiny.yaml", runtime_env={"working_dir": str(wd)})
    assert wait_for(client, job) == "SUCCEEDED", client.get_job_logs(job)[-3000:]
    import mlflow
    mlflow.set_tracking_uri(mlflow_server)
    mv = MlflowClient().get_model_version_by_alias("ops-tune", "candidate")
    assert mv.tags["cluster_ids"] == "0,1,2" and mv.tags["next_cluster_id"] == "3"
    assert (tmp_path / "out" / "model" / "manifest.json").is_file()


def neurcam(*args, env: dict, cwd=None, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "neurcam_dist.cli", *map(str, args)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def test_sigterm_or_timeout_to_submit_stops_the_ray_job(ray_head, tmp_path):
    """A scheduler's deadline (the CronJob's activeDeadlineSeconds, Forbid) reaches the Ray job: the
    submitting process, terminated, stops the job it submitted and exits 143; --timeout stops it
    and exits 124. The job is a stand-in entrypoint that prints a line and sleeps."""
    from ray.job_submission import JobSubmissionClient
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": ray_head["token"], "PYTHONPATH": str(ROOT)}
    wd = tmp_path / "wd"
    (wd / "jobs").mkdir(parents=True)
    (wd / "jobs" / "train.py").write_text("import time\nprint('job started', flush=True)\ntime.sleep(600)\n")
    (wd / "c.yaml").write_text("data: {path: x}\nmodel: {n_clusters: 2}\noutput: y\n")
    client = JobSubmissionClient(ray_head["jobs"], headers=ray_head["headers"])
    proc = subprocess.Popen([sys.executable, "-m", "neurcam_dist.cli", "submit", "--address", ray_head["jobs"],
                             "--working-dir", str(wd), "train", "--config", "c.yaml"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    for line in proc.stdout:                      # the job's own output, streamed by submit
        if "job started" in line or time.time() > deadline:
            break
    proc.send_signal(signal.SIGTERM)
    t0 = time.time()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    job_id = re.search(r"submitted (\S+) to", err).group(1)
    assert client.get_job_status(job_id) == "STOPPED" and time.time() - t0 < 45, err
    assert "terminated (SIGTERM): stopping job" in err

    done = neurcam("submit", "--address", ray_head["jobs"], "--working-dir", wd, "--timeout", "8", "train",
                   "--config", "c.yaml", env=env, timeout=120)
    assert done.returncode == 124, done.stderr
    job_id = re.search(r"submitted (\S+) to", done.stderr).group(1)
    assert client.get_job_status(job_id) == "STOPPED" and "--timeout 8 s reached" in done.stderr


def test_the_cluster_fit_is_checked_before_anything_runs_and_auth_errors_say_the_fix(ray_head, mlflow_server, events,
                                                                                      tmp_path):
    """validate --address and submit ask the cluster (4 CPUs here) whether the job fits, by the
    rule the runs apply; a driver without the cluster's token is told to set it."""
    from ray.job_submission import JobSubmissionClient
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": ray_head["token"], "PYTHONPATH": str(ROOT)}
    wd = tmp_path / "wd"
    shutil.copytree(ROOT / "jobs", wd / "jobs", ignore=shutil.ignore_patterns("__pycache__"))
    (wd / "c.yaml").write_text(yaml.safe_dump(tiny(events / "date=2026-11-26", tmp_path / "out", "ops-fit")))
    done = neurcam("validate", "--config", wd / "c.yaml", "--address", ray_head["jobs"], env=env)
    assert done.returncode == 0, done.stderr
    assert "cluster: 4 CPUs, 0 GPUs" in done.stdout and "resources: fits: 1 trial(s) at once take 1.01 of 4" in done.stdout
    done = neurcam("validate", "--config", wd / "c.yaml", "--address", ray_head["jobs"], "--set",
                   "train.num_workers=4", env=env)
    assert done.returncode == 2 and "train.num_workers x train.cpus_per_worker = 4 CPUs leaves 0" in done.stderr
    client = JobSubmissionClient(ray_head["jobs"], headers=ray_head["headers"])
    before = len(client.list_jobs())
    done = neurcam("submit", "--address", ray_head["jobs"], "--working-dir", wd, "tune", "--config", "c.yaml",
                   "--set", "search.max_concurrent_trials=3", env=env)
    assert done.returncode == 2 and "search.max_concurrent_trials=3 trials" in done.stderr, done.stderr
    assert len(client.list_jobs()) == before                     # refused before submitting
    no_token = {k: v for k, v in env.items() if k not in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN")}
    done = neurcam("validate", "--config", wd / "c.yaml", "--address", ray_head["jobs"], env=no_token)
    assert done.returncode == 2 and "set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1              # one line, no traceback
    rc_env = {**recluster_env(ray_head, mlflow_server, events, tmp_path / "rc-out")}
    rc_env.pop("RAY_AUTH_MODE")
    rc_env.pop("RAY_AUTH_TOKEN")
    done = neurcam("recluster", "--config", wd / "c.yaml", env=rc_env, timeout=300)
    assert done.returncode == 1 and "set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN" in done.stderr, done.stderr[-3000:]


def test_a_bad_config_job_fails_naming_the_field_and_submit_exits_non_zero(ray_head, tmp_path):
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": ray_head["token"], "PYTHONPATH": str(ROOT)}
    cfg = tmp_path / "c.yaml"
    cfg.write_text("data: {path: /nonexistent/data}\nmodel: {n_clusters: three}\noutput: /tmp/x\n")
    done = neurcam("submit", "--address", ray_head["jobs"], "train", "--config", cfg, env=env, cwd=ROOT)
    assert done.returncode == 2 and "is not a file under --working-dir" in done.stderr
    wd = tmp_path / "wd"
    shutil.copytree(ROOT / "jobs", wd / "jobs", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(cfg, wd / "c.yaml")
    client = JobSubmissionClient(ray_head["jobs"], headers=ray_head["headers"])
    before = len(client.list_jobs())
    done = neurcam("submit", "--address", ray_head["jobs"], "--working-dir", wd, "train", "--config", "c.yaml", env=env)
    assert done.returncode == 2, done.stdout + done.stderr                     # refused before submitting
    assert "model.n_clusters: Input should be a valid integer" in done.stderr and len(client.list_jobs()) == before
    # a config that is valid here and fails in the job: the job's own error is streamed, exit 1
    (wd / "c.yaml").write_text("data: {path: /nonexistent/data}\nmodel: {n_clusters: 3}\noutput: /tmp/x\n")
    done = neurcam("submit", "--address", ray_head["jobs"], "--working-dir", wd, "train", "--config", "c.yaml", env=env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "/nonexistent/data" in done.stdout                                 # the job's own log, streamed
    assert "FAILED" in done.stderr
    env.pop("RAY_AUTH_TOKEN")
    done = neurcam("submit", "--address", ray_head["jobs"], "--working-dir", wd, "train", "--config", "c.yaml", env=env)
    assert done.returncode == 1 and "set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN" in done.stderr


def test_a_credential_in_a_set_value_is_refused_before_anything_is_sent(ray_head, tmp_path):
    """A job server returns a job's entrypoint and runtime environment to anyone who can list jobs:
    a ``--set`` with a credential is refused, unsent and unprinted, with how the job gets it from
    the cluster instead (``NEURCAM_SET_<n>`` in the head's environment, which the job applies)."""
    from neurcam_dist.config import env_overrides
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": ray_head["token"], "PYTHONPATH": str(ROOT)}
    wd = tmp_path / "wd"
    shutil.copytree(ROOT / "jobs", wd / "jobs", ignore=shutil.ignore_patterns("__pycache__"))
    (wd / "c.yaml").write_text(f"data: {{path: /nonexistent/data}}\nmodel: {{n_clusters: 3}}\noutput: {tmp_path / 'o'}\n")
    secret = "S3CRETVALUE42"
    client = JobSubmissionClient(ray_head["jobs"], headers=ray_head["headers"])
    before = len(client.list_jobs())
    for given in (f"data.path=/nonexistent/fromset?secret_key={secret}", f"tracking.password={secret}",
                  f"data.path=s3://user:{secret}@bucket/x"):
        done = neurcam("submit", "--address", ray_head["jobs"], "--working-dir", wd, "train", "--config", "c.yaml",
                       "--set", given, "--set", "model.epochs=3", env=env)
        assert done.returncode == 2, done.stdout + done.stderr
        assert secret not in done.stdout + done.stderr
        assert f"--set {given.partition('=')[0]}=*** holds a credential" in done.stderr
        assert "NEURCAM_SET_0=" in done.stderr and "Kubernetes Secret" in done.stderr
    assert len(client.list_jobs()) == before                          # nothing reached the job server
    # what the cluster gives the job instead: applied by its config loader
    got, notes = env_overrides({}, {"NEURCAM_SET_0": f"data.path=/d?secret_key={secret}"})
    assert got == {"data.path": f"/d?secret_key={secret}"} and notes == [
        "NEURCAM_SET_0 sets data.path (a --set value with a credential, from the environment)"]


def recluster_env(ray_head, mlflow_server, events, out: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURCAM_", "MLFLOW_"))}
    env.update(RAY_ADDRESS=ray_head["gcs"], RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=ray_head["token"],
               NEURCAM_DATA_PATH=str(events), NEURCAM_OUTPUT=str(out), NEURCAM_TRACKING_URI=mlflow_server, PYTHONPATH=str(ROOT))
    return env


def test_two_reclusterings_at_once_promote_exactly_one(ray_head, mlflow_server, events, tmp_path):
    config = tmp_path / "rc.yaml"
    config.write_text(yaml.safe_dump(tiny(events, tmp_path / "unused", "ops-race",
                                          recluster={"policy": "improve", "min_improvement": 0.0})))
    procs = []
    for i in range(2):
        env = recluster_env(ray_head, mlflow_server, events, tmp_path / f"out{i}")
        procs.append(subprocess.Popen([sys.executable, "-m", "neurcam_dist.cli", "recluster", "--config", str(config),
                                       "--set", f"search.seeds=[{i}]"], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    logs = [p.communicate(timeout=900)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(x[-3000:] for x in logs)
    for i, console in enumerate(logs):   # Ray's connection line: in the run's Ray log, not on the console
        assert "Connecting to existing Ray cluster" not in console, console
        assert "Connecting to existing Ray cluster" in "".join(
            f.read_text() for f in (tmp_path / f"out{i}" / "logs").glob("ray-*.log"))
    records = [json.loads((tmp_path / f"out{i}" / "recluster.json").read_text()) for i in range(2)]
    assert sorted(r["promoted"] for r in records) == [False, True], records
    won, lost = sorted(records, key=lambda r: not r["promoted"])
    assert won["champion_version"] is None and lost["champion_version"] is None
    assert "the champion moved from no champion to version " + won["challenger_version"] in lost["reason"]
    assert won["mapping"] == {"0": 0, "1": 1, "2": 2} and won["snapshot"] == "2026-11-26"
    import mlflow
    from mlflow import MlflowClient
    mlflow.set_tracking_uri(mlflow_server)
    client = MlflowClient()
    assert client.get_model_version_by_alias("ops-race", "champion").version == won["challenger_version"]
    assert client.get_model_version_by_alias("ops-race", "candidate").version in (won["challenger_version"],
                                                                                 lost["challenger_version"])
    names = [m.name for m in client.search_registered_models()]
    assert "ops-race.promotion-lease" not in names   # the lease was released


def test_four_reclusterings_into_one_output_leave_one_champion_and_four_history_lines(ray_head, mlflow_server,
                                                                                       events, tmp_path):
    """A CronJob allowed to overlap (or four operators at once): every run ends, exactly one is
    promoted, the shared output's history has one line per run, its model is the champion's."""
    config = tmp_path / "rc.yaml"
    out = tmp_path / "shared-out"
    # keep_runs 1: each run that ends prunes the older searches' folders, never one still running
    config.write_text(yaml.safe_dump(tiny(events, out, "ops-four",
                                          recluster={"policy": "improve", "min_improvement": 0.0, "keep_runs": 1})))
    env = recluster_env(ray_head, mlflow_server, events, out)
    procs = [subprocess.Popen([sys.executable, "-m", "neurcam_dist.cli", "recluster", "--config", str(config),
                               "--set", f"search.seeds=[{i}]"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for i in range(4)]
    logs = [p.communicate(timeout=900)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, "\n\n".join(x[-3000:] for x in logs)
    lines = [json.loads(x) for x in (out / "recluster-history.jsonl").read_text().splitlines()]
    assert len(lines) == 4 and len({x["search"] for x in lines}) == 4, lines
    assert sorted(x["outcome"] for x in lines) == ["kept", "kept", "kept", "promoted"], lines
    won = next(x for x in lines if x["promoted"])
    import mlflow
    from mlflow import MlflowClient
    mlflow.set_tracking_uri(mlflow_server)
    client = MlflowClient()
    assert client.get_model_version_by_alias("ops-four", "champion").version == won["challenger_version"]
    assert len(client.search_model_versions("name = 'ops-four'")) == 4      # each registered once
    # the shared output holds whole sets: its model is one of the four challengers (the search that
    # wrote last), its recluster.json one of the four records; the champion is the registry's
    from neurcam_dist import NeurCAM
    from neurcam_dist.tracking import load_estimator
    X = blobs(n=300, seed=5)[0]
    here = NeurCAM.load(out / "model").predict(X)
    assert any(np.array_equal(here, load_estimator(f"models:/ops-four/{x['challenger_version']}").predict(X))
               for x in lines)
    assert json.loads((out / "recluster.json").read_text())["search"] in {x["search"] for x in lines}
    assert json.loads((out / "search.json").read_text())["name"] in {x["search"] for x in lines}


def k8s_cronjob(overlay: str) -> tuple[list[str], dict]:
    """The dev overlay's CronJob container command and the ConfigMap's files, as built."""
    docs = list(yaml.safe_load_all(subprocess.run(["kubectl", "kustomize", str(ROOT / "k8s" / "overlays" / overlay)],
                                                  check=True, capture_output=True, text=True).stdout))
    cron = next(d for d in docs if d["kind"] == "CronJob")
    c = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    configs = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "neurcam-configs")
    return c["command"] + c["args"], configs["data"]


def test_the_k8s_cronjob_command_reclusters_against_the_champion(ray_head, mlflow_server, events, tmp_path):
    """Runs after the race above: a champion exists, so this run is compared with it, keeps its
    cluster ids and is promoted only by the dev config's policy."""
    cmd, files = k8s_cronjob("dev")
    assert cmd[:2] == ["neurcam", "submit"]
    i = cmd.index("--config")
    name = Path(cmd[i + 1]).name
    local = tmp_path / name
    local.write_text(files[name].replace("model_name: segments-dev", "model_name: ops-race"))
    args = list(cmd[1:])
    args[args.index("--address") + 1] = ray_head["jobs"]
    args[args.index("--config") + 1] = str(local)
    # the overlay points the job at its bucket; here the same command runs on local folders
    sets = [i + 1 for i, word in enumerate(args) if word == "--set"]
    assert {args[i].partition("=")[0] for i in sets} == {"data.path", "output"}
    args = [word for i, word in enumerate(args) if i not in sets and i + 1 not in sets]
    # the race above trained on this very snapshot, so a scheduled run would skip it (unchanged
    # files); this one is forced, to be compared with the champion
    args += ["--set", "recluster.force=true"]
    env = recluster_env(ray_head, mlflow_server, events, tmp_path / "out")
    done = neurcam(*args, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads((tmp_path / "out" / "recluster.json").read_text())
    assert record["champion_version"] is not None and record["inertia_champion"] > 0
    # 4 clusters against the champion's 3: three keep the champion's ids, the new one gets id 3
    assert sorted(record["mapping"].values()) == [0, 1, 2, 3] and record["next_cluster_id"] == 4
    assert 0.0 <= record["agreement_ari"] <= 1.0 and record["top_terms_overlap"] is not None
    assert record["promoted"] == (record["improvement"] >= 0.0)
    # the challenger's report shows how its reference rows moved from the champion's ids, and the
    # cluster the champion did not have as new
    from neurcam_dist.explain import Explanation
    report = tmp_path / "out" / "report"
    cmp = Explanation.from_json(report / "explanation.json").comparison
    assert cmp["n_rows"] == sum(n for row in cmp["flow"].values() for n in row.values()) > 0
    assert {int(n) for row in cmp["flow"].values() for n in row} <= {0, 1, 2, 3} and set(cmp["flow"]) <= {"0", "1", "2"}
    assert [d["cluster"] for d in cmp["drivers"] if d["before"] is None] == [3]
    assert "id='compare'" in (report / "report.html").read_text()
    assert "[neurcam]" in done.stdout      # the job's log lines were streamed to the CronJob's output
    # MLflow's lines (the champion's download, the registration, the promotion): one file, said once
    assert done.stdout.count("MLflow's own log lines go to") == 1, done.stdout
    mlflow_log, = (tmp_path / "out" / "logs").glob("mlflow-*.log")
    assert "Created version" in mlflow_log.read_text()
    import mlflow
    from mlflow import MlflowClient
    mlflow.set_tracking_uri(mlflow_server)
    mv = MlflowClient().get_model_version("ops-race", record["challenger_version"])
    assert mv.tags["cluster_ids"] == ",".join(str(record["mapping"][str(k)]) for k in range(4))
    assert mv.tags["recluster.promoted"] == str(record["promoted"]).lower()


def test_a_deleted_champion_version_does_not_break_the_lineage_of_ids(ray_head, mlflow_server, events, tmp_path):
    """Someone deletes the champion's version in the registry: the next re-clustering compares with
    the newest remaining version that was champion, so the unmoved rows keep their ids, and ids the
    deleted version had used are never handed out again. With no former champion left it refuses,
    naming `neurcam promote`."""
    import mlflow
    from mlflow import MlflowClient

    from neurcam_dist import NeurCAM, service
    from neurcam_dist.tracking import log_model
    name = "ops-lineage"
    snapshot = pd.read_parquet(events / "date=2026-11-26")
    X = snapshot[["f0", "f1", "f2", "f3"]]
    model = {**tiny(events, tmp_path, name)["model"], "epochs": 30}  # as the re-clustering below trains
    est = NeurCAM(**{**model, "hidden": tuple(model["hidden"])}, verbose=False).fit(X)
    mlflow.set_tracking_uri(mlflow_server)
    mlflow.set_experiment("ops-lineage")
    versions = []
    for ids, next_id in (([0, 1, 2], 3), ([5, 6, 7], 8)):   # the second: a lineage that moved on to 5..7
        est.set_cluster_ids(ids, next_id)
        with mlflow.start_run():
            versions.append(log_model(est, X, registered_name=name)[1])
        service.promote(name, versions[-1], tracking_uri=mlflow_server)
    client = MlflowClient()
    client.delete_model_version(name, versions[1])     # the champion's version, deleted by a person

    config = tmp_path / "rc.yaml"
    cfg = tiny(events, tmp_path / "unused", name, recluster={"policy": "always"})
    cfg["model"] = model  # both models trained enough to agree on most rows (epochs bounds annealing too)
    config.write_text(yaml.safe_dump(cfg))
    env = recluster_env(ray_head, mlflow_server, events, tmp_path / "out")
    # what a run SIGKILLed while logging leaves: its MLflow run RUNNING, its recluster.json "running"
    import socket
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    ghost = client.create_run(mlflow.set_experiment("ops").experiment_id, run_name="killed-search",
                              tags={"neurcam.host": socket.gethostname(), "neurcam.pid": str(dead.pid)})
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "recluster.json").write_text(json.dumps({
        "outcome": "running", "host": socket.gethostname(), "pid": dead.pid, "started_at": "2026-11-27T03:00:00Z",
        "search": "search-20261127-030000-dead00", "model_name": name}))
    done = neurcam("recluster", "--config", config, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert client.get_run(ghost.info.run_id).info.status == "KILLED"     # found and ended by this run
    record = json.loads((tmp_path / "out" / "recluster.json").read_text())
    searches = sorted(p.name for p in (tmp_path / "out" / "trials").iterdir())
    assert record["search"] == searches[-1]     # the record and the output's model are of the same search
    assert record["champion_version"] is None and record["compared_with"] == versions[0]
    assert f"version {versions[1]}) is gone from the registry" in record["note"]
    assert sorted(record["mapping"].values()) == [0, 1, 2]       # the former champion's ids carried over
    assert record["next_cluster_id"] >= 8                         # 5, 6, 7 (deleted version) stay retired
    from neurcam_dist.tracking import load_estimator
    new = load_estimator(f"models:/{name}/{record['challenger_version']}")
    est.set_cluster_ids([0, 1, 2], 8)                             # version 1's ids
    kept = float((new.predict(X) == est.predict(X)).mean())
    assert kept > 0.85, kept                                     # most rows keep the id they had
    assert client.get_model_version_by_alias(name, "champion").version == record["challenger_version"]
    assert client.get_registered_model(name).tags["neurcam.champion_version"] == record["challenger_version"]

    # the same snapshot again: skipped, no new version; the history has both decisions
    n_versions = len(client.search_model_versions(f"name = '{name}'"))
    done = neurcam("recluster", "--config", config, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    again = json.loads((tmp_path / "out" / "recluster.json").read_text())
    assert again["outcome"] == "skipped" and "the champion of ops-lineage" in again["reason"]
    assert again["challenger_version"] is None and len(client.search_model_versions(f"name = '{name}'")) == n_versions
    shown = neurcam("history", "--output", tmp_path / "out", env=env)
    assert shown.returncode == 0 and "promoted" in shown.stdout and "skipped" in shown.stdout, shown.stdout
    lines = [json.loads(x) for x in (tmp_path / "out" / "recluster-history.jsonl").read_text().splitlines()]
    assert [x["outcome"] for x in lines] == ["killed", "promoted", "skipped"]
    assert lines[0]["search"] == "search-20261127-030000-dead00" and lines[1]["compared_with"] == versions[0]
    prom = _prometheus(tmp_path / "out" / "recluster.prom")
    assert prom["neurcam_recluster_skipped"] == 1.0 and prom["neurcam_recluster_promoted"] == 0.0
    assert prom["neurcam_recluster_last_success_timestamp_seconds"] == pytest.approx(lines[2]["finished_unix"])

    # every version that was champion deleted: refused before any training, naming the fix
    for v in (versions[0], record["challenger_version"]):
        client.delete_model_version(name, v)
    done = neurcam("recluster", "--config", config, env=env)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"'neurcam promote {name} VERSION'" in done.stderr
    lines = [json.loads(x) for x in (tmp_path / "out" / "recluster-history.jsonl").read_text().splitlines()]
    assert [x["outcome"] for x in lines] == ["killed", "promoted", "skipped", "failed"]
    prom = _prometheus(tmp_path / "out" / "recluster.prom")
    assert prom["neurcam_recluster_failed"] == 1.0        # an alert can fire on it; the last success stays
    assert prom["neurcam_recluster_last_success_timestamp_seconds"] == pytest.approx(lines[2]["finished_unix"])


def test_when_drift_reclusters_only_on_a_monitor_alert(ray_head, mlflow_server, events, tmp_path):
    """``recluster.when: drift``: the snapshot is monitored against the champion first. The
    snapshot the champion was fitted on raises no alert: skipped, no search, no new version, the
    verdict in the record and the history. An older snapshot of other clusters raises one: the
    search runs and the decision carries the alert."""
    import mlflow
    from mlflow import MlflowClient

    from neurcam_dist import NeurCAM, service
    from neurcam_dist.tracking import log_model
    name = "ops-drift"
    X = pd.read_parquet(events / "date=2026-11-26")[["f0", "f1", "f2", "f3"]]
    model = tiny(events, tmp_path, name)["model"]
    est = NeurCAM(**{**model, "hidden": tuple(model["hidden"])}, verbose=False).fit(X)
    mlflow.set_tracking_uri(mlflow_server)
    mlflow.set_experiment("ops-drift")
    with mlflow.start_run():
        version = log_model(est, X, registered_name=name)[1]
    service.promote(name, version, tracking_uri=mlflow_server)
    config = tmp_path / "rc.yaml"
    config.write_text(yaml.safe_dump(tiny(events, tmp_path / "unused", name,
                                          recluster={"when": "drift", "policy": "always"})))
    env = recluster_env(ray_head, mlflow_server, events, tmp_path / "out")
    done = neurcam("recluster", "--config", config, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads((tmp_path / "out" / "recluster.json").read_text())
    assert record["outcome"] == "skipped" and record["drift_alert"] is False, record
    assert "no drift alert on snapshot '2026-11-26'" in record["reason"] and record["challenger_version"] is None
    assert json.loads((tmp_path / "out" / "drift" / "drift.json").read_text())["alert"] is False
    client = MlflowClient()
    assert [v.version for v in client.search_model_versions(f"name = '{name}'")] == [version]

    done = neurcam("recluster", "--config", config, "--set", "recluster.snapshot=2026-11-25", env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads((tmp_path / "out" / "recluster.json").read_text())
    drift = json.loads((tmp_path / "out" / "drift" / "drift.json").read_text())
    assert drift["alert"] is True and record["drift_alert"] is True and record["drift"].startswith("ALERT")
    assert record["outcome"] == "promoted" and record["challenger_version"] not in (None, version)
    lines = [json.loads(x) for x in (tmp_path / "out" / "recluster-history.jsonl").read_text().splitlines()]
    assert [(x["outcome"], x["drift_alert"]) for x in lines] == [("skipped", False), ("promoted", True)]
    assert _prometheus(tmp_path / "out" / "recluster.prom", name)["neurcam_recluster_drift_alert"] == 1.0


def _prometheus(path: Path, model: str = "ops-lineage") -> dict:
    """The samples of ``model`` in a Prometheus text file, parsed by prometheus_client's own parser."""
    from prometheus_client.parser import text_string_to_metric_families
    return {s.name: s.value for fam in text_string_to_metric_families(path.read_text()) for s in fam.samples
            if s.labels.get("model") == model}
