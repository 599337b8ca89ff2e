"""Invariants of the model and the estimator: one-hot gates, additivity, the loss, determinism."""
import os
import traceback

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from neurcam_dist import NeurCAM
from neurcam_dist.model import TrainingSpec, build_trainer, log_assignment
from neurcam_dist.model.gates import SelectionGates, is_one_hot, relaxed_gates
from neurcam_dist.model.graphs import StepGraphs
from neurcam_dist.model.loss import fcm_log_membership, fuzzy_loss, kl_to_target, squared_distances
from neurcam_dist.model.network import NeurCAMNet
from neurcam_dist.model.schedule import Schedule
from neurcam_dist.model import step
from neurcam_dist.model.step import Batch, batch_loss, train_epoch

from .conftest import SMALL


def test_relaxed_gates_become_one_hot_as_temperature_falls():
    logits = torch.tensor([[0.3, 0.2, -1.0, 0.1]])
    assert not is_one_hot(relaxed_gates(logits, 1.0))
    assert is_one_hot(relaxed_gates(logits, 0.04))  # gap 0.1 >= 2T: entmax15 gives exactly one non-zero
    g = relaxed_gates(logits, 0.04)
    assert torch.equal(g, torch.tensor([[1.0, 0.0, 0.0, 0.0]]))


def test_locked_gates_are_constant_one_hot_and_get_no_gradient():
    gates = SelectionGates(3, 2, 5, torch.Generator().manual_seed(0))
    expected = gates.logits.detach().argmax(-1)
    gates.lock()
    mat = gates.matrix(0.5)
    assert is_one_hot(mat)
    assert torch.equal(mat.argmax(-1), expected)
    assert not mat.requires_grad


