"""The package's layers: no import cycles, no upward imports, a model layer of pure math, and an
estimator that works without Ray or MLflow installed."""
import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import neurcam_dist

PACKAGE = Path(neurcam_dist.__file__).resolve().parent
ROOT = "neurcam_dist"

# Lower ranks may not import higher ones; a unit imports only units of a strictly lower rank.
RANKS = {
    "version": 0, "params": 0, "metrics": 0, "validation": 0, "numerics": 0, "redaction": 0,
    "clusterids": 0, "uris": 0, "settings": 0, "signals": 0, "names": 0, "errors": -1, "columns": 0.5,
    "model": 1, "storage": 1, "config": 1, "raycompat": 1,
    "explain": 2, "data": 2, "choosing": 2.5, "monitor": 2.7,
    "estimator": 3, "text": 3, "outputs": 3,
    "distributed": 4, "tracking": 4,
    "local": 6.5, "service": 7,
    "ops": 6,
    "cli": 8, "__init__": 8,
}
MODEL_FORBIDDEN = {"ray", "mlflow", "pyarrow", "os", "io", "pathlib", "shutil", "tempfile", "json", "pickle",
                   "glob", "safetensors", "fsspec", "pandas"}


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join((ROOT, *parts))
        out[name.removesuffix(".__init__")] = path
    return out


def is_package(name: str, mods: dict[str, Path]) -> bool:
    return mods[name].name == "__init__.py"


def imports_of(name: str, mods: dict[str, Path]) -> list[tuple[str, int]]:
    """Every import in the module (function-level ones included): (absolute module, line)."""
    tree = ast.parse(mods[name].read_text())
    base = name if is_package(name, mods) else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                target = f"{anchor}.{node.module}" if node.module else anchor
            else:
                target = node.module
            for a in node.names:  # ``from pkg import submodule`` imports the submodule
                sub = f"{target}.{a.name}"
                found.append((sub if sub in mods else target, node.lineno))
    return found


def unit(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def internal_graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: {t for t, _ in imports_of(m, mods) if t in mods and t != m} for m in mods}


def test_every_module_has_a_layer():
    assert {unit(m) for m in modules()} <= set(RANKS), "a new top-level module needs a rank in RANKS"


def test_no_import_cycles():
    graph = internal_graph()
    state: dict[str, int] = {}
    cycles = []

    def visit(m, stack):
        state[m] = 1
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                cycles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t, stack + [t])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_no_upward_imports():
    mods = modules()
    bad = []
    for m in mods:
        for t, line in imports_of(m, mods):
            if t in mods and unit(t) != unit(m) and RANKS[unit(t)] >= RANKS[unit(m)]:
                bad.append(f"{mods[m].relative_to(PACKAGE)}:{line} imports {t}")
    assert not bad, "imports that go up (or sideways) a layer:\n" + "\n".join(bad)


def test_model_layer_is_pure_math():
    mods = modules()
    bad = []
    for m, path in mods.items():
        if unit(m) != "model":
            continue
        for t, line in imports_of(m, mods):
            if t.split(".")[0] in MODEL_FORBIDDEN:
                bad.append(f"{path.relative_to(PACKAGE)}:{line} imports {t}")
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                f = node.func
                if (isinstance(f, ast.Name) and f.id == "open") or (
                        isinstance(f, ast.Attribute) and f.attr in ("save", "load") and
                        isinstance(f.value, ast.Name) and f.value.id == "torch"):
                    bad.append(f"{path.relative_to(PACKAGE)}:{node.lineno} does file I/O")
    assert not bad, "model/ must know nothing of files, Ray or MLflow:\n" + "\n".join(bad)


def test_the_checker_sees_function_level_imports(tmp_path):
    # the walk must catch the imports that used to hide cycles inside functions
    mods = modules()
    found = {t for t, _ in imports_of("neurcam_dist.estimator", mods)}
    assert "neurcam_dist.explain" in found  # imported inside NeurCAM.explain


