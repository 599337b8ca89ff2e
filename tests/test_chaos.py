"""What a distributed service meets in production, done to real parts during a run: the tracking
server stopped and restarted, a Ray node lost (a multi-node cluster of separate raylets on this
machine), the object store restarted. Each run ends right or fails clearly, and nothing is lost
or written twice."""
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import yaml

from .conftest import blobs, free_port, start_mlflow_server

ROOT = Path(__file__).resolve().parents[1]


def _table(d: Path, n=600, seed=0) -> Path:
    X, y = blobs(n=n, d=4, k=3, seed=seed)
    d.mkdir(parents=True, exist_ok=True)
    X.assign(id=np.arange(n), label=y).to_parquet(d / "part-0.parquet")
    return d


def _small(data: Path, out: Path, **extra) -> dict:
    return {"data": {"path": str(data), "id": "id", "label": "label"},
            "model": {"n_clusters": 3, "hidden": [16, 16], "n_bases": 4, "warmup_epochs": 3, "epochs": 6,
                      "distill_epochs": 1, "batch_size": 128, "epsilon": 0.3, "early_stopping": False,
                      "lr": 5e-3, "random_state": 0},
            "train": {"num_workers": 1, "kmeans_sample": 400, "reference_rows": 400},
            "output": str(out), **extra}


def _streamed(tmp_path: Path, output: Path, storage: str, **train) -> dict:
    """A training on ``tmp_path/data`` (``write_shards``: 3,000 rows, 4 files) that streams the
    files every epoch (a few seconds each: time to act mid-run) and checkpoints to ``storage``."""
    from neurcam_dist.data.synthetic import write_shards
    if not (tmp_path / "data").exists():
        write_shards(tmp_path / "data", 3000, n_features=4, repr_dim=6, n_clusters=3, n_files=4, seed=0)
    return {"data": {"path": str(tmp_path / "data"), "embedding": "embedding", "label": "label", "id": "id"},
            "model": {"n_clusters": 3, "hidden": [16, 16], "n_bases": 4, "warmup_epochs": 3, "distill_epochs": 1,
                      "epochs": 12, "epsilon": 0.3, "batch_size": 64, "lr": 5e-3, "early_stopping": False,
                      "random_state": 0},
            "train": {"num_workers": 1, "cpus_per_worker": 1, "cache": "never", "checkpoint_every": 2,
                      "max_failures": 1, "shuffle_buffer": 256, "storage_path": storage, **train},
            "output": str(output)}


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("NEURCAM_", "MLFLOW_")) and k != "RAY_ADDRESS"}
    return {**env, "PYTHONPATH": str(ROOT), **extra}


def _ended(proc: subprocess.Popen) -> str:
    """The output of ``proc``, stopped first when still running (reading a live one's would block)."""
    if proc.poll() is None:
        proc.kill()
    return proc.communicate()[0][-4000:]