class _HostReads(TorchDispatchMode):
    """Records every read of a tensor's value by the host (``item``, ``bool``, ``if tensor``): on a
    GPU each one waits for the device's queue to drain. CPU Adam's step counter is a host tensor
    (the trainer asks for ``capturable`` Adam on CUDA), so reads from ``torch.optim`` are left out."""

    def __init__(self):
        super().__init__()
        self.where: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._local_scalar_dense.default:
            stack = traceback.extract_stack()
            if not any(f"torch{os.sep}optim" in fr.filename for fr in stack):
                self.where.append("".join(traceback.format_list(stack[-8:])))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("captured", [False, True], ids=["eager", "captured"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_training_step_never_reads_a_device_value(precision, captured):
    spec = TrainingSpec.for_data({"n_clusters": 3, "n_pairs": 2, "hidden": (8,), "n_bases": 4,
                                  "init": "kmeans", "random_state": 0}, 64, 5)
    trainer = build_trainer(spec, np.random.default_rng(0).normal(size=(3, 5)), precision=precision)
    x = torch.randn(64, 5, generator=torch.Generator().manual_seed(1))
    target = torch.log_softmax(torch.randn(64, 3), dim=1)
    for lock in (None, trainer.net.pairs.gates, trainer.net.single.gates):
        if lock is not None:
            lock.lock()
        for phase, batch in (("warmup", Batch(x, x)), ("anneal_single", Batch(x, x, target))):
            reads = _HostReads()
            # captured: warm-up steps, the capture, then replays (graphs.RerunRecorder re-runs the step)
            graphs = StepGraphs("cpu") if captured else None
            with reads:
                train_epoch(trainer.model, trainer.net.centroids, trainer.optimizer, [batch] * (4 if captured else 1),
                            phase=phase, t=0.5, t2=0.5, m=1.1, gamma=0.1, precision=precision, graphs=graphs)
            assert not captured or graphs.captures == 1
            assert reads.where == [], f"{phase}, locked {lock is not None}: host reads at\n" + "\n".join(reads.where)


class _Subnormals(TorchDispatchMode):
    """Counts the subnormal floats in the outputs of the ops run inside it that have more than
    ``above`` elements."""

    def __init__(self, above: int = 0):
        super().__init__()
        self.count, self.above = 0, above

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for o in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(o, torch.Tensor) and o.is_floating_point() and o.numel() > self.above:
                tiny = torch.finfo(o.dtype).tiny
                self.count += int(((o != 0) & (o.abs() < tiny)).sum())
        return out


def test_the_cpu_backward_pass_carries_no_subnormal_floats(monkeypatch):
    """Far clusters' weights underflow; unguarded, their subnormal gradients flood the backbone's
    backward matmuls (x86's slow path: a late-training CPU step ran 5-7x slower). Guarded, the
    loss is the same, and every gradient equals the unguarded one to 1e-18."""
    spec = TrainingSpec.for_data({"n_clusters": 8, "hidden": (32, 32), "n_bases": 8, "init": "kmeans",
                                  "random_state": 0}, 256, 6)
    centroids = np.repeat(np.arange(8.0)[:, None], 6, axis=1) * 10.0
    trainer = build_trainer(spec, centroids, precision="fp32")
    with torch.no_grad():
        trainer.net.single.weight.mul_(200.0)  # separated clusters: most far weights are below 1e-38
    x = torch.randn(256, 6, generator=torch.Generator().manual_seed(0)) * 3
    batch = Batch(x, torch.randn(256, 6, generator=torch.Generator().manual_seed(1)) * 10)

    def backward():
        trainer.optimizer.zero_grad(set_to_none=True)
        loss, _, _ = batch_loss(trainer.model, trainer.net.centroids, batch, 1.0, 1.0, 1.05, 0.0)
        # the backbone's (rows x channels, hidden) tensors, where the time goes; the (rows, K)
        # loss terms and the centroids' gradient may keep theirs
        seen = _Subnormals(above=batch.x.shape[0] * spec.n_clusters)
        with seen:
            loss.backward()
        return loss.detach(), seen.count, {n: p.grad.clone() for n, p in trainer.net.named_parameters()
                                           if p.grad is not None}

    with monkeypatch.context() as m:
        m.setattr(step, "TINY_GRADIENT", 0.0)
        loss0, flood, grads0 = backward()
    loss1, left, grads1 = backward()
    assert flood > 10_000, "the data no longer makes subnormals: the test would prove nothing"
    assert left == 0
    assert torch.equal(loss0, loss1)
    for name, g in grads0.items():
        torch.testing.assert_close(grads1[name], g, rtol=0, atol=1e-18, msg=name)


def test_a_loaded_gate_knows_it_is_locked_without_reading_the_device():
    gates = SelectionGates(3, 1, 5, torch.Generator().manual_seed(0))
    gates.lock()
    other = SelectionGates(3, 1, 5, torch.Generator().manual_seed(1))
    assert not other.is_locked
    other.load_state_dict(gates.state_dict())
    assert other.is_locked and torch.equal(other.matrix(1.0), gates.matrix(1.0))


@pytest.mark.parametrize("est_name", ["fitted", "fitted_pairs"])
def test_every_gate_exactly_one_hot_after_fit(est_name, request):
    est = request.getfixturevalue(est_name)
    t, t2 = est.temperatures_
    for shape_fns, temp in ((est.net_.single, t), (est.net_.pairs, t2)):
        relaxed = relaxed_gates(shape_fns.gates.logits.detach(), temp)
        assert ((relaxed != 0).sum(-1) == 1).all(), "entmax at the final temperature is not exactly one-hot"
        assert bool(shape_fns.gates.locked) or shape_fns.n == 0
        assert torch.equal(shape_fns.gates.matrix(temp), relaxed)
    assert len(est.selected_features_) == 4
    assert len(est.selected_pairs_) == (3 if est_name == "fitted_pairs" else 0)
    assert all(f in est.feature_names_in_ for f in est.selected_features_)


@pytest.mark.parametrize("est_name", ["fitted", "fitted_pairs"])
def test_predictions_are_exactly_additive(est_name, request, data):
    est = request.getfixturevalue(est_name)
    X, _ = data
    contrib = est.contributions(X)
    logits = est.decision_function(X)
    assert contrib.shape == (len(X), est.net_.single.n + est.net_.pairs.n, 3)
    np.testing.assert_allclose(contrib.sum(1), logits, rtol=1e-5, atol=1e-4)


def test_each_channel_depends_only_on_its_selected_features(fitted_pairs, data):
    X, _ = data
    est = fitted_pairs
    base = est.contributions(X)
    used = set(est.selected_features_) | {f for p in est.selected_pairs_ for f in p}
    for col in X.columns:
        shifted = X.copy()
        shifted[col] = shifted[col] + 3.0
        delta = np.abs(est.contributions(shifted) - base).max(axis=(0, 2))
        channels = [c for c, f in enumerate(est.selected_features_) if f == col]
        channels += [len(est.selected_features_) + p for p, pair in enumerate(est.selected_pairs_) if col in pair]
        untouched = [c for c in range(base.shape[1]) if c not in channels]
        assert np.all(delta[untouched] == 0), f"channels not using {col} changed when {col} moved"
        if col not in used:
            assert np.array_equal(est.predict_proba(shifted), est.predict_proba(X))


def test_predict_proba_rows_sum_to_one(fitted, data):
    X, _ = data
    p = fitted.predict_proba(X)
    assert p.shape == (len(X), 3)
    np.testing.assert_allclose(p.sum(1), 1.0, rtol=0, atol=1e-12)
    assert np.array_equal(p.argmax(1), fitted.predict(X))


def test_same_seed_same_model_other_seed_other_model(data, fitted):
    X, _ = data
    again = NeurCAM(n_clusters=3, random_state=0, **SMALL).fit(X)
    assert np.array_equal(again.predict_proba(X), fitted.predict_proba(X))
    other = NeurCAM(n_clusters=3, random_state=5, **SMALL).fit(X)
    assert not np.array_equal(other.predict_proba(X), fitted.predict_proba(X))


def test_deterministic_fit_trains_under_torch_deterministic_algorithms_and_restores_them(data, fitted):
    X, _ = data
    workspace = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    seen = []
    est = NeurCAM(n_clusters=3, random_state=0, deterministic=True, **SMALL)
    est.fit(X, callback=lambda ctx: seen.append((torch.are_deterministic_algorithms_enabled(),
                                                  os.environ.get("CUBLAS_WORKSPACE_CONFIG"))))
    assert len(seen) == est.history_["n_epochs"]
    assert all(on and ws == (workspace or ":4096:8") for on, ws in seen)
    assert not torch.are_deterministic_algorithms_enabled()
    assert os.environ.get("CUBLAS_WORKSPACE_CONFIG") == workspace   # left as it was
    assert est.history_["deterministic"] is True and fitted.history_["deterministic"] is False
    # on a CPU the switch changes no arithmetic here: the same model as without it
    assert np.array_equal(est.predict_proba(X), fitted.predict_proba(X))
    assert NeurCAM(deterministic=True).get_params()["deterministic"] is True
    with pytest.warns(UserWarning, match=r"deterministic=True with max_seconds=600: the clock sets the epoch budget"):
        NeurCAM(n_clusters=3, deterministic=True, **{**SMALL, "epochs": 2, "max_seconds": 600}).fit(X)


def test_an_operation_without_a_deterministic_implementation_is_named():
    from neurcam_dist.errors import TrainingError
    from neurcam_dist.settings import deterministic_algorithms
    with pytest.raises(TrainingError, match=r"deterministic=True: put_ does not have a deterministic implementation"):
        with deterministic_algorithms(True):
            torch.zeros(3).put_(torch.tensor([0, 0]), torch.tensor([1.0, 2.0]))
    assert not torch.are_deterministic_algorithms_enabled()
    with deterministic_algorithms(False):   # off: torch's own settings, untouched
        torch.zeros(3).put_(torch.tensor([0, 0]), torch.tensor([1.0, 2.0]))


def test_clusters_recovered_on_separated_blobs(fitted, data):
    from neurcam_dist import metrics
    X, y = data
    assert metrics.ari(y, fitted.predict(X)) > 0.9


def test_teacher_kl_is_zero_when_annealing_starts_and_cache_equals_recomputation(data):
    X, _ = data
    seen = {}

    def callback(ctx):
        if ctx["action"] == "freeze_teacher":
            net, sched, x = ctx["net"], ctx["schedule"], ctx["x"]
            current = log_assignment(net, x, sched.t, sched.t2)
            seen["kl_start"] = float(kl_to_target(ctx["targets"], current))
            seen["temps"] = (sched.t, sched.t2)
        elif ctx["teacher"] is not None and "recomputed" not in seen:
            idx = torch.randperm(ctx["x"].shape[0])[:50]
            with torch.no_grad():
                fresh = torch.log_softmax(ctx["teacher"](ctx["x"][idx], 1.0, 1.0).float(), 1)
            seen["recomputed"] = float((fresh - ctx["targets"][idx]).abs().max())

    NeurCAM(n_clusters=3, n_pairs=2, random_state=0, **SMALL).fit(X, callback=callback)
    assert seen["temps"] == (1.0, 1.0)
    assert seen["kl_start"] == pytest.approx(0.0, abs=1e-7)
    assert seen["recomputed"] < 1e-5


def test_loss_matches_hand_computation():
    xr = torch.tensor([[0.0, 0.0], [2.0, 1.0], [1.0, -1.0]])
    z = torch.tensor([[0.0, 1.0], [2.0, 0.0]])
    logits = torch.tensor([[0.5, -0.5], [0.0, 0.0], [-1.0, 2.0]])
    m = 1.5
    w = np.exp(logits.numpy()) / np.exp(logits.numpy()).sum(1, keepdims=True)
    d2 = ((xr.numpy()[:, None, :] - z.numpy()[None]) ** 2).sum(-1)
    hand = (w ** m * d2).sum(1).mean()
    got = fuzzy_loss(torch.log_softmax(logits, 1), squared_distances(xr, z), m)
    assert float(got) == pytest.approx(hand, rel=1e-6)
    target = np.array([[0.9, 0.1], [0.5, 0.5], [0.2, 0.8]])
    hand_kl = (target * np.log(target / w)).sum(1).mean()
    got_kl = kl_to_target(torch.log(torch.tensor(target, dtype=torch.float32)), torch.log_softmax(logits, 1))
    assert float(got_kl) == pytest.approx(hand_kl, rel=1e-5)


def test_fcm_membership_is_the_fuzzy_loss_optimum():
    d2 = torch.tensor([[1.0, 4.0, 9.0]])
    m = 2.0
    u = fcm_log_membership(d2, m).exp()
    inv = 1.0 / d2
    np.testing.assert_allclose(u.numpy(), (inv / inv.sum()).numpy(), rtol=1e-6)
    assert torch.equal(fcm_log_membership(d2, 1.0).exp(), torch.tensor([[1.0, 0.0, 0.0]]))


def test_network_forward_has_no_python_loop_over_channels():
    # 40 channels cost about the same number of autograd nodes as 2: channels are batched.
    def nodes(c):
        net = NeurCAMNet(6, 3, c, c, (8,), 4, torch.zeros(3, 6))
        out = net(torch.randn(5, 6))
        seen, stack = set(), [out.grad_fn]
        while stack:
            fn = stack.pop()
            if fn is None or fn in seen:
                continue
            seen.add(fn)
            stack.extend(f for f, _ in fn.next_functions)
        return len(seen)
    assert nodes(40) == nodes(2)


def test_schedule_phases_and_state_round_trip():
    s = Schedule(epochs=50, warmup_epochs=3, distill_epochs=1, epsilon=0.5, has_pairs=True, early_stopping=False)
    assert s.phase == "distill"
    hot = {"pairs": False, "single": False}
    actions = []
    for _ in range(12):
        actions.append(s.end_epoch(1.0, lambda t: hot["pairs"], lambda t: hot["single"]))
        if s.t2 < 0.2:
            hot["pairs"] = True
        if s.t < 0.3:
            hot["single"] = True
    assert "freeze_teacher" in actions and "lock_pairs" in actions and "lock_single" in actions
    assert [e["phase"] for e in s.events] == ["warmup", "anneal_pairs", "anneal_single", "final"]
    clone = Schedule.from_state_dict(s.state_dict())
    assert clone.state_dict() == s.state_dict()


def test_history_records_phases_and_stop_reason(fitted):
    h = fitted.history_
    phases = [r["phase"] for r in h["epochs"]]
    assert phases[0] == "distill" and "warmup" in phases and "anneal_single" in phases
    assert [e["phase"] for e in h["events"]] == ["warmup", "anneal_single", "final"]
    assert h["stop_reason"]
    assert {"loss", "clust_loss", "kl", "T", "T2", "lr"} <= set(h["epochs"][0])
    assert all(r["kl"] == 0 for r in h["epochs"] if r["phase"] == "warmup")


def test_x_repr_is_used_for_the_loss_and_inertia(data):
    X, y = data
    rep = np.eye(3)[y] * 10 + np.random.default_rng(0).normal(size=(len(y), 3)) * 0.1
    est = NeurCAM(n_clusters=3, random_state=0, **SMALL).fit(X, X_repr=rep)
    assert est.cluster_centers_.shape == (3, 3)
    assert est.inertia(X, rep) < 1.0
    with pytest.raises(ValueError, match="X_repr"):
        est.inertia(X)


def test_bf16_training_gives_a_valid_fp32_scored_model(data):
    X, _ = data
    est = NeurCAM(n_clusters=3, precision="bf16", random_state=0, **SMALL).fit(X)
    assert est.precision_ == "bf16"
    for shape_fns in (est.net_.single, est.net_.pairs):
        assert is_one_hot(shape_fns.gates.matrix(1e-9))
    np.testing.assert_allclose(est.contributions(X).sum(1), est.decision_function(X), rtol=1e-5, atol=1e-4)
    assert next(est.net_.parameters()).dtype == torch.float32  # autocast only: weights stay fp32


def test_building_or_loading_a_network_leaves_the_callers_random_state_alone(fitted, tmp_path):
    fitted.save(tmp_path / "m")
    torch.manual_seed(1234)
    expected = torch.rand(5)
    torch.manual_seed(1234)
    NeurCAM.load(tmp_path / "m")
    NeurCAMNet(6, 3, 2, 2, (8,), 4, torch.zeros(3, 6), seed=7)
    assert torch.equal(torch.rand(5), expected)
    # and the network's own initialisation is still a function of its seed alone
    a, b = (NeurCAMNet(6, 3, 2, 2, (8,), 4, torch.zeros(3, 6), seed=7) for _ in range(2))
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values(), strict=False))


