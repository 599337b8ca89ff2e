"""Shared by the job entrypoints: run one ``neurcam`` subcommand with this process's arguments.

The package is imported from the uploaded working directory when it holds one (so the job's
driver and its Ray workers, which import from that directory, run the same code), else from the
installed package (a container image)."""
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if (ROOT / "neurcam_dist" / "__init__.py").is_file():
    sys.path.insert(0, str(ROOT))


def run(command: str) -> int:
    from neurcam_dist.cli import main
    return main([command, *sys.argv[1:]])