# ---------------------------------------------------------------- the tracking server
def test_a_tracking_server_down_for_30_s_when_a_search_ends_gets_the_runs_late(tmp_path):
    """The server stops as the search picks its winner and is back 30 s later: the search
    finishes, waits for it, logs every run once and registers once, and says the logging was late."""
    import mlflow
    from mlflow import MlflowClient

    store, port = tmp_path / "mlflow", free_port()
    store.mkdir()
    server = {"proc": start_mlflow_server(store, port)}
    uri = f"http://127.0.0.1:{port}"
    cfg = _small(_table(tmp_path / "data"), tmp_path / "out", search={"seeds": 1},
                 tracking={"uri": uri, "experiment": "chaos", "model_name": "chaos"})
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    proc = subprocess.Popen([sys.executable, "-m", "neurcam_dist.cli", "tune", "--config", str(tmp_path / "c.yaml")],
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    said, down = [], {}

    def restart():
        time.sleep(30)
        server["proc"] = start_mlflow_server(store, port)
        down["back"] = time.time()

    try:
        for line in proc.stdout:
            said.append(line)
            if "winner:" in line and not down:        # the trials are done; the logging is next
                server["proc"].terminate()
                server["proc"].wait(timeout=30)
                down["at"] = time.time()
                threading.Thread(target=restart, daemon=True).start()
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = "".join(said)
    try:
        assert proc.returncode == 0, text[-4000:]
        assert down and "back" in down, text[-4000:]
        assert "waiting up to 300 s (NEURCAM_TRACKING_WAIT_S) for the server before logging" in text, text[-4000:]
        assert f"MLflow tracking server {uri} answers again after" in text, text[-4000:]
        assert "WARNING: the MLflow parent run was logged late (" in text, text[-4000:]
        mlflow.set_tracking_uri(uri)
        client = MlflowClient()
        exp = client.get_experiment_by_name("chaos")
        runs = client.search_runs([exp.experiment_id], max_results=100)
        parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
        trials = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
        assert len(parents) == 1 and len(trials) == 1, [(r.info.run_name, r.info.status) for r in runs]
        assert {r.info.status for r in runs} == {"FINISHED"}
        assert all(r.info.start_time / 1000 >= down["back"] - 1 for r in runs)   # logged after the restart
        versions = client.search_model_versions("name = 'chaos'")
        assert len(versions) == 1 and client.get_model_version_by_alias("chaos", "candidate").version == "1"
    finally:
        server["proc"].terminate()
        server["proc"].wait(timeout=30)


class _CuttingProxy:
    """A TCP proxy on 127.0.0.1 in front of a server that, at the ``cut_at``-th request whose
    text holds ``marker``, drops every connection and refuses new ones for ``down_s`` seconds: a
    server that stops answering part-way through a client's work."""

    def __init__(self, upstream_port: int, marker: bytes, cut_at: int, down_s: float):
        import socket
        self.upstream, self.marker, self.cut_at, self.down_s = upstream_port, marker, cut_at, down_s
        self.seen, self.down_until, self.cuts, self.conns = 0, 0.0, 0, []
        self.lock = threading.Lock()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        import socket
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            if time.time() < self.down_until:
                client.close()
                continue
            server = socket.create_connection(("127.0.0.1", self.upstream))
            with self.lock:
                self.conns += [client, server]
            threading.Thread(target=self._pipe, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, False), daemon=True).start()

    def _pipe(self, src, dst, counting: bool):
        while True:
            try:
                chunk = src.recv(65536)
            except OSError:
                chunk = b""
            if counting and self.marker in chunk:
                with self.lock:
                    self.seen += 1
                    if self.seen == self.cut_at:
                        self.cuts += 1
                        self.down_until = time.time() + self.down_s
                        for c in self.conns:
                            c.close()
                        self.conns = []
                        return
            if not chunk:
                for c in (src, dst):
                    c.close()
                return
            try:
                dst.sendall(chunk)
            except OSError:
                return

    def close(self):
        self.sock.close()


def test_a_tracking_server_cut_off_mid_logging_gets_the_runs_once(ray_cluster, mlflow_server, tmp_path, monkeypatch,
                                                                   capsys):
    """The server stops answering right after the search's parent run is created: the logging
    waits, tries once more, ends the cut-off attempt's run FAILED and registers exactly once."""
    import mlflow
    from mlflow import MlflowClient

    from neurcam_dist.service import search
    port = int(mlflow_server.rsplit(":", 1)[1])
    proxy = _CuttingProxy(port, b"/runs/create", cut_at=2, down_s=6)   # the trial run's create
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    uri = f"http://127.0.0.1:{proxy.port}"
    cfg = _small(_table(tmp_path / "data"), tmp_path / "out", search={"seeds": 1},
                 tracking={"uri": uri, "experiment": "cut", "model_name": "cut"})
    try:
        result = search(cfg)
    finally:
        proxy.close()
    said = capsys.readouterr().out
    assert proxy.cuts == 1, said[-3000:]
    assert "WARNING: MLflow stopped answering while the search's parent run, its trial runs were being logged" in said
    assert "ended the cut-off attempt's 1 MLflow run(s) FAILED" in said, said[-3000:]
    assert "was logged late (" in said and ", on the second attempt)" in said, said[-3000:]
    mlflow.set_tracking_uri(mlflow_server)
    client = MlflowClient()
    runs = client.search_runs([client.get_experiment_by_name("cut").experiment_id], max_results=100)
    failed = [r for r in runs if r.info.status == "FAILED"]
    assert len(failed) == 1 and "cut off" in failed[0].data.tags["neurcam.ended_by"]
    done = [r for r in runs if r.info.status == "FINISHED"]
    assert len(done) == 2 and result.tracking["run_id"] in {r.info.run_id for r in done}   # parent + trial
    assert [v.version for v in client.search_model_versions("name = 'cut'")] == [result.tracking["version"]]


