#!/usr/bin/env bash
# The counters' full scale on a GPU machine: what a bare per-cycle counter (the design's first
# command, `--metric sm__pipe_tensor_cycles_active.avg`) reads against its sustained peak, next to
# CUPTI's own `.pct_of_peak_sustained_elapsed` and ncu on the same kernels.
#
#   scripts/gpu/scale.sh probe    # raw columns: the counter, its peak, the clock domains' elapsed
#                                 # cycles, under idle / bf16 matmul / copy phases (scale_probe.json)
#   scripts/gpu/scale.sh check    # the commands a user types, their per-phase means against the
#                                 # percentage metric and ncu (scale_check.json, a table)
#
# Binaries from scripts/gpu/unpack.sh (.dev-bin/all). Results under $OUT.
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/lib.sh
OUT=${OUT:-/tmp/cufall-scale}
W=examples/workloads/matmul_copy.py
T=$(mktemp -d /tmp/cufall-scale.XXXX)
mkdir -p "$OUT"
X=sm__pipe_tensor_cycles_active.avg
PCT=$X.pct_of_peak_sustained_elapsed
parts="${*:-probe check}"

rec() { # NAME ARGS... : records matmul_copy's phases (1 s busy, 0.3 s idle) at 200us
  local name=$1; shift
  "$C" record --force -o "$T/$name.cufall" --devices 0 --interval 200us "$@" -- \
    python3 $W --seconds 1 --idle 0.3 --phases-json "$T/$name.phases.json" > "$T/$name.log" 2>&1
  echo "$name rc=$? $(tail -c 300 "$T/$name.log" | tr '\n' ' ')"
}

ncu_run() {
  local ncu; ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  [ -n "$ncu" ] || { echo "no ncu"; return; }
  hdr "ncu --clock-control none on the matmul kernels"
  "$ncu" --clock-control none --csv --launch-skip 12 --launch-count 8 \
    --metrics "$PCT,$X,$X.peak_sustained,sm__cycles_elapsed.avg,gpc__cycles_elapsed.max,gr__cycles_elapsed.max,sys__cycles_elapsed.avg" \
    python3 $W --only matmul --iters 25 > "$OUT/ncu_matmul.csv" 2>&1
  echo "ncu rc=$?"; grep -c '"' "$OUT/ncu_matmul.csv"
}

if want probe; then
  hdr machine
  nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.max.sm --format=csv
  "$C" --version
  hdr "sub-metrics CUPTI lists for the tensor pipe counter"
  "$C" metrics --filter pipe_tensor_cycles_active 2>&1 | head -40
  hdr "raw columns"
  i=0
  for set in \
    "$X $X.peak_sustained $PCT sm__cycles_elapsed.avg gpc__cycles_elapsed.max gr__cycles_elapsed.max" \
    "$X $X.peak_sustained_elapsed" \
    "$X.sum $X.sum.peak_sustained $X.sum.peak_sustained_elapsed sm__cycles_elapsed.sum" \
    "sys__cycles_elapsed.avg gpc__cycles_elapsed.avg sm__cycles_elapsed.max" \
    "dram__bytes_read.sum dram__bytes_read.sum.peak_sustained dram__bytes_read.sum.peak_sustained_elapsed dram__cycles_elapsed.avg dram__throughput.avg.pct_of_peak_sustained_elapsed" \
    "$PCT sm__pipe_tensor_cycles_active_realtime.avg.pct_of_peak_sustained_elapsed sm__pipe_tensor_cycles_active_realtime.avg sm__pipe_tensor_cycles_active_realtime.avg.peak_sustained" \
    "dram__throughput.avg.pct_of_peak_sustained_elapsed dram__bytes.sum.pct_of_peak_sustained_elapsed dram__bytes_read.sum.pct_of_peak_sustained_elapsed dram__bytes_write.sum.pct_of_peak_sustained_elapsed"; do
    args=(); for m in $set; do args+=(--metric "$m"); done
    i=$((i + 1)); name=set$i
    rec "$name" --no-denominator "${args[@]}"
    python3 scripts/gpu/analyze_scale.py "$T/$name.cufall" "$T/$name.phases.json" > "$OUT/scale_$name.json" 2>&1
    head -c 3000 "$OUT/scale_$name.json"; echo
  done
  hdr "bytes per sample of candidate metrics and sets"
  "$C" metrics --filter dram__bytes 2>&1 | grep -E "^(dram|  ).*cost" | head -8
  for set in "$PCT dram__throughput.avg.pct_of_peak_sustained_elapsed" \
    "sm__pipe_tensor_cycles_active_realtime.avg.pct_of_peak_sustained_elapsed dram__throughput.avg.pct_of_peak_sustained_elapsed" \
    "$X $PCT" "sm__pipe_tensor_cycles_active_realtime.avg.pct_of_peak_sustained_elapsed dram__bytes.sum.pct_of_peak_sustained_elapsed"; do
    args=(); for m in $set; do args+=(--metric "$m"); done
    "$C" metrics "${args[@]}" 2>&1 | tail -3
  done
fi

if want check; then
  hdr "the commands a user types"
  rec seed --metric $X
  rec seed_den --metric $X --denominator gr__cycles_elapsed.max
  rec seed_raw --metric $X --raw
  rec pct --metric $PCT
  ncu_run
  for n in seed seed_den seed_raw pct; do
    "$C" report "$T/$n.cufall" > "$OUT/report_$n.txt" 2>&1; echo "report $n rc=$?"
    "$C" replay --print "$T/$n.cufall" > "$OUT/replay_$n.txt" 2>&1; echo "replay $n rc=$?"
    head -8 "$OUT/replay_$n.txt"
  done
  python3 scripts/gpu/analyze_scale.py --check "$T" "$OUT/ncu_matmul.csv" > "$OUT/scale_check.json"
  cat "$OUT/scale_check.json"
  hdr "the live view and the exporter under a bf16 matmul load"
  python3 $W --load 14 > /dev/null 2>&1 &
  load=$!
  sleep 3
  "$C" --metric $X --print --print-after 3s 2>&1 | head -12
  "$C" --metric $X --denominator gr__cycles_elapsed.max --print --print-after 3s 2>&1 | head -12
  "$C" serve --listen 127.0.0.1:9477 --metric $X --dump-dir "$T" > "$T/serve.log" 2>&1 &
  srv=$!
  sleep 4
  curl -s 127.0.0.1:9477/metrics | grep -E "^cufall_metric_mean" | head -4
  kill $srv; wait $srv 2>/dev/null; kill $load 2>/dev/null; wait $load 2>/dev/null
fi