def test_warmup_epochs_count_from_the_end_of_distillation():
    s = Schedule(epochs=100, warmup_epochs=3, distill_epochs=5, epsilon=0.5, has_pairs=False, early_stopping=False)
    for _ in range(10):
        s.end_epoch(1.0, lambda t: False, lambda t: False)
    starts = {e["phase"]: e["epoch"] for e in s.events}
    assert starts["warmup"] == 5 and starts["anneal_single"] == 8  # 5 distillation + 3 warm-up epochs
    # warmup_epochs=0: the distilled model is the teacher, annealing starts right after distillation
    s0 = Schedule(epochs=100, warmup_epochs=0, distill_epochs=2, epsilon=0.5, has_pairs=True, early_stopping=False)
    actions = [s0.end_epoch(1.0, lambda t: False, lambda t: False) for _ in range(3)]
    assert actions[1] == "freeze_teacher" and s0.phase == "anneal_pairs"


def test_scoring_model_holds_what_scoring_needs_and_nothing_else(fitted, data):
    import pickle
    X, _ = data
    fitted_net = fitted.scoring_model()
    assert not hasattr(fitted_net, "reference_") and not hasattr(fitted_net, "warmup_net_")
    np.testing.assert_array_equal(fitted_net.logits(X.to_numpy()), fitted.decision_function(X))
    assert len(pickle.dumps(fitted_net)) < len(pickle.dumps(fitted)) / 2


