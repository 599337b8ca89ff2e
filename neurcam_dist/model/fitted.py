"""The fitted state of a NeurCAM: one object that every way of training and loading produces.

``FittedNet`` holds the locked network and what scoring and explaining need (standardization,
temperatures, feature names, channel means, stable cluster ids), plus the record of the fit
(history, representation, precision, a text model's vocabulary). The in-memory fit and the Ray
driver build it with ``from_trainer``; ``NeurCAM.save``/``load`` and the registry go through
``to_dict``/``from_dict``; the estimator's learned attributes read it. Batch scoring ships it to
every Ray Data actor (not the estimator with its reference rows and warm-up network).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import torch

from ..columns import ColumnCoding
from ..errors import ModelFileError, TrainingError
from ..numerics import softmax, standardize, standardized_zero
from .network import NeurCAMNet

CHUNK = 8192
LABELS = "fit.labels"   # the training rows' ids, beside the network's tensors in weights.safetensors


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


@dataclass(frozen=True)
class FittedNet:
    """A locked network plus its standardization, temperatures, feature names and the
    training-data mean of every channel, which centres per-row explanations; the stable cluster
    ids; and the record of the fit. Frozen: a value made complete (``model.start.finish``,
    ``from_dict``); what changes later (ids renamed, a summary computed) is a new value
    (``dataclasses.replace``) that the estimator adopts.

    Attributes
    ----------
    net : NeurCAMNet
        The network, every gate one-hot.
    mean, scale : ndarray
        Standardization of the raw features (the network sees ``(x - mean) / scale``).
    temperatures : tuple of float
        The single-feature and pair gates' final temperatures.
    feature_names : list of str
        The raw feature columns, in the network's order.
    channel_means : ndarray or None
        (C + P, K) mean contribution of each channel over the training rows.
    cluster_ids : ndarray or None
        Stable id of each logit column (None: 0..K-1).
    next_cluster_id : int or None
        The smallest id the model's lineage never used (None: K).
    repr_dim : int
        Width of the clustering space (the embedding, or the standardized features).
    uses_features_as_repr : bool
        True when the clustering space is the standardized features themselves.
    precision : str
        ``fp32`` or ``bf16``: what the network trained in.
    history : dict
        Per-epoch records, schedule events, stop reason, epochs, seconds, k-means init, and what
        a driver adds (resumes, world size, clusters used).
    text : dict or None
        The vocabulary of a model trained on featurized documents (raw documents are featurized
        with it).
    labels : ndarray or None
        The cluster id of every training row, for a model trained in memory (None for a run on
        Ray, whose rows are in its ``assignments`` output, and for models saved before format 2).
    summary : dict or None
        Importance of every term and each cluster's profile over the training reference rows, by
        logit column (see ``NeurCAM.importance_``); computed when first asked for or saved.
    coding : ColumnCoding or None
        How the columns reach the network (categorical levels, missing cells: ``columns``); None
        for a model saved before format 3, which reads plain numbers as today's models do
        (``ColumnCoding.numeric(legacy=True)``: the same messages) and refuses missing cells.
    drift_reference : dict or None
        What the training rows looked like to the model (``monitor.reference_of``: bins, cluster
        shares, term means; no rows), which ``NeurCAM.monitor`` compares snapshots with; computed
        when first asked for or saved; None for a model saved before monitoring.
    """

    net: NeurCAMNet
    mean: np.ndarray
    scale: np.ndarray
    temperatures: tuple[float, float]
    feature_names: list[str]
    channel_means: np.ndarray | None = None
    cluster_ids: np.ndarray | None = None   # stable id of each output column (None given: 0..K-1)
    next_cluster_id: int | None = None      # the smallest id the lineage never used (None given: K)
    repr_dim: int = 0
    uses_features_as_repr: bool = True
    precision: str = "fp32"
    history: dict = field(default_factory=dict)
    text: dict | None = None
    labels: np.ndarray | None = None
    summary: dict | None = None
    coding: ColumnCoding | None = None
    drift_reference: dict | None = None

    @classmethod
    def from_trainer(cls, trainer, records: list, seconds: float, *, feature_names: list[str], mean, scale,
                     repr_dim: int, uses_features_as_repr: bool, precision: str, init_info: dict | None = None,
                     text: dict | None = None, coding: ColumnCoding | None = None, **history) -> "FittedNet":
        """The state at the end of training (in memory or on Ray): the trainer's network, locked,
        its schedule's temperatures and record. ``history``: what the driver adds to the record.

        Raises
        ------
        TrainingError
            When a gate is not exactly one-hot (a schedule that ended early: a bug).
        """
        net, sched = trainer.net, trainer.schedule
        if not net.all_one_hot(sched.t, sched.t2):
            raise TrainingError("internal error: training ended with a gate that is not one-hot")
        record = {"epochs": list(records), "events": sched.events, "stop_reason": sched.stop_reason,
                  "n_epochs": sched.epoch, "fit_seconds": seconds, "init": init_info, **history}
        return cls(net=net.eval(), mean=np.asarray(mean, np.float64), scale=np.asarray(scale, np.float64),
                   temperatures=(sched.t, sched.t2), feature_names=list(feature_names), repr_dim=int(repr_dim),
                   uses_features_as_repr=bool(uses_features_as_repr), precision=precision, history=record,
                   text=text, coding=coding)

    def to_dict(self) -> tuple[dict, dict]:
        """``(config, weights)``: the fitted state as plain values (what ``config.json`` of a
        model directory holds, less the hyperparameters) and the network's state dict."""
        singles, pairs = self.selected()
        config = {
            "n_single": self.net.single.n, "n_pairs": self.net.pairs.n,
            "feature_names": list(self.feature_names),
            "mean": self.mean.tolist(), "scale": self.scale.tolist(),
            "repr_dim": int(self.repr_dim), "uses_features_as_repr": bool(self.uses_features_as_repr),
            "precision": self.precision, "temperatures": list(self.temperatures),
            "channel_means": None if self.channel_means is None else np.asarray(self.channel_means).tolist(),
            "cluster_ids": [int(v) for v in self.cluster_ids], "next_cluster_id": self.next_cluster_id,
            "selected_features": singles, "selected_pairs": [list(p) for p in pairs],
            "history": self.history,
        }
        if self.text is not None:
            config["text"] = self.text
        if self.summary is not None:
            config["summary"] = self.summary
        if self.drift_reference is not None:
            config["drift_reference"] = self.drift_reference
        if self.coding is not None:
            from .network import CODING_GAIN, MISSING_GAIN
            config["coding"] = {**self.coding.to_dict(), "gains": [CODING_GAIN, MISSING_GAIN]}
        weights = self.net.state_dict()
        if self.labels is not None:
            weights[LABELS] = torch.from_numpy(np.asarray(self.labels, dtype=np.int64))
        return config, weights

    @classmethod
    def from_dict(cls, config: dict, weights: dict, device: str = "cpu", where: str = "the model") -> "FittedNet":
        """The state ``to_dict`` gave (``config`` with its ``params``: hidden, n_bases); models
        saved before stable cluster ids or constant-feature masks load with their defaults.

        Raises
        ------
        ModelFileError
            When the weights do not match the config (naming ``where``).
        """
        params = config["params"]
        k, r = weights["centroids"].shape
        coding = ColumnCoding.from_dict(config["coding"]) if config.get("coding") else None
        net = NeurCAMNet(len(config["feature_names"]), k, config["n_single"], config["n_pairs"],
                         tuple(params["hidden"]), params["n_bases"], torch.zeros(k, r),
                         n_levels=None if coding is None else coding.n_levels,
                         missing_terms=coding is not None and coding.has_missing)
        weights = dict(weights)
        labels = weights.pop(LABELS, None)
        if coding is not None:   # raw parameters saved under other gains: the same effective values
            from .network import CODING_GAIN, MISSING_GAIN
            saved = config["coding"].get("gains", [CODING_GAIN, MISSING_GAIN])
            for key, gain, now in (("coding.values", saved[0], CODING_GAIN), ("missing_delta", saved[1], MISSING_GAIN)):
                if key in weights and gain != now:
                    weights[key] = weights[key] * (gain / now)
        for key, value in net.state_dict().items():  # models saved before constant-feature masks
            if key.endswith("gates.allowed"):
                weights.setdefault(key, value)
        try:
            net.load_state_dict(weights, strict=True)
        except RuntimeError as exc:   # one line: the first mismatch (torch lists every tensor)
            detail = next((ln.strip() for ln in str(exc).splitlines()[1:] if ln.strip()), str(exc))
            raise ModelFileError(f"{where}/weights.safetensors was altered or replaced: it does not match "
                                 f"config.json ({detail[:240]})") from None
        means = config.get("channel_means")
        return cls(net=net.to(device).eval(), mean=np.asarray(config["mean"], np.float64),
                   scale=np.asarray(config["scale"], np.float64), temperatures=tuple(config["temperatures"]),
                   feature_names=list(config["feature_names"]),
                   channel_means=None if means is None else np.asarray(means, np.float64),
                   cluster_ids=np.asarray(config.get("cluster_ids", range(k)), dtype=np.int64),
                   next_cluster_id=int(config.get("next_cluster_id", k)), repr_dim=int(config["repr_dim"]),
                   uses_features_as_repr=bool(config["uses_features_as_repr"]),
                   precision=config.get("precision", params.get("precision", "fp32")),
                   history=config.get("history", {}), text=config.get("text"),
                   labels=None if labels is None else labels.numpy().astype(np.int64),
                   summary=config.get("summary"), coding=coding, drift_reference=config.get("drift_reference"))

    def __post_init__(self):
        # rows at a feature's zero skip the backbone of the locked channels reading it
        self.net.set_baseline(torch.from_numpy(standardized_zero(self.mean, self.scale)))
        k = self.n_clusters   # the defaults made explicit, once, as the value is made
        object.__setattr__(self, "cluster_ids", np.arange(k, dtype=np.int64) if self.cluster_ids is None
                           else np.asarray(self.cluster_ids, np.int64))
        object.__setattr__(self, "next_cluster_id", k if self.next_cluster_id is None else int(self.next_cluster_id))

    @property
    def n_clusters(self) -> int:
        """The number of clusters (logit columns)."""
        return self.net.n_clusters

    def for_scoring(self) -> "FittedNet":
        """This state without the record of the fit (the network is shared, not copied): what a
        scoring actor needs and nothing else."""
        return dataclasses.replace(self, history={}, labels=None, summary=None, drift_reference=None)

    @staticmethod
    def standardize_with(arr: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
        """Raw features -> float32 standardized features (computed in float64); fit and scoring share it."""
        return standardize(arr, mean, scale)

    def encode(self, X, what: str = "X") -> np.ndarray:
        """Rows (a DataFrame aligned by name, or a 2-D array in the fitted order) as the encoded
        matrix the network reads (``columns.ColumnCoding.encode``: level codes, NaN for missing
        cells); a model without a coding reads plain numbers and refuses missing cells."""
        return self.reader.encode_counted(X, what)[0]

    def encode_counted(self, X, what: str = "X") -> tuple[np.ndarray, dict[str, int]]:
        """``(encoded matrix, unseen levels per column)``, as ``encode``."""
        return self.reader.encode_counted(X, what)

    @property
    def reader(self) -> ColumnCoding:
        """The coding rows are read with: the fitted one, or for a model saved without one, plain
        numbers read as such models always were (missing cells refused, with the same messages)."""
        if self.coding is None:
            return ColumnCoding.numeric(list(self.feature_names), 0, missing="refuse", legacy=True)
        return self.coding

    def clustering_space(self, arr: np.ndarray) -> np.ndarray:
        """The clustering space of encoded rows for a model whose space is its features
        (``uses_features_as_repr``): the standardized features, with levels one-hot and missing
        cells as the ``columns`` module says."""
        x = self.standardize(arr)
        return x if self.coding is None else self.coding.clustering_space(x)

    def standardize(self, arr: np.ndarray) -> np.ndarray:
        """Raw features in the fitted column order -> float32 standardized features."""
        return self.standardize_with(arr, self.mean, self.scale)

    def _device(self) -> torch.device:
        return next(self.net.parameters()).device

    @torch.no_grad()
    def contribution_chunks(self, arr: np.ndarray, chunk: int = CHUNK):
        """(n, C + P, K) per-channel contributions, ``chunk`` rows at a time."""
        t, t2 = self.temperatures
        for i in range(0, arr.shape[0], chunk):
            x = torch.from_numpy(self.standardize(arr[i:i + chunk])).to(self._device())
            yield self.net.contributions(x, t, t2).float().cpu().numpy()

    def contributions(self, arr: np.ndarray) -> np.ndarray:
        """(n, C + P, K) per-channel contributions of raw feature rows ``arr``."""
        return np.concatenate(list(self.contribution_chunks(arr)))

    @torch.no_grad()
    def logit_chunks(self, arr: np.ndarray, around: np.ndarray | None = None):
        """``(first row, (rows, K) logits)`` of raw feature rows ``arr``, ``CHUNK`` rows at a time
        (fp32, no autograd): neither a whole standardized copy of ``arr`` nor, for ``assign``,
        every row's logits is held. ``around``: one raw row that the rows of ``arr`` differ from
        in a few features (a counterfactual's candidates): only the channels of those run."""
        t, t2 = self.temperatures
        device = self._device()
        base = None if around is None else torch.from_numpy(self.standardize(around[None])[0]).to(device)
        for i in range(0, arr.shape[0], CHUNK):
            x = torch.from_numpy(self.standardize(arr[i:i + CHUNK])).to(device)
            yield i, self.net(x, t, t2, around=base).float().cpu().numpy()

    def _per_chunk(self, arr: np.ndarray, out: np.ndarray, of_logits, around=None) -> np.ndarray:
        """``out`` filled chunk by chunk with ``of_logits`` of each chunk's logits."""
        for i, z in self.logit_chunks(arr, around):
            out[i:i + len(z)] = of_logits(z)
        return out

    def logits(self, arr: np.ndarray, around: np.ndarray | None = None) -> np.ndarray:
        """(n, K) logits of raw feature rows ``arr``, in one output array (``around`` as
        ``logit_chunks``')."""
        return self._per_chunk(arr, np.empty((arr.shape[0], self.net.n_clusters), np.float32), lambda z: z, around)

    def proba(self, arr: np.ndarray) -> np.ndarray:
        """(n, K) cluster probabilities (float64 softmax of the logits) of raw feature rows ``arr``."""
        return self._per_chunk(arr, np.empty((arr.shape[0], self.net.n_clusters)), softmax)

    def assign(self, arr: np.ndarray, around: np.ndarray | None = None) -> np.ndarray:
        """(n,) the cluster column of each of the raw feature rows ``arr`` (its largest logit);
        ``around`` as ``logit_chunks``'."""
        return self._per_chunk(arr, np.empty(arr.shape[0], np.int64), lambda z: z.argmax(1), around)

    def selected(self) -> tuple[list[str], list[tuple[str, str]]]:
        """Names of the features the single gates picked, and of the pairs the pair gates picked."""
        names = self.feature_names
        singles = [names[i] for i in self.net.single.gates.selected()[:, 0].tolist()]
        pairs = [tuple(names[i] for i in pair) for pair in self.net.pairs.gates.selected().tolist()]
        return singles, pairs
