"""``NeurCAM``: the in-memory, scikit-learn-style estimator (one process, data held as tensors).

It starts from ``model.start.begin`` (its rows' ``Start``), builds its trainer from that start,
drives the shared epoch loop and ends with ``model.start.finish``; the Ray driver and workers use
the very same start, trainer and finish over streamed shards.
"""
from __future__ import annotations

import dataclasses
import sys
import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from .errors import ConfigError, DataError
from . import metrics
from .model import FittedNet, NeurCAMNet, TrainingSpec, loop
from .model.fitted import CHUNK
from .model.device import resolve_device, resolve_precision
from .model.perf import keep_freed_memory
from .model.start import begin, finish
from .params import CATEGORICAL_WEIGHT, refuse_unknown_params
from .settings import available_memory, cuda_graphs_enabled, deterministic_algorithms, sized_threads
from .storage import jsonable, read_model_dir, write_model_dir
from .uris import Location, Where
from .numerics import fmt, check_float32_range, check_scale_range, column_moments, constant_columns
from .columns import ColumnCoding
from .validation import (is_frame, check_matrix, constant_features_note, empty_cluster_ids, empty_clusters_note,
                         refuse_lookalike_names)
from .version import __version__

if TYPE_CHECKING:  # annotations only: pandas is imported where a frame is made
    import pandas as pd

    from .monitor import Drift

REFERENCE_ROWS = 20_000  # training rows kept in memory (not saved) for explain() without data


def _on_sized_threads(method):
    """An in-process scoring method of ``X`` (None: the reference rows) run on the torch threads
    its chunks are worth (``settings.sized_threads``: a forward pass over at most
    ``fitted.CHUNK`` rows), or on the estimator's ``threads`` when set."""
    import functools

    @functools.wraps(method)
    def on_sized_threads(self, X=None, *args, **kwargs):
        check_is_fitted(self, "fitted_")
        rows = X if X is not None else getattr(self, "reference_", None)
        n = len(rows) if hasattr(rows, "__len__") else CHUNK
        with sized_threads(self.fitted_.net.step_work(min(n, CHUNK), backward=False), getattr(self, "threads", None)):
            return method(self, X, *args, **kwargs)
    return on_sized_threads