def test_kmeans_init_is_lloyd_while_cheap_and_recorded(data, fitted):
    from sklearn.cluster import KMeans

    from neurcam_dist.model.kmeans import LLOYD_BUDGET, kmeans_centroids, kmeans_method
    X, _ = data
    x = ((X - X.mean()) / X.std(ddof=0)).to_numpy(np.float32)
    cents, info = kmeans_centroids(x, 3, 0)
    ref = KMeans(n_clusters=3, n_init=10, random_state=0).fit(x)
    np.testing.assert_allclose(cents, ref.cluster_centers_, rtol=1e-5, atol=1e-5)
    assert info["method"] == "lloyd" and info["n_init"] == 10
    assert info["inertia"] == pytest.approx(ref.inertia_ / len(x))
    assert kmeans_method(100_000, 256, 10) == "minibatch" and kmeans_method(10_000, 16, 10) == "lloyd"
    assert kmeans_method(int(LLOYD_BUDGET), 1, 1) == "lloyd" and kmeans_method(1, 1, 1, "minibatch") == "minibatch"
    # the fitted model says which k-means it started from, and the model card carries it
    assert fitted.history_["init"]["method"] == "lloyd"
    assert fitted.explain(X).model_card["kmeans_init"]["method"] == "lloyd"
    mb = NeurCAM(n_clusters=3, random_state=0, kmeans="minibatch", kmeans_n_init=3, **SMALL).fit(X)
    assert mb.history_["init"]["method"] == "minibatch" and mb.history_["init"]["n_init"] == 3


