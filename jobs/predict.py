"""Ray Job entrypoint: ``neurcam predict``. Submit with
``ray job submit --working-dir . -- python jobs/predict.py --config configs/X.yaml [--set KEY=VALUE ...]``
or ``neurcam submit --address URL predict --config configs/X.yaml``; the exit status is the job's status."""
import sys

from _entry import run

if __name__ == "__main__":
    sys.exit(run("predict"))