class NeurCAM(ClusterMixin, BaseEstimator):
    """Interpretable fuzzy clustering with a neural GAM (NeurCAM) or GA2M (Neur2CAM, ``n_pairs > 0``).

    ``n_single=None`` gives one single-feature channel per feature. ``init='distill'`` spends the
    first ``distill_epochs`` epochs pulling the network toward the k-means assignment (KL to the
    fuzzy c-means membership of the k-means centroids; ``kmeans`` says which k-means: Lloyd's
    while it costs seconds, MiniBatchKMeans above); the paper's warm-up follows,
    for at most ``warmup_epochs`` epochs. ``early_stopping`` ends the warm-up and the final phase
    once the epoch loss stops improving by ``tol`` (relative) for ``n_iter_no_change`` epochs;
    ``warmup_epochs`` and ``epochs`` (the whole run) are then upper bounds. ``epochs`` bounds every
    phase together: the warm-up ends early enough to leave annealing its room, and an annealing
    phase that reaches its deadline (``anneal_epochs``, or the budget) locks each gate to its argmax,
    so a fitted model is always a valid GAM within the budget; ``max_seconds`` lowers the budget to
    what fits in that many seconds (``history_['stop_reason']`` and ``history_['events']`` say what
    ended each phase). An epoch is a pass over the rows, or ``epoch_rows`` rows of a larger table
    (part of a pass: its plateaus then watch the loss of a fixed sample of the rows), so every
    count of epochs means the same optimiser steps on any table and a large table's fit costs what
    convergence needs, not a multiple of its rows. Every parameter, its range and default:
    ``neurcam_dist.params``.

    Learned attributes: ``labels_`` (each training row's cluster; saved with the model),
    ``importance_`` and ``profiles_`` (DataFrames over the training rows; saved too), ``cluster_centers_``, ``net_``, ``mean_``, ``scale_``,
    ``temperatures_``, ``selected_features_``, ``selected_pairs_``, ``channel_means_``,
    ``history_``, ``cluster_ids_`` (what ``predict`` returns for each logit column: 0..K-1, or the
    stable ids a re-clustering gave them) and ``next_cluster_id_``, ``n_iter_``, ``n_features_in_``,
    ``feature_names_in_`` (the DataFrame's columns, or ``x0..`` for arrays), ``reference_`` (up to
    20,000 training rows for ``explain()``; not saved) and, for a model trained on the output of
    ``neurcam featurize-text``, ``text_`` (the vocabulary: raw documents are featurized with it).

    Examples
    --------
    >>> import numpy as np
    >>> from neurcam_dist import NeurCAM
    >>> rng = np.random.default_rng(0)
    >>> X = np.r_[rng.normal(0, 1, (100, 2)), rng.normal(5, 1, (100, 2))]
    >>> est = NeurCAM(n_clusters=2, epochs=12, warmup_epochs=4, verbose=False).fit(X)
    >>> est.predict(X[:3]).shape, est.predict_proba(X[:3]).shape
    ((3,), (3, 2))
    >>> sorted(set(est.labels_.tolist()))
    [0, 1]
    >>> est.importance_.columns[:3].tolist()
    ['term', 'kind', 'importance']
    """

    def __init__(self, n_clusters: int = 10, n_single: int | None = None, n_pairs: int = 0, m: float = 1.05,
                 gamma: float = 1.0, epsilon: float = 0.9, warmup_epochs: int = 400, epochs: int = 1000,
                 batch_size: int = 512, epoch_rows: int = 20_000, lr: float = 2e-3, hidden: tuple = (64, 64), n_bases: int = 64,
                 standardize: bool = True, constant_features: str = "drop", random_state: int = 0, device: str = "auto",
                 threads: int | None = None,
                 kmeans: str = "auto", kmeans_n_init: int = 10, init: str = "distill", distill_epochs: int = 10,
                 lr_patience: int = 10,
                 early_stopping: bool = True, n_iter_no_change: int = 10, tol: float = 1e-3,
                 anneal_epochs: int = 30, max_seconds: float | None = None,
                 precision: str = "fp32", deterministic: bool = False, verbose: bool = True,
                 categorical_features="from_dtype", missing: str = "learn", missing_values=(),
                 categorical_weight: float = CATEGORICAL_WEIGHT, min_level_rows: int = 5, max_levels: int = 64,
                 numeric_features=None):
        self.n_clusters = n_clusters
        self.n_single = n_single
        self.n_pairs = n_pairs
        self.m = m
        self.gamma = gamma
        self.epsilon = epsilon
        self.warmup_epochs = warmup_epochs
        self.epochs = epochs
        self.batch_size = batch_size
        self.epoch_rows = epoch_rows
        self.lr = lr
        self.hidden = hidden
        self.n_bases = n_bases
        self.standardize = standardize
        self.constant_features = constant_features
        self.random_state = random_state
        self.device = device
        self.threads = threads
        self.kmeans = kmeans
        self.kmeans_n_init = kmeans_n_init
        self.init = init
        self.distill_epochs = distill_epochs
        self.lr_patience = lr_patience
        self.early_stopping = early_stopping
        self.n_iter_no_change = n_iter_no_change
        self.tol = tol
        self.anneal_epochs = anneal_epochs
        self.max_seconds = max_seconds
        self.precision = precision
        self.deterministic = deterministic
        self.verbose = verbose
        self.categorical_features = categorical_features
        self.missing = missing
        self.missing_values = missing_values
        self.categorical_weight = categorical_weight
        self.min_level_rows = min_level_rows
        self.max_levels = max_levels
        self.numeric_features = numeric_features

    def __sklearn_tags__(self):
        """scikit-learn's tags: missing cells (NaN) are a value of their own under ``missing='learn'``
        (infinite cells are still refused), and categorical text columns are read natively."""
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = self.missing == "learn"
        tags.input_tags.categorical = True
        tags.input_tags.string = True
        return tags

    # ------------------------------------------------------------------ validation
    def _validate_fit_input(self, X, what: str = "X") -> tuple[np.ndarray, ColumnCoding]:
        """scikit-learn's validation (sparse, complex, 1-D input) plus ours, which names the
        column: duplicate columns, infinite cells, and (``missing='refuse'``) missing ones; text,
        ``category`` and boolean columns (and those ``categorical_features`` names) become
        categorical features (``columns.ColumnCoding``). The encoded matrix and its coding."""
        _refuse_empty(getattr(X, "shape", None), what)
        if is_frame(X):
            refuse_lookalike_names([str(c) for c in X.columns], what)
            source = X
        else:
            source = validate_data(self, X, reset=True, dtype=np.float64, ensure_all_finite=False)
        coding, arr = ColumnCoding.fit(source, self.categorical_features, min_level_rows=self.min_level_rows,
                                       max_levels=self.max_levels, missing=self.missing,
                                       missing_values=tuple(self.missing_values),
                                       categorical_weight=self.categorical_weight,
                                       numeric_features=self.numeric_features, what=what)
        check_scale_range(arr, list(coding.names), what, skip=coding.categorical_mask())
        return arr, coding

    def _validated(self, X) -> np.ndarray:
        """Rows to score as the encoded float64 matrix in the fitted column order (a DataFrame is
        realigned by name; levels become codes, missing cells NaN: ``columns``); what scoring them
        meets that training did not is said in a warning (``_warn_met``)."""
        arr, unseen = self._validated_counted(X)
        counts = np.isnan(arr).sum(axis=0)
        self._warn_met(unseen, {str(self.feature_names_in_[j]): int(counts[j]) for j in np.flatnonzero(counts)})
        return arr

    def _warn_met(self, unseen: dict[str, int], missing: dict[str, int]) -> None:
        """A ``UserWarning`` when rows hold levels not seen at training (scored as ``other``) or
        missing cells (``missing``: column -> cells) in features that had none at training, counted
        by column as ``neurcam predict`` counts them; nothing for what training had."""
        coding = self.fitted_.coding
        had = {c.name for c in coding.columns if c.missing_rows} if coding is not None else set()
        new = {c: n for c, n in missing.items() if c not in had}
        if unseen or new:
            from .explain.assignments import met_line
            warnings.warn(f"X: {met_line({'unseen': unseen, 'missing': new})}", UserWarning, stacklevel=4)

    def _validated_counted(self, X, what: str = "X") -> tuple[np.ndarray, dict[str, int]]:
        """``_validated``'s matrix and the unseen levels per column (coded ``other``)."""
        check_is_fitted(self, "net_")
        names = list(self.feature_names_in_)
        if is_frame(X):
            return self.fitted_.encode_counted(X, what)
        _refuse_empty(getattr(X, "shape", None), what)
        cat = self.fitted_.coding is not None and self.fitted_.coding.has_categorical
        arr = check_array(X, dtype=None if cat else np.float64, ensure_all_finite=False, input_name="X")
        if arr.shape[1] != self.n_features_in_:
            raise DataError(f"X has {arr.shape[1]} features, but {type(self).__name__} is expecting "
                             f"{self.n_features_in_} features as input (it has {arr.shape[1]} columns, the model "
                             f"was fitted on {self.n_features_in_}: {names})")
        return self.fitted_.encode_counted(arr, "X")

    # ------------------------------------------------------------------ fit
    def fit(self, X, y=None, *, X_repr=None, callback: Callable[[dict], None] | None = None):
        """Fit on features ``X``, clustering in ``X_repr`` (rows aligned with X), or in the
        standardized X when None. ``y`` is ignored (unsupervised), as for scikit-learn's KMeans.

        ``callback(ctx)`` is called after every epoch with a dict holding the epoch record, the
        schedule, the network and the teacher cache.
        """
        started = time.perf_counter()
        arr, coding = self._validate_fit_input(X)
        names = coding.names
        n, d = arr.shape
        if self.n_clusters == "auto" and X_repr is not None:
            raise ConfigError("n_clusters='auto' chooses K in the features' clustering space; with X_repr, measure "
                              "K in your representation and pass it as n_clusters")
        choice = self._choose_k(X, n) if self.n_clusters == "auto" else None
        params = {**self.get_params(), **({"n_clusters": choice.k} if choice else {})}
        spec = TrainingSpec.for_data(params, n, d)   # the one check of the hyperparameters
        device = resolve_device(self.device)                     # ... and of the device, before any work
        say = (lambda line: print(f"NeurCAM: {line}", file=sys.stderr)) if self.verbose else None
        spec.check_memory(n, available_memory(), say=say)
        if X_repr is None:   # the levels' clustering space, before it is built
            coding.check_space(n, available_memory(), say=say)
        rep = None if X_repr is None else _representation(X_repr, n)
        allowed = ~self._constant_columns(arr, names)
        mean, scale = _standardization(arr, coding, self.standardize)
        x_std = FittedNet.standardize_with(arr, mean, scale)
        xr = coding.clustering_space(x_std) if X_repr is None else rep.astype(np.float32)
        if device.type == "cpu":
            keep_freed_memory()
        precision = resolve_precision(self.precision, device)

        t0 = time.perf_counter()
        with sized_threads(spec.step_work(n), self.threads) as threads:
            if say:
                say(f"starting point: k-means ({self.kmeans}) on {n:,} rows x {xr.shape[1]:,} columns")
            start = begin(spec, x_std, xr, arr, mean=mean, scale=scale, allowed=allowed, coding=coding,
                          method=self.kmeans, n_init=self.kmeans_n_init)
            trainer = start.trainer(spec, precision=precision, device=device, cuda_graphs=cuda_graphs_enabled())
            trainer.schedule.seconds = time.perf_counter() - started  # max_seconds counts from the start of fit
            x_t = torch.from_numpy(x_std).to(device)
            xr_t = torch.from_numpy(np.ascontiguousarray(xr)).to(device)
            with deterministic_algorithms(spec.deterministic):
                records = self._train(trainer, x_t, xr_t, spec, callback)
                deterministic = torch.are_deterministic_algorithms_enabled()   # what training ran under
            fitted = finish(trainer, start, records, time.perf_counter() - t0, feature_names=names,
                            repr_dim=xr.shape[1], uses_features_as_repr=X_repr is None, precision=precision,
                            rows=arr, deterministic=deterministic, id_column=_index_name(X.index if is_frame(X) else None), threads=threads,
                            **({"k_choice": choice.to_dict()} if choice is not None else {}))
        self.adopt(fitted, teacher=trainer.teacher)
        self._note_empty_clusters(arr)
        self._keep_reference(X, names, arr, int(self.random_state))
        return self

    def _keep_reference(self, X, names: list[str], arr: np.ndarray, seed: int) -> None:
        """``reference_``, a seeded draw of at most ``REFERENCE_ROWS`` of the training rows ``X``
        in order, and its rows of ``arr``, the table as ``fit`` encoded it: what ``save``'s summary
        and drift reference read (``_encoded_reference``)."""
        keep = np.sort(np.random.default_rng(seed).permutation(len(X))[:REFERENCE_ROWS])
        if is_frame(X):
            self.reference_ = X.iloc[keep]
        else:
            import pandas as pd
            self.reference_ = pd.DataFrame(np.asarray(X)[keep], columns=names)
        self._reference_encoded = (self.fitted_.coding, arr[keep])

    def _choose_k(self, X, n: int):
        """``n_clusters='auto'``: ``choosing.choose_k`` over K = 2..12 (fewer on a small table) with
        this estimator's other parameters, on a seeded sample of at most ``choosing.MAX_ROWS`` rows."""
        import functools

        from .choosing import SUBSAMPLE, MAX_ROWS, choose_k
        top = min(12, int(SUBSAMPLE * min(n, MAX_ROWS)) - 1)
        if top < 3:
            raise ConfigError(f"n_clusters='auto' needs enough rows to compare K = 2 and 3 on subsamples; X has {n}")
        say = (lambda line: print(f"NeurCAM: choosing K: {line}", file=sys.stderr)) if self.verbose else None
        params = {**self.get_params(), "verbose": False}
        choice = choose_k(X, functools.partial(_member, params), range(2, top + 1),
                          random_state=int(self.random_state), say=say)
        if say:
            say(f"K = {choice.k} ({'sure' if choice.sure else 'unsure'}; runner-up "
                f"{choice.runner_up['k'] if choice.runner_up else 'none'})")
        return choice

    def _constant_columns(self, arr: np.ndarray, names: list[str]) -> np.ndarray:
        const = constant_columns(arr)
        note = constant_features_note(const, names, self.constant_features, self.n_pairs)
        if note:
            warnings.warn(note, UserWarning, stacklevel=3)
        return const

    def _note_empty_clusters(self, arr: np.ndarray) -> None:
        """Fewer non-empty clusters than asked for (e.g. fewer distinct rows than clusters): warn and
        record it, since a caller reading ``n_clusters`` would otherwise assume all are in use."""
        k = self.n_clusters_
        sizes = np.bincount(self.labels_, minlength=k)
        used = int((sizes > 0).sum())
        empty = empty_cluster_ids(sizes, self.cluster_ids_)
        distinct = len(np.unique(arr, axis=0)) if used < k and arr.shape[0] <= 1_000_000 else None
        note = empty_clusters_note(used, k, distinct, empty,
                                   (self.history_.get("init") or {}).get("method"))
        self.history_.update(n_clusters_used=used, empty_clusters=empty, empty_clusters_note=note)
        if note:
            warnings.warn(note, UserWarning, stacklevel=3)

    def _train(self, trainer, x_t: torch.Tensor, xr_t: torch.Tensor, spec: TrainingSpec, callback) -> list[dict]:
        """The epoch loop (``model.loop``) over the rows in memory, reshuffled every pass and cut
        into epochs of ``epoch_rows`` rows on a larger table (the plateaus then watch a fixed
        sample's loss), with a progress bar and the caller's ``callback``; the history records."""
        aims = loop.Targets(trainer.net.centroids, spec.m)
        feed = loop.Rows(x_t, xr_t, spec.batch_size, torch.Generator().manual_seed(spec.random_state), aims)
        steps = spec.epoch_steps(x_t.shape[0])
        stream = loop.Stream(feed, steps)
        pick = loop.watched_indices(x_t.shape[0], steps, spec.random_state + 1)
        watch = None if pick is None else loop.Watch(x_t[pick.to(x_t.device)], xr_t[pick.to(x_t.device)], aims)
        bar = _progress(self.verbose, spec.epochs)

        def after_epoch(rec: dict, action) -> None:
            s = trainer.schedule
            bar.update(1)
            bar.set_postfix(phase=s.phase.value, loss=f"{rec['loss']:.4f}", T=fmt(s.t),
                            **({"T2": fmt(s.t2)} if spec.n_pairs else {}))
            if callback is not None:
                callback({"record": rec, "schedule": s, "net": trainer.net, "teacher": trainer.teacher,
                          "targets": feed.current_targets(trainer), "x": x_t, "xr": xr_t, "action": action})

        records = loop.run(trainer, stream, after_epoch=after_epoch, watch=watch)
        bar.close()
        return records

    def adopt(self, fitted: FittedNet, teacher: NeurCAMNet | None = None) -> "NeurCAM":
        """Take ``fitted`` as this estimator's fitted state: the one place the learned attributes
        come from (``fit``, ``load`` and the Ray driver all end here). ``teacher``: the network
        frozen after warm-up (``warmup_net_``), which is not saved.

        Parameters
        ----------
        fitted : FittedNet
            The state; the estimator shares it (no copy).
        teacher : NeurCAMNet, optional
            The warm-up model, kept for inspection.

        Returns
        -------
        NeurCAM
            ``self``.
        """
        self.fitted_ = fitted
        self.feature_names_in_ = np.asarray(fitted.feature_names, dtype=object)
        self.n_features_in_ = len(fitted.feature_names)
        self.warmup_net_ = teacher
        return self

    # The learned attributes, read from the fitted state (scikit-learn's trailing underscore).
    net_ = property(lambda self: self.fitted_.net, doc="The network, every gate one-hot.")
    mean_ = property(lambda self: self.fitted_.mean, doc="Feature means used to standardize.")
    scale_ = property(lambda self: self.fitted_.scale, doc="Feature scales used to standardize.")
    temperatures_ = property(lambda self: tuple(self.fitted_.temperatures), doc="Final gate temperatures.")
    channel_means_ = property(lambda self: self.fitted_.channel_means,
                              doc="(C + P, K) mean contribution of each channel over the training rows.")
    cluster_ids_ = property(lambda self: self.fitted_.cluster_ids, doc="Stable cluster id of each logit column.")
    next_cluster_id_ = property(lambda self: self.fitted_.next_cluster_id,
                                doc="The smallest cluster id this model's lineage never used.")
    history_ = property(lambda self: self.fitted_.history, doc="Per-epoch records, events and stop reason.")
    n_clusters_ = property(lambda self: int(self.fitted_.n_clusters),
                           doc="The number of clusters fitted (``n_clusters``, or the K that 'auto' chose).")
    k_choice_ = property(lambda self: self.fitted_.history.get("k_choice"),
                         doc="With n_clusters='auto': what choose_k measured and proposed (KChoice.to_dict()), "
                             "saved with the model; else None.")
    n_iter_ = property(lambda self: self.fitted_.history.get("n_epochs"), doc="Epochs trained.")
    id_column_ = property(lambda self: self.fitted_.history.get("id_column"),
                          doc="The name the training rows' ids went by (the name of ``X``'s index, ``neurcam "
                              "fit``'s id column, a Ray job's ``data.id``), None when they had none: "
                              "``neurcam predict`` and ``explain`` look for this column first.")
    cluster_centers_ = property(lambda self: self.fitted_.net.centroids.detach().cpu().numpy(),
                                doc="(K, repr_dim) centroids in the clustering space.")
    repr_dim_ = property(lambda self: self.fitted_.repr_dim, doc="Width of the clustering space.")
    uses_features_as_repr_ = property(lambda self: self.fitted_.uses_features_as_repr,
                                      doc="True when the clustering space is the standardized features.")
    precision_ = property(lambda self: self.fitted_.precision, doc="fp32 or bf16, as trained.")
    text_ = property(lambda self: self.fitted_.text,
                     doc="The vocabulary of a model trained on featurized documents, else None.")
    selected_features_ = property(lambda self: self.fitted_.selected()[0],
                                  doc="The feature each single-feature gate selected.")
    selected_pairs_ = property(lambda self: self.fitted_.selected()[1], doc="The pair each pair gate selected.")

    @property
    def labels_(self) -> np.ndarray:
        """The cluster id of every training row (saved with the model). A model trained by
        ``neurcam train`` on Ray has none: its rows' clusters are in the run's assignments."""
        labels = self.fitted_.labels
        if labels is None:
            raise AttributeError("labels_: this model carries no training labels (trained on Ray, or saved by a "
                                 "release before model format 2); predict(X) gives them")
        return labels

    @property
    def importance_(self) -> "pd.DataFrame":
        """Importance of every term over the training rows (``reference_``), largest first: one
        row per term with its ``kind``, ``importance`` (mean absolute centred contribution) and
        one ``importance_ID`` column per cluster; what ``explain().importance_frame()`` gives, kept
        with the model when it is saved."""
        from .explain.explanation import importance_table
        return importance_table(self._summary()["importance"], self.cluster_ids_)

    @property
    def profiles_(self) -> "pd.DataFrame":
        """Each cluster over the training rows: its ``size`` and ``share`` of them and the terms
        that pull rows ``into`` it and push them ``out_of`` it (strongest first); what
        ``explain().profiles_frame()`` gives, kept with the model when it is saved."""
        from .explain.explanation import profiles_table
        return profiles_table(self._summary()["profiles"], self.cluster_ids_)

    def _summary(self) -> dict:
        """Importance and profiles over the reference rows, computed once (an explanation without
        typical rows or counterfactuals) and kept in the fitted state, which saves them."""
        fitted = self.fitted_
        if fitted.summary is None:
            ref = self._kept_rows("importance_ and profiles_ come from the training rows, which this model does not "
                                  "carry (saved by a release before model format 2): use explain(X)."
                                  "importance_frame() / .profiles_frame() on rows of its data")
            from .explain import build_explanation
            from .explain.explanation import summary_of
            summary = summary_of(build_explanation(self, ref, typical=0, encoded=self._encoded_reference()))
            self.fitted_ = fitted = dataclasses.replace(fitted, summary=summary)
        return fitted.summary

    def _encoded_reference(self) -> np.ndarray | None:
        """``reference_`` as the model encodes it, kept from ``fit``'s own encoding of the table (so
        ``save`` encodes nothing again); None once the fitted state has another coding."""
        coding, arr = getattr(self, "_reference_encoded", (None, None))
        return arr if arr is not None and self.fitted_.coding is coding else None

    def _kept_rows(self, missing: str):
        """The training rows kept in memory (``reference_``); ``AttributeError(missing)`` without them
        (a loaded model)."""
        ref = getattr(self, "reference_", None)
        if ref is None:
            raise AttributeError(missing)
        return ref

    def drift_reference(self, X=None) -> dict:
        """What the training rows looked like to the model (``monitor.reference_of``): computed
        once from the training rows (``reference_``) and kept in the fitted state, which saves it.

        Parameters
        ----------
        X : DataFrame or array, optional
            Rows of the training data to build it from, for a model saved without one (by a
            release before monitoring); replaces a kept reference.

        Raises
        ------
        AttributeError
            When the model carries neither a reference nor its training rows and ``X`` is None.
        """
        from .monitor import reference_of
        fitted = self._validated_state()
        if X is not None:
            reference = reference_of(fitted, fitted.encode_counted(X, "the reference rows")[0])
        elif fitted.drift_reference is None:
            ref = self._kept_rows("this model carries no drift reference (saved by a release before monitoring): "
                                  "give rows of its training data, monitor(X, reference=TRAINING_ROWS) or "
                                  "'neurcam monitor --reference TABLE'")
            encoded = self._encoded_reference()
            if encoded is None:
                encoded = fitted.encode_counted(ref, "the reference rows")[0]
            reference = reference_of(fitted, encoded, fitted.labels)
        else:
            return fitted.drift_reference
        self.fitted_ = dataclasses.replace(fitted, drift_reference=reference)
        return reference

    @_on_sized_threads
    def monitor(self, X, reference=None) -> "Drift":
        """Compare a snapshot of new rows with the training data, through the model: which
        features moved (population stability index on the training deciles and levels), which
        clusters grew or shrank, and which terms account for it (``docs/monitor.md``).

        Parameters
        ----------
        X : DataFrame or array
            The snapshot, with the model's feature columns (as ``predict`` takes it).
        reference : DataFrame or array, optional
            Training rows, for a model saved without a drift reference (``drift_reference``).

        Returns
        -------
        monitor.Drift
            ``alert``, features most drifted first, clusters, terms most moved first.

        Raises
        ------
        DataError
            An empty snapshot, a missing feature, a column of another kind than at fit.

        Examples
        --------
        >>> import numpy as np
        >>> from neurcam_dist import NeurCAM
        >>> rng = np.random.default_rng(0)
        >>> X = np.r_[rng.normal(0, 1, (200, 2)), rng.normal(4, 1, (200, 2))]
        >>> est = NeurCAM(n_clusters=2, hidden=(16,), n_bases=8, epochs=12, warmup_epochs=4, verbose=False).fit(X)
        >>> est.monitor(X[::2]).alert
        False
        >>> est.monitor(X + [6.0, 0.0]).drifted_features()[0]
        'x0'
        """
        from .monitor import drift_of
        self.drift_reference(reference)
        return drift_of(self._validated_state(), self.fitted_.drift_reference, X)

    # ------------------------------------------------------------------ inference
    def _html_repr(self) -> str:
        """scikit-learn's estimator diagram and, once fitted, a compact table for notebooks: each
        cluster's id and training rows, the selected terms and how the fit ended."""
        import html
        out = super()._html_repr()
        if getattr(self, "fitted_", None) is None:
            return out
        labels = getattr(self, "labels_", None)
        sizes = {int(i): int((labels == i).sum()) for i in self.cluster_ids_} if labels is not None else {}
        rows = "".join(f"<tr><td>{int(i)}</td><td>{sizes.get(int(i), '')}</td></tr>" for i in self.cluster_ids_)
        terms = list(dict.fromkeys(self.selected_features_)) + [" & ".join(p) for p in self.selected_pairs_]
        return (out + f"<div><b>fitted</b>: {self.n_clusters_} clusters, {self.n_iter_} epochs "
                f"({html.escape(str(self.history_.get('stop_reason')))}); terms: "
                f"{html.escape(', '.join(map(str, terms[:20])))}{' ...' if len(terms) > 20 else ''}"
                f"<table><thead><tr><th>cluster</th><th>training rows</th></tr></thead><tbody>{rows}</tbody>"
                f"</table></div>")

    def scoring_model(self) -> FittedNet:
        """The fitted state less the record of the fit: what scoring needs and nothing else (the
        network is shared, not copied). Batch scoring ships this to its actors instead of the
        estimator with its reference rows and history."""
        check_is_fitted(self, "fitted_")
        return self.fitted_.for_scoring()

    def _validated_state(self) -> FittedNet:
        """The fitted state itself, for scoring in this process (``scoring_model`` makes the
        trimmed copy that is shipped to actors)."""
        check_is_fitted(self, "fitted_")
        return self.fitted_

    @_on_sized_threads
    def decision_function(self, X) -> np.ndarray:
        """(N, K) logits ``g(x)``: the sum of every shape function's contribution."""
        return self._validated_state().logits(self._validated(X))

    @_on_sized_threads
    def predict_proba(self, X) -> np.ndarray:
        """(N, K) cluster probabilities (softmax of the logits); column ``k`` is cluster
        ``cluster_ids_[k]``."""
        fitted = self._validated_state()   # fitted-ness first, then X
        return fitted.proba(self._validated(X))

    def score_frame(self, X, top_terms: int = 0) -> "pd.DataFrame":
        """Scored rows as a DataFrame, the columns batch scoring and the registry model return:
        ``cluster`` (stable id), ``proba_ID`` per cluster and, with ``top_terms``, the terms that
        pushed each row hardest toward its cluster (``term_r``, ``term_r_contribution``).

        Parameters
        ----------
        X : DataFrame or array-like
            Rows with the model's feature columns (a DataFrame is aligned by name).
        top_terms : int
            Terms to report per row (0: none).

        Returns
        -------
        DataFrame
            One row per input row, with ``X``'s index when it is a DataFrame.
        """
        scored, met = self.score_frame_counted(X, top_terms)
        self._warn_met(met["unseen"], met["missing"])
        return scored

    @_on_sized_threads
    def score_frame_counted(self, X, top_terms: int = 0, what: str = "X", **layout) -> tuple["pd.DataFrame", dict]:
        """``score_frame``'s rows and what reading them met: ``{"unseen": column -> cells whose
        level was not seen at training (scored as (other levels)), "missing": column -> missing cells}``.
        ``what``: how a message names the rows (``neurcam predict``: the input file); ``layout``:
        ``explain.assignments.assignments``' column choice (``file_layout``)."""
        from .explain.assignments import scored_frame
        arr, unseen = self._validated_counted(X, what)
        return scored_frame(self._validated_state(), arr, unseen, X.index if is_frame(X) else None,
                            top_terms=top_terms, **layout)

    @_on_sized_threads
    def predict(self, X) -> np.ndarray:
        """Stable cluster ids (``cluster_ids_``; 0..K-1 unless a re-clustering renamed them).
        Column ``k`` of ``predict_proba`` is cluster ``cluster_ids_[k]``."""
        fitted = self._validated_state()   # fitted-ness first, then X
        return self.cluster_ids_[fitted.assign(self._validated(X))]

    def set_cluster_ids(self, ids, next_id: int | None = None) -> "NeurCAM":
        """Rename the clusters (``neurcam recluster`` keeps a segment's id across versions); ``next_id``
        is the smallest id never used by this model's lineage, so retired ids are not reused."""
        check_is_fitted(self, "net_")
        ids = np.asarray(ids, dtype=np.int64)
        if ids.shape != (self.n_clusters_,) or len(np.unique(ids)) != len(ids) or (ids < 0).any():
            raise ConfigError(f"cluster ids must be {self.n_clusters_} distinct non-negative integers, got {ids.tolist()}")
        next_id = int(ids.max()) + 1 if next_id is None else int(next_id)
        if next_id <= ids.max():
            raise ConfigError(f"next_cluster_id={next_id} must exceed every cluster id (largest {int(ids.max())})")
        labels = self.fitted_.labels
        if labels is not None:
            order = np.argsort(self.cluster_ids_)
            labels = ids[order[np.searchsorted(self.cluster_ids_[order], labels)]]
        self.fitted_ = dataclasses.replace(self.fitted_, labels=labels, cluster_ids=ids, next_cluster_id=next_id)
        return self

    def transform_features(self, X) -> np.ndarray:
        """The standardized features the network reads (a categorical column as its level codes,
        a missing cell as NaN: the network's input coding maps both to learned values)."""
        return self._validated_state().standardize(self._validated(X))

    def clustering_space(self, X) -> np.ndarray:
        """Rows in the clustering space of a model fitted without ``X_repr``: the standardized
        numeric features, missing cells at the mean with an indicator, levels one-hot (scaled so
        a categorical weighs like a numeric; ``neurcam_dist.columns``). The space of the loss,
        the k-means init and ``inertia``."""
        if not self.uses_features_as_repr_:
            raise ConfigError("this model was fitted with X_repr: its clustering space is that representation")
        return self._validated_state().clustering_space(self._validated(X))

    @_on_sized_threads
    def contributions(self, X) -> np.ndarray:
        """(N, C + P, K) per-channel contributions; they sum over channels to ``decision_function``."""
        return self._validated_state().contributions(self._validated(X))

    @_on_sized_threads
    def inertia(self, X, X_repr=None) -> float:
        """The paper's hard inertia in the representation (standardized X when ``X_repr`` is None)."""
        arr = self._validated(X)
        if X_repr is None and not self.uses_features_as_repr_:
            raise ConfigError("this model was fitted with X_repr: pass the same representation to inertia()")
        rep = self.fitted_.clustering_space(arr) if X_repr is None else _representation(X_repr, arr.shape[0])
        return metrics.inertia(rep, self.fitted_.cluster_ids[self.fitted_.assign(arr)])

    @_on_sized_threads
    def explain(self, X=None, grid_size: int = 128, pair_grid_size: int = 32, **measured):
        """Shape graphs, purified pair heat maps, importance and cluster profiles over ``X``
        (default: ``reference_``, up to 20,000 training rows kept since ``fit``); ``measured``:
        what ``explain.build_explanation`` also measures (``labels``, ``rows``, ``compared``,
        ``runs``). An explanation of the reference rows at the default grids gives
        ``importance_`` / ``profiles_`` their values when they have none yet (they are the same
        numbers), so a report followed by ``save`` builds one explanation, not two."""
        from .explain import build_explanation
        check_is_fitted(self, "net_")
        reference = X is None
        X = getattr(self, "reference_", None) if reference else X
        if X is None:
            raise DataError("explain() needs data: this model was loaded from disk, pass X "
                             "(rows from the data it clusters)")
        expl = build_explanation(self, X, grid_size=grid_size, pair_grid_size=pair_grid_size, **measured)
        if reference and self.fitted_.summary is None and (grid_size, pair_grid_size) == (128, 32):
            from .explain.explanation import summary_of
            self.fitted_ = dataclasses.replace(self.fitted_, summary=summary_of(expl))
        return expl

    @_on_sized_threads
    def explain_rows(self, X):
        """Per-row terms: ``intercept + contributions.sum(1) == logits`` (see ``RowExplanation``),
        with the rows' feature values and each row's cluster (``to_frame()`` shows them)."""
        import dataclasses

        import pandas as pd

        from .explain import rows_from_contributions
        fitted = self._validated_state()
        arr = self._validated(X)
        rows = rows_from_contributions(fitted, fitted.contributions(arr))
        return dataclasses.replace(rows, cluster_ids=fitted.cluster_ids, assigned=fitted.cluster_ids[rows.logits.argmax(1)],
                                   features=pd.DataFrame(arr, columns=list(self.feature_names_in_)))

    @_on_sized_threads
    def counterfactuals(self, X, target: int | None = None, grid_size: int = 64, pairs: bool = True):
        """What would move each row of ``X``: the smallest change of one feature, or of a pair
        term's two features when that is shorter (``pairs``; in standard deviations), that puts it
        in cluster ``target`` (a stable id), or in the nearest other cluster when None, within the
        range of the reference rows (else of ``X``). A DataFrame (``row``, ``cluster``, ``target``,
        ``feature``, ``value``, ``new_value``, ``change``, ``change_std``, and for a pair move
        ``feature_2``, ``value_2``, ``new_value_2``, ``change_2``); see ``explain.counterfactual``.
        Applying the new values moves the row."""
        import pandas as pd

        from .explain.counterfactual import counterfactuals, value_span
        fitted = self._validated_state()
        arr = self._validated(X)
        ref = getattr(self, "reference_", None)
        span = self._validated(ref) if ref is not None else arr
        return counterfactuals(fitted, arr, list(self.feature_names_in_), *value_span(span), target=target,
                               grid_size=grid_size, index=X.index if isinstance(X, pd.DataFrame) else None,
                               pairs=pairs)

    # ------------------------------------------------------------------ persistence
    def save(self, path: Where) -> None:
        """A model directory (``storage.modeldir``): config JSON + safetensors + manifest, atomically.

        Parameters
        ----------
        path : str or PathLike
            The directory to write (replaced atomically when it holds an earlier model).
        """
        check_is_fitted(self, "fitted_")
        if getattr(self, "reference_", None) is not None:
            self._summary()   # importance and profiles travel with the model
            self.drift_reference()   # ... and what monitoring compares with
        state, weights = self.fitted_.to_dict()
        config = {"written_by": f"neurcam-dist {__version__}", "params": self.get_params(), **state}
        write_model_dir(Location(path), jsonable(config), weights)

    @classmethod
    def load(cls, path: Where, device: str = "cpu") -> "NeurCAM":
        """The estimator ``save`` wrote, with its fitted state (not its reference rows).

        Parameters
        ----------
        path : str or PathLike
            A model directory.
        device : str
            Where the network goes (``cpu``, ``cuda``).

        Raises
        ------
        ModelFileError
            When the directory is incomplete, altered, or written by a newer version.
        """
        config, state = read_model_dir(Location(path))
        refuse_unknown_params(config, path)
        params = dict(config["params"])
        params["hidden"] = tuple(params["hidden"])
        params["missing_values"] = tuple(params.get("missing_values", ()))
        params["device"] = device
        return cls(**params).adopt(FittedNet.from_dict(config, state, device, where=str(path)))