def test_kmeans_init_gives_the_same_centroids_on_a_many_core_machine(monkeypatch):
    """One seed, one set of centroids however many OpenMP threads the machine offers: with three or
    more, scikit-learn's Lloyd sums its threads' partial centroids in the order they finish (seen on a
    16-core GPU host as one label of pendigits changing between two ``deterministic=True`` runs).
    ``OMP_NUM_THREADS`` lets this 2-core machine run the 16 threads such a host would."""
    from threadpoolctl import threadpool_info, threadpool_limits

    from neurcam_dist.model.kmeans import kmeans_centroids
    monkeypatch.setenv("OMP_NUM_THREADS", "16")
    x = np.random.default_rng(0).lognormal(size=(10_000, 16)).astype(np.float32)
    with threadpool_limits(limits=16, user_api="openmp"):
        runs = [kmeans_centroids(x, 10, 0) for _ in range(5)]
        # the caller's own thread setting is back after each call
        assert {i["num_threads"] for i in threadpool_info() if i["user_api"] == "openmp"} == {16}
    for cents, info in runs[1:]:
        np.testing.assert_array_equal(cents, runs[0][0])
        assert info["inertia"] == runs[0][1]["inertia"] and info["sizes"] == runs[0][1]["sizes"]


def _run(s: Schedule, hot_below: float = 0.0, limit: int = 10_000) -> list:
    """End epochs (loss 1.0) until ``s`` finishes; gates are one-hot below ``hot_below``."""
    actions = []
    while not s.finished and len(actions) < limit:   # as the Trainer does: the budget's end locks the gates
        actions.append(s.end_epoch(1.0, lambda t: t < hot_below, lambda t: t < hot_below))
        actions += s.lock_remaining()
    return actions


@pytest.mark.parametrize("epochs,pairs", [(1, False), (1, True), (2, True), (5, False), (60, False), (60, True),
                                          (400, True)])
def test_epochs_bounds_the_whole_run_and_it_still_ends_with_locked_gates(epochs, pairs):
    s = Schedule(epochs=epochs, warmup_epochs=400, distill_epochs=10, epsilon=0.9, has_pairs=pairs,
                 early_stopping=False, anneal_epochs=100)
    actions = _run(s)  # gates never one-hot on their own: annealing must be cut to fit
    assert s.epoch == epochs and s.phase == "final"            # exactly the budget, however small
    assert actions.count("freeze_teacher") == 1 and actions.count("lock_single") == 1
    assert actions.count("lock_pairs") == (1 if pairs else 0)
    assert s.stop_reason == f"reached epochs={epochs}"
    assert any(f"annealing compressed to fit epochs={epochs}" in e["reason"]
               or f"the budget, epochs={epochs}, ended" in e["reason"] for e in s.events)


def test_annealing_stops_at_anneal_epochs_and_the_event_says_so():
    s = Schedule(epochs=1000, warmup_epochs=5, distill_epochs=0, epsilon=0.9, has_pairs=False,
                 early_stopping=False, anneal_epochs=7)
    _run(s)
    starts = {e["phase"]: e for e in s.events}
    assert starts["final"]["epoch"] - starts["anneal_single"]["epoch"] == 7
    assert "locked to their argmax" in starts["final"]["reason"] and "anneal_epochs=7" in starts["final"]["reason"]
    # gates that become one-hot in time end annealing themselves (no lock forced)
    s2 = Schedule(epochs=1000, warmup_epochs=5, distill_epochs=0, epsilon=0.5, has_pairs=False,
                  early_stopping=False, anneal_epochs=7)
    _run(s2, hot_below=0.2)
    assert "gates one-hot at T=0.125" in s2.events[-1]["reason"]