# ---------------------------------------------------------------- a lost node
class _Cluster:
    """``chaos_cluster.py`` in its own process: a head (no CPUs) and worker nodes on this machine."""

    def __init__(self, env: dict, cpus: float = 2, nodes: int = 2, head_cpus: float = 0):
        import tempfile
        self.log = tempfile.NamedTemporaryFile("w+", prefix="chaos-cluster-", suffix=".log")
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "chaos_cluster.py"), str(cpus), str(nodes),
                                      str(head_cpus)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     env=env, cwd="/tmp", start_new_session=True)
        self.state = self._answer()

    def _answer(self) -> dict:
        import json
        line = self.proc.stdout.readline()
        if not line:
            self.log.seek(0)
            raise RuntimeError(f"the test cluster ended (exit {self.proc.wait()}): {self.log.read()[-3000:]}")
        said = json.loads(line)
        if "error" in said:
            raise RuntimeError(f"the test cluster could not do it: {said['error']}")
        return said

    def ask(self, command: str) -> dict:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        self.state = self._answer()
        return self.state

    def node_of(self, pid: int) -> str | None:
        """The raylet pid (as the cluster names its nodes) of the node process ``pid`` runs on."""
        import psutil
        for parent in psutil.Process(pid).parents():
            if str(parent.pid) in self.state["nodes"]:
                return str(parent.pid)
        return None

    def close(self):
        import signal
        try:
            self.ask("quit")
            self.proc.wait(timeout=60)
        except Exception:  # noqa: BLE001 - take it down whatever state it is in
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.log.close()


def _train_workers_by_node(cluster: _Cluster, driver_pid: int) -> dict[str, list[int]]:
    """The Ray Train workers of the run ``driver_pid`` started, by node (raylet pid)."""
    import psutil
    found: dict[str, list[int]] = {}
    for p in psutil.process_iter(["cmdline"]):
        if "RayTrainWorker" in " ".join(p.info["cmdline"] or []):
            node = cluster.node_of(p.pid)
            if node is not None:
                found.setdefault(node, []).append(p.pid)
    return found