def test_estimator_and_table_scorer_work_without_ray_or_mlflow():
    code = textwrap.dedent("""
        import importlib.abc, sys
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("ray", "mlflow"):
                    raise ImportError(f"{name} is blocked in this test")
        sys.meta_path.insert(0, Block())
        import numpy as np
        from neurcam_dist import NeurCAM
        from neurcam_dist.explain import Explanation
        rng = np.random.default_rng(0)
        X = np.vstack([rng.normal(c, 0.5, size=(40, 3)) for c in (-4, 0, 4)])
        est = NeurCAM(n_clusters=3, hidden=(8,), n_bases=4, warmup_epochs=3, epochs=8, distill_epochs=1,
                      epsilon=0.3, batch_size=32, verbose=False).fit(X)
        scorer = Explanation.from_dict(est.explain(X).to_dict()).to_scorer()
        agree = (scorer.predict(X) == est.predict(X)).mean()
        assert agree > 0.9, agree
        assert not any(m.split(".")[0] in ("ray", "mlflow") for m in sys.modules)
        print("ok", agree)
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.startswith("ok")


HEAVY = ["torch", "sklearn", "scipy", "pandas", "pyarrow", "ray", "mlflow", "matplotlib"]


def _loaded_after(statements: str) -> list[str]:
    """The heavy modules a fresh interpreter holds after running ``statements``."""
    code = "import json, sys\n" + textwrap.dedent(statements).strip() + (
        f"\nprint(json.dumps(sorted({{m for m in sys.modules if m.split('.')[0] in {HEAVY!r}}})))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_import_help_and_a_mistyped_command_load_no_training_stack():
    """``import neurcam_dist``, ``neurcam --help`` and a mistyped command answer without torch,
    scikit-learn, pandas, pyarrow, Ray, MLflow or matplotlib (they are imported where used)."""
    assert _loaded_after("import neurcam_dist") == []
    for argv in (["--help"], ["fitt"], ["fit", "--help"], ["--version"]):
        loaded = _loaded_after(f"""
            import contextlib, io
            from neurcam_dist.cli import main
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                try:
                    main({argv!r})
                except SystemExit:
                    pass
        """)
        assert loaded == [], (argv, loaded)
    # the estimator needs torch and scikit-learn (and scikit-learn pandas), nothing of the services
    loaded = {m.split(".")[0] for m in _loaded_after("from neurcam_dist import NeurCAM")}
    assert {"torch", "sklearn"} <= loaded and not loaded & {"ray", "mlflow", "matplotlib"}, loaded


def test_predict_on_a_model_folder_loads_neither_scikit_learn_nor_the_services(tmp_path):
    """``neurcam predict`` of a CSV with a model folder reads the fitted state without the estimator
    class: torch and pandas, not scikit-learn, SciPy, Ray, MLflow or matplotlib (a fresh-process
    predict pays only for what it uses; ``benchmarks/startup.py`` times it)."""
    import numpy as np
    import pandas as pd
    from neurcam_dist import NeurCAM
    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.normal(size=(90, 3)), columns=["a", "b", "c"]).assign(plan=rng.choice(["x", "y", "z"], 90))
    est = NeurCAM(n_clusters=2, hidden=(8,), n_bases=4, warmup_epochs=2, epochs=4, distill_epochs=1, batch_size=32,
                  verbose=False).fit(X)
    est.save(tmp_path / "m")
    X.head(10).to_csv(tmp_path / "rows.csv", index=False)
    argv = ["predict", "--model", str(tmp_path / "m"), "--input", str(tmp_path / "rows.csv"),
            "--output", str(tmp_path / "out.csv")]
    loaded = {m.split(".")[0] for m in _loaded_after(f"""
        import contextlib, io
        from neurcam_dist.cli import main
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            try:
                main({argv!r})
            except SystemExit as stop:
                assert not stop.code, stop.code
    """)}
    assert {"torch", "pandas"} <= loaded and not loaded & {"sklearn", "scipy", "ray", "mlflow", "matplotlib"}, loaded
    scored = pd.read_csv(tmp_path / "out.csv")
    assert scored["cluster"].tolist() == est.predict(X.head(10)).tolist()   # the same scores as the estimator's


def test_cli_names_the_missing_extra():
    code = textwrap.dedent("""
        import importlib.abc, sys
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "ray":
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        sys.meta_path.insert(0, Block())
        from neurcam_dist.cli import main
        sys.exit(main(["train", "--config", "configs/digits.yaml"]))
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=PACKAGE.parent)
    assert res.returncode == 2, res.stderr[-3000:]
    assert "needs ray, which is not installed: pip install 'neurcam-dist[ray]'" in res.stderr


