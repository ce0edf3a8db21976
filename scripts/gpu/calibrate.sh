#!/usr/bin/env bash
# The capture calibration on the GPU (issue: the observer effect): `cufall calibrate-capture`
# run directly, as `cufall record` runs it after the program, for the default kinds with graphs
# of 1, 8 and 32 kernels and for graphs traced node by node, unpinned and pinned to one CPU;
# then one recording of the graph-replayed loop under the default capture, with the summary's
# calibration line and the report's CAPTURE COST section. About 1 minute.
#
#   scripts/gpu/unpack.sh && scripts/gpu/calibrate.sh
#
# What to check in $OUT/calibrate.log: every kind `measured` (no `error`), with `ns` > 0 and
# the traced rounds' spread (`low_ns`..`high_ns`) around it; the recording's line `capture
# cost per event, measured after the program in … s: …`; the report's `step: capture added
# about … per step` (a figure, not `unknown`).
set -u
cd "$(dirname "$0")/../.."
BIN=${BIN:-.dev-bin/all}
C=$BIN/cufall
LIB=$(readlink -f "$BIN/libcufall_inject.so")
OUT=${OUT:-/tmp/cufall-calibrate}
PIN=${PIN:-3}
T=$(mktemp -d /tmp/cufall-cal.XXXX)
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
calibrate() { # KINDS NODES [PIN]
  local pin=()
  [ -n "${3:-}" ] && pin=(taskset -c "$3")
  env CUDA_INJECTION64_PATH="$LIB" CUFALL_CAPTURE="$1" CUFALL_CAPTURE_CALIBRATE=1 \
    CUFALL_CAPTURE_FLUSH_MS=0 "${pin[@]}" "$C" calibrate-capture --kinds "$1" --graph-nodes "$2"
}
{
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?') $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo "CPU $PIN siblings: $(cat /sys/devices/system/cpu/cpu$PIN/topology/thread_siblings_list 2>/dev/null)"
  lscpu | grep -E "^(Model name|Thread|Core|Socket|CPU\(s\))" 
  for nodes in 1 8 32; do
    echo "== default kinds, graph of $nodes kernels, unpinned"
    t0=$(date +%s%N)
    calibrate kernels,memcpy,graphs "$nodes"
    echo "  took $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  done
  echo "== default kinds, graph of 8, pinned to CPU $PIN"
  calibrate kernels,memcpy,graphs 8 "$PIN"
  echo "== graph-nodes, graph of 8, unpinned"
  calibrate graph-nodes 8
  for tune in per-thread-buffers hw-trace; do
    echo "== default kinds, graph of 8, CUFALL_CAPTURE_TUNE=$tune"
    CUFALL_CAPTURE_TUNE=$tune calibrate kernels,memcpy,graphs 8
  done
  echo "== one kind at a time (which kind's tracing costs the launch), graph of 8"
  for k in graphs kernels memcpy; do calibrate "$k" 8; done
  echo "== record: the graph loop under the default capture (--nvml-only --host-stacks off)"
  "$C" record --force -o "$T/d.cufall" --devices 0 --nvml-only --host-stacks off -- \
    taskset -c "$PIN" python3 examples/workloads/graph_step_loop.py --mode graph --seconds 3 \
    > "$T/d.out" 2> "$T/d.err"
  echo "rc=$? $(grep '^{' "$T/d.out" | tail -1 | cut -c1-120)"
  grep -E "capture cost|capture:" "$T/d.err"
  "$C" report "$T/d.cufall" 2>/dev/null | sed -n '/^CAPTURE COST/,/^$/p'
  "$C" export "$T/d.cufall" --format csv -o "$T/csv" --force > /dev/null 2>&1 &&
    grep -h "capture_cost" "$T"/csv/capture*.csv | cut -c1-400
  cp "$T/d.cufall" "$OUT/graph-loop-default.cufall" 2>/dev/null
} 2>&1 | tee "$OUT/calibrate.log"
rm -rf "$T"
