#!/usr/bin/env bash
# gpu.py's modes in one call on a GPU host, each under its own time limit (seconds), tables last:
#   bash benchmarks/scale/gpu_run.sh step:90 fit:120 ray:150 pack:200
# On a host without Ray (the lent GPU machine) the kit of ../shared/gpu/make_kit.sh, built into
# .gpukit/, is installed first; pendigits.csv.gz is read from $DATA (default .gpudata/).
# Logs and tables go to $OUT (default /tmp/gpu-out): <mode>.log and gpu_<mode>.md.
set -u
OUT=${OUT:-/tmp/gpu-out}; DATA=${DATA:-.gpudata}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH=${PYTHONPATH:-}
if ! python3 -c "import ray, entmax, pydantic" 2>/dev/null; then
  if [ -d /tmp/site/ray ]; then :
  elif [ -d .gpukit ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpukit/whl/*.whl \
      && python3 .gpukit/unpack.py .gpukit/ray-stripped.zip /tmp/site || exit 1
  else
    echo "no Ray here and no .gpukit/ (bash ../shared/gpu/make_kit.sh)"; exit 1
  fi
  export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total,utilization.gpu,clocks.sm --format=csv 2>&1
for spec in "$@"; do
  mode=${spec%%:*}; limit=${spec#*:}; t0=$SECONDS
  timeout -k 10 "$limit" python3 benchmarks/scale/gpu.py "$mode" --data-dir "$DATA" --out "$OUT/gpu_$mode.md" \
    > "$OUT/$mode.log" 2>&1
  echo "== $mode: rc=$? in $((SECONDS - t0)) s"
done
for spec in "$@"; do
  mode=${spec%%:*}
  if [ -f "$OUT/gpu_$mode.md" ]; then echo; cat "$OUT/gpu_$mode.md"
  else echo "== $mode: no table; log tail:"; grep -v "^\s*$" "$OUT/$mode.log" | tail -25; fi
done
