"""``NeurCAM``: the in-memory, scikit-learn-style estimator (one process, data held as tensors).

It drives the shared ``epoch.train_epoch`` with the ``schedule.Schedule`` state machine; the Ray
worker drives the same two pieces over streamed shards.
"""
from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pandas as pd
import torch
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.cluster import MiniBatchKMeans

from . import metrics
from .epoch import Batch
from .loss import fcm_log_membership, squared_distances
from .nbm import NeurCAMNet
from .perf import keep_freed_memory
from .training import Trainer
from .schedule import Schedule
from .validation import check_matrix, check_number

INITS = ("distill", "kmeans")
REFERENCE_ROWS = 20_000  # training rows kept in memory (not saved) for explain() without data
PRECISIONS = ("fp32", "bf16", "auto")


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def resolve_precision(precision: str, device: torch.device) -> str:
    """``auto``: bf16 where the hardware has fast bf16 matmuls (CUDA with bf16, CPUs with
    AVX-512 BF16 / AMX through oneDNN), fp32 elsewhere."""
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    try:
        return "bf16" if torch.ops.mkldnn._is_mkldnn_bf16_supported() else "fp32"
    except (AttributeError, RuntimeError):
        return "fp32"


def kmeans_centroids(xr: np.ndarray, n_clusters: int, batch_size: int, seed: int) -> np.ndarray:
    """MiniBatchKMeans with the paper's mKMC settings (init on 5 x batch size points, 5 inits)."""
    km = MiniBatchKMeans(n_clusters=n_clusters, batch_size=batch_size, init_size=min(len(xr), 5 * batch_size),
                         n_init=5, random_state=seed)
    km.fit(xr)
    return km.cluster_centers_.astype(np.float32)


@torch.no_grad()
def log_assignment(net: NeurCAMNet, x: torch.Tensor, t: float = 1.0, t2: float = 1.0,
                   chunk: int = 8192) -> torch.Tensor:
    """(N, K) log fuzzy assignment in fp32, computed in chunks (no autograd graph)."""
    was_training = net.training
    net.eval()
    out = torch.cat([torch.log_softmax(net(x[i:i + chunk], t, t2).float(), dim=1)
                     for i in range(0, x.shape[0], chunk)])
    net.train(was_training)
    return out