def _ast_nodes():
    mods = modules()
    for m, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            yield m, path, node


def test_every_exception_class_derives_from_the_errors_base():
    """One base for the service's errors (``errors.NeurcamError``), defined in ``errors`` alone."""
    from neurcam_dist import errors
    bad = []
    for m, path, node in _ast_nodes():
        if isinstance(node, ast.ClassDef) and m != "neurcam_dist.errors":
            bases = {getattr(b, "id", getattr(b, "attr", "")) for b in node.bases}
            if any(b.endswith(("Error", "Exception", "Timeout")) for b in bases):
                bad.append(f"{path.relative_to(PACKAGE)}:{node.lineno} class {node.name}")
    assert not bad, "exception classes belong in neurcam_dist/errors.py:\n" + "\n".join(bad)
    classes = [v for v in vars(errors).values() if isinstance(v, type) and issubclass(v, BaseException)]
    assert len(classes) >= 8 and all(issubclass(c, errors.NeurcamError) for c in classes)


def test_the_package_raises_only_its_own_errors():
    """No bare ``raise ValueError(...)`` / ``RuntimeError`` / ``Exception``: a caller can catch the
    service's refusals by class (``NeurcamError``), and each still is the built-in it was."""
    bad = []
    for _, path, node in _ast_nodes():
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call):
            name = getattr(node.exc.func, "id", None)
            if name in ("ValueError", "RuntimeError", "Exception", "ConnectionError"):
                bad.append(f"{path.relative_to(PACKAGE)}:{node.lineno} raises {name}")
    assert not bad, "raise a class of neurcam_dist.errors instead:\n" + "\n".join(bad)


def test_ray_private_names_are_touched_in_one_adapter():
    """``ray._private``, ``ray.*._internal`` and the executor's private attributes: in
    ``raycompat`` alone, which names the Ray version it was checked against."""
    from neurcam_dist import raycompat
    private_attrs = {"_topology", "_data_context", "_private", "_internal"}
    bad = []
    for m, path, node in _ast_nodes():
        if m == "neurcam_dist.raycompat":
            continue
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        for n in names:
            parts = n.split(".")
            if parts[0] == "ray" and any(p.startswith("_") for p in parts[1:]):
                bad.append(f"{path.relative_to(PACKAGE)}:{node.lineno} imports {n}")
        if isinstance(node, ast.Attribute) and node.attr in private_attrs:
            bad.append(f"{path.relative_to(PACKAGE)}:{node.lineno} reads .{node.attr}")
    assert not bad, "Ray's private names belong in neurcam_dist/raycompat.py:\n" + "\n".join(bad)
    import ray
    assert raycompat.RAY_CHECKED.split(".")[:2] == ray.__version__.split(".")[:2], (
        f"raycompat was checked against Ray {raycompat.RAY_CHECKED}, this is Ray {ray.__version__}: "
        f"re-read its accessors and update RAY_CHECKED")


