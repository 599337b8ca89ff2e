"""The paper's "AE" representation: the denoising autoencoder trained on Ray before clustering, its
embedding written beside the data, its weights kept with the run and logged to MLflow."""
import json

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from neurcam_dist.config import ConfigError, parse_config
from neurcam_dist.data.synthetic import write_shards
from neurcam_dist.model.dae import DenoisingAutoencoder


def test_the_autoencoder_has_the_configured_shape_and_learns():
    net = DenoisingAutoencoder(10, (16, 8), bottleneck=3, dropout=0.1, seed=0)
    assert [m.out_features for m in net.encoder if hasattr(m, "out_features")] == [16, 8, 3]
    assert [m.out_features for m in net.decoder if hasattr(m, "out_features")] == [8, 16, 10]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 3, generator=g) @ torch.randn(3, 10, generator=g)     # rank 3: a 3-dim code suffices
    assert net.encode(x).shape == (256, 3)
    opt = torch.optim.Adam(net.parameters(), lr=2e-3)
    torch.manual_seed(0)
    first = float(net(x))
    for _ in range(300):
        opt.zero_grad()
        loss = net(x)
        loss.backward()
        opt.step()
    assert float(net(x)) < 0.5 * first
    same = DenoisingAutoencoder(10, (16, 8), bottleneck=3, seed=0)
    assert all(torch.equal(a, b) for a, b in zip(same.state_dict().values(),
                                                 DenoisingAutoencoder(10, (16, 8), 3, seed=0).state_dict().values(), strict=False))


def test_the_autoencoder_trains_through_the_epoch_loop_over_a_group():
    """``loop.plain_epochs``: the group wraps the network once, every epoch runs in its join context
    and its sums are reduced by the group; the mean loss reaches ``after_epoch``, which stops the
    run. The real Ray group is the Ray test below's."""
    import contextlib

    from neurcam_dist.model import dae, loop

    class Recording(loop.Alone):
        def __init__(self):
            self.calls = []

        def wrap(self, net):
            self.calls.append("wrap")
            return net

        def joined(self, model):
            self.calls.append("joined")
            return contextlib.nullcontext()

        def reduce(self, sums):
            self.calls.append(("reduce", sums.dtype, sums.device.type))
            return sums

    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 3, generator=g) @ torch.randn(3, 10, generator=g)
    net = DenoisingAutoencoder(10, (16, 8), bottleneck=3, seed=0)
    opt, _ = dae.optimizer(net, 2e-3, 5)
    losses, group = [], Recording()

    def after(epoch, loss):
        losses.append((epoch, loss))
        return epoch == 30

    ran = loop.plain_epochs(net, lambda model, epoch: dae.train_epoch(model, opt, x.split(64)), group, 100, after)
    assert ran == 30 and [e for e, _ in losses] == list(range(1, 31))
    assert group.calls[0] == "wrap" and group.calls.count("wrap") == 1
    assert group.calls[1:] == ["joined", ("reduce", torch.float64, "cpu")] * 30
    assert losses[-1][1] < 0.5 * losses[0][1]
    with torch.no_grad():   # the mean loss handed on is the epoch's rows' mean (dropout off: a bound)
        assert losses[-1][1] > 0 and float(net.eval()(x)) < losses[0][1]


def test_a_computed_representation_excludes_a_given_one():
    base = {"data": {"path": "d/"}, "model": {"n_clusters": 3}, "output": "o", "representation": {"kind": "dae"}}
    assert parse_config(base).representation.hidden == [128, 64, 32, 16]
    with pytest.raises(ConfigError, match="leave data.embedding out"):
        parse_config({**base, "data": {"path": "d/", "embedding": "e"}})
    with pytest.raises(ConfigError, match="representation.kind"):
        parse_config({**base, "representation": {"kind": "pca"}})


def test_a_dae_run_trains_on_ray_clusters_in_its_embedding_and_logs_the_weights(
        ray_cluster, mlflow_server, tmp_path, monkeypatch):
    import mlflow

    from neurcam_dist import service
    write_shards(tmp_path / "data", 1200, n_features=6, repr_dim=4, n_clusters=3, n_files=2, seed=0)
    cfg = {"data": {"path": str(tmp_path / "data"), "label": "label", "id": "id",
                    "features": [f"f{j}" for j in range(6)]},
           "representation": {"kind": "dae", "hidden": [16, 8], "bottleneck": 3, "epochs": 25, "batch_size": 128,
                              "n_iter_no_change": 50},
           "model": {"n_clusters": 3, "n_single": 3, "hidden": [16, 16], "n_bases": 4, "warmup_epochs": 3,
                     "distill_epochs": 1, "epochs": 8, "epsilon": 0.3, "batch_size": 64, "early_stopping": False,
                     "deterministic": True},
           "train": {"num_workers": 2},
           "tracking": {"uri": mlflow_server, "experiment": "dae-test"},
           "output": str(tmp_path / "run")}
    # every pass through Ray Data, as for data too large to read in the driver: the workers stream
    # their first epoch (small data would come from the held rows, test_distributed.py)
    monkeypatch.setenv("NEURCAM_LOCAL_PASS_BYTES", "0")
    res = service.train(cfg)
    assert res.metrics["repr_dim"] == 3 and res.plan.repr_columns == ["dae_embedding"]
    # two workers, cache: auto: each keeps its streamed shard after the first epoch and trains from
    # memory, the teacher's assignment cached per row (no second forward); the same rows every epoch
    # (an equal split may drop < 2)
    h = res.estimator.history_
    assert h["world_size"] == 2 and h["deterministic"] is True   # model.deterministic: both trainings
    assert [r["source"] for r in h["epochs"]] == ["stream"] + ["resident"] * (h["n_epochs"] - 1)
    assert any(r["phase"] in ("anneal_single", "final") for r in h["epochs"])   # phases with a teacher
    assert all(r["teacher_rows"] == 0 for r in h["epochs"])
    assert len({r["rows"] for r in h["epochs"]}) == 1 and 1198 <= h["epochs"][0]["rows"] <= 1200
    card = json.loads((tmp_path / "run" / "representation" / "config.json").read_text())
    losses = [h["loss"] for h in card["history"]]
    assert len(losses) == 25 and losses[-1] < losses[0]          # the reconstruction loss falls
    assert card["features"] == [f"f{j}" for j in range(6)] and card["bottleneck"] == 3 and card["deterministic"]
    staged = sorted((tmp_path / "run" / "_ray" / "staging" / "dae").glob("*.parquet"))
    table = pq.read_table(staged[0])
    assert table.schema.field("dae_embedding").type.list_size == 3
    assert sum(pq.read_metadata(f).num_rows for f in staged) == 1200
    emb = np.stack(table["dae_embedding"].to_numpy(zero_copy_only=False))
    assert np.isfinite(emb).all() and emb.std(0).min() > 0
    state = torch.load(tmp_path / "run" / "representation" / "weights.pt", weights_only=True)
    net = DenoisingAutoencoder(6, (16, 8), 3)
    net.load_state_dict(state)
    client = mlflow.MlflowClient(mlflow_server)
    names = {a.path for a in client.list_artifacts(res.tracking["run_id"], "representation")}
    assert names == {"representation/config.json", "representation/weights.pt"}