def test_a_lowered_budget_compresses_the_phases_after_it():
    def five_epochs_in():
        s = Schedule(epochs=1000, warmup_epochs=400, distill_epochs=2, epsilon=0.9, has_pairs=False,
                     early_stopping=False)
        for _ in range(5):
            s.end_epoch(1.0, lambda t: False, lambda t: False)
        return s
    s = five_epochs_in()
    s.cap(8, "max_seconds=2")
    s.cap(40, "max_seconds=9")  # only ever lowered
    assert s.limit == 8
    _run(s)
    assert s.epoch == 8 and s.stop_reason == "reached max_seconds=2 at epoch 8"
    assert [e["epoch"] for e in s.events] == [2, 7, 8]  # warm-up cut at 7, gates locked at 8
    clone = Schedule.from_state_dict(s.state_dict())
    assert clone.limit == 8 and clone.budget_reason == "max_seconds=2"
    # a budget cut to the epoch under way leaves no room: warm-up ends and the gates lock in it
    late = five_epochs_in()
    late.cap(3, "max_seconds=2")
    assert late.limit == 6
    _run(late)
    assert late.epoch == 6 and late.phase == "final" and "the budget, max_seconds=2, ended" in late.events[-1]["reason"]


def test_annealing_falls_fast_enough_to_be_one_hot_by_its_deadline_and_no_faster():
    hot = 1e-3  # the gates are one-hot at or below this temperature
    s = Schedule(epochs=1000, warmup_epochs=2, distill_epochs=0, epsilon=0.9, has_pairs=False,
                 early_stopping=False, anneal_epochs=10)
    temps = []
    while s.phase != "final":
        temps.append(s.t)
        s.end_epoch(1.0, lambda t: True, lambda t: t <= hot * (1 + 1e-9), None, lambda t: min(t, hot))
    assert "gates one-hot at T=0.001" in s.events[-1]["reason"]  # reached by annealing, not a forced lock
    anneal = temps[2:]
    assert len(anneal) <= 10 and all(b < a for a, b in zip(anneal, anneal[1:], strict=False))
    # where epsilon alone reaches the one-hot temperature in time, it sets the pace
    s2 = Schedule(epochs=1000, warmup_epochs=2, distill_epochs=0, epsilon=0.5, has_pairs=False,
                  early_stopping=False, anneal_epochs=10)
    for _ in range(4):
        s2.end_epoch(1.0, lambda t: True, lambda t: t <= 0.2, None, lambda t: min(t, 0.2))
    assert s2.t == 0.25


def test_distillation_weighs_every_kmeans_cluster_alike():
    from neurcam_dist.model.loss import balanced_weights
    w = balanced_weights([1, 0, 999])
    assert w[1] == 0 and torch.isclose(w[0], torch.tensor(1000 / 2)) and torch.isclose(w[2], torch.tensor(1000 / 1998))
    assert torch.isclose((w * torch.tensor([1.0, 0.0, 999.0])).sum() / 1000, torch.tensor(1.0))  # rows' mean: 1
    target = torch.log(torch.tensor([[0.9, 0.0, 0.1], [0.0, 0.0, 1.0]]).clamp_min(1e-30))
    log_w = torch.log_softmax(torch.tensor([[0.0, 1.0, 2.0], [1.0, 0.0, 0.0]]), 1)
    per_row = torch.stack([kl_to_target(target[i:i + 1], log_w[i:i + 1]) for i in range(2)])
    row_weight = target.exp() @ w                          # a soft target spreads its weight
    assert torch.isclose(kl_to_target(target, log_w, w), (per_row * row_weight).mean())


def _one_far_row(seed: int, n: int = 1500) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centers = rng.normal(0, 3, size=(3, 4))
    x = centers[rng.integers(0, 3, size=n)] + rng.normal(size=(n, 4))
    x[7, 1] += 60 * x[:, 1].std()
    return x


def test_a_cluster_of_one_far_row_is_followed_as_lloyd_isolates_it():
    """Lloyd spends a cluster on one far row; unweighted and 10 epochs long, the distillation lost
    it (2.46x Lloyd's inertia on this table) or a large cluster (3.2x)."""
    from sklearn.cluster import KMeans

    from neurcam_dist.metrics import inertia
    x = _one_far_row(2)
    xs = (x - x.mean(0)) / x.std(0)
    km = KMeans(4, n_init=10, random_state=0).fit(xs)
    assert np.bincount(km.labels_, minlength=4).min() == 1          # the far row alone
    est = NeurCAM(n_clusters=4, random_state=0, verbose=False).fit(x)
    labels = est.predict(x)
    assert est.history_["empty_clusters"] == [] and est.history_["init"]["method"] == "lloyd"
    assert np.bincount(labels, minlength=4).min() == 1 and labels[7] != labels[8]
    assert inertia(xs, labels) <= 1.01 * km.inertia_ / len(xs)
    # the far row's cluster keeps distillation at its floor: 34 epochs of 3 steps make 100 steps
    assert est.history_["events"][0]["reason"] == "distillation done after 34 epochs"


def test_the_init_trial_keeps_every_row_of_a_small_cluster():
    from neurcam_dist.model import initial
    own = np.zeros(20_000, np.int64)
    own[[3, 11_000, 19_999]] = 1                               # a cluster of three far rows
    train, measured = initial._trial_rows(len(own), own, 2, seed=0)
    assert {3, 11_000, 19_999} <= set(train.tolist()) and {3, 11_000, 19_999} <= set(measured.tolist())
    assert initial.TRIAL_ROWS <= len(train) <= initial.TRIAL_ROWS + 3 and len(measured) == len(own)


