"""Start-up: what a fresh process pays before it does any work.

    python benchmarks/startup.py [--repeats 5] [--rows 100]

Fits a small mixed model (``data.synthetic.mixed_table``, 600 rows) once, then times, each in a
fresh Python process and ``--repeats`` times: ``import neurcam_dist``; ``neurcam predict`` of
``--rows`` CSV rows as a user runs it (the command's wall time, its own scoring line beside it);
and ``neurcam --help``. Prints one Markdown table (median and fastest seconds) and the modules
``python -X importtime`` finds costliest on the predict path (cumulative milliseconds), so a
change that pulls a heavy import onto a light command shows up here. The issue's target: a
fresh-process predict of 100 rows under 2 s on the 2-core development machine.
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _timed(cmd: list[str], repeats: int) -> list[float]:
    seconds = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        seconds.append(time.perf_counter() - t0)
    return seconds


def _costliest_imports(cmd: list[str], top: int = 8) -> list[tuple[str, float]]:
    """The modules with the largest cumulative import time (ms) under ``python -X importtime``,
    each counted once, outermost first."""
    err = subprocess.run([sys.executable, "-X", "importtime", *cmd[1:]], capture_output=True, text=True).stderr
    rows = []
    for line in err.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \|(\s*)(\S+)", line)
        if m:
            rows.append((m.group(3), int(m.group(1)) / 1000, len(m.group(2))))
    top_level = [(name, ms) for name, ms, depth in rows if depth <= 3]
    return sorted(top_level, key=lambda r: -r[1])[:top]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rows", type=int, default=100)
    args = ap.parse_args()
    from neurcam_dist import NeurCAM
    from neurcam_dist.data.synthetic import mixed_table
    with tempfile.TemporaryDirectory() as d:
        df, _ = mixed_table(600, seed=0, defined_by="level")
        X = df.drop(columns="customer_id")
        NeurCAM(n_clusters=3, epochs=20, verbose=False).fit(X).save(Path(d) / "model")
        X.head(args.rows).to_csv(Path(d) / "rows.csv", index=False)
        neurcam = [sys.executable, "-m", "neurcam_dist.cli"]
        predict = [*neurcam, "predict", "--model", str(Path(d) / "model"), "--input", str(Path(d) / "rows.csv"),
                   "--output", str(Path(d) / "out.csv")]
        cases = {"import neurcam_dist": [sys.executable, "-c", "import neurcam_dist"],
                 "neurcam --help": [*neurcam, "--help"],
                 f"neurcam predict, {args.rows} rows": predict}
        print(f"| fresh process ({args.repeats} runs) | median s | fastest s |\n| --- | --- | --- |")
        for name, cmd in cases.items():
            t = _timed(cmd, args.repeats)
            print(f"| {name} | {statistics.median(t):.2f} | {min(t):.2f} |")
        print("\ncostliest imports of `neurcam predict` (cumulative ms):\n")
        print("| module | ms |\n| --- | --- |")
        for name, ms in _costliest_imports(predict):
            print(f"| {name} | {ms:.0f} |")


if __name__ == "__main__":
    main()
