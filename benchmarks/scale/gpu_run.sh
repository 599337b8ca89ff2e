#!/usr/bin/env bash
# gpu.py's modes in one call on a GPU host, each under its own time limit (seconds), tables last:
#   bash benchmarks/scale/gpu_run.sh step:90 fit:150                      # 111 s on one H100
#   bash benchmarks/scale/gpu_run.sh ray:120:--caches,device repeat:180:--deterministic pack:220   # issue 41
#   bash benchmarks/scale/gpu_run.sh batch:230:--ray-batches,512,65536 repeat:150:--deterministic pack:170  # issue 71
# (mode:seconds[:extra arguments, comma-separated]; a mode given twice writes <mode>_2.log and so on)
# On a host without Ray (the lent GPU machine) the kit of ../shared/gpu/make_kit.sh, built into
# .gpukit/, is installed first; pendigits.csv.gz is read from $DATA (default .gpudata/).
# Logs and tables go to $OUT (default /tmp/gpu-out): <mode>.log and gpu_<mode>.md (a device call brings
# back at most 8 files: four modes per call).
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
names=()
for spec in "$@"; do
  IFS=: read -r mode limit extra <<< "$spec"
  name=$mode; i=2
  while [[ " ${names[*]-} " == *" $name "* ]]; do name=${mode}_$i; i=$((i + 1)); done
  names+=("$name"); t0=$SECONDS
  # shellcheck disable=SC2086
  timeout -k 10 "$limit" python3 benchmarks/scale/gpu.py "$mode" --data-dir "$DATA" --out "$OUT/gpu_$name.md" \
    ${extra//,/ } > "$OUT/$name.log" 2>&1
  echo "== $name: rc=$? in $((SECONDS - t0)) s"
done
for name in "${names[@]}"; do
  if [ -f "$OUT/gpu_$name.md" ]; then echo; cat "$OUT/gpu_$name.md"
  else echo "== $name: no table; log tail:"; grep -v "^\s*$" "$OUT/$name.log" | tail -25; fi
done