def test_no_console_text_is_parsed_back():
    """Progress crosses from workers as records (``distributed.events``), errors as types
    (``errors.find_cause``): no module matches ``[neurcam]`` lines or error texts with a regex."""
    bad = []
    for _, path, node in _ast_nodes():
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") in ("compile", "match", "search",
                                                                             "fullmatch", "findall"):
            if getattr(node.func.value, "id", "") != "re" or not node.args:
                continue
            pattern = node.args[0]
            text = pattern.value if isinstance(pattern, ast.Constant) and isinstance(pattern.value, str) else ""
            if "neurcam" in text or "Error" in text:
                bad.append(f"{path.relative_to(PACKAGE)}:{node.lineno} matches {text!r}")
    assert not bad, "\n".join(bad)


# signals: the process's SIGTERM handling, which belongs to the command, not to the service
FRONT_DOOR_ALLOWED = {"service", "errors", "redaction", "uris", "version", "params", "signals"}


def test_the_cli_is_a_thin_layer_over_the_front_door():
    """``neurcam`` parses and prints; what it does goes through ``service`` (the one front door),
    and the Ray Job entrypoints go through the command."""
    mods = modules()
    used = {unit(t) for t, _ in imports_of("neurcam_dist.cli", mods) if t in mods}
    assert used <= FRONT_DOOR_ALLOWED, f"cli imports {sorted(used - FRONT_DOOR_ALLOWED)}: go through service"
    jobs = Path(PACKAGE).parent / "jobs"
    for path in jobs.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("neurcam_dist"):
                assert node.module == "neurcam_dist.cli", f"{path.name} imports {node.module}"
    # the service offers every command the CLI has
    from neurcam_dist import service
    for name in ("fit", "explain", "predict", "train", "search", "recluster", "validate", "promote", "submit",
                 "featurize_text", "generate", "sample", "demo", "choose_k", "choose_k_on_ray"):
        assert callable(getattr(service, name)), name


def test_the_doors_on_ray_are_named_alike_for_the_run_and_the_type_checker():
    """``service.ON_RAY`` (what ``service`` imports on first use) and its ``TYPE_CHECKING`` block
    (what type checkers and the API reference read) name the same doors from the same modules,
    and each is listed in ``service.__all__``."""
    from neurcam_dist import service
    tree = ast.parse(Path(service.__file__).read_text())
    block = [node for node in tree.body if isinstance(node, ast.If) and isinstance(node.test, ast.Name)
             and node.test.id == "TYPE_CHECKING"]
    assert len(block) == 1, "service.py: one `if TYPE_CHECKING:` block"
    checked = {alias.name: node.module for node in block[0].body if isinstance(node, ast.ImportFrom)
               for alias in node.names}
    assert checked == service.ON_RAY and set(service.ON_RAY) <= set(service.__all__), (checked, service.ON_RAY)


# other spellings of the front door's two ideas (docs/architecture.md, "Glossary"): the rows a
# command reads are its ``input``, where it writes its ``output``
NOT_THE_GLOSSARY = {"data": "input", "input_path": "input", "in_path": "input", "out": "output", "out_dir": "output",
                    "output_dir": "output", "output_path": "output", "directory": "output", "root": "output"}


def test_the_front_door_names_input_and_output_one_way():
    """Every entry point of ``service`` (and the job records they take) calls what it reads
    ``input`` and where it writes ``output``, as the CLI's flags do: no ``data``, ``out`` or
    ``output_dir`` beside them."""
    import dataclasses
    import inspect

    from neurcam_dist import service
    from neurcam_dist.text import TextJob
    seen = {}
    for name in service.__all__:
        thing = getattr(service, name)
        if callable(thing) and not inspect.isclass(thing):
            seen[f"service.{name}"] = list(inspect.signature(thing).parameters)
    seen["TextJob (service.featurize_text's fields)"] = [f.name for f in dataclasses.fields(TextJob)]
    bad = [f"{where}({p}): call it {NOT_THE_GLOSSARY[p]}" for where, params in seen.items() for p in params
           if p in NOT_THE_GLOSSARY]
    assert not bad, "\n".join(bad)
    assert {"input", "output"} <= set(seen["service.fit"]) and "output" in seen["service.demo"]


