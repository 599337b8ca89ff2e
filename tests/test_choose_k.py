"""Choosing K: the rule on tables that leave no doubt, the JSON and the page, ``auto`` in the
estimator and the CLI, and the refusals (a K range below 2 or above the rows, one seed)."""
import json

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import adjusted_rand_score

from neurcam_dist import NeurCAM, choose_k
from neurcam_dist.choosing import STABLE, propose
from neurcam_dist.cli import main
from neurcam_dist.errors import ConfigError

# a small network (the budgets as they are: early stopping ends each fit in about a second)
FAST = dict(hidden=(16,), n_bases=8)


def clear_blobs(n=450, k=3, seed=0):
    """``k`` round clusters far apart in 4 features, a text column that follows them: K = k leaves
    no doubt."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(0, 1, size=(k, 4))
    centres *= 12 / np.linalg.norm(centres[:, None] - centres[None], axis=2).max()
    centres[:, :2] += np.array([[14 * i, -9 * i] for i in range(k)])
    y = np.arange(n) % k
    X = pd.DataFrame(centres[y] + rng.normal(0, 0.6, size=(n, 4)), columns=["a", "b", "c", "d"])
    X["tier"] = np.array(["gold", "silver", "bronze", "tin"])[y % 4]
    return X, y


@pytest.fixture(scope="module")
def three():
    return clear_blobs()


def row(k, sil, stab, used=None):
    return {"k": k, "silhouette": sil, "stability": stab, "clusters_used": k if used is None else used}


def test_the_rule_takes_the_largest_stable_and_separated_k_and_names_its_runner_up():
    table = [row(2, 0.50, 1.0), row(3, 0.71, 1.0), row(4, 0.70, 0.99), row(5, 0.72, 0.60), row(6, 0.40, 0.95)]
    k, runner, sure = propose(table, 3)
    assert (k, runner["k"], sure) == (4, 3, True) and "fewer clusters" in runner["why"]
    assert [r["stable"] for r in table] == [True, True, True, False, True]
    assert [r["separated"] for r in table] == [False, True, True, True, False]
    # no K both stable and separated: the best silhouette, and the proposal says it is unsure
    k, runner, sure = propose([row(2, 0.3, 0.5), row(3, 0.5, 0.6), row(4, 0.4, 0.8)], 3)
    assert (k, runner["k"], sure) == (3, 4, False) and "no K was both" in runner["why"]
    # one K qualifies: the runner-up is the nearest to the rule, with what it lacks
    k, runner, _ = propose([row(2, 0.6, 1.0), row(3, 0.2, 1.0), row(4, 0.59, STABLE - 0.2)], 3)
    assert (k, runner["k"]) == (2, 4) and "not stable" in runner["why"]
    # a K whose fits leave a cluster empty is the smaller K in disguise, however stable
    k, runner, _ = propose([row(2, 0.6, 1.0), row(3, 0.86, 1.0), row(4, 0.86, 1.0, used=3)], 3)
    assert (k, runner["k"]) == (3, 4) and "every cluster used (3 of 4)" in runner["why"]


def test_a_proposal_at_the_top_of_the_range_says_so_and_suggests_a_wider_one():
    from neurcam_dist.choosing import decide

    def full(*args):
        return {**row(*args), "inertia": 5193.2, "stability_sd": 0.0, "term_agreement": 1.0, "terms_used": 3,
                "seconds": 0.1}
    top = decide([full(2, 0.3, 1.0), full(3, 0.5, 1.0), full(4, 0.7, 1.0)], 3, 300, 0.0)
    assert top.k == 4 and top.edge == ("K = 4 is the largest K tried (2-4): a larger K may be better still; try a "
                                       "wider range, --k 2-8")
    assert top.edge in top.lines() and top.to_dict()["edge"] == top.edge
    from neurcam_dist.choosing import choice_html
    page = choice_html(top)
    assert "<p id='edge'>K = 4 is the largest K tried (2-4)" in page
    assert "<td>5190</td>" in page and "e+" not in page.split("<h2>Every K</h2>")[1]   # no scientific notation
    inside = decide([full(2, 0.3, 1.0), full(3, 0.7, 1.0), full(4, 0.5, 1.0)], 3, 300, 0.0)
    assert inside.k == 3 and inside.edge is None and not any("largest K tried" in line for line in inside.lines())


def test_a_proposal_is_a_k_some_fit_used_and_a_huge_range_is_refused_before_any_work():
    """Every K tried left clusters empty (3 distinct rows, K = 3..5): the proposal is the number of
    clusters the fits used, said as such; a range of millions of K is refused before it is built."""
    from neurcam_dist.choosing import decide, k_range
    table = [row(3, 0.9, 1.0, used=2), row(4, 0.9, 1.0, used=2), row(5, 0.9, 1.0, used=1)]
    choice = decide(table, 3, 300, 0.0)
    assert choice.k == 2 and not choice.sure and choice.runner_up["k"] == 3
    assert "no K tried used all its clusters" in choice.rule and "include K = 2 in the range" in choice.rule
    assert "only 2 of its 3 clusters" in choice.runner_up["why"]
    for huge in ("2-300000000", "2-99999999999"):
        with pytest.raises(ConfigError, match=r"asks for [\d,]+ values of K; choose-k compares at most 100"):
            k_range(huge)
    X = pd.DataFrame(np.repeat([[0.0, 0.0], [5.0, 5.0], [10.0, 0.0]], 40, axis=0), columns=["a", "b"])
    with pytest.raises(ConfigError, match="asks for 299,999,999 values of K"):
        choose_k(X, k="2-300000000", seeds=2, verbose=False, **FAST)
    # within the count and the rows, but every seed's labels would not fit: refused before any fit
    from neurcam_dist.settings import available_memory
    seeds = int(available_memory() // len(X))     # 2 K x 16 bytes per row and seed: 32x the memory
    with pytest.raises(ConfigError, match=r"would keep about [\d.]+ GiB .* over half of the [\d.]+ GiB available"):
        choose_k(X, k="2,3", seeds=seeds, verbose=False, **FAST)
    with pytest.raises(ConfigError, match="k goes up to 200, but each seed is fitted on"):
        choose_k(X, k="2,200", seeds=2, verbose=False, **FAST)


def test_choose_k_proposes_the_clear_k_with_every_figure_and_fewest_terms(three):
    X, y = three
    choice = choose_k(X, y, k=range(2, 6), seeds=2, terms=True, verbose=False, **FAST)
    assert choice.k == 3 and choice.sure, choice.lines()
    assert [r["k"] for r in choice.table] == [2, 3, 4, 5]
    best = {r["k"]: r for r in choice.table}[3]
    assert best["stability"] > 0.99 and best["ari"] > 0.99 and best["silhouette"] == max(
        r["silhouette"] for r in choice.table)
    for r in choice.table:
        assert {"inertia", "silhouette", "stability", "stability_sd", "term_agreement", "terms_used", "clusters_used",
                "seconds"} <= set(r)
        assert 0 <= r["term_agreement"] <= 1 and 1 <= r["terms_used"] <= 5 and r["seconds"] > 0
    inertias = [r["inertia"] for r in choice.table]
    assert inertias == sorted(inertias, reverse=True)           # more clusters, tighter (or as tight)
    # fewer terms: the full model first, the smallest within 1.02x of it named
    assert choice.terms[0]["n_single"] == 5 and choice.terms[0]["ratio"] == 1.0
    assert choice.smallest["ratio"] <= 1.02 and choice.smallest["terms"] <= 5
    assert choice.smallest["terms"] == min(r["terms"] for r in choice.terms if r["ratio"] <= 1.02)
    assert choice.frame().index.tolist() == [2, 3, 4, 5] and "proposed K = 3" in "\n".join(choice.lines())


def test_choose_k_refuses_what_it_cannot_measure(three):
    X, _ = three
    with pytest.raises(ConfigError, match="start at 2"):
        choose_k(X, k="1-4", verbose=False)
    with pytest.raises(ConfigError, match="at least two values"):
        choose_k(X, k=[3], verbose=False)
    with pytest.raises(ConfigError, match="seeds must be 2 or more"):
        choose_k(X, k="2-4", seeds=1, verbose=False)
    with pytest.raises(ConfigError, match=r"k goes up to 400, but each seed is fitted on 360 rows"):
        choose_k(X, k="2,400", verbose=False)
    with pytest.raises(ConfigError, match="range such as 2-12"):
        choose_k(X, k="two-five", verbose=False)
    with pytest.raises(ConfigError, match="choose_k sets n_clusters"):
        choose_k(X, k="2-4", n_clusters=3, verbose=False)


def test_the_cli_writes_choice_json_and_page_and_reruns_in_place(three, tmp_path, capsys):
    X, y = three
    data = tmp_path / "table.csv"
    X.assign(kind=y).to_csv(data, index=False)
    args = ["choose-k", "--input", data, "--output", tmp_path / "k", "--k", "2-4", "--seeds", "2", "--label", "kind",
            "--hidden", "16", "--n-bases", "8"]
    assert main([str(a) for a in args]) == 0
    out = capsys.readouterr()
    assert "proposed K = 3" in out.out and "choice.html" in out.out and "K=4: silhouette" in out.err
    choice = json.loads((tmp_path / "k" / "choice.json").read_text())
    assert choice["k"] == 3 and choice["rule"].startswith("the largest K") and choice["runner_up"]["k"] in (2, 4)
    assert [r["k"] for r in choice["table"]] == [2, 3, 4] and all("seconds" in r and "ari" in r for r in choice["table"])
    assert choice["features"] == ["a", "b", "c", "d", "tier"] and len(choice["clusters"]) == 3
    assert sum(c["share"] for c in choice["clusters"]) == pytest.approx(1.0)
    page = (tmp_path / "k" / "choice.html").read_text()
    assert "Proposed K = 3" in page and "data:image/png;base64," in page and "<h2>The 3 clusters" in page
    assert "http" not in page.replace("http-equiv", "")       # one offline page
    assert main([str(a) for a in args]) == 0                  # again into its own folder: replaced
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    assert main([str(a) for a in args[:3]] + ["--output", str(tmp_path / "mine")] + [str(a) for a in args[5:]]) == 2
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"
    capsys.readouterr()
    assert main(["choose-k", "--input", str(data), "--output", str(tmp_path / "one"), "--seeds", "1"]) == 2
    assert "seeds must be 2 or more" in capsys.readouterr().err and not (tmp_path / "one").exists()


def test_fit_n_clusters_auto_fits_the_proposed_k_and_the_model_keeps_the_choice(three, tmp_path, capsys):
    """``neurcam fit --n-clusters auto`` (the estimator's ``n_clusters='auto'``): K = 2..12, the
    proposal fitted, the choice in metrics.json and saved with the model."""
    X, y = three
    data = tmp_path / "table.csv"
    X.to_csv(data, index=False)
    fit = ["fit", "--input", data, "--output", tmp_path / "run", "--n-clusters", "auto", "--hidden", "16",
           "--n-bases", "8"]
    assert main([str(a) for a in fit]) == 0
    out = capsys.readouterr()
    assert '"n_clusters": 3' in out.out and "n_clusters auto: K = 3" in out.out
    assert "choosing K: K=12" in out.err                        # progress, K by K
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["n_clusters"] == 3 and metrics["k_choice"]["k"] == 3
    est = NeurCAM.load(tmp_path / "run" / "model")
    assert est.n_clusters == "auto" and est.n_clusters_ == 3 and len(est.cluster_ids_) == 3
    assert est.k_choice_["k"] == 3 and [r["k"] for r in est.k_choice_["table"]] == list(range(2, 13))
    assert adjusted_rand_score(y, est.predict(X)) == 1.0
    with pytest.raises(ConfigError, match="n_clusters must be an integer"):
        NeurCAM(n_clusters="many").fit(X)
    with pytest.raises(ConfigError, match="with X_repr"):
        NeurCAM(n_clusters="auto").fit(X, X_repr=np.zeros((len(X), 2)))


def test_the_choosing_k_page_python_block_runs_as_written(capsys):
    from .conftest import doc_blocks
    (block,) = doc_blocks("docs/choosing-k.md")
    space: dict = {}
    exec(compile(block, "choosing-k.md", "exec"), space)
    choice, est = space["choice"], space["est"]
    assert 2 <= choice.k <= 6 and [r["k"] for r in choice.table] == [2, 3, 4, 5, 6]
    assert est.n_clusters_ == est.k_choice_["k"] and 2 <= est.n_clusters_ <= 12
    assert "silhouette" in capsys.readouterr().out
