"""The README's Python example runs as written, on a table with a text column; the README stays a
front page (the rest lives in docs/, built by `mkdocs build --strict` in .ci/run)."""
import re
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_python_example_runs_on_a_table_with_a_text_column(capsys):
    text = (ROOT / "README.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
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
    text = (ROOT / "docs" / "mixed.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    space: dict = {}
    exec(compile(code.replace("NeurCAM(n_clusters=3)", "NeurCAM(n_clusters=3, verbose=False)"), "mixed.md", "exec"),
         space)
    est = space["est"]
    assert est.importance_["term"].iloc[0] == "plan"
    levels = space["expl"].term("plan").levels[0]
    assert levels[-2:] == ["other", "missing"] and set(levels[:-2]) == {"monthly", "yearly", "two-year"}
    assert "[['" in capsys.readouterr().out
