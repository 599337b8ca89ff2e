"""The interpretable trees ``benchmarks/peers.py`` compares with (``benchmarks/trees.py``)."""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from trees import exkmc, imm, imm_tree, predict


def _leaves(tree) -> list[int]:
    return [tree] if not isinstance(tree, tuple) else _leaves(tree[2]) + _leaves(tree[3])


def _surrogate(x, centers, labels) -> float:
    return float(((x - centers[labels]) ** 2).sum())


def test_imm_explains_separable_clusters_exactly_with_k_leaves():
    rng = np.random.default_rng(0)
    centers = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0], [10.0, 10.0]])
    own = rng.integers(0, 4, 400)
    x = centers[own] + rng.normal(scale=0.5, size=(400, 2))
    tree = imm_tree(x, centers)
    assert sorted(_leaves(tree)) == [0, 1, 2, 3]            # one leaf per centre
    assert np.array_equal(imm(x, centers), own) and np.array_equal(predict(tree, x), own)


def test_exkmc_grows_imms_tree_and_never_costs_more():
    rng = np.random.default_rng(1)
    centers = rng.normal(0, 2, size=(5, 3))
    own = rng.integers(0, 5, 1000)
    x = centers[own] + rng.normal(size=(1000, 3))
    a, b = imm(x, centers), exkmc(x, centers)
    assert set(a.tolist()) <= set(range(5)) and set(b.tolist()) <= set(range(5))
    nearest = ((x[:, None] - centers[None]) ** 2).sum(2).argmin(1)
    assert (a != nearest).sum() > 0                          # overlapping clusters: IMM makes mistakes
    assert _surrogate(x, centers, nearest) <= _surrogate(x, centers, b) <= _surrogate(x, centers, a)
