"""Interpretable text features: the paper's pipeline (appendix "Text Representation Details").

Punctuation becomes a space, the text is split into tokens and lowercased, English stop words
are dropped, the rest lemmatized (``simplemma``: its dictionaries ship inside the package, so
nothing is downloaded, unlike NLTK's WordNet which the paper used), corpus-specific stop words
(in more than ``max_df`` of the documents) and rare words (in fewer than ``min_df``) are dropped,
and each document becomes its term frequencies scaled to unit L2 norm.

The vocabulary is fitted from document-frequency counts that merge (``Counter`` per batch), so a
corpus of any size is counted in a streaming pass; the fitted ``Vocabulary`` is plain JSON and
travels with the features' Parquet files and with the model, so new documents get the same columns.
"""
from __future__ import annotations

import functools
import re
from collections import Counter
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from ..errors import DataError
from ..data.sources import VOCABULARY_FILE  # noqa: F401 - re-exported: where the vocabulary lives

SCHEMA_KEY = b"neurcam.text"          # Parquet schema metadata: the vocabulary's term columns
KIND = "neurcam.text-vocabulary"
FORMAT = 1

_PUNCTUATION = re.compile(r"[^\w\s]|_")


def _stop_words() -> frozenset[str]:
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS
    return frozenset(ENGLISH_STOP_WORDS)


@functools.lru_cache(maxsize=1 << 18)
def _lemma(token: str) -> str:
    import simplemma
    return simplemma.lemmatize(token, lang="en")


@dataclass(frozen=True)
class Analyzer:
    """How a document becomes terms. ``min_chars``: shorter tokens (single letters left by split
    contractions and initials) are dropped."""

    lemmatizer: str = "simplemma"
    min_chars: int = 2
    stop_words: str = "sklearn-english"

    def __post_init__(self):
        if self.lemmatizer not in ("simplemma", "none"):
            raise DataError(f"text lemmatizer {self.lemmatizer!r}: expected 'simplemma' or 'none'")
        if self.stop_words not in ("sklearn-english", "none"):
            raise DataError(f"text stop_words {self.stop_words!r}: expected 'sklearn-english' or 'none'")

    @functools.cached_property
    def _stops(self) -> frozenset[str]:
        return _stop_words() if self.stop_words != "none" else frozenset()

    def terms(self, text) -> list[str]:
        """The document's terms in order (a term repeats as often as it occurs)."""
        if text is None:
            return []
        stops, n = self._stops, self.min_chars
        out = []
        for token in _PUNCTUATION.sub(" ", str(text)).lower().split():
            if len(token) < n or token in stops:
                continue
            lemma = _lemma(token) if self.lemmatizer == "simplemma" else token
            lemma = lemma.lower()
            if len(lemma) >= n and lemma not in stops:   # "has" -> "have": still a stop word
                out.append(lemma)
        return out


def document_frequencies(texts, analyzer: Analyzer) -> tuple[Counter, int]:
    """How many of ``texts`` hold each term, and how many texts there were: counts of batches add up."""
    df = Counter()
    n = 0
    for text in texts:
        df.update(set(analyzer.terms(text)))
        n += 1
    return df, n


