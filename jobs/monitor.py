"""Ray Job entrypoint: ``neurcam monitor`` on the cluster, for snapshots too large for one process
(a Parquet folder or s3:// prefix is reduced by Ray Data actors in one streamed pass). Submit with
``ray job submit --working-dir . -- python jobs/monitor.py --model models:/NAME@champion --input
s3://bucket/snapshot/ --output s3://bucket/drift/``; the job's exit status is the command's (4: a
drift alert, which Ray reports as a failed job)."""
import sys

from _entry import run

if __name__ == "__main__":
    sys.exit(run("monitor"))