def test_the_front_door_takes_a_place_as_one_type():
    """Every entry point's ``input``, ``output``, ``model`` and ``log_dir`` is a ``uris.Where``
    (text, a ``Path`` or a ``Location``) in its signature, not ``str`` in one and ``Path`` in
    another; so is the place the estimator and an explanation are saved to and read from."""
    import inspect

    from neurcam_dist import NeurCAM, service
    from neurcam_dist.explain import Explanation
    from neurcam_dist.explain.report import write_report
    doors = {f"service.{name}": getattr(service, name) for name in service.__all__}
    doors.update({"NeurCAM.save": NeurCAM.save, "NeurCAM.load": NeurCAM.load, "Explanation.to_json": Explanation.to_json,
                  "Explanation.from_json": Explanation.from_json, "Explanation.to_parquet": Explanation.to_parquet,
                  "write_report": write_report})
    places, bad = 0, []
    for name, thing in doors.items():
        if not inspect.ismethod(thing) and not inspect.isfunction(thing):
            continue
        for p in inspect.signature(thing).parameters.values():
            if p.name in ("input", "output", "model", "log_dir", "path", "directory"):
                places += 1
                if not str(p.annotation).startswith("Where"):
                    bad.append(f"{name}({p.name}: {p.annotation})")
    assert places >= 28 and not bad, "annotate with uris.Where:\n" + "\n".join(bad)


def test_below_the_door_a_place_is_a_location_made_once():
    """Below the door a place is the ``uris.Location`` made where it came in: the storage layer, the
    run writer, the log routing, the embeddings join and the re-clustering's history
    (``storage/``, ``outputs.py``, ``distributed/console.py``, ``data/join.py``,
    ``ops/history.py``) build none from text, and each of their public functions' places
    (``out``, ``output``, ``target``, ``path``, ``folder``, ``staging``, ``storage``) is
    annotated ``Location`` (``Path``: a local file only; an object store's key inside the
    publication is ``uri`` text)."""
    below = ("neurcam_dist.storage", "neurcam_dist.outputs", "neurcam_dist.distributed.console", "neurcam_dist.data.join",
             "neurcam_dist.ops.history")
    made, places, bad = [], 0, []
    for m, path in modules().items():
        if not m.startswith(below):
            continue
        tree, where = ast.parse(path.read_text()), path.relative_to(PACKAGE)
        made += [f"{where}:{node.lineno} builds Location(...)" for node in ast.walk(tree)
                 if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Location"]
        for node in tree.body:   # the module's functions (a file system handler's methods take its own paths)
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            for a in node.args.args + node.args.kwonlyargs:
                if a.arg in ("out", "output", "target", "path", "folder", "staging", "storage"):
                    places += 1
                    kind = ast.unparse(a.annotation) if a.annotation else None
                    if kind not in ("Location", "Location | None", "Path"):
                        bad.append(f"{where}:{node.lineno} {node.name}({a.arg}: {kind})")
    assert places >= 20, places
    assert not made and not bad, "take the place as a uris.Location, made at the door:\n" + "\n".join(made + bad)


def test_an_explanation_is_finished_where_it_is_built():
    """``explain.build_explanation`` returns the explanation complete; it is frozen, and no module
    outside ``explain/`` assigns to an explanation's attributes or fills its parts."""
    import dataclasses

    from neurcam_dist.explain import Explanation
    assert Explanation.__dataclass_params__.frozen
    bad = []
    for m, path, node in _ast_nodes():
        if m.startswith("neurcam_dist.explain"):
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
            node, (ast.AugAssign, ast.AnnAssign)) else []
        for t in targets:
            while isinstance(t, (ast.Subscript, ast.Attribute)) and not (
                    isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)):
                t = t.value
            if isinstance(t, ast.Attribute) and "expl" in t.value.id:
                bad.append(f"{path.relative_to(PACKAGE)}:{node.lineno} assigns {t.value.id}.{t.attr}")
    assert not bad, "build the explanation complete in neurcam_dist.explain:\n" + "\n".join(bad)
    assert dataclasses.is_dataclass(Explanation)


