"""Ray Job entrypoint: ``neurcam recluster``. Submit with
``ray job submit --working-dir . -- python jobs/recluster.py --config configs/X.yaml [--set KEY=VALUE ...]``
or ``neurcam submit --address URL recluster --config configs/X.yaml``; the exit status is the job's status."""
import sys

from _entry import run

if __name__ == "__main__":
    sys.exit(run("recluster"))
