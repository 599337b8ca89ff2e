"""The centroid initialisation (the paper's mKMC) shared by the estimator and the Ray driver."""
from __future__ import annotations

import numpy as np
from sklearn.cluster import MiniBatchKMeans


def kmeans_centroids(xr: np.ndarray, n_clusters: int, batch_size: int, seed: int) -> np.ndarray:
    """MiniBatchKMeans with the paper's mKMC settings (init on 5 x batch size points, 5 inits)."""
    km = MiniBatchKMeans(n_clusters=n_clusters, batch_size=batch_size, init_size=min(len(xr), 5 * batch_size),
                         n_init=5, random_state=seed)
    km.fit(xr)
    return km.cluster_centers_.astype(np.float32)
