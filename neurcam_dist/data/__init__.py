"""Data: Parquet sources (paths, globs, URIs), the plan (schemas and column roles from the
footers), the profile pass (validation and standardization moments), joins, sampling, reading
with Ray Data, and the bundled and synthetic example data. Knows nothing of the model."""
from .join import join_embeddings
from .planning import Plan, plan
from .profiling import Profile, profile
from .reading import embedding, matrix, read, read_source
from .sampling import sample
from .sources import PATH_COLUMN, ROW_KEY, DataError, Source, footers, resolve

__all__ = ["PATH_COLUMN", "ROW_KEY", "DataError", "Plan", "Profile", "Source", "footers", "join_embeddings", "matrix", "plan", "profile",
           "read", "read_source", "embedding", "resolve", "sample"]
