"""The public API's Examples sections run as written (numpydoc, as scikit-learn's estimators carry
them): the estimator, the explanation, choosing K, monitoring, and the front door's in-memory
entry points (fit, choose_k, explain, monitor, export, predict), the data makers (generate, sample),
the config and record helpers (load_config, parse_overrides, validate, history, history_table,
unreachable), the model loader (load_model, with load_fitted), the demo's config and data place,
the manifests' check, predict's settings and the registry's promote; on the session's Ray,
``train``, ``search``, ``choose_k_on_ray`` (run by ``test_tune``, which then reads what it wrote:
``RUN_BY``), ``recluster``, ``demo`` and ``featurize_text``; and
``submit``, to a Ray head with its job server that this module starts (``open_ray_head``).
A public entry point listed here without an example fails."""
import pytest

from neurcam_dist import Explanation, NeurCAM, choose_k, service

from .conftest import run_example

DOCUMENTED = {"NeurCAM": NeurCAM, "NeurCAM.monitor": NeurCAM.monitor, "Explanation": Explanation,
              "choose_k": choose_k, **{f"service.{name}": getattr(service, name) for name in (
                  "fit", "choose_k", "explain", "monitor", "export", "predict", "generate", "sample", "load_config",
                  "parse_overrides", "validate", "history", "history_table", "unreachable", "load_model", "demo_config",
                  "demo_data", "validate_manifests", "predict_settings", "promote", "train", "search",
                  "choose_k_on_ray", "recluster", "demo", "featurize_text", "submit")}}
ON_RAY = {"service.train", "service.search", "service.choose_k_on_ray", "service.recluster", "service.demo",
          "service.featurize_text"}   # their examples start Ray Train, Ray Tune or Ray Data
ON_A_HEAD = {"service.submit"}   # its example's ``address``: a Ray head's job server (``open_ray_head``)


# examples whose run a test elsewhere makes, and then reads what it wrote (one run, not two)
RUN_BY = {"service.choose_k_on_ray": "test_tune.py::test_choose_k_on_ray_s_example_runs_one_trial_per_k_and_seed"}


@pytest.mark.parametrize("name", sorted(set(DOCUMENTED) - set(RUN_BY)))
def test_the_example_runs_as_written(name, request):
    given = {}
    if name in ON_RAY:
        request.getfixturevalue("ray_cluster")   # the session's Ray (capped), not one of their own
    if name in ON_A_HEAD:
        given["address"] = request.getfixturevalue("open_ray_head")["jobs"]
    run_example(DOCUMENTED[name], name, given)


def test_an_example_run_elsewhere_is_run_there():
    """Each example left out above is run, by name, by the test that reads its output."""
    from pathlib import Path
    for name, where in RUN_BY.items():
        module, test = where.split("::")
        source = (Path(__file__).parent / module).read_text()
        assert f"run_example(service.{name.split('.')[1]}, \"{name}\")" in source and f"def {test}" in source, where
