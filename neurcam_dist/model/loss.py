"""The NeurCAM objective: fuzzy c-means with free centroids, plus KL to a fixed teacher assignment.

Both terms are means over the rows of a batch (the paper's sums divided by N), so ``gamma``
keeps the paper's meaning. Everything here runs in fp32 even under autocast.
"""
from __future__ import annotations

import torch


def squared_distances(xr: torch.Tensor, centroids: torch.Tensor) -> torch.Tensor:
    """(N, K) ``||xr_n - z_k||^2`` via the expanded form (one matmul; clamped at 0)."""
    xr = xr.float()
    z = centroids.float()
    d2 = (xr * xr).sum(1, keepdim=True) - 2.0 * xr @ z.T + (z * z).sum(1)
    return d2.clamp_min(0.0)


def fuzzy_loss(log_w: torch.Tensor, d2: torch.Tensor, m: float) -> torch.Tensor:
    """Mean over rows of ``sum_k w_k^m d2_k`` with ``w^m = exp(m log w)``."""
    return (torch.exp(m * log_w) * d2).sum(1).mean()


def kl_to_target(target_log_w: torch.Tensor, log_w: torch.Tensor,
                 cluster_weight: torch.Tensor | None = None) -> torch.Tensor:
    """Mean over rows of ``KL(w* || w)``; terms with ``w* = 0`` contribute 0. ``cluster_weight``
    (K,): each row's KL weighted by its target's cluster, ``w* . cluster_weight`` (a soft target
    spreads it), as ``balanced_weights`` makes them."""
    p = target_log_w.exp()
    terms = torch.where(p > 0, p * (target_log_w - log_w), torch.zeros_like(p)).sum(1)
    if cluster_weight is not None:
        terms = terms * (p @ cluster_weight.to(p.dtype))
    return terms.mean()


def balanced_weights(sizes) -> torch.Tensor:
    """(K,) weights ``N / (K n_k)`` for clusters of ``sizes`` rows (0 for an empty one): every
    cluster's rows together weigh ``N / K``, so a cluster of one far row pulls the network as hard
    as a cluster of thousands; the rows' mean weight stays 1."""
    n = torch.tensor([float(s) for s in sizes])
    used = n > 0
    return torch.where(used, n.sum() / (used.sum() * n.clamp_min(1.0)), torch.zeros_like(n))


def fcm_log_membership(d2: torch.Tensor, m: float) -> torch.Tensor:
    """Log of the fuzzy c-means membership ``u_k ∝ d2_k^(-1/(m-1))`` (the optimum of the fuzzy
    loss for fixed centroids). Used as the distillation target of ``init='distill'``; for m = 1
    (hard c-means) it is the hard assignment."""
    d2 = d2.float().clamp_min(1e-12)
    if m <= 1.0:
        hard = torch.full_like(d2, float("-inf"))
        return hard.scatter(1, d2.argmin(1, keepdim=True), 0.0)
    logits = -torch.log(d2) / (m - 1.0)
    return torch.log_softmax(logits, dim=1)
