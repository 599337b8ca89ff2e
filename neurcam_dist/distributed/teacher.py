"""The frozen warm-up model's assignment of streamed rows, kept per row key across epochs.

The KL term after warm-up needs the frozen model's log-assignment of every row. In memory (the
estimator, a device-resident shard) it is computed once per row. A streamed shard reaches a worker
in another order every epoch, and with several workers another split of the rows, so the worker
keys what it computed by ``ROW_KEY`` (a row's place in the plan's files): the teacher runs at most
once per row and worker, instead of once per row and annealing epoch. Any row can reach any
worker, so the table spans all the plan's rows (rows x clusters float32, plus a flag per row);
past the worker's memory budget it is off and the teacher runs on every batch, as it must.
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from ..model.fitted import log_assignment


class RowTargets:
    """``targets(teacher, x, keys)``: the teacher's log-assignment of the rows ``keys``, computed
    for the rows not seen before (``computed`` counts them) and looked up for the others."""

    def __init__(self, n_rows: int, n_clusters: int, device: torch.device, budget: int,
                 say: Callable[[str], None] = print):
        self.n_rows, self.n_clusters, self.device = n_rows, n_clusters, device
        self.bytes = n_rows * (n_clusters * 4 + 1)
        self.enabled = self.bytes <= budget
        self.budget, self.say, self.told = budget, say, False
        self.teacher = self.values = self.known = None
        self.computed = 0

    def targets(self, teacher, x: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """The frozen model's log-assignment of the batch's rows (computed once a row,
        then taken from the cache by row key while the cache fits its budget)."""
        with torch.no_grad():
            if not self.enabled:
                if not self.told:
                    self.told = True
                    self.say(f"the frozen model's assignments of all {self.n_rows:,} rows would need "
                             f"{self.bytes / 2**30:.2f} GiB, over this worker's budget of {self.budget / 2**30:.2f} "
                             f"GiB: computed again for every batch (raise train.device_cache_gib)")
                self.computed += x.shape[0]
                return log_assignment(teacher, x)
            if teacher is not self.teacher:  # the first teacher, or a new one: nothing known yet
                self.teacher = teacher
                self.values = torch.empty((self.n_rows, self.n_clusters), dtype=torch.float32, device=self.device)
                self.known = torch.zeros(self.n_rows, dtype=torch.bool, device=self.device)
            keys = keys.to(self.device)
            miss = ~self.known[keys]
            if bool(miss.any()):
                new = keys[miss]
                self.values[new] = log_assignment(teacher, x[miss])
                self.known[new] = True
                self.computed += int(new.shape[0])
            return self.values[keys]

    def take_computed(self) -> int:
        """Rows the teacher ran on since the last call (the epoch record's ``teacher_rows``)."""
        n, self.computed = self.computed, 0
        return n
