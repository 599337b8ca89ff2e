"""Follow one object from the door to the end of a command: how many steps it takes, how often it
comes back to a module it had left, and how many names it goes by.

    python benchmarks/flow.py explain     # the model of service.explain
    python benchmarks/flow.py fit         # the table of service.fit (a CSV read, then fitted with --report)
    python benchmarks/flow.py recluster   # the config of service.recluster (local Ray, a SQLite MLflow
                                          # store; the second of two snapshots, with a champion)
    PYTHONPATH=/path/to/another/checkout python benchmarks/flow.py explain   # the same, on other code

A *step* is a function of the package that receives the object (as ``self`` or an argument),
counted once, in the order of its first call (``calls`` counts every call); *returns* count the
steps into a module the object had already left; *names* are the distinct (function, parameter)
names it arrives under; *path questions* count the package's calls, from outside ``uris.py``, that
work a path out from its text again: ``is_uri``, ``local``, ``join``, ``as_path``, ``expand``,
``filesystem``, and a ``uris.Location`` made from a string (a location resolved once at the door and
passed on asks none of them: ``location / "name"`` and its properties are not counted).
The object: for ``explain``, every
``NeurCAM`` and its ``FittedNet`` (the model as loaded, then scored); for ``fit``, every pandas
``DataFrame`` (the table as read, its feature columns, the assignments); for ``recluster``, every
``JobConfig`` (the config and the copies made of it on the way). Traced with ``sys.setprofile``;
only the driver process is seen (Ray's workers are not).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd


QUESTIONS = {"is_uri", "local", "join", "as_path", "expand", "filesystem"}   # uris.py's functions


def trace(kinds: tuple, run) -> dict:
    """Run ``run()`` and count the steps of objects of ``kinds`` through the package."""
    import neurcam_dist
    root = str(Path(neurcam_dist.__file__).resolve().parent)
    steps, uris = [], [0]
    uris_file = os.path.join(root, "uris.py")

    def profile(frame, event, arg):
        if event != "call" or not frame.f_code.co_filename.startswith(root):
            return
        code = frame.f_code
        if code.co_filename == uris_file and frame.f_back is not None and frame.f_back.f_code.co_filename != uris_file:
            if code.co_qualname in QUESTIONS or (code.co_qualname == "Location.__init__"
                                                 and isinstance(frame.f_locals.get("where"), str)):
                uris[0] += 1
        names = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
        got = [n for n in names if isinstance(frame.f_locals.get(n), kinds)]
        if got:
            module = frame.f_globals.get("__name__", "?")
            steps.append((module, code.co_name, tuple(got)))

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    first = list(dict.fromkeys((m, f) for m, f, _ in steps))
    seen, returns, previous = set(), 0, None
    for module, _ in first:
        if module != previous and module in seen:
            returns += 1
        seen.add(module)
        previous = module
    names = {(f, n) for _, f, got in steps for n in got}
    return {"steps": len(first), "calls": len(steps), "modules": len(seen), "returns": returns, "names": len(names),
            "path questions": uris[0], "path": [f"{m}.{f}" for m, f in first]}


def explain_flow(tmp: Path) -> dict:
    from sklearn.datasets import load_wine

    from neurcam_dist import NeurCAM, service
    from neurcam_dist.model import FittedNet
    X = pd.DataFrame(load_wine().data, columns=[c.replace("/", "_") for c in load_wine().feature_names])
    NeurCAM(n_clusters=3, epochs=30, random_state=0).fit(X).save(tmp / "model")
    X.to_csv(tmp / "wine.csv", index=False)
    return trace((NeurCAM, FittedNet), lambda: service.explain(str(tmp / "model"), str(tmp / "wine.csv"),
                                                               str(tmp / "report"), say=lambda *_: None))


def fit_flow(tmp: Path) -> dict:
    from sklearn.datasets import load_wine

    from neurcam_dist import service
    X = pd.DataFrame(load_wine().data, columns=[c.replace("/", "_") for c in load_wine().feature_names])
    X.assign(id=range(len(X))).to_csv(tmp / "wine.csv", index=False)
    return trace((pd.DataFrame,), lambda: service.fit(str(tmp / "wine.csv"), str(tmp / "run"), id_column="id",
                                                      params={"n_clusters": 3, "epochs": 30, "random_state": 0},
                                                      report=True))


def recluster_flow(tmp: Path) -> dict:
    import ray

    from neurcam_dist import service
    from neurcam_dist.config import JobConfig
    rng = np.random.default_rng(0)
    centres = rng.normal(scale=4.0, size=(3, 4))

    def snapshot(day: str) -> None:
        part = tmp / "events" / f"date={day}"
        part.mkdir(parents=True)
        x = centres[rng.integers(0, 3, 600)] + rng.normal(size=(600, 4))
        pd.DataFrame(x, columns=[f"f{i}" for i in range(4)]).to_parquet(part / "part-0.parquet")

    snapshot("2026-01-01")
    os.chdir(tmp)   # MLflow's SQLite store keeps its artifacts in ./mlartifacts
    ray.init(num_cpus=3, include_dashboard=False, logging_level="WARNING")
    config = {"data": {"path": str(tmp / "events")},
              "model": {"n_clusters": 3, "epochs": 20, "hidden": [16], "n_bases": 4},
              "train": {"num_workers": 1}, "search": {"seeds": [0], "max_concurrent_trials": 1},
              "tracking": {"uri": f"sqlite:///{tmp}/mlflow.db", "model_name": "flow"},
              "output": str(tmp / "out")}
    try:
        service.recluster(config)       # the first model: no champion to compare with
        snapshot("2026-01-02")          # the traced run: a champion, its ids, the comparison
        return trace((JobConfig,), lambda: service.recluster(config))
    finally:
        ray.shutdown()


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["explain", "fit", "recluster"])
    ap.add_argument("--path", action="store_true", help="print every step")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        out = {"explain": explain_flow, "fit": fit_flow, "recluster": recluster_flow}[args.what](Path(tmp))
    path = out.pop("path")
    if args.path:
        print("\n".join(path))
    print(json.dumps({"flow": args.what, **out}))


if __name__ == "__main__":
    main()
