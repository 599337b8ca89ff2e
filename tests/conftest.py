import socket
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pandas as pd
import pytest

from neurcam_dist import NeurCAM

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
def ray_cluster():
    """One local Ray for the whole test session: 4 logical CPUs on the 2 cores (two training
    workers plus Ray Data's readers), a small object store, no dashboard."""
    import ray

    from neurcam_dist.distributed import quiet_data_progress
    ray.init(num_cpus=4, object_store_memory=256 * 2**20, include_dashboard=False,
             configure_logging=True, logging_level="WARNING")
    quiet_data_progress()
    yield ray
    ray.shutdown()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """A real ``mlflow server`` on 127.0.0.1 (SQLite backend, proxied artifact store), once per session."""
    d = tmp_path_factory.mktemp("mlflow")
    port = free_port()
    log = open(d / "server.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                             "--backend-store-uri", f"sqlite:///{d / 'mlflow.db'}",
                             "--artifacts-destination", str(d / "artifacts"), "--workers", "1"],
                            stdout=log, stderr=subprocess.STDOUT)
    uri = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while True:
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            raise RuntimeError(f"mlflow server did not start: {(d / 'server.log').read_text()[-2000:]}")
        time.sleep(0.5)
    yield uri
    proc.terminate()
    proc.wait(timeout=30)
    log.close()