class NeurCAM(ClusterMixin, BaseEstimator):
    """Interpretable fuzzy clustering with a neural GAM (NeurCAM) or GA2M (Neur2CAM, ``n_pairs > 0``).

    ``n_single=None`` gives one single-feature channel per feature. ``init='distill'`` spends the
    first ``distill_epochs`` epochs pulling the network toward the MiniBatchKMeans assignment
    (KL to the fuzzy c-means membership of the k-means centroids) before the paper's warm-up.
    ``early_stopping`` ends the warm-up and the final phase once the epoch loss stops improving
    by ``tol`` (relative) for ``n_iter_no_change`` epochs; ``warmup_epochs`` and ``epochs`` are
    then upper bounds. Annealing always runs until every gate is exactly one-hot, so a fitted
    model is a valid GAM even when that takes longer than ``epochs``.
    """

    def __init__(self, n_clusters: int = 10, n_single: int | None = None, n_pairs: int = 0, m: float = 1.05,
                 gamma: float = 1.0, epsilon: float = 0.9, warmup_epochs: int = 400, epochs: int = 1000,
                 batch_size: int = 512, lr: float = 2e-3, hidden: tuple = (256, 256), n_bases: int = 64,
                 standardize: bool = True, random_state: int = 0, device: str = "auto",
                 init: str = "distill", distill_epochs: int = 10, lr_patience: int = 10,
                 early_stopping: bool = True, n_iter_no_change: int = 10, tol: float = 1e-3,
                 precision: str = "fp32", verbose: bool = True):
        self.n_clusters = n_clusters
        self.n_single = n_single
        self.n_pairs = n_pairs
        self.m = m
        self.gamma = gamma
        self.epsilon = epsilon
        self.warmup_epochs = warmup_epochs
        self.epochs = epochs
        self.batch_size = batch_size
        self.lr = lr
        self.hidden = hidden
        self.n_bases = n_bases
        self.standardize = standardize
        self.random_state = random_state
        self.device = device
        self.init = init
        self.distill_epochs = distill_epochs
        self.lr_patience = lr_patience
        self.early_stopping = early_stopping
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.precision = precision
        self.verbose = verbose

    # ------------------------------------------------------------------ validation
    def _check_params(self, n_rows: int, n_features: int) -> None:
        check_number("n_clusters", self.n_clusters, low=2, integer=True)
        if self.n_clusters > n_rows:
            raise ValueError(f"n_clusters={self.n_clusters} is larger than the number of rows ({n_rows})")
        if self.n_single is not None:
            check_number("n_single", self.n_single, low=0, integer=True)
        check_number("n_pairs", self.n_pairs, low=0, integer=True)
        if self.n_pairs > 0 and n_features < 2:
            raise ValueError(f"n_pairs={self.n_pairs} needs at least 2 features, X has {n_features}")
        if (self.n_single if self.n_single is not None else n_features) + self.n_pairs == 0:
            raise ValueError("n_single=0 and n_pairs=0: the model needs at least one shape function")
        check_number("m", self.m, low=1.0)
        check_number("gamma", self.gamma, low=0.0)
        check_number("epsilon", self.epsilon, low=0.0, high=1.0, low_open=True, high_open=True)
        check_number("warmup_epochs", self.warmup_epochs, low=0, integer=True)
        check_number("epochs", self.epochs, low=1, integer=True)
        check_number("batch_size", self.batch_size, low=1, integer=True)
        check_number("lr", self.lr, low=0.0, low_open=True)
        check_number("n_bases", self.n_bases, low=1, integer=True)
        check_number("distill_epochs", self.distill_epochs, low=0, integer=True)
        check_number("lr_patience", self.lr_patience, low=0, integer=True)
        check_number("n_iter_no_change", self.n_iter_no_change, low=1, integer=True)
        check_number("tol", self.tol, low=0.0)
        hidden = tuple(self.hidden)
        if not hidden or any(isinstance(h, bool) or not isinstance(h, (int, np.integer)) or h < 1 for h in hidden):
            raise ValueError(f"hidden must be a non-empty sequence of positive integers, got {self.hidden!r}")
        if self.init not in INITS:
            raise ValueError(f"init must be one of {INITS}, got {self.init!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")

    def _check_fitted(self) -> None:
        if not hasattr(self, "net_"):
            raise ValueError("this NeurCAM is not fitted yet: call fit(X) first")

    def _features(self, X) -> np.ndarray:
        """Validated, standardized float32 features with the fitted column order."""
        self._check_fitted()
        arr, _, _ = check_matrix(X, "X", expected_columns=self.feature_names_in_)
        return ((arr - self.mean_) / self.scale_).astype(np.float32)

    def _representation(self, X, X_repr, x_std: np.ndarray) -> np.ndarray:
        if X_repr is None:
            return x_std
        rep, _, _ = check_matrix(X_repr, "X_repr")
        if rep.shape[0] != x_std.shape[0]:
            raise ValueError(f"X has {x_std.shape[0]} rows but X_repr has {rep.shape[0]}: they must match row for row")
        return rep

    # ------------------------------------------------------------------ fit
    def fit(self, X, X_repr=None, *, y=None, callback: Callable[[dict], None] | None = None):
        """Fit on features ``X`` (clustering in ``X_repr``, or in standardized X when None).

        ``y`` is accepted and ignored (unsupervised). ``callback(ctx)`` is called after every epoch
        with a dict holding the epoch record, the schedule, the network and the teacher cache.
        """
        arr, names, _ = check_matrix(X, "X")
        n, d = arr.shape
        self._check_params(n, d)
        if X_repr is not None:
            rep, _, _ = check_matrix(X_repr, "X_repr")
            if rep.shape[0] != n:
                raise ValueError(f"X has {n} rows but X_repr has {rep.shape[0]}: they must match row for row")
        self.feature_names_in_ = names
        self.n_features_in_ = d
        if self.standardize:
            self.mean_ = arr.mean(0).astype(np.float32)
            std = arr.std(0)
            self.scale_ = np.where(std > 0, std, 1.0).astype(np.float32)
        else:
            self.mean_ = np.zeros(d, np.float32)
            self.scale_ = np.ones(d, np.float32)
        x_std = ((arr - self.mean_) / self.scale_).astype(np.float32)
        xr = x_std if X_repr is None else rep
        self.repr_dim_ = xr.shape[1]
        self.uses_features_as_repr_ = X_repr is None
        seed = int(self.random_state)
        torch.manual_seed(seed)
        device = resolve_device(self.device)
        if device.type == "cpu":
            keep_freed_memory()
        self.precision_ = precision = resolve_precision(self.precision, device)

        t0 = time.perf_counter()
        centroids = kmeans_centroids(xr, self.n_clusters, self.batch_size, seed)
        n_single = d if self.n_single is None else int(self.n_single)
        net = NeurCAMNet(d, self.n_clusters, n_single, int(self.n_pairs), tuple(self.hidden), int(self.n_bases),
                         torch.from_numpy(centroids), seed=seed).to(device)
        x_t = torch.from_numpy(x_std).to(device)
        xr_t = torch.from_numpy(np.ascontiguousarray(xr, dtype=np.float32)).to(device)
        distill = self.init == "distill" and self.distill_epochs > 0
        sched = Schedule(epochs=int(self.epochs), warmup_epochs=int(self.warmup_epochs),
                         distill_epochs=int(self.distill_epochs) if distill else 0, epsilon=float(self.epsilon),
                         has_pairs=self.n_pairs > 0, early_stopping=bool(self.early_stopping),
                         n_iter_no_change=int(self.n_iter_no_change), tol=float(self.tol))
        targets = fcm_log_membership(squared_distances(xr_t, net.centroids.detach()), self.m) if distill else None
        trainer = Trainer(net, sched, m=self.m, gamma=self.gamma, lr=self.lr, lr_patience=int(self.lr_patience),
                          precision=precision)
        gen = torch.Generator().manual_seed(seed)
        records = []
        bar = _progress(self.verbose, self.epochs)
        while not trainer.finished:
            te = time.perf_counter()
            batches = _batches(x_t, xr_t, targets if trainer.schedule.uses_teacher else None, self.batch_size, gen)
            stats = trainer.run_epoch(batches)
            rec, action = trainer.end_epoch(stats.means(), time.perf_counter() - te)
            records.append(rec)
            if action == "freeze_teacher":  # the teacher's assignment is fixed per row: cache it once
                targets = log_assignment(trainer.teacher, x_t, 1.0, 1.0)
            s = trainer.schedule
            bar.update(1)
            bar.set_postfix(phase=s.phase, loss=f"{rec['loss']:.4f}", T=f"{s.t:.3g}", T2=f"{s.t2:.3g}")
            if callback is not None:
                callback({"record": rec, "schedule": s, "net": net, "teacher": trainer.teacher,
                          "targets": targets, "x": x_t, "xr": xr_t, "action": action})
        bar.close()
        self._set_trained(net, trainer.teacher, trainer.schedule, records, time.perf_counter() - t0)
        self.labels_ = self.predict_proba(X).argmax(1)
        # Training-data means of every channel: the reference that centres per-row explanations.
        self.channel_means_ = sum(c.astype(np.float64).sum(0) for c in self._contribution_chunks(X)) / n
        keep = np.random.default_rng(seed).permutation(n)[:REFERENCE_ROWS]
        self._reference = X.iloc[np.sort(keep)] if isinstance(X, pd.DataFrame) else arr[np.sort(keep)]
        return self

    def _set_trained(self, net: NeurCAMNet, teacher: NeurCAMNet | None, sched: Schedule, records: list,
                     seconds: float) -> None:
        """The learned attributes every driver sets at the end of training (in memory or on Ray)."""
        if not (net.single.gates.one_hot_at(sched.t) and net.pairs.gates.one_hot_at(sched.t2)):
            raise RuntimeError("internal error: training ended with a gate that is not one-hot")
        self.net_ = net.eval()
        self.warmup_net_ = teacher
        self.history_ = {"epochs": records, "events": sched.events, "stop_reason": sched.stop_reason,
                         "n_epochs": sched.epoch, "fit_seconds": seconds}
        self.n_iter_ = sched.epoch
        self.temperatures_ = (sched.t, sched.t2)
        self.cluster_centers_ = net.centroids.detach().cpu().numpy()
        self._set_selection()

    def _set_selection(self) -> None:
        names = self.feature_names_in_
        self.selected_features_ = [names[i] for i in self.net_.single.gates.selected()[:, 0].tolist()]
        self.selected_pairs_ = [tuple(names[i] for i in pair) for pair in self.net_.pairs.gates.selected().tolist()]

    # ------------------------------------------------------------------ inference
    @torch.no_grad()
    def decision_function(self, X) -> np.ndarray:
        """(N, K) logits ``g(x)``: the sum of every shape function's contribution."""
        x = torch.from_numpy(self._features(X)).to(self._device())
        t, t2 = self.temperatures_
        return torch.cat([self.net_(x[i:i + 8192], t, t2).float() for i in range(0, x.shape[0], 8192)]).cpu().numpy()

    def predict_proba(self, X) -> np.ndarray:
        g = torch.from_numpy(self.decision_function(X))
        return torch.softmax(g.double(), dim=1).numpy()

    def predict(self, X) -> np.ndarray:
        return self.decision_function(X).argmax(1)

    def contributions(self, X) -> np.ndarray:
        """(N, C + P, K) per-channel contributions; they sum over channels to ``decision_function``."""
        return np.concatenate(list(self._contribution_chunks(X)))

    @torch.no_grad()
    def _contribution_chunks(self, X, chunk: int = 8192):
        x = torch.from_numpy(self._features(X)).to(self._device())
        t, t2 = self.temperatures_
        for i in range(0, x.shape[0], chunk):
            yield self.net_.contributions(x[i:i + chunk], t, t2).float().cpu().numpy()

    def inertia(self, X, X_repr=None) -> float:
        """The paper's hard inertia in the representation (standardized X when ``X_repr`` is None)."""
        x_std = self._features(X)
        if X_repr is None and not self.uses_features_as_repr_:
            raise ValueError("this model was fitted with X_repr: pass the same representation to inertia()")
        rep = self._representation(X, X_repr, x_std)
        return metrics.inertia(rep, self.predict(X))

    def explain(self, X=None, grid_size: int = 128, pair_grid_size: int = 32):
        """Shape graphs, purified pair heat maps, importance and cluster profiles over ``X``
        (default: up to 20,000 training rows kept since ``fit``). See ``neurcam_dist.explain``."""
        from .explain import build_explanation
        if X is None:
            X = getattr(self, "_reference", None)
            if X is None:
                raise ValueError("explain() needs data: this model was loaded from disk, pass X "
                                 "(rows from the data it clusters)")
        return build_explanation(self, X, grid_size=grid_size, pair_grid_size=pair_grid_size)

    def explain_rows(self, X):
        """Per-row terms: ``intercept + contributions.sum(1) == logits`` (see ``RowExplanation``)."""
        from .explain import explain_rows
        return explain_rows(self, X)

    def _device(self) -> torch.device:
        return next(self.net_.parameters()).device

    # ------------------------------------------------------------------ persistence
    def save(self, path) -> None:
        from .persist import save_estimator
        save_estimator(self, path)

    @classmethod
    def load(cls, path, device: str = "cpu") -> "NeurCAM":
        from .persist import load_estimator
        return load_estimator(path, device=device)


def _batches(x: torch.Tensor, xr: torch.Tensor, targets: torch.Tensor | None, batch_size: int,
             gen: torch.Generator):
    """Shuffled mini-batches; the teacher's cached log-assignment travels with its rows."""
    perm = torch.randperm(x.shape[0], generator=gen).to(x.device)
    for i in range(0, x.shape[0], batch_size):
        idx = perm[i:i + batch_size]
        yield Batch(x[idx], xr[idx], None if targets is None else targets[idx])


class _NoBar:
    def update(self, *_):
        pass

    def set_postfix(self, **_):
        pass

    def close(self):
        pass


def _progress(verbose: bool, total: int):
    if not verbose:
        return _NoBar()
    from tqdm.auto import tqdm
    return tqdm(total=total, desc="NeurCAM", unit="epoch", dynamic_ncols=True)