@dataclass
class Vocabulary:
    """The fitted terms, the Parquet column of each, and how they were made."""

    terms: list[str]
    columns: list[str]
    document_frequency: list[int]
    n_documents: int
    min_df: float
    max_df: float
    text_columns: list[str]
    analyzer: dict = field(default_factory=lambda: asdict(Analyzer()))

    @classmethod
    def fit(cls, df: Counter, n_documents: int, *, min_df: float | None = None, max_df: float = 0.99,
            text_columns: list[str], analyzer: Analyzer, reserved: set[str] = frozenset()) -> "Vocabulary":
        """Terms in at least ``min_df`` and at most ``max_df`` of the documents (fractions), in
        alphabetical order; ``min_df=None`` chooses it for the documents (``auto_min_df``). A term
        whose name is a reserved column (the id, a carried column, the embedding) gets the column
        ``term_<term>``."""
        if n_documents == 0:
            raise DataError("no documents to fit a vocabulary on")
        if min_df is None:
            min_df = auto_min_df(df, n_documents, max_df)
        check_thresholds(min_df, max_df)
        lo, hi = min_df * n_documents, max_df * n_documents
        terms = sorted(t for t, c in df.items() if lo <= c <= hi)
        if not terms:
            raise DataError(f"no term is in between {min_df:g} and {max_df:g} of the {n_documents} documents "
                             f"({len(df)} distinct terms before the thresholds): lower text.min_df or raise "
                             f"text.max_df")
        columns = [f"term_{t}" if t in reserved else t for t in terms]
        return cls(terms=terms, columns=columns, document_frequency=[int(df[t]) for t in terms],
                   n_documents=int(n_documents), min_df=float(min_df), max_df=float(max_df),
                   text_columns=list(text_columns), analyzer=asdict(analyzer))

    @functools.cached_property
    def _analyzer(self) -> Analyzer:
        return Analyzer(**self.analyzer)

    @functools.cached_property
    def _index(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.terms)}

    def transform(self, texts) -> tuple[np.ndarray, np.ndarray]:
        """(n, terms) float32 term frequencies with unit L2 norm per row, and each row's number of
        vocabulary terms: a row with none stays all zero (there is nothing to normalise)."""
        analyzer, index = self._analyzer, self._index
        texts = list(texts)
        out = np.zeros((len(texts), len(self.terms)), np.float32)
        for i, text in enumerate(texts):
            for term in analyzer.terms(text):
                j = index.get(term)
                if j is not None:
                    out[i, j] += 1.0
        counts = out.sum(1).astype(np.int64)
        norms = np.linalg.norm(out, axis=1)
        nonzero = norms > 0
        out[nonzero] /= norms[nonzero, None]
        return out, counts

    def to_json(self) -> dict:
        """The vocabulary as JSON-ready values (``kind`` and ``format`` first)."""
        return {"kind": KIND, "format": FORMAT, **asdict(self)}

    @classmethod
    def from_json(cls, d: dict) -> "Vocabulary":
        """The vocabulary ``to_json`` gave; ``DataError`` for another kind or a newer format."""
        if d.get("kind") != KIND:
            raise DataError(f"not a neurcam text vocabulary (kind {d.get('kind')!r})")
        if d.get("format", 0) > FORMAT:
            raise DataError(f"text vocabulary format {d['format']} is newer than this neurcam-dist reads "
                             f"({FORMAT}): upgrade neurcam-dist")
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


MIN_DF = 0.01              # terms in fewer than this share of the documents are dropped, unless
TERMS_PER_DOCUMENT = 4.0   # the average document would then keep fewer of its terms than this:
MIN_DOCUMENTS = 5          # then the threshold is lowered, never below a term in this many documents


def auto_min_df(df: Counter, n_documents: int, max_df: float = 0.99) -> float:
    """The ``min_df`` of ``min_df=None``: ``MIN_DF`` (the paper's 1%), lowered for short documents.

    A document is what its vocabulary terms say of it: at 1%, short documents (docstrings,
    titles) keep two or three terms each and many keep none, which leaves a model of the terms
    little to separate them by. So the threshold is lowered, one document at a time, until the
    average document keeps ``TERMS_PER_DOCUMENT`` vocabulary terms, but never below a term seen in
    ``MIN_DOCUMENTS`` documents (rarer terms are noise, and their shape functions rest on a handful
    of rows). News articles keep 8-9 terms at 1% (AG News): unchanged. The average is computed from
    the counts alone (the sum of the kept terms' document frequencies over the documents)."""
    start = max(1, int(np.ceil(MIN_DF * n_documents)))
    counts = np.sort(np.fromiter((c for c in df.values() if c <= max_df * n_documents), dtype=np.int64))[::-1]
    kept = np.cumsum(counts)

    def per_document(c: int) -> float:   # terms the average document keeps at threshold c
        k = int(np.searchsorted(-counts, -c, side="right"))
        return float(kept[k - 1]) / n_documents if k else 0.0

    c = start
    while c > MIN_DOCUMENTS and per_document(c) < TERMS_PER_DOCUMENT:
        c -= 1
    return MIN_DF if c == start else c / n_documents


def check_thresholds(min_df: float, max_df: float) -> None:
    """Refuse document-frequency thresholds outside 0 <= min_df < max_df <= 1."""
    if not 0.0 <= min_df < max_df <= 1.0:
        raise DataError(f"text thresholds: need 0 <= min_df < max_df <= 1 (fractions of the documents), got "
                         f"min_df={min_df}, max_df={max_df}")


def join_text(columns: list, n: int) -> list[str | None]:
    """One document per row from one or more text columns (a title and a body, say), joined by a
    space; a row whose columns are all null is None."""
    if len(columns) == 1:
        return [None if v is None else str(v) for v in columns[0]]
    out = []
    for i in range(n):
        parts = [str(c[i]) for c in columns if c[i] is not None]
        out.append(" ".join(parts) if parts else None)
    return out