def test_mlflow_is_reached_through_tracking_alone():
    """MLflow (its client, its fluent API) is imported in ``tracking/`` only: the rest of the
    service records runs, models and decisions through that layer's functions."""
    bad = [f"{path.relative_to(PACKAGE)}:{node.lineno} imports {name}" for m, path, node in _ast_nodes()
           if not m.startswith("neurcam_dist.tracking")
           for name in ([a.name for a in node.names] if isinstance(node, ast.Import) else
                        [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
           if name.split(".")[0] == "mlflow"]
    assert not bad, "reach MLflow through neurcam_dist.tracking:\n" + "\n".join(bad)


def test_parquet_rows_are_read_by_one_family():
    """Parquet rows are read by the per-file read tasks of ``data/parquet_files.py`` alone (run by
    Ray Data or in this process, see ``data/reading.py``): no other module opens a Parquet file
    for its rows or calls another reader (Ray Data's or pandas' ``read_parquet``, ``pq.read_table``).
    Footers and schemas (``read_metadata``, ``read_schema``) may be read anywhere."""
    readers = {"ParquetFile", "read_table", "read_parquet", "read_pandas"}
    bad = [f"{path.relative_to(PACKAGE)}:{node.lineno} calls {node.func.attr}()" for m, path, node in _ast_nodes()
           if m != "neurcam_dist.data.parquet_files" and isinstance(node, ast.Call)
           and isinstance(node.func, ast.Attribute) and node.func.attr in readers
           and (getattr(node.func.value, "id", "") in ("pq", "parquet", "pd")
                or getattr(node.func.value, "attr", "") in ("parquet", "data"))]
    assert not bad, "read Parquet rows through neurcam_dist.data.reading:\n" + "\n".join(bad)


def test_paths_are_joined_by_location():
    """An output or input is a ``uris.Location`` from the door on (``location / "name"``, its file
    system opened once): no module but ``uris`` joins path strings with ``uris.join``."""
    bad = [f"{path.relative_to(PACKAGE)}:{node.lineno} imports uris.join" for m, path, node in _ast_nodes()
           if m != "neurcam_dist.uris" and isinstance(node, ast.ImportFrom) and (node.module or "").endswith("uris")
           and any(a.name == "join" for a in node.names)]
    assert not bad, "join with uris.Location:\n" + "\n".join(bad)


def test_no_function_is_over_60_lines():
    """A function over 60 lines is split into steps that read on their own."""
    bad = []
    for _, path, node in _ast_nodes():
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 60:
            bad.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} "
                       f"({node.end_lineno - node.lineno + 1} lines)")
    assert not bad, "split these:\n" + "\n".join(bad)


def test_the_epoch_loop_is_in_one_module():
    """Epochs run in ``model/loop.py`` alone, for the estimator and every Ray worker: nothing else
    steps a trainer through an epoch (``run_epoch``) or advances it (``end_epoch``; the trainer
    itself advances its schedule), and nothing outside the trainer swaps the module it steps."""
    allowed = {"run_epoch": {"neurcam_dist.model.loop"},
               "end_epoch": {"neurcam_dist.model.loop", "neurcam_dist.model.trainer"}}
    bad = []
    for m, path, node in _ast_nodes():
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in allowed:
            if m not in allowed[node.func.attr] and getattr(node.func.value, "id", "") != "graphs":  # CUDA graphs' own
                bad.append(f"{path.relative_to(PACKAGE)}:{node.lineno} calls .{node.func.attr}()")
        if isinstance(node, ast.Assign) and m != "neurcam_dist.model.trainer":
            for t in node.targets:
                if isinstance(t, ast.Attribute) and t.attr == "model" and getattr(t.value, "id", "") == "trainer":
                    bad.append(f"{path.relative_to(PACKAGE)}:{node.lineno} assigns trainer.model")
    assert not bad, "run epochs through neurcam_dist.model.loop:\n" + "\n".join(bad)


