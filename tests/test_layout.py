"""The package's layers: no import cycles, no upward imports, a model layer of pure math, and an
estimator that works without Ray or MLflow installed."""
import ast
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
    "clusterids": 0, "uris": 0, "settings": 0,
    "model": 1, "storage": 1, "config": 1,
    "explain": 2, "data": 2,
    "estimator": 3, "represent": 3,
    "distributed": 4, "tracking": 4,
    "service": 5,
    "ops": 6,
    "cli": 7, "__init__": 7,
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
