"""The one writer of a run's outputs, for every command that trains (``fit``, ``train``, a
search's trials and winner) and every target (a local folder or an object-store URI).

A run folder holds ``model/``, ``metrics.json``, ``config.json`` and, as the run asks, a
``report/``, more JSON files and copied folders, published together and atomically
(``storage.write_run_output``): a reader sees the whole previous set or the whole new one.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from .storage import check_writable, refuse_foreign_output, refuse_overwrite, write_run_output
from .storage.published import local_copy
from .uris import Location

RUN_FILES = ("model", "metrics.json", "config.json")


def run_files(*, report: bool = False, extra=(), dirs=()) -> set[str]:
    """The names a run with these parts writes into its folder."""
    return {*RUN_FILES, *extra, *dirs, *(("report",) if report else ())}


def check_run_target(out: Location, *, report: bool = False, extra=(), dirs=(), inputs=()) -> None:
    """Before any work: refuse an output that is a file, cannot be written (``check_writable``),
    holds what such a run does not write, or is (inside) one of its ``inputs`` or a model folder
    (``storage.refuse_overwrite``): an ``errors.ConfigError`` naming it, so nothing is trained only
    to be refused at the end."""
    refuse_overwrite(out, inputs=inputs)
    refuse_foreign_output(out, run_files(report=report, extra=extra, dirs=dirs))
    check_writable(out)


def write_run(out: Location, est, metrics: dict, config_json: str, *, extra: dict[str, str | bytes] | None = None, report=None,
              dirs: dict[str, Location] | None = None, exclusive: bool = False) -> str | None:
    """Publish a run's outputs in ``out`` as one set. A report that fails to render never costs
    the model: the set is published with ``report/error.txt`` in its place, and the error is
    returned (None: no report asked, or it was written).

    Parameters
    ----------
    out : Location
        A local folder or an object-store URI.
    est : NeurCAM
        The fitted estimator; written as ``model/`` (``NeurCAM.save``).
    metrics : dict
        Written as ``metrics.json``.
    config_json : str
        What made the run (the job config, or a fit's parameters), written as ``config.json``.
    extra : dict of str to str or bytes, optional
        More files: name -> text (``search.json``) or bytes (``assignments.parquet``).
    report : Explanation or Exception, optional
        Rendered into ``report/`` (``explain.report.write_report``); an exception (explaining
        failed) is written as ``report/error.txt``.
    dirs : dict of str to Location, optional
        Folders (or published URIs) copied in under a name (a computed representation's model).
    exclusive : bool
        Refuse an ``out`` holding anything else (``fit``: a folder of its own); a Ray run keeps
        its checkpoints and trials beside its outputs.
    """
    failed: list[str | None] = []

    def write(tmp: Path) -> None:
        failed.clear()
        for name, src in (dirs or {}).items():
            with local_copy(src) as copy:
                shutil.copytree(copy, tmp / name)
        est.save(tmp / "model")
        (tmp / "metrics.json").write_text(json.dumps(metrics, indent=1, default=str))
        (tmp / "config.json").write_text(config_json)
        for name, content in (extra or {}).items():
            if isinstance(content, bytes):
                (tmp / name).write_bytes(content)
            else:
                (tmp / name).write_text(content)
        if report is not None:
            failed.append(_write_report(report, tmp / "report"))

    names = tuple(extra or ()) + tuple(dirs or ()) + (("report",) if report is not None else ())
    write_run_output(out, write, extra=names,
                     own=run_files(report=report is not None, extra=extra or (), dirs=dirs or ()) if exclusive else None)
    return next((f for f in failed if f), None)


def _write_report(report, folder: Path) -> str | None:
    """Render ``report`` (an ``Explanation``, or the exception that explaining raised) into
    ``folder``; on any error, ``folder/error.txt`` says what failed and how to retry, and the
    error is returned (a plotting library missing on this host among them)."""
    try:
        if isinstance(report, Exception):
            raise report
        from .explain.report import write_report
        write_report(report, folder)
        return None
    except Exception as exc:   # noqa: BLE001 - whatever broke the rendering, the model is kept
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        error = f"{type(exc).__name__}: {exc}".strip()
        (folder / "error.txt").write_text(f"the report could not be written: {error}\n"
                                          f"the model beside this folder is complete; retry with: neurcam explain "
                                          f"--model ../model --input DATA --output DIR\n")
        return error