def test_distillation_lasts_100_steps_within_a_tenth_of_the_budget():
    from neurcam_dist.model.build import distill_epochs_for
    assert distill_epochs_for(10, 1500, 512, 1000) == 34       # 3 steps an epoch: 34 epochs make 100 steps
    assert distill_epochs_for(10, 100_000, 512, 1000) == 10    # 196 steps an epoch: as asked
    assert distill_epochs_for(1, 3000, 64, 8) == 1             # a short run set by hand keeps its phases
    assert distill_epochs_for(3, 150, 512, 100) == 10 and distill_epochs_for(0, 150, 512, 1000) == 0
    spec = TrainingSpec.for_data({"n_clusters": 3}, 150, 4)
    assert (spec.distill_epochs, spec.distill_far_epochs) == (10, 100)
    none = TrainingSpec.for_data({"n_clusters": 3, "init": "kmeans"}, 150, 4)
    assert (none.distill_epochs, none.distill_far_epochs, none.distill_epochs_given([1, 70, 79])) == (0, 0, 0)
    # epochs of a table over epoch_rows rows: distillation counts their steps
    assert distill_epochs_for(10, 1_000_000, 512, 1000, epoch_rows=20_000) == 10   # 40 steps an epoch
    assert distill_epochs_for(1, 1_000_000, 512, 1000, epoch_rows=5_000) == 10     # 10 steps: 10 epochs make 100


def test_distillation_pays_its_floor_only_toward_a_far_row_cluster():
    """The 100-step floor is for a k-means target with a cluster of a few far rows (one under a
    tenth of an even split); a target of even clusters distils the epochs asked for."""
    from neurcam_dist.model.build import build_schedule, far_row_clusters
    spec = TrainingSpec.for_data({"n_clusters": 3}, 150, 4)
    assert not far_row_clusters([53, 50, 47]) and not far_row_clusters([375, 194])
    assert far_row_clusters([1, 749, 750]) and far_row_clusters([0, 75, 75]) and far_row_clusters(None)
    assert spec.distill_epochs_given([53, 50, 47]) == 10 and spec.distill_epochs_given([1, 74, 75]) == 100
    assert build_schedule(spec, cluster_sizes=[53, 50, 47]).distill_epochs == 10
    assert build_schedule(spec, cluster_sizes=[2, 74, 74]).distill_epochs == 100
    # end to end: iris's k-means clusters are even, so a default fit distils 10 epochs
    from sklearn.datasets import load_iris
    est = NeurCAM(n_clusters=3, verbose=False).fit(load_iris().data)
    assert min(est.history_["init"]["sizes"]) > 40
    assert est.history_["events"][0]["reason"] == "distillation done after 10 epochs"


def _small_trainer(n: int = 300, d: int = 3, seed: int = 0, **params):
    """A trainer over ``n`` rows of blobs, its spec and the rows as tensors."""
    from .conftest import blobs
    X, _ = blobs(n=n, d=d, seed=seed)
    x = torch.tensor(((X - X.mean()) / X.std()).to_numpy(), dtype=torch.float32)
    spec = TrainingSpec.for_data({"n_clusters": 3, "hidden": (8,), "n_bases": 4, "batch_size": 10,
                                  "random_state": seed, **params}, n, d)
    trainer = build_trainer(spec, x[:3].numpy(), precision="fp32")
    return trainer, spec, x


def test_an_epoch_of_a_large_table_is_part_of_a_pass_and_a_phase_can_end_mid_pass():
    """Epochs of ``steps`` batches over a feed of 30 batches a pass: three epochs make one pass,
    every row once; a phase change after the first epoch reaches the rest of that pass's batches
    (the teacher's targets from then on)."""
    from neurcam_dist.model import loop
    from neurcam_dist.model.schedule import Phase
    trainer, spec, x = _small_trainer(300, warmup_epochs=5, epochs=50)
    feed = loop.Rows(x, x, 10, torch.Generator().manual_seed(0), loop.Targets(trainer.net.centroids, spec.m))
    stream = loop.Stream(feed, 10)
    trainer.schedule.phase = Phase.WARMUP
    first = list(stream.batches(trainer))
    assert len(first) == 10 and all(b.target is None for b in first)   # warm-up: no KL term
    assert stream.position()["pass"] == 0 and stream.position()["done"] == 10
    trainer.teacher, trainer.schedule.phase = copy_of(trainer.net), Phase.ANNEAL_SINGLE   # the phase moves on
    rest = [b for _ in range(2) for b in stream.batches(trainer)]
    assert all(b.target is not None for b in rest)                      # mid-pass, the new phase's targets
    rows = torch.cat([b.x for b in first + rest])
    assert rows.shape[0] == 300 and torch.equal(rows.unique(dim=0), x.unique(dim=0))   # one pass, every row once
    where = stream.position()
    assert (where["pass"], where["done"], sorted(where)) == (0, 30, ["done", "gen", "pass"])
    nxt = list(stream.batches(trainer))
    assert len(nxt) == 10 and stream.position()["pass"] == 1 and stream.position()["done"] == 10
    whole = loop.Stream(loop.Rows(x, x, 10, torch.Generator().manual_seed(0), loop.Targets(trainer.net.centroids,
                                                                                             spec.m)), None)
    assert len(list(whole.batches(trainer))) == 30                      # None: an epoch is the whole pass


