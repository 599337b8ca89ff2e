"""A trained network ready to score: what prediction needs and nothing else.

The estimator scores through it, and batch scoring ships exactly this to every Ray Data actor
(not the estimator with its reference rows, warm-up network and history).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..numerics import standardize, standardized_zero
from .network import NeurCAMNet

CHUNK = 8192


@torch.no_grad()
def log_assignment(net: NeurCAMNet, x: torch.Tensor, t: float = 1.0, t2: float = 1.0,
                   chunk: int = CHUNK) -> torch.Tensor:
    """(N, K) log fuzzy assignment in fp32, computed in chunks (no autograd graph)."""
    was_training = net.training
    net.eval()
    out = torch.cat([torch.log_softmax(net(x[i:i + chunk], t, t2).float(), dim=1)
                     for i in range(0, x.shape[0], chunk)])
    net.train(was_training)
    return out


@dataclass
class FittedNet:
    """A locked network plus its standardization, temperatures, feature names and (once known)
    the training-data mean of every channel, which centres per-row explanations."""

    net: NeurCAMNet
    mean: np.ndarray
    scale: np.ndarray
    temperatures: tuple[float, float]
    feature_names: list[str]
    channel_means: np.ndarray | None = None
    cluster_ids: np.ndarray | None = None   # stable id of each output column (default 0..K-1)

    def __post_init__(self):
        # rows at a feature's zero skip the backbone of the locked channels reading it
        self.net.set_baseline(torch.from_numpy(standardized_zero(self.mean, self.scale)))

    @property
    def n_clusters(self) -> int:
        return self.net.n_clusters

    @property
    def ids(self) -> np.ndarray:
        """The stable cluster id of each logit column: what predictions and reports call the clusters."""
        return np.arange(self.n_clusters) if self.cluster_ids is None else np.asarray(self.cluster_ids, np.int64)

    @staticmethod
    def standardize_with(arr: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
        """Raw features -> float32 standardized features (computed in float64); fit and scoring share it."""
        return standardize(arr, mean, scale)

    def standardize(self, arr: np.ndarray) -> np.ndarray:
        """Raw features in the fitted column order -> float32 standardized features."""
        return self.standardize_with(arr, self.mean, self.scale)

    def _device(self) -> torch.device:
        return next(self.net.parameters()).device

    @torch.no_grad()
    def contribution_chunks(self, arr: np.ndarray, chunk: int = CHUNK):
        """(n, C + P, K) per-channel contributions, ``chunk`` rows at a time."""
        x = torch.from_numpy(self.standardize(arr)).to(self._device())
        t, t2 = self.temperatures
        for i in range(0, x.shape[0], chunk):
            yield self.net.contributions(x[i:i + chunk], t, t2).float().cpu().numpy()

    def contributions(self, arr: np.ndarray) -> np.ndarray:
        return np.concatenate(list(self.contribution_chunks(arr)))

    @torch.no_grad()
    def logits(self, arr: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(self.standardize(arr)).to(self._device())
        t, t2 = self.temperatures
        return torch.cat([self.net(x[i:i + CHUNK], t, t2).float() for i in range(0, x.shape[0], CHUNK)]).cpu().numpy()

    def selected(self) -> tuple[list[str], list[tuple[str, str]]]:
        """Names of the features the single gates picked, and of the pairs the pair gates picked."""
        names = self.feature_names
        singles = [names[i] for i in self.net.single.gates.selected()[:, 0].tolist()]
        pairs = [tuple(names[i] for i in pair) for pair in self.net.pairs.gates.selected().tolist()]
        return singles, pairs
