"""Representations the service computes itself: interpretable text features (term frequencies
over a fitted vocabulary) and sentence embeddings, each written as Parquet beside an id column.
Knows the data layer, nothing of the model or of training."""
from .featurize import TextJob, featurize_text
from .sentences import EMBEDDING_COLUMN, check_model_path
from .vocabulary import VOCABULARY_FILE, Analyzer, Vocabulary

__all__ = ["EMBEDDING_COLUMN", "VOCABULARY_FILE", "Analyzer", "TextJob", "Vocabulary", "check_model_path",
           "featurize_text"]
