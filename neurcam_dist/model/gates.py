"""Feature-selection gates: entmax15 over learned logits, annealed by a temperature until one-hot.

A gate is a row of a (channels, D) matrix; the selected input of a channel is ``x @ gate``.
While relaxed, the gate is ``entmax15(logits / T)``: a sparse mixture of features. Once every
gate of a kind is exactly one-hot (a single non-zero), the kind is *locked*: its selection is
frozen to the argmax and the gate becomes a constant one-hot matrix, so later optimiser steps
(Adam momentum included) cannot move a selection that the model's explanation relies on.
Features marked not ``allowed`` (constant columns) get a logit far below the rest, so entmax
gives them exactly zero weight at every temperature and no gate can ever select them.

The locked flag is kept twice: a buffer (it travels with ``state_dict``) and a Python bool that
``forward`` reads, because reading a device tensor's value in every forward is a host sync that
stalls the GPU's queue and makes a training step impossible to capture in a CUDA graph.
"""
from __future__ import annotations

import torch
from entmax import entmax15
from torch import nn

EXCLUDED_LOGIT = -1e4  # below any learned logit: exactly zero weight under entmax15 at T <= 1
# With at least as many single-feature channels as features, channel c's logit of feature c starts
# SPREAD_LOGIT higher (times min(1, SPREAD_FULL_UP_TO / features)). From random logits alone several
# channels settled on one feature and left others unused: a 5-feature mixture used 3 and ended at
# 1.22x KMeans' inertia, pendigits used 14 of 16 (1.0009x; 1.0002x with the lean). With many
# features the relaxed mixtures of the warm-up matter more than covering each one (digits, 64
# features, went from 1.0008x to 1.037x with a lean of 4), so the lean shrinks as 128 / features
# beyond 16 (4 at 32, 2 at 64). A lean of 4 on 7 features still let one channel of Plotly's tips
# drift onto another's feature in warm-up (1.022x KMeans' inertia at seed 0; 1.0002x with 8).
SPREAD_LOGIT = 8.0
SPREAD_FULL_UP_TO = 16


def relaxed_gates(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """entmax15 over the last axis of ``logits / temperature``; exact zeros outside the support."""
    return entmax15(logits / temperature, dim=-1)


def is_one_hot(gates: torch.Tensor) -> bool:
    """True when every gate row has exactly one non-zero entry (no tolerance: exact zeros)."""
    if gates.numel() == 0:
        return True
    return bool(((gates != 0).sum(dim=-1) == 1).all())


class SelectionGates(nn.Module):
    """``n`` groups of ``arity`` gates over ``n_features`` inputs (arity 1: single, 2: pairwise)."""

    def __init__(self, n: int, arity: int, n_features: int, generator: torch.Generator | None = None,
                 allowed: torch.Tensor | None = None):
        super().__init__()
        self.n, self.arity, self.n_features = n, arity, n_features
        init = torch.randn(n, arity, n_features, generator=generator) if n else torch.zeros(n, arity, n_features)
        pool = torch.arange(n_features) if allowed is None else torch.nonzero(torch.as_tensor(allowed)).flatten()
        if arity == 1 and len(pool) and n >= len(pool):
            # as many channels as features: channel c starts leaning toward feature c (cycled), so
            # every feature keeps a channel unless training moves it (see SPREAD_LOGIT)
            lean = SPREAD_LOGIT * min(1.0, SPREAD_FULL_UP_TO / len(pool))
            init[torch.arange(n), 0, pool.repeat(-(-n // len(pool)))[:n]] += lean
        self.logits = nn.Parameter(init)
        # Locked state lives in buffers so it travels with state_dict (checkpoints, save/load).
        self.register_buffer("locked", torch.zeros((), dtype=torch.bool))
        self.register_buffer("index", torch.zeros(n, arity, dtype=torch.long))
        self.register_buffer("allowed", torch.ones(n_features, dtype=torch.bool) if allowed is None
                             else torch.as_tensor(allowed, dtype=torch.bool).clone())
        self.is_locked = False  # the host's copy of ``locked``: read per forward without a sync
        # The locked gate matrix, made once (``one_hot`` checks its indices on the host).
        self.register_buffer("one_hot", None, persistent=False)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._set_locked(bool(self.locked))  # once per load, never per forward

    def _set_locked(self, locked: bool) -> None:
        self.is_locked = locked
        self.one_hot = (nn.functional.one_hot(self.index, self.n_features).to(self.logits.dtype)
                        if locked else None)

    def masked_logits(self) -> torch.Tensor:
        """The gate logits with the features a gate may not select pushed far down."""
        return self.logits.masked_fill(~self.allowed, EXCLUDED_LOGIT)

    def matrix(self, temperature: float) -> torch.Tensor:
        """The (n, arity, D) gate matrix at this temperature (one-hot constant once locked)."""
        if self.is_locked:
            return self.one_hot
        return relaxed_gates(self.masked_logits(), temperature)

    @torch.no_grad()
    def one_hot_at(self, temperature: float) -> bool:
        """True when every gate is exactly one-hot at ``temperature`` (or locked)."""
        return self.is_locked or is_one_hot(relaxed_gates(self.masked_logits(), temperature))

    @torch.no_grad()
    def one_hot_temperature(self, below: float) -> float:
        """The largest temperature up to ``below`` at which every gate is exactly one-hot: entmax15
        of ``z / T`` is one-hot iff the top logit leads the next by at least ``2 T``. ``below`` when
        some gate has two equal top logits (no temperature separates them)."""
        z = self.masked_logits()
        if self.n == 0 or z.shape[-1] < 2:
            return below
        top2 = z.topk(2, dim=-1).values
        t = min(below, float((top2[..., 0] - top2[..., 1]).min()) / 2)
        while t > 0 and not is_one_hot(relaxed_gates(z, t)):  # rounding at the boundary
            t /= 2
        return t if t > 0 else below

    @torch.no_grad()
    def lock(self) -> None:
        """Freeze the selection to the argmax; callers check ``one_hot_at`` first."""
        self.index.copy_(self.masked_logits().argmax(dim=-1))
        self.locked.fill_(True)
        self._set_locked(True)
        self.logits.requires_grad_(False)

    def selected(self) -> torch.Tensor:
        """(n, arity) selected feature indices (the argmax; equal to the locked index once locked)."""
        return self.index.clone() if self.is_locked else self.masked_logits().detach().argmax(dim=-1)
