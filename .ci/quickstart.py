"""The README's Quick start, as CI runs it (`.ci/run`): the commands read from README.md itself, so
the README and CI cannot drift apart, and what the first one must leave behind.

    python3 .ci/quickstart.py commands        # the Quick start's commands, one a line
    python3 .ci/quickstart.py copy DIR        # the repository as a fresh clone has it, into DIR
    python3 .ci/quickstart.py check DIR LOG   # command 1 ran in DIR and printed LOG: did it work?

Standard library only: `commands` runs before anything is installed. `check` reads the MLflow
store through the `mlflow` that command 1 installed.
"""
from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# what `neurcam demo` writes (neurcam_dist.service.demo_config), and the lines it closes with
DEMO_OUTPUT, DEMO_MODEL = "runs/demo", "digits-demo"
CLOSING = ("model: runs/demo/model; trials: runs/demo/search.json", "explanation report: file://",
           f"registered model: models:/{DEMO_MODEL}/", "MLflow UI: mlflow ui --backend-store-uri sqlite:///")


def commands(readme: Path = ROOT / "README.md") -> list[str]:
    """The shell commands of the first ``bash`` block under README's "## Quick start" (comment and
    blank lines left out). Exactly two: the first installs and runs the demo, the second the tests."""
    text = readme.read_text()
    section = re.search(r"^## Quick start\n(.*?)(?=^## )", text, re.S | re.M)
    if section is None:
        raise SystemExit(f"{readme}: no '## Quick start' section")
    block = re.search(r"^```bash\n(.*?)^```", section.group(1), re.S | re.M)
    if block is None:
        raise SystemExit(f"{readme}: the Quick start has no ```bash block")
    found = [ln.strip() for ln in block.group(1).splitlines() if ln.strip() and not ln.strip().startswith("#")]
    if len(found) != 2:
        raise SystemExit(f"{readme}: the Quick start block holds {len(found)} command(s), not 2 (install and run "
                         f"the demo; install and run the tests): {found}")
    return found


def copy(dest: Path) -> int:
    """The files git knows here (tracked, and new ones it does not ignore), as they are in the
    working tree, into ``dest``: a visitor's fresh clone, without this checkout's installs, runs
    and caches. Returns how many files were copied."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    n = 0
    for name in filter(None, dict.fromkeys(listed)):
        src = ROOT / name
        if not src.exists() and not src.is_symlink():   # deleted in the working tree, not yet committed
            continue
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / name, follow_symlinks=False)
        n += 1
    return n


def check(where: Path, log: Path) -> list[str]:
    """What command 1 must leave in ``where`` and print (``log``): every trial of the search
    finished, the winner's model and report written, the winner registered in the local MLflow
    store with the alias ``candidate``, and the demo's closing lines. Returns the problems."""
    problems = []
    out = where / DEMO_OUTPUT
    search = out / "search.json"
    if not search.is_file():
        return [f"no {search}: the demo did not finish its search"]
    trials = json.loads(search.read_text())["trials"]
    if not trials or any(t["status"] != "ok" for t in trials):
        problems.append(f"{search}: trials {[(t['trial_id'], t['status']) for t in trials]}, not all ok")
    for need in ("model/config.json", "model/weights.safetensors", "report/report.html", "metrics.json"):
        if not (out / need).is_file():
            problems.append(f"no {out / need}")
    problems += _registered(where / "mlflow.db")
    printed = log.read_text(errors="replace")
    problems += [f"the demo never printed {line!r}" for line in CLOSING if line not in printed]
    return problems


def _registered(store: Path) -> list[str]:
    """The demo's model in the local MLflow store, with its ``candidate`` alias on a version."""
    if not store.is_file():
        return [f"no MLflow store {store}"]
    with sqlite3.connect(store) as db:
        versions = db.execute("SELECT version FROM model_versions WHERE name = ?", (DEMO_MODEL,)).fetchall()
        alias = db.execute("SELECT version FROM registered_model_aliases WHERE name = ? AND alias = 'candidate'",
                           (DEMO_MODEL,)).fetchall()
    if not versions:
        return [f"{store}: no version of {DEMO_MODEL!r} registered"]
    if not alias or alias[0][0] not in {v for (v,) in versions}:
        return [f"{store}: {DEMO_MODEL!r} has no alias 'candidate' on a registered version"]
    return []


def main(argv: list[str]) -> int:
    if argv[:1] == ["commands"] and len(argv) == 1:
        print("\n".join(commands()))
        return 0
    if argv[:1] == ["copy"] and len(argv) == 2:
        print(f"quickstart: {copy(Path(argv[1]))} files copied to {argv[1]}")
        return 0
    if argv[:1] == ["check"] and len(argv) == 3:
        problems = check(Path(argv[1]), Path(argv[2]))
        for p in problems:
            print(f"quickstart: command 1: {p}", file=sys.stderr)
        if not problems:
            print(f"quickstart: command 1 left the demo's search, model, report, registered model and closing "
                  f"lines in {argv[1]}")
        return 1 if problems else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