def copy_of(net):
    import copy
    return copy.deepcopy(net).eval()


def test_a_mid_pass_checkpoint_resumes_on_the_same_batches_bit_for_bit():
    """An epoch loop stopped after an epoch that ended mid-pass, its trainer and stream position
    saved as a checkpoint holds them and loaded into a fresh trainer, ends exactly where the
    uninterrupted loop does: the same batches, the same parameters, bit for bit."""
    import io

    from neurcam_dist.model import loop

    def run(trainer, spec, x, state=None, max_epochs=None):
        aims = loop.Targets(trainer.net.centroids, spec.m)
        feed = loop.Rows(x, x, spec.batch_size, torch.Generator().manual_seed(spec.random_state), aims)
        stream = loop.Stream(feed, spec.epoch_steps(x.shape[0]))
        pick = torch.arange(0, x.shape[0], 3)
        watch = loop.Watch(x[pick], x[pick], aims)
        if state is not None:
            trainer.load_state_dict(state["trainer"])
            stream.seek(state["stream"])
        records = loop.run(trainer, stream, max_epochs=max_epochs, watch=watch)
        return records, stream

    params = dict(epoch_rows=70, warmup_epochs=12, epochs=40, early_stopping=False, epsilon=0.5)
    whole, spec, x = _small_trainer(300, **params)
    ref, _ = run(whole, spec, x)
    assert spec.epoch_steps(300) == 7 and all(r["rows"] == 70 for r in ref)   # 70 rows an epoch, of a 300-row pass
    first, _, _ = _small_trainer(300, **params)
    head, stream = run(first, spec, x, max_epochs=6)
    assert stream.position()["done"] % 30 != 0                             # stopped mid-pass
    buf = io.BytesIO()
    torch.save({"trainer": first.state_dict(), "stream": stream.position()}, buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    again, _, _ = _small_trainer(300, **params)
    tail, _ = run(again, spec, x, state=state)
    assert [r["loss"] for r in head + tail] == [r["loss"] for r in ref]
    assert [r["watched_loss"] for r in head + tail] == [r["watched_loss"] for r in ref]
    for (k, a), b in zip(whole.net.state_dict().items(), again.net.state_dict().values(), strict=False):
        assert torch.equal(a, b), k


def test_a_fit_of_a_table_over_epoch_rows_trains_epochs_of_that_many_rows():
    """``epoch_rows`` below the table's rows: every epoch trains that many rows (part of a pass),
    its plateaus watch a fixed sample's loss, and the clusters are as good as with whole passes;
    0 makes every epoch a pass again."""
    from .conftest import blobs
    X, y = blobs(n=3000, d=4, seed=2)
    small = {k: v for k, v in SMALL.items() if k not in ("epochs", "warmup_epochs", "batch_size")}
    parts = NeurCAM(n_clusters=3, random_state=0, epoch_rows=600, batch_size=60, epochs=60, warmup_epochs=20,
                    **small).fit(X)
    passes = NeurCAM(n_clusters=3, random_state=0, epoch_rows=0, batch_size=60, epochs=60, warmup_epochs=20,
                     **small).fit(X)
    epochs = parts.history_["epochs"]
    assert {r["rows"] for r in epochs} == {600} and all("watched_loss" in r for r in epochs)
    assert {r["rows"] for r in passes.history_["epochs"]} == {3000}
    assert not any("watched_loss" in r for r in passes.history_["epochs"])
    from neurcam_dist import metrics
    xs = ((X - X.mean()) / X.std(ddof=0)).to_numpy()
    assert metrics.inertia(xs, parts.predict(X)) <= 1.02 * metrics.inertia(xs, passes.predict(X))


def test_a_table_of_at_most_epoch_rows_trains_whole_passes(data, fitted):
    """One epoch a pass on a table of at most ``epoch_rows`` rows: the default fit (240 rows, under
    the default 20,000) is the one that ``epoch_rows=0`` (always a pass) gives, bit for bit, and
    its plateaus watch the epochs' own loss."""
    X, _ = data
    passes = NeurCAM(n_clusters=3, random_state=0, epoch_rows=0, **SMALL).fit(X)
    assert fitted.epoch_rows == 20_000 and {r["rows"] for r in fitted.history_["epochs"]} == {len(X)}
    assert not any("watched_loss" in r for r in fitted.history_["epochs"])
    for (k, a), b in zip(fitted.net_.state_dict().items(), passes.net_.state_dict().values(), strict=False):
        assert torch.equal(a, b), k


def test_progress_shows_the_pairs_temperature_only_for_a_model_with_pairs(capsys):
    """A model without pairs has no pair gates: its progress lines show T, not a T2 of 1."""
    from .conftest import blobs
    X, _ = blobs(n=200, d=3)
    for pairs in (0, 2):
        NeurCAM(n_clusters=3, n_pairs=pairs, epochs=6, warmup_epochs=2, hidden=(16,), n_bases=4, verbose=True).fit(X)
        lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("NeurCAM: epoch")]
        assert lines and all(", T " in line for line in lines)
        assert all(("T2 " in line) == (pairs > 0) for line in lines), lines