def _index_name(index) -> str | None:
    """The name of a DataFrame's row ``index`` (the rows' id column, set aside), else None."""
    name = index.name if index is not None and index.nlevels == 1 else None
    return None if name is None else str(name)


def _standardization(arr: np.ndarray, coding: ColumnCoding, standardize: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(mean, scale)`` of the encoded training rows: each numeric column's mean and deviation
    over its cells that are not missing (1 for a constant one); categorical codes pass as they are."""
    if not standardize:
        return np.zeros(arr.shape[1]), np.ones(arr.shape[1])
    mean, std = column_moments(arr, skip=coding.categorical_mask())
    return mean, np.where(std > 0, std, 1.0)


def _representation(X_repr, n_rows: int) -> np.ndarray:
    """The clustering representation, checked and aligned row for row with ``n_rows`` rows of X."""
    rep, names, _ = check_matrix(X_repr, "X_repr")
    check_float32_range(rep, names, "X_repr")
    if rep.shape[0] != n_rows:
        raise DataError(f"X has {n_rows} rows but X_repr has {rep.shape[0]}: they must match row for row")
    return rep


def _refuse_empty(shape, what: str) -> None:
    """No rows in an input of this ``shape`` (None: not an array): say so plainly (scikit-learn's
    own message covers zero columns)."""
    if shape is not None and len(shape) == 2 and shape[0] == 0:
        raise DataError(f"{what} is empty: shape {tuple(shape)}")


class _NoBar:
    def update(self, *_):
        pass

    def set_postfix(self, **_):
        pass

    def close(self):
        pass


LOG_EVERY_S = 5.0   # seconds between progress lines in a log


class _Bar:
    """A terminal's live bar: its total is the epoch budget (an upper bound) while training, and
    the epochs that ran once it ends (a fit that stops early ends at 100%, not "9% 89/1000")."""

    def __init__(self, total: int):
        from tqdm.auto import tqdm
        self.bar = tqdm(total=total, desc=f"NeurCAM (at most {total} epochs)", unit="epoch", dynamic_ncols=True)

    def update(self, n: int = 1):
        self.bar.update(n)

    def set_postfix(self, **kw):
        self.bar.set_postfix(**kw)

    def close(self):
        self.bar.desc = "NeurCAM"
        self.bar.total = self.bar.n
        self.bar.refresh()
        self.bar.close()


class _Lines:
    """Progress for a log (CI, a pipe, a pod): a line when the phase changes or ``every`` seconds
    have passed, and one at the end; a short fit writes a handful, never one per epoch."""

    def __init__(self, total: int, every: float = LOG_EVERY_S, stream=None):
        self.total, self.every, self.stream = total, every, stream or sys.stderr
        self.n, self.phase, self.post, self.t0 = 0, None, {}, time.monotonic()
        self.last = self.t0

    def update(self, n: int = 1):
        self.n += n

    def set_postfix(self, **kw):
        self.post = kw
        now = time.monotonic()
        if kw.get("phase") != self.phase or now - self.last >= self.every:
            self.phase, self.last = kw.get("phase"), now
            self._say(f"epoch {self.n} (at most {self.total}): " + ", ".join(f"{k} {v}" for k, v in kw.items()))

    def _say(self, text: str):
        print(f"NeurCAM: {text}", file=self.stream, flush=True)

    def close(self):
        self._say(f"done: {self.n} epochs in {time.monotonic() - self.t0:.1f} s"
                  + (f", loss {self.post['loss']}" if "loss" in self.post else ""))


def _progress(verbose: bool, total: int):
    """No progress (``verbose=False``), a live bar on a terminal, lines in a log."""
    if not verbose:
        return _NoBar()
    if sys.stderr.isatty():
        return _Bar(total)
    return _Lines(total)


def _member(params: dict, k: int, seed: int) -> NeurCAM:
    """One of ``choose_k``'s fits for ``n_clusters='auto'`` (a module-level function: joblib's
    workers receive it pickled)."""
    return NeurCAM(**{**params, "n_clusters": k, "random_state": seed})


def choose_k(X, y=None, k=range(2, 13), *, seeds: int = 3, terms: bool = False, random_state: int = 0,
             n_jobs: int | None = None, verbose: bool = True, describe: bool = False, say=None, **params):
    """How many clusters: fit ``NeurCAM(n_clusters=K, random_state=seed, **params)`` for every K
    of ``k`` and ``seeds`` seeds (each on its own subsample of the rows), measure inertia,
    silhouette, stability across seeds, agreement of top terms and the terms used, and propose a
    K (``choosing.RULE``). Returns a ``choosing.KChoice`` (``.k``, ``.runner_up``, ``.frame()``,
    ``.to_dict()``); ``y``: a label, for evaluation only (each K's ARI with it); ``terms=True``
    also fits the proposed K with fewer terms; ``describe=True`` fits it on every sampled row and
    describes its clusters (``.clusters``). ``n_jobs``: fits at once (default: one per core, up
    to 8); ``verbose``: a line per K on stderr (or to ``say(line)`` when given).

    Parameters
    ----------
    X : DataFrame or array
        The table (as ``NeurCAM.fit`` takes it).
    y : array-like, optional
        A label, for evaluation only.
    k : iterable of int
        The values of K to compare.
    seeds : int
        Seeds per K (2 at least: stability is their agreement).
    **params
        Other hyperparameters of every fit.

    Returns
    -------
    choosing.KChoice

    Examples
    --------
    >>> import numpy as np
    >>> from neurcam_dist import choose_k
    >>> rng = np.random.default_rng(0)
    >>> X = np.r_[rng.normal(0, 1, (150, 2)), rng.normal(6, 1, (150, 2)), rng.normal((0, 6), 1, (150, 2))]
    >>> choice = choose_k(X, k=[2, 3, 4], seeds=2, epochs=12, warmup_epochs=4, n_jobs=1, verbose=False)
    >>> choice.k
    3
    >>> choice.frame().index.tolist()   # one row per K: inertia, silhouette, stability, ...
    [2, 3, 4]
    """
    import functools

    from .choosing import choose_k as _choose
    from .params import check_params
    check_params(params)
    if "n_clusters" in params:
        raise ConfigError("choose_k sets n_clusters itself: give the values of K to compare as k=...")
    if say is None and verbose:
        say = lambda line: print(f"choose_k: {line}", file=sys.stderr)  # noqa: E731
    return _choose(X, functools.partial(_member, {**params, "verbose": False}), k, y=y, seeds=seeds,
                   random_state=random_state, n_jobs=n_jobs, terms=terms, describe=describe, say=say)
