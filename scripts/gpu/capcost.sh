#!/usr/bin/env bash
# What capture says it added (the report's CAPTURE COST section) on the host-bound,
# graph-replayed decode loop (examples/workloads/graph_step_loop.py --mode graph), against what
# the loop itself lost: the loop bare, under `--capture nvtx` and under the default capture,
# each recording's cost rows (`capture_cost_*`: NVTX measured in the program at capture start,
# the CUDA kinds after it in cufall's calibration process) and
# its report's cost lines. About 2 minutes.
#
#   scripts/gpu/unpack.sh && scripts/gpu/capcost.sh
#
# What to check in $OUT/capcost.log:
# - nvtx: a `capture_cost_nvtx` row of a few hundred ns per range, and the report line
#   `step: capture added about … per step (…% of host time); gaps shorter than that may be
#   cufall's own` (1 range per step: well under 1 µs);
# - default: `capture_cost_kernel`, `_memcpy`, `_graph` rows of process 0 (measured after the
#   program by `cufall calibrate-capture`: about 3 µs each on the H200) and the line `step:
#   capture added about … per step`; where the calibration failed, `_unknown` rows and `step:
#   capture cost unknown: …` (never a cost of 0);
# - the steps lost against bare (µs per step) for comparison (docs/benchmarks.md).
set -u
cd "$(dirname "$0")/../.."
C=${BIN:-.dev-bin/all}/cufall
OUT=${OUT:-/tmp/cufall-capcost}
PIN=${PIN:-3}
SECS=${SECONDS_PER_RUN:-3}
T=$(mktemp -d /tmp/cufall-capcost.XXXX)
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
LOOP=(taskset -c "$PIN" python3 examples/workloads/graph_step_loop.py --mode graph --seconds "$SECS")
{
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?') $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo "== bare"
  "${LOOP[@]}" 2>&1 | grep '^{' | tail -1
  for c in nvtx default; do
    if [ "$c" = nvtx ]; then flags=(--nvml-only --capture nvtx); else flags=(); fi
    echo "== $c: cufall record ${flags[*]} --host-stacks off"
    "$C" record --force -o "$T/$c.cufall" --devices 0 --host-stacks off "${flags[@]}" -- \
      "${LOOP[@]}" > "$T/$c.out" 2> "$T/$c.err"
    echo "rc=$? $(grep '^{' "$T/$c.out" | tail -1)"
    "$C" report "$T/$c.cufall" --json > "$T/$c.json" 2>> "$T/$c.err"
    python3 - "$T/$c.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c = r.get("capture_cost")
if c is None:
    print("  no capture_cost in the report")
    sys.exit()
print("  calibrated:", c["calibrated"])
for k in c["kinds"]:
    print("  kind %-9s ns_per_event=%s processes=%d  %s" % (k["kind"], k["ns_per_event"], k["processes"], k["detail"][:110]))
for p in c["phases"][:4]:
    print("  phase %s: steps=%d events=%s per_step_ns=%s host_fraction=%s known_ns=%.0f"
          % (p["path"], p["steps"], p["events"], p["per_step_ns"], p["host_fraction"], p["known_ns"]))
PY
    "$C" report "$T/$c.cufall" 2>/dev/null | sed -n '/^CAPTURE COST/,/^$/p'
    "$C" info "$T/$c.cufall" 2>/dev/null | grep -i "capture" | head -5
  done
} 2>&1 | tee "$OUT/capcost.log"
rm -rf "$T"
