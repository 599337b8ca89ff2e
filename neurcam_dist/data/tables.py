"""One table in memory: a CSV or Parquet file (or a Parquet folder) read as a DataFrame, for the
commands that work in one process (``fit``, ``explain``, ``sample``), and its feature columns
chosen by the same rule as the Ray path's (``validation.auto_features``).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pandas as pd

from ..columns import DATE_UNIT, FLAG_RULE, as_days, is_flag, level_counts, numbers_in_text, refuse_numbers_with_typos
from ..errors import ConfigError, DataError
from ..validation import auto_features, first_names, missing_columns_note

CSV_SUFFIXES = (".csv", ".csv.gz", ".csv.bz2", ".csv.zst")


def is_parquet(path) -> bool:
    """A ``.parquet`` / ``.pq`` file, or a folder (of Parquet files)."""
    p = Path(path)
    return p.name.lower().endswith((".parquet", ".pq")) or p.is_dir()


def read_table(path: str, encoding: str = "utf-8", columns: list[str] | None = None, *,
               delimiter: str | None = None, decimal: str | None = None) -> pd.DataFrame:
    """A CSV or Parquet file (or a Parquet directory) as a DataFrame.

    Parameters
    ----------
    path : str
        The file or folder.
    encoding : str
        A CSV file's text encoding.
    columns : list of str, optional
        Read only those of them the file has (a wide table's other columns, embeddings say,
        are not read).
    delimiter, decimal : str, optional
        A CSV file's field separator and decimal mark (default: detected from its first lines,
        ``csv_format``).

    Raises
    ------
    DataError
        No such file, an unknown suffix, text that is not in ``encoding``, a delimiter that
        cannot be told, or a table with no rows.
    """
    p = Path(path)
    if not p.exists():
        raise DataError(f"no such file: {path}")
    if is_parquet(p):
        df = _read_parquet(str(p), columns)
    elif is_csv(p):
        df = _read_csv(p, encoding, columns, delimiter, decimal)
    else:
        raise DataError(f"{path}: expected a .csv(.gz) or .parquet file")
    if df.empty:
        raise DataError(f"{path} has no rows (only {'a header naming ' if is_csv(p) else ''}{len(df.columns)} "
                        f"column(s)): nothing to cluster or score")
    return df


# A cell of digits with a leading zero (``000042``, ``007``): a code, which a number would change
CODE = re.compile(r"^[+-]?0[0-9]+$")


def _read_csv(p: Path, encoding: str, columns, delimiter, decimal) -> pd.DataFrame:
    """A CSV file as pandas reads it, but: a header naming a column twice is refused (pandas
    would rename the second ``f1.1``), and a column of whole numbers whose cells carry leading
    zeros (``000042``) is kept as the text written, never read as ``42`` (``CODE``)."""
    sep, dec = csv_format(p, encoding, delimiter, decimal)
    try:
        header = pd.read_csv(p, encoding=encoding, sep=sep, header=None, nrows=1, dtype=str,
                             keep_default_na=False).iloc[0].tolist() if _head(p, encoding, 1) else []
        twice = sorted({str(c) for c in header if header.count(c) > 1})
        if twice:
            raise DataError(f"{p}: the header names column(s) {twice} more than once: rename them (a table needs "
                            f"one name per column)")
        use = {} if columns is None else {"usecols": lambda c, wanted=set(columns): c in wanted}
        df = pd.read_csv(p, encoding=encoding, sep=sep, decimal=dec, **use)
        whole = [c for c in df.columns if pd.api.types.is_integer_dtype(df[c].dtype)]
        if whole:
            text = pd.read_csv(p, encoding=encoding, sep=sep, usecols=whole, dtype=str, keep_default_na=False)
            for c in whole:
                if text[c].str.match(CODE).any():
                    df[c] = text[c].astype(object)
    except UnicodeDecodeError as exc:
        raise _not_in(p, encoding, exc) from None
    if columns is None:
        _refuse_one_glued_column(p, df.columns, sep)
    return df


def _read_parquet(path: str, columns: list[str] | None) -> pd.DataFrame:
    """A Parquet file or folder (the files the Ray path reads: ``sources.resolve``) as one frame:
    a number column that is int64 in one file and double in another is read as double
    (``sources.unified_types``); a column some files lack, or text in one file and numbers in
    another, is refused naming the files."""
    import pyarrow as pa

    from .reading import tables_here
    from .sources import footers, resolve
    src = resolve(path)
    found = footers(src)
    names = src.schema.names
    wanted = names if columns is None else [c for c in columns if c in set(names)]
    for col in wanted:
        lacking = [f for f, schema, _ in found if schema.get_field_index(col) < 0]
        if lacking:
            raise DataError(f"{lacking[0]}{f' and {len(lacking) - 1} more file(s)' if len(lacking) > 1 else ''} "
                            f"lack(s) column {col!r}, which other files of {path} have: give files of one schema")
        (f1, t1), *rest = [(f, src.casts.get(col, schema.field(col).type)) for f, schema, _ in found]
        other = next(((f, t) for f, t in rest if t != t1), None)
        if other is not None:
            raise DataError(f"column {col!r} is {t1} in {f1} but {other[1]} in {other[0]}: give it one type in "
                            f"every file")
    tables = list(tables_here(src, wanted))
    if not tables:
        return pd.DataFrame(columns=wanted)
    return pa.concat_tables(tables).to_pandas()


def table_columns(path: str, encoding: str = "utf-8", *, delimiter: str | None = None,
                  decimal: str | None = None) -> list:
    """The column names of what ``read_table`` reads, without reading the rows."""
    p = Path(path)
    if is_parquet(p):
        from .sources import footers, resolve
        return list(dict.fromkeys(n for _, schema, _ in footers(resolve(str(p))) for n in schema.names))
    sep, _ = csv_format(p, encoding, delimiter, decimal)
    return list(pd.read_csv(p, encoding=encoding, sep=sep, nrows=0).columns)


DELIMITERS = (",", ";", "\t", "|")
_DECIMAL_COMMA = re.compile(r"^\s*[-+]?\d+,\d+(?:[eE][-+]?\d+)?\s*$")
_DECIMAL_POINT = re.compile(r"^\s*[-+]?\d*\.\d+(?:[eE][-+]?\d+)?\s*$")


def csv_format(path, encoding: str = "utf-8", delimiter: str | None = None,
               decimal: str | None = None, lines: int = 50) -> tuple[str, str]:
    """``(delimiter, decimal mark)`` of a CSV file: as given, else told from its first ``lines``
    lines. The delimiter is the one of ``, ; TAB |`` that splits every line (the header too) into
    the same number of fields, more than one, a comma first; with a delimiter other than a comma,
    fields such as ``0,125`` make the decimal mark a comma. A file no candidate splits evenly
    keeps the comma (pandas then names a ragged line); one whose header is one field under a
    comma but holds another candidate is refused, naming ``--delimiter``. Says on stderr when it
    chose anything but ``,`` and ``.``."""
    import csv
    if delimiter is not None and decimal is not None:
        return delimiter, decimal
    head = _head(path, encoding, lines)
    if not head:
        return delimiter or ",", decimal or "."
    if delimiter is None:
        splits = {d: [len(row) for row in csv.reader(head, delimiter=d)] for d in DELIMITERS}
        even = [d for d, counts in splits.items() if counts and counts[0] > 1 and len(set(counts)) == 1]
        if "," in even or not even:
            if not even and splits[","][0] == 1 and any(d in head[0] for d in DELIMITERS[1:]):
                raise DataError(f"{path}: cannot tell its delimiter (the header {head[0][:60]!r} is one field "
                                f"when split at commas): pass --delimiter (e.g. --delimiter ';')")
            delimiter = ","
        elif len(even) == 1:
            delimiter = even[0]
        else:
            raise DataError(f"{path}: cannot tell its delimiter ({' and '.join(map(repr, even))} both split every "
                            f"line evenly): pass --delimiter")
    if decimal is None:
        decimal = "."
        if delimiter != ",":
            cells = [c for row in csv.reader(head[1:], delimiter=delimiter) for c in row]
            commas = sum(bool(_DECIMAL_COMMA.match(c)) for c in cells)
            points = sum(bool(_DECIMAL_POINT.match(c)) for c in cells)
            if commas and not points:
                decimal = ","
    if (delimiter, decimal) != (",", "."):
        shown = {"\t": "tab", ";": "';'", "|": "'|'", ",": "','"}.get(delimiter, repr(delimiter))
        print(f"{path}: read as {shown}-separated" + (" with decimal commas" if decimal == "," else "")
              + " (--delimiter / --decimal set them)", file=sys.stderr)
    return delimiter, decimal


def _head(path, encoding: str, lines: int) -> list[str]:
    """The first ``lines`` non-blank lines of a (possibly compressed) text file."""
    from pandas.io.common import get_handle
    out = []
    try:
        with get_handle(str(path), "r", encoding=encoding, compression="infer") as h:
            for line in h.handle:
                if line.strip():
                    out.append(line.rstrip("\r\n"))
                if len(out) >= lines:
                    break
    except UnicodeDecodeError as exc:
        raise _not_in(path, encoding, exc) from None
    return out


# what a "CSV" file holds when its first bytes say it is not text
NOT_TEXT = {b"\x1f\x8b": "gzip-compressed: name it .csv.gz", b"PAR1": "a Parquet file: name it .parquet",
            b"PK\x03\x04": "a zip archive (an Excel workbook?): unpack it or save it as CSV",
            b"BZh": "bzip2-compressed: name it .csv.bz2", b"\x28\xb5\x2f\xfd": "zstd-compressed: name it .csv.zst"}


def _not_in(path, encoding: str, exc: UnicodeDecodeError) -> DataError:
    """The error for a CSV file that is not ``encoding`` text: what it is when its first bytes
    tell (gzip, Parquet, zip), else the byte, its offset and the flag."""
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError:
        magic = b""
    for start, what in NOT_TEXT.items():
        if magic.startswith(start) and not str(path).lower().endswith((".gz", ".bz2", ".zst")):
            return DataError(f"{path} is not a text file: it is {what}")
    return DataError(f"{path} is not valid {encoding} text (byte {exc.object[exc.start:exc.start + 1]!r} "
                     f"at offset {exc.start}): pass its encoding, e.g. --encoding latin-1")


def _refuse_one_glued_column(path, columns, sep: str) -> None:
    """A table read as one column whose name holds another delimiter was split at the wrong
    character (``--delimiter ,`` on a ``;`` file): never fit it as one feature."""
    if len(columns) == 1:
        glued = [d for d in DELIMITERS if d != sep and d in str(columns[0])]
        if glued:
            raise DataError(f"{path} was read as one column named {str(columns[0])[:60]!r}: its delimiter looks "
                            f"like {glued[0]!r}, not {sep!r}: pass --delimiter {glued[0]!r}")


def id_columns(columns, features, label: str | None) -> list:
    """Of a table's ``columns``, those automatic feature selection sets aside as ids (index-, id-
    or key-like names): what ``fit``'s assignments carry beside each row's cluster."""
    from ..validation import is_id_like
    return [c for c in columns if c not in set(features) and c != label and is_id_like(c)]


def is_csv(path) -> bool:
    """A CSV file (``.csv``, compressed or not) rather than Parquet."""
    return Path(path).name.lower().endswith(CSV_SUFFIXES)


# A number as people write it in a spreadsheet: a currency sign or a percent, digits grouped by
# thousands ('7,111', '1.234.567', '12 500'), a decimal point or comma ('$1,234.50', '1.234,50 €').
MARKS = "$€£¥%"
WRITTEN_NUMBER = re.compile(r"^[+-]?[$€£¥]?\s?[+-]?(\d{1,3}([,. '’]\d{3})+|\d+)([.,]\d+)?\s?[%$€£¥]?$")
GROUPED = r"\d[,. '’]\d{3}(?!\d)"


def written_numbers(values: pd.Series) -> str | None:
    """The marks (``'$'``, ``'%'``, thousands separators) of a text column whose cells are
    nearly all (90%) numbers written with them: a price or an amount exported as formatted text,
    which is neither free text nor an id. None for anything else (plain digits: codes, zips)."""
    text = values.astype(str).str.strip()
    if text.str.match(WRITTEN_NUMBER).mean() < 0.9:
        return None
    marks = [repr(m) for m in MARKS if text.str.contains(m, regex=False).any()]
    if text.str.contains(GROUPED, regex=True).any():
        marks.append("thousands separators")
    return ", ".join(marks) or None


PLAIN_NUMBERS = "write them as plain numbers (1234.5) to use the column as a number"


def category_reason(counts: dict, missing: int, max_levels: int, *, at_least: bool = False,
                    id_flag: str = "--id") -> str | None:
    """Why a text column chosen automatically is not a category feature (None: it is one), from
    its level counts (level text -> rows) and missing cells: nothing in it, one value in every
    row, or more distinct values than ``max_levels`` (free text, ids, or numbers written as
    formatted text). What the "not used" line says; ``fit`` and a Ray job's profile pass share it
    (``at_least``: the counts were capped; ``id_flag``: how the caller names an id column)."""
    if not counts:
        return "every cell blank"
    if len(counts) == 1 and not missing:
        return f"one value, {next(iter(counts))[:40]!r}, in every row"
    if len(counts) <= max_levels:
        return None
    distinct = f"{'at least ' if at_least else ''}{len(counts):,} distinct values"
    numbers = written_as_numbers(list(counts))
    if numbers:
        return f"{numbers}, {distinct}: {PLAIN_NUMBERS}"
    return (f"text with {distinct}, more than a category's max_levels={max_levels}: "
            f"`neurcam featurize-text` for text, {id_flag} for an id")


def written_as_numbers(seen: list) -> str | None:
    """``"numbers written as text with '$' (e.g. '$916.87', '$491.25')"`` for a column whose
    values (``seen``) are amounts exported as formatted text (``written_numbers``), else None."""
    marks = written_numbers(pd.Series(seen, dtype=object))
    return f"numbers written as text with {marks} (e.g. {', '.join(repr(str(v)) for v in seen[:2])})" if marks else None


def is_category_column(series: pd.Series) -> bool:
    """Text, ``category`` and boolean columns: the categorical features automatic selection
    considers (as scikit-learn's ``categorical_features="from_dtype"``; ``columns.is_category_dtype``)."""
    from ..columns import is_category_dtype
    return is_category_dtype(series) and as_days(series) is None and not numbers_in_text(series)   # dates: days


def _auto_columns(df: pd.DataFrame, label: str | None, named_cat: list, max_levels: int) -> tuple[list, dict]:
    """The features automatic selection takes (``validation.auto_features`` over every column,
    a text column only when it can be a category), and why each text column left out was."""
    candidates, why = [], {}
    for c in df.columns:
        if c == label:
            continue
        if as_days(df[c]) is not None:
            why[c] = (f"dates and times: name it in --features to use it as {DATE_UNIT}, or derive numbers or "
                      f"levels from it (month, weekday)")
            continue
        if df[c].isna().all():
            why[c] = "every cell missing"
            continue
        if pd.api.types.is_timedelta64_dtype(df[c]):
            why[c] = "durations: convert them to numbers (seconds, days) to use them"
            continue
        if is_category_column(df[c]) and c not in named_cat and auto_features([(c, True)], {label}):
            refuse_numbers_with_typos(df[c], c, "the table's")   # a numbers column with a few text cells is a typo
            reason = category_reason(*level_counts(df[c]), max_levels)
            if reason:
                why[c] = reason
                continue
        candidates.append((c, True))
    cols = auto_features(candidates, {label})
    if not cols:
        raise DataError("no feature columns found: name them with --features")
    return cols, why


def _excluded(columns: list, features: list[str] | None, exclude: list[str] | None) -> dict:
    """``--exclude``'s columns, each with why it is not used; ``ConfigError`` for a column the
    table (its ``columns``) does not have (with the nearest names) or one ``features`` also names."""
    exclude = list(exclude or [])
    missing = [c for c in exclude if c not in columns]
    if missing:
        raise ConfigError(f"--exclude columns {missing} are not in the data{missing_columns_note(missing, columns)}")
    both = [c for c in exclude if c in (features or [])]
    if both:
        raise ConfigError(f"--exclude names {both}, which --features lists: name each column in one")
    return {c: "excluded" for c in exclude}


def split_columns(df: pd.DataFrame, features: list[str] | None, label: str | None, *, quiet: bool = False,
                  categorical: list[str] | None = None, max_levels: int = 64, exclude: list[str] | None = None,
                  numeric: list[str] | None = None):
    """``(X, y)``: the feature columns (named, or chosen by ``validation.auto_features``, plus the
    text, ``category`` and boolean columns with at most ``max_levels`` distinct values) and the
    label's values (None without a label). ``categorical`` names integer-coded categorical columns,
    ``numeric`` flags read as numbers (both features), ``exclude`` columns the selection leaves out.
    Says on stderr which columns were chosen, which are categorical and why the others were not
    used, unless ``quiet``.

    Raises
    ------
    ConfigError
        A named feature, categorical or label column that is not in the table (with the nearest
        names).
    DataError
        No feature column, a mostly numeric column with a few text cells, or blank labels.
    """
    if label is not None and label not in df.columns:
        raise ConfigError(f"label column {label!r} is not in the data{missing_columns_note([label], list(df.columns))}")
    named_cat = list(categorical or [])
    missing = [c for c in named_cat if c not in df.columns]
    if missing:
        raise ConfigError(f"--categorical columns {missing} are not in the data"
                          f"{missing_columns_note(missing, list(df.columns))}")
    why = _excluded(list(df.columns), features, exclude)
    if features:
        missing = [f for f in features if f not in df.columns]
        if missing:
            raise ConfigError(f"feature columns {missing} are not in the data"
                              f"{missing_columns_note(missing, list(df.columns))}")
        cols = list(features)
    else:
        cols, auto_why = _auto_columns(df.drop(columns=list(why)), label, named_cat, max_levels)
        why.update(auto_why)
    for flag, named in (("--categorical", named_cat), ("--numeric", list(numeric or []))):
        not_features = [c for c in named if c not in cols]
        if not_features:
            raise ConfigError(f"{flag} names {not_features}, which are not features (--features {' '.join(map(str, cols))})")
    if not quiet:
        cat = [str(c) for c in cols if is_category_column(df[c]) or c in named_cat]
        flags = [str(c) for c in cols if str(c) not in cat and str(c) not in (numeric or ()) and is_flag(df[c])]
        dates = [str(c) for c in cols if c not in named_cat and as_days(df[c]) is not None]
        texts = [str(c) for c in cols if c not in named_cat and numbers_in_text(df[c])]
        skipped = [str(c) + (f" ({why[c]})" if c in why else "") for c in df.columns if c not in cols and c != label]
        print(f"features ({len(cols)}): {first_names(cols)}"
              + (f"; categorical: {first_names(cat)}" if cat else "")
              + (f"; categorical, {FLAG_RULE}: {first_names(flags)}" if flags else "")
              + (f"; dates and times as {DATE_UNIT}: {first_names(dates)}" if dates else "")
              + (f"; numbers written as text (blank cells missing): {first_names(texts)}" if texts else "")
              + (f"; not used: {first_names(skipped)}" if skipped else ""), file=sys.stderr)
    y = None
    if label is not None:
        blank = df[label].isna()
        if blank.any():
            raise DataError(f"label column {label!r} has {int(blank.sum())} blank cell(s), the first at row "
                            f"{df.index[blank.to_numpy()][0]}: fill or drop those rows (the label is used for "
                            f"evaluation only)")
        y = df[label].to_numpy()
    return df[cols], y
