"""The centroid initialisation (and, with ``init='distill'``, the distillation target) shared by
the estimator and the Ray driver.

Lloyd's ``KMeans`` (k-means++, ``n_init`` restarts) reaches a lower inertia than MiniBatchKMeans
(the paper's mKMC), and the network then holds that better partition; it is used whenever it
costs seconds (``auto``: rows x dims x clusters up to ``LLOYD_BUDGET``). Larger inputs (a Ray
k-means sample of 100,000 rows of a 256-dim embedding, say) use MiniBatchKMeans.

Both run on one OpenMP thread. scikit-learn's Lloyd iteration sums its threads' partial centroids
in the order the threads finish (and its inertia by an OpenMP reduction), so with three threads or
more the same seed gives centroids that differ in the last bits from run to run (seen on a 16-core
GPU host: 7e-7 between runs, then 1 of 10,992 labels and the inertia after training, with
``deterministic=True``). One thread is also the faster choice below about a million
rows x dims x clusters (pendigits: 0.11 s against 0.41 s on 2 threads); at ``LLOYD_BUDGET`` it
costs about 1.6x the 2-thread time (4.8 s against 2.9 s on 100,000 x 20 x 10).
"""
from __future__ import annotations

import time

import numpy as np

LLOYD_BUDGET = 2e7  # rows x dims x clusters: Lloyd with 10 restarts takes seconds below this on 2 cores


def kmeans_method(n_rows: int, dim: int, n_clusters: int, method: str = "auto") -> str:
    """``lloyd`` or ``minibatch``: ``auto`` picks Lloyd while it stays cheap."""
    if method != "auto":
        return method
    return "lloyd" if n_rows * dim * n_clusters <= LLOYD_BUDGET else "minibatch"


def kmeans_centroids(xr: np.ndarray, n_clusters: int, seed: int, *, method: str = "auto", n_init: int = 10,
                     batch_size: int = 512) -> tuple[np.ndarray, dict]:
    """``(centroids, info)``: ``info`` says which k-means ran, with how many restarts, on how many
    rows, its mean squared distance to the nearest centroid, how many rows each cluster holds
    (``sizes``: they weight the distillation) and how long it took (the model card records it)."""
    from sklearn.cluster import KMeans, MiniBatchKMeans  # on use: sklearn.cluster is slow to import
    from threadpoolctl import threadpool_limits

    chosen = kmeans_method(len(xr), xr.shape[1], n_clusters, method)
    t0 = time.perf_counter()
    if chosen == "lloyd":
        km = KMeans(n_clusters=n_clusters, init="k-means++", n_init=n_init, random_state=seed)
    else:  # the paper's mKMC settings: init on 5 x batch size points
        km = MiniBatchKMeans(n_clusters=n_clusters, batch_size=batch_size, init_size=min(len(xr), 5 * batch_size),
                             n_init=n_init, random_state=seed)
    with threadpool_limits(limits=1, user_api="openmp"):   # one seed, one set of centroids (module docstring)
        km.fit(xr)
    info = {"method": chosen, "n_init": int(n_init), "rows": int(len(xr)),
            "inertia": float(km.inertia_) / len(xr), "seconds": round(time.perf_counter() - t0, 3),
            "sizes": np.bincount(km.labels_, minlength=n_clusters).tolist()}
    return km.cluster_centers_.astype(np.float32), info
