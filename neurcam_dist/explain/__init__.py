"""Explanations as data first: terms, shape graphs on grids in original units, purified pair
heat maps, importance, cluster profiles, the table-only scorer, and the plots and HTML report
rendered from those numbers. Takes a fitted model; knows nothing of training, Ray or MLflow."""
from .build import build_explanation
from .explanation import Explanation, TableScorer, Term
from .terms import RowExplanation, rows_from_contributions, term_groups

__all__ = ["Explanation", "RowExplanation", "TableScorer", "Term", "build_explanation",
           "rows_from_contributions", "term_groups"]
