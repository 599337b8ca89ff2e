"""The public API's Examples sections run as written (numpydoc, as scikit-learn's estimators carry
them): the estimator, the explanation, choosing K, monitoring, and the front door's in-memory
entry points (fit, choose_k, explain, monitor, export, predict), the data makers (generate, sample),
the config and record helpers (load_config, parse_overrides, validate, history, history_table,
unreachable), the model loader (load_model, with load_fitted), the demo's config and data place,
the manifests' check, predict's settings and the registry's promote; on the session's Ray,
``train``, ``search``, ``choose_k_on_ray``, ``recluster``, ``demo`` and ``featurize_text``; and
``submit``, to a Ray head with its job server that this module starts (``open_ray_head``).
A public entry point listed here without an example fails."""
import doctest

import pytest

from neurcam_dist import Explanation, NeurCAM, choose_k, service

DOCUMENTED = {"NeurCAM": NeurCAM, "NeurCAM.monitor": NeurCAM.monitor, "Explanation": Explanation,
              "choose_k": choose_k, **{f"service.{name}": getattr(service, name) for name in (
                  "fit", "choose_k", "explain", "monitor", "export", "predict", "generate", "sample", "load_config",
                  "parse_overrides", "validate", "history", "history_table", "unreachable", "load_model", "demo_config",
                  "demo_data", "validate_manifests", "predict_settings", "promote", "train", "search",
                  "choose_k_on_ray", "recluster", "demo", "featurize_text", "submit")}}
ON_RAY = {"service.train", "service.search", "service.choose_k_on_ray", "service.recluster", "service.demo",
          "service.featurize_text"}   # their examples start Ray Train, Ray Tune or Ray Data
ON_A_HEAD = {"service.submit"}   # its example's ``address``: a Ray head's job server (``open_ray_head``)


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_the_example_runs_as_written(name, request):
    given = {}
    if name in ON_RAY:
        request.getfixturevalue("ray_cluster")   # the session's Ray (capped), not one of their own
    if name in ON_A_HEAD:
        given["address"] = request.getfixturevalue("open_ray_head")["jobs"]
    tests = [t for t in doctest.DocTestFinder(recurse=False).find(DOCUMENTED[name], name, globs=given) if t.examples]
    assert tests, f"{name} has no Examples section"
    runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0, f"{name}'s example printed something else (above)"