def _called(node) -> str:
    return node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")


def test_every_model_trains_through_the_loop_and_its_groups():
    """By what the code does, not by method names: only a group (``model/loop.py``'s ``Alone``,
    ``distributed/worker.py``'s ``RayGroup``) all-reduces, gathers or wraps a network in DDP; a
    backward pass happens in the models' steps alone (``model/step.py``, the autoencoder's
    ``model/dae.py``); and a loop that trains through epochs (a ``for`` whose body steps a model
    or runs an epoch) is ``model/loop.py``'s: the clustering's and the autoencoder's alike."""
    collectives = {"all_reduce", "all_gather_object", "DistributedDataParallel", "broadcast"}
    training = {"backward", "train_epoch", "run_epoch", "train_step", "steps_only"}
    bad = []
    for m, path, tree in ((m, path, ast.parse(path.read_text())) for m, path in modules().items()):
        where = str(path.relative_to(PACKAGE))
        for cls in [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)] + [tree]:
            is_group = isinstance(cls, ast.ClassDef) and (m, cls.name) in {("neurcam_dist.model.loop", "Alone"),
                                                                          ("neurcam_dist.distributed.worker",
                                                                           "RayGroup")}
            body = cls.body if isinstance(cls, ast.ClassDef) else [n for n in tree.body
                                                                   if not isinstance(n, ast.ClassDef)]
            for node in (n for b in body for n in ast.walk(b)):
                if isinstance(node, ast.Call) and _called(node) in collectives and not is_group:
                    bad.append(f"{where}:{node.lineno} calls {_called(node)} outside a group")
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _called(node) == "backward" and m not in (
                    "neurcam_dist.model.step", "neurcam_dist.model.dae"):
                bad.append(f"{where}:{node.lineno} runs a backward pass outside the models' steps")
            if isinstance(node, ast.For) and m not in ("neurcam_dist.model.loop", "neurcam_dist.model.dae"):
                steps = {_called(c) for c in ast.walk(node) if isinstance(c, ast.Call)} & training
                if steps:
                    bad.append(f"{where}:{node.lineno} loops over {sorted(steps)}: run epochs in model/loop.py")
    assert not bad, "train through neurcam_dist.model.loop and its groups:\n" + "\n".join(bad)


def test_no_dated_measurements_in_the_code():
    """Measurements with their dates belong in benchmarks/results, not in docstrings."""
    import re
    dated = re.compile(r"(measured|took|on) [^\n]{0,40}20\d\d-\d\d-\d\d")
    bad = [f"{p.relative_to(PACKAGE)}" for p in PACKAGE.rglob("*.py") if dated.search(p.read_text())]
    assert not bad, bad


def test_public_functions_and_classes_have_docstrings():
    """Every public module-level function and class, and every public method of a public class,
    says what it does (numpydoc: a summary line, sections where the arguments need them)."""
    bad = []
    for path in modules().values():
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                if ast.get_docstring(node) is None:
                    bad.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}")
                if isinstance(node, ast.ClassDef):
                    bad += [f"{path.relative_to(PACKAGE)}:{sub.lineno} {node.name}.{sub.name}" for sub in node.body
                            if isinstance(sub, ast.FunctionDef) and not sub.name.startswith("_")
                            and ast.get_docstring(sub) is None]
    assert not bad, "public names without a docstring:\n" + "\n".join(bad)


REPO = PACKAGE.parent


