"""The README's Python example runs as written, on a table with a text column; the README stays a
front page (the rest lives in docs/, built by `mkdocs build --strict` in .ci/run)."""
import re

import numpy as np

from .conftest import ROOT, doc_blocks


def test_the_readme_python_example_runs_on_a_table_with_a_text_column(capsys):
    (code,) = doc_blocks("README.md")
    assert "select_dtypes" in code and 'df["name"]' in code   # the example's table has a text column
    space: dict = {}
    exec(compile(code.replace("n_clusters=3, random_state=0", "n_clusters=3, random_state=0, verbose=False"),
                 "README.md", "exec"), space)
    est, X = space["est"], space["X"]
    assert est.n_features_in_ == 13 and "name" not in X.columns
    assert set(np.unique(est.predict(X))) <= set(est.cluster_ids_.tolist())
    printed = capsys.readouterr().out.splitlines()
    assert printed[-1].startswith("[") and len(space["expl"].importance) >= 3


def test_the_readme_is_a_front_page_with_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert len(text.encode()) <= 12 * 1024
    assert '-e ".[service]" && neurcam demo' in text and "&& python3 -m pytest" in text
    for link in re.findall(r"\]\(([^)#]+)\)", text):   # every relative link resolves in the repository
        assert link.startswith("http") or (ROOT / link).exists(), link
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in re.findall(r":\s*([\w/.-]+\.md)\s*$", nav, re.M):
        assert (ROOT / "docs" / page).exists(), page


def test_the_mixed_tables_page_example_runs_as_written(capsys):
    (code,) = doc_blocks("docs/mixed.md")
    space: dict = {}
    exec(compile(code.replace("NeurCAM(n_clusters=3,", "NeurCAM(n_clusters=3, verbose=False,"), "mixed.md", "exec"),
         space)
    est = space["est"]
    assert est.importance_["term"].iloc[0] == "plan"
    levels = space["expl"].term("plan").levels[0]
    assert levels[-2:] == ["(other levels)", "missing"] and set(levels[:-2]) == {"monthly", "yearly", "two-year"}
    assert "[['" in capsys.readouterr().out


def test_every_page_with_python_blocks_has_a_test_that_runs_them_all():
    """A page's Python blocks are run by a test that calls ``doc_blocks`` on it and unpacks the
    whole list (so a block added later fails that test until it runs too). Bash blocks: every
    ``neurcam`` line parses (test_first_hour.py), getting started's steps run (own-csv.sh)."""
    sources = "\n".join(p.read_text() for p in (ROOT / "tests").glob("test_*.py"))
    pages = ["README.md"] + [f"docs/{p.name}" for p in sorted((ROOT / "docs").glob("*.md"))]
    with_blocks = [p for p in pages if doc_blocks(p)]
    assert len(with_blocks) >= 8
    for page in with_blocks:
        calls = re.findall(rf"^\s*(.+?)=\s*doc_blocks\(\"{re.escape(page)}\"\)", sources, re.M)
        assert calls, f"no test runs the Python blocks of {page}"
        assert any(len(re.findall(r"\w+", lhs)) == len(doc_blocks(page)) for lhs in calls), (page, calls)


def test_the_yaml_blocks_of_the_docs_are_what_the_service_takes(tmp_path):
    """search.md's section on the digits config, text.md's config (with an output), and the alert
    rules of operations.md on the gauges a re-clustering exports."""
    import yaml

    from neurcam_dist.config import parse_config
    from neurcam_dist.ops.history import export_metrics
    from neurcam_dist.uris import Location
    (search_section,) = doc_blocks("docs/search.md", "yaml")
    config = yaml.safe_load((ROOT / "configs" / "digits.yaml").read_text())
    parsed = parse_config({**config, **yaml.safe_load(search_section)})
    assert parsed.search.seeds == [0, 1, 2, 3, 4] and parsed.search.m == [1.025, 1.05]
    assert parsed.tracking.model_name == "digits-segments"
    (text_config,) = doc_blocks("docs/text.md", "yaml")
    assert parse_config({**yaml.safe_load(text_config), "output": "runs/news"}).text.columns == ["title", "description"]
    (rules,) = doc_blocks("docs/operations.md", "yaml")
    exported = export_metrics(Location(tmp_path), {"outcome": "promoted", "promoted": True, "finished_unix": 1.0,
                                              "agreement_ari": 0.9, "model_name": "m"}, [{"finished_unix": 1.0}])
    names = set(re.findall(r"^(neurcam_\w+)\{", exported, re.M))
    used = {n for r in yaml.safe_load(rules)["groups"][0]["rules"] for n in re.findall(r"neurcam_\w+", r["expr"])}
    assert used and used <= names, used - names