def test_training_that_loses_a_node_resumes_from_its_s3_checkpoint(s3_server, tmp_path):
    """Two workers on two nodes, checkpoints in the bucket: a node lost mid-run (its raylet and
    every process on it) and a replacement added; the run resumes once from its last S3 checkpoint
    and ends with every epoch once and a model that clusters the data. That a resumed run ends on
    the uninterrupted run's network, bit for bit, is
    ``test_distributed::test_workers_resumed_mid_pass_end_on_the_uninterrupted_run_s_network``."""
    import json

    from neurcam_dist import NeurCAM
    from neurcam_dist.storage import published
    from neurcam_dist.uris import Location

    from .conftest import checkpoint_registered
    from .test_s3 import _objects
    env = _env(**s3_server)
    os.environ.update(s3_server)   # this process reads the bucket too
    cluster = _Cluster(env)
    try:
        env["RAY_ADDRESS"] = cluster.state["address"]
        cfg = _streamed(tmp_path, tmp_path / "lost", "s3://neurcam/chaos/lost", num_workers=2, placement="spread")
        (tmp_path / "lost.yaml").write_text(yaml.safe_dump(cfg))
        lost = subprocess.Popen([sys.executable, "-m", "neurcam_dist.cli", "train", "--config",
                                 str(tmp_path / "lost.yaml")],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
        deadline = time.time() + 300
        while not checkpoint_registered(published.read_text(Location(f"s3://neurcam/chaos/lost/{p}"))
                                        for p in _objects("s3://neurcam/chaos/lost")
                                        if p.endswith("checkpoint_manager_snapshot.json")):
            assert lost.poll() is None and time.time() < deadline, _ended(lost)
            time.sleep(0.5)
        placed = _train_workers_by_node(cluster, lost.pid)
        assert len(placed) == 2, placed            # spread: one worker on each node
        victim = sorted(placed)[0]
        cluster.ask(f"kill {victim}")              # the node's raylet and every process on it, at once
        cluster.ask("add")                         # a replacement joins (an autoscaler's new pod)
        text, _ = lost.communicate(timeout=600)
        assert lost.returncode == 0, text[-4000:]
    finally:
        cluster.close()
    h = NeurCAM.load(tmp_path / "lost" / "model").history_
    assert len(h["resumes"]) == 1 and h["resumes"][0] % 2 == 0 and h["resumes"][0] >= 2, h["resumes"]
    assert [r["epoch"] for r in h["epochs"]] == list(range(1, h["n_epochs"] + 1))
    got = json.loads((tmp_path / "lost" / "metrics.json").read_text())
    # every row scored once, and the three generated clusters found (an uninterrupted run: ARI 0.76)
    assert got["n_rows"] == 3000 and sum(got["cluster_sizes"]) == 3000, got
    assert got["n_clusters_used"] == 3 and got["ari"] > 0.5, got


def test_a_search_that_loses_a_node_resumes_that_trial_and_leaves_the_other(s3_server, tmp_path):
    import json

    from neurcam_dist import NeurCAM
    from neurcam_dist.storage import published
    from neurcam_dist.uris import Location

    from .conftest import checkpoint_registered
    from .test_s3 import _objects
    env = _env(**s3_server)
    os.environ.update(s3_server)
    # nodes of 1 CPU: each holds one training worker, one trial's own actor (search.trial_cpus 1) or
    # Ray Data's reads, so a lost node takes the worker of one trial and nothing of the other
    cluster = _Cluster(env, cpus=1, nodes=5)
    storage = "s3://neurcam/chaos/search"
    try:
        env["RAY_ADDRESS"] = cluster.state["address"]
        cfg = {**_streamed(tmp_path, tmp_path / "out", storage),
               "search": {"seeds": [0, 1], "max_concurrent_trials": 2, "trial_cpus": 1}}
        del cfg["model"]["random_state"]
        (tmp_path / "s.yaml").write_text(yaml.safe_dump(cfg))
        proc = subprocess.Popen([sys.executable, "-m", "neurcam_dist.cli", "tune", "--config", str(tmp_path / "s.yaml")],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
        deadline = time.time() + 300

        def registered() -> int:   # the trials' TorchTrainer runs with a checkpoint the controller registered
            snaps = [p for p in _objects(storage) if p.endswith("checkpoint_manager_snapshot.json")]
            return sum(checkpoint_registered([published.read_text(Location(f"{storage}/{p}"))]) for p in snaps)
        while registered() < 2:
            assert proc.poll() is None and time.time() < deadline, _ended(proc)
            time.sleep(0.5)
        placed = _train_workers_by_node(cluster, proc.pid)
        assert len(placed) == 2 and all(len(v) == 1 for v in placed.values()), placed
        victim = sorted(placed)[0]
        # what of the search runs there: the training worker, and maybe a trial's own actor
        import psutil
        there = [p.pid for p in psutil.process_iter(["cmdline"])
                 if any(k in " ".join(p.info["cmdline"] or []) for k in ("RayTrainWorker", "ImplicitFunc", "_trial"))
                 and cluster.node_of(p.pid) == victim]
        cluster.ask(f"kill {victim}")
        cluster.ask("add")
        text, _ = proc.communicate(timeout=600)
        assert proc.returncode == 0, text[-4000:]
    finally:
        cluster.close()
    search = json.loads((tmp_path / "out" / "search.json").read_text())
    assert [t["status"] for t in search["trials"]] == ["ok", "ok"], search["trials"]
    resumes = {}
    for t in search["trials"]:
        h = NeurCAM.load(tmp_path / "out" / "trials" / search["name"] / t["trial_id"] / "model").history_
        assert [r["epoch"] for r in h["epochs"]] == list(range(1, h["n_epochs"] + 1))
        resumes[t["trial_id"]] = h["resumes"]
    # the trial that lost its worker resumed from its checkpoint once; the other never stopped
    assert len(there) == 1, there
    assert sorted(len(r) for r in resumes.values()) == [0, 1], resumes
    assert all(e % 2 == 0 and e >= 2 for r in resumes.values() for e in r), resumes


def test_predict_that_loses_a_node_writes_every_row_exactly_once(tmp_path):
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from neurcam_dist import NeurCAM

    from .conftest import SMALL
    X, _ = blobs(n=400, seed=0)
    NeurCAM(n_clusters=3, random_state=0, **SMALL).fit(X).save(tmp_path / "model")
    rng = np.random.default_rng(1)
    n_files, per_file = 8, 250_000
    (tmp_path / "in").mkdir()
    for i in range(n_files):
        cols = {f"f{j}": rng.normal(0, 6, per_file) for j in range(4)}
        pq.write_table(pa.table({"id": np.arange(i * per_file, (i + 1) * per_file), **cols}),
                       tmp_path / "in" / f"part-{i}.parquet")
    env = _env(NEURCAM_LOCAL_PASS_BYTES="0", NEURCAM_PREDICT_PROGRESS_S="1")
    cluster = _Cluster(env)
    try:
        env["RAY_ADDRESS"] = cluster.state["address"]
        proc = subprocess.Popen([sys.executable, "-m", "neurcam_dist.cli", "predict", "--model", str(tmp_path / "model"),
                                 "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"), "--id", "id",
                                 "--batch-size", "20000"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
        said, killed = [], None
        for line in proc.stdout:
            said.append(line)
            if killed is None and line.startswith("[neurcam] scored ") and not line.startswith("[neurcam] scored 0 ") \
                    and "(100%)" not in line:
                import psutil
                scorers = [p.pid for p in psutil.process_iter(["cmdline"])
                           if "MapWorker" in " ".join(p.info["cmdline"] or [])]
                nodes = sorted({cluster.node_of(pid) for pid in scorers} - {None})
                assert nodes, "".join(said)[-3000:]
                killed = cluster.ask(f"kill {nodes[0]}")["killed"]   # a node with a scoring actor, mid-pass
                cluster.ask("add")
        proc.wait(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
        cluster.close()
    text = "".join(said)
    assert killed, text[-3000:]
    assert proc.returncode == 0, text[-4000:]
    out = pd.read_parquet(tmp_path / "out", columns=["id", "cluster"])
    assert len(out) == n_files * per_file and out["id"].is_unique, (len(out), text[-2000:])
    assert int(out["id"].min()) == 0 and int(out["id"].max()) == n_files * per_file - 1
    # and right: the rows of a file (whichever actor scored them) as the model scores them here
    first = pq.read_table(tmp_path / "in" / "part-3.parquet").to_pandas()
    got = out.set_index("id").loc[first["id"], "cluster"].to_numpy()
    model = NeurCAM.load(tmp_path / "model")
    assert np.array_equal(got, model.predict(first[[f"f{j}" for j in range(4)]]))


# ---------------------------------------------------------------- the object store
def test_an_object_store_restarted_during_checkpoint_writes_is_waited_for(tmp_path, monkeypatch):
    """Checkpoints go to S3 every epoch; the store stops for 8 s and comes back while the run
    writes them. Ray's storage waits for it (``storage.retrying``), and the run finishes with its
    model whole and every epoch once."""
    import json
    import secrets

    from neurcam_dist import NeurCAM
    from neurcam_dist.storage import published
    from neurcam_dist.uris import Location

    from .conftest import Seaweed, _free_port_pair, checkpoint_registered
    from .test_s3 import _objects
    settings = {"AWS_ACCESS_KEY_ID": "chaos", "AWS_SECRET_ACCESS_KEY": secrets.token_hex(16),
                "AWS_ENDPOINT_URL": f"http://127.0.0.1:{_free_port_pair()}", "AWS_REGION": "us-east-1"}
    (tmp_path / "weed").mkdir()
    store = Seaweed(tmp_path / "weed", settings)
    store.start()
    for k, v in settings.items():
        monkeypatch.setenv(k, v)
    cfg = _streamed(tmp_path, tmp_path / "out", "s3://neurcam/restart", checkpoint_every=1, max_failures=2)
    storage = cfg["train"]["storage_path"]
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    env = _env(**settings)
    args = [sys.executable, "-m", "neurcam_dist.cli", "train", "--config", str(tmp_path / "c.yaml")]
    try:
        proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                cwd=tmp_path)
        deadline = time.time() + 300
        while not checkpoint_registered(published.read_text(Location(f"{storage}/{p}")) for p in _objects(storage)
                                        if p.endswith("checkpoint_manager_snapshot.json")):
            assert proc.poll() is None and time.time() < deadline, _ended(proc)
            time.sleep(0.3)
        store.stop()           # mid-run: the next checkpoint write meets a closed port
        time.sleep(8)
        store.start()
        text, _ = proc.communicate(timeout=600)
    finally:
        store.stop()
    # an 8 s outage is well inside the storage's outage bound (storage.retrying.STORE_OUTAGE_S):
    # the run waits for the store and finishes
    assert proc.returncode == 0, text[-4000:]
    assert "Traceback" not in text
    h = NeurCAM.load(tmp_path / "out" / "model").history_
    assert [r["epoch"] for r in h["epochs"]] == list(range(1, h["n_epochs"] + 1)), h["resumes"]
    assert np.isfinite(json.loads((tmp_path / "out" / "metrics.json").read_text())["inertia"])
    print(f"object store restarted mid-run: exit {proc.returncode}; "
          + " | ".join(x for x in text.splitlines() if x.startswith("neurcam:"))[:1500])