def _quickstart():
    """``.ci/quickstart.py``, the helper ``.ci/run`` reads the README's Quick start with."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("quickstart", REPO / ".ci" / "quickstart.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ci_runs_the_readme_quick_start_literally(tmp_path):
    """``.ci/run`` runs what README.md's Quick start says, both commands, as written there: the
    first in a scratch copy of the repository, then checked; the second here. A README whose
    Quick start changes changes what CI runs."""
    import os
    import re
    quick = _quickstart()
    block = re.search(r"^## Quick start\n.*?^```bash\n(.*?)^```", (REPO / "README.md").read_text(), re.S | re.M)
    written = [ln for ln in block.group(1).splitlines() if ln.strip() and not ln.startswith("#")]
    assert quick.commands() == written and len(written) == 2
    assert written[0].endswith("neurcam demo") and written[1].endswith("python3 -m pytest")
    dry = subprocess.run(["bash", str(REPO / ".ci" / "run")], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "NEURCAM_CI_DRY_RUN": "1"})
    assert dry.returncode == 0, dry.stderr
    steps = [line.split("\t", 1) for line in dry.stdout.splitlines() if "\t" in line]
    assert [name for name, _ in steps] == ["torch, the CPU wheel", "quick start command 1",
                                           "quick start command 1 checked", "quick start command 2", "docs", "lint"]
    # the CPU wheel before anything else installs, and both commands begin with it too
    assert steps[0][1] == "python3 -m pip install torch==2.13.0"
    assert all(w.startswith("python3 -m pip install torch==2.13.0 && ") for w in written)
    first, checked, second = (cmd for _, cmd in steps[1:4])
    scratch = re.search(r"cd '([^']+)'", first).group(1)
    assert f"({written[0]})" in first and scratch != str(REPO)
    assert checked.endswith(f"quickstart.py check {scratch} {scratch}/quickstart-1.log")
    assert second == f"bash -c {written[1]}"
    # another README, another command
    other = tmp_path / "README.md"
    other.write_text((REPO / "README.md").read_text().replace("&& neurcam demo\n", "&& neurcam demo --seeds 5\n"))
    assert quick.commands(other)[0].endswith("neurcam demo --seeds 5")
    # ... which .ci/run refuses until its own copy of the commands says the same
    import shutil
    shutil.copytree(REPO / ".ci", tmp_path / ".ci")
    refused = subprocess.run(["bash", str(tmp_path / ".ci" / "run")], capture_output=True, text=True, timeout=60,
                             env={**os.environ, "NEURCAM_CI_DRY_RUN": "1"})
    assert refused.returncode == 1 and "Quick start command 1 is" in refused.stderr and not refused.stdout


def test_the_quick_start_check_fails_a_demo_that_left_nothing(tmp_path):
    """What ``.ci/run`` checks after command 1 can fail: no search, no closing lines."""
    quick = _quickstart()
    (tmp_path / "log").write_text("neurcam: error: output runs/demo holds the input runs/demo/data\n")
    assert quick.check(tmp_path, tmp_path / "log") == [f"no {tmp_path / 'runs/demo/search.json'}: the demo did not "
                                                       f"finish its search"]
    (tmp_path / "runs" / "demo").mkdir(parents=True)
    (tmp_path / "runs" / "demo" / "search.json").write_text('{"trials": [{"trial_id": "a", "status": "error"}]}')
    problems = quick.check(tmp_path, tmp_path / "log")
    assert any("not all ok" in p for p in problems) and any("report/report.html" in p for p in problems)
    assert any("no MLflow store" in p for p in problems) and any("registered model:" in p for p in problems)


def test_every_test_runs_in_the_gate():
    """No test is kept out of ``.ci/run``: pytest's options select nothing away (no ``-m``,
    ``-k`` or ``--ignore``) and no test carries a marker that a selection could drop."""
    import re
    import tomllib
    options = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert not re.search(r"(^|\s)(-m|-k|--ignore|--deselect)\b", options.get("addopts", "")), options["addopts"]
    assert "markers" not in options, options.get("markers")
    marked = [f"{p.name}:{i}" for p in (REPO / "tests").glob("*.py")
              for i, line in enumerate(p.read_text().splitlines(), 1)
              if re.match(r"\s*@pytest\.mark\.(slow|skip|skipif|xfail)\b", line)]
    assert not marked, marked
