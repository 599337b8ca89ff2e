"""``neurcam monitor`` over a Parquet snapshot of any size: one streamed pass (Ray Data over an
actor pool, or this process when the snapshot is small), each block reduced to its tally
(``monitor.tally``: cells per reference bin, contribution sums, rows per cluster), the tallies
added up on the driver. Memory is bounded by a block, never by the snapshot."""
from __future__ import annotations

import pickle

import numpy as np
import pyarrow as pa

from .. import data as data_mod
from ..model import FittedNet
from ..monitor import Drift, combine, drift_from, tally
from .scoring import _check_input, reduce_pass
from .session import ray_for


class _Monitor:
    """A Ray Data actor: each block of the snapshot to its pickled tally."""

    def __init__(self, fitted: FittedNet, reference: dict):
        import torch
        torch.set_num_threads(1)
        self.fitted, self.reference = fitted, reference

    def __call__(self, table: pa.Table) -> dict:
        x, unseen = data_mod.reading.feature_matrix_counted(table, list(self.fitted.feature_names),
                                                            self.fitted.coding, "the snapshot")
        return {"acc": np.array([pickle.dumps(tally(self.fitted, self.reference, x, unseen))], dtype=object)}


def monitor_parquet(est, input_path, *, batch_size: int = 4096, concurrency: int = 2, log=None) -> Drift:
    """The drift of a Parquet snapshot (a file, a folder or an object-store prefix) against
    ``est``'s drift reference (``NeurCAM.drift_reference``), in one pass.

    Raises
    ------
    DataError
        An empty snapshot, a file without a feature the model uses, a numeric feature that holds
        no numbers (naming the file and the column).
    """
    reference = est.drift_reference()
    fitted = est.scoring_model()
    src = data_mod.resolve(input_path)
    footers = data_mod.footers(src)
    features = list(fitted.feature_names)
    _check_input(fitted, src, footers, features, None, None)
    n_rows = sum(n for _, _, n in footers)
    plan = data_mod.Plan(source=src, features=features, repr_kind="features", repr_columns=features,
                         repr_dim=len(features), label=None, id=None, n_rows=n_rows,
                         rows_per_file={f: n for f, _, n in footers}, schema_hash="")
    if data_mod.reading.local_pass(plan, features):
        total = reduce_pass(plan, features, _Monitor, combine, batch_size, concurrency, log,
                            fitted=fitted, reference=reference)
    else:
        with ray_for(min_cpus=concurrency + 1):   # the actors, plus a CPU for the reads
            total = reduce_pass(plan, features, _Monitor, combine, batch_size, concurrency, log,
                                fitted=fitted, reference=reference)
    if total is not None and total["n"] != n_rows:
        from ..errors import TrainingError
        raise TrainingError(f"the monitor's pass saw {total['n']} rows, the snapshot has {n_rows}")
    return drift_from(reference, total)
