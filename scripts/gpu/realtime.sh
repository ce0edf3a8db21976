#!/usr/bin/env bash
# Does GH100's cheaper tensor-pipe counter (`sm__pipe_tensor_cycles_active_realtime`, 7,001
# bytes per sample as a percentage against 20,825) read what the usual one reads when each is
# recorded alone? Two recordings of examples/workloads/matmul_copy.py at 200 µs, one per form,
# their per-phase means (analyze_scale.py), and each run's CPU. Results under $OUT.
set -u
cd "$(dirname "$0")/../.."
C=${BIN:-.dev-bin/all}/cufall
OUT=${OUT:-/tmp/cufall-realtime}
T=$(mktemp -d /tmp/cufall-rt.XXXX)
mkdir -p "$OUT"
for m in sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed \
         sm__pipe_tensor_cycles_active_realtime.avg.pct_of_peak_sustained_elapsed; do
  n=${m%%.avg*}
  "$C" record --force -o "$T/$n.cufall" --devices 0 --interval 200us --metric "$m" \
    --host-stacks off -- python3 examples/workloads/matmul_copy.py --seconds 1 --idle 0.3 \
    --phases-json "$T/$n.phases.json" > "$T/$n.log" 2>&1
  echo "$n rc=$? $(grep -o 'used [0-9.]* CPU cores' "$T/$n.log")"
  python3 scripts/gpu/analyze_scale.py "$T/$n.cufall" "$T/$n.phases.json" > "$OUT/$n.json"
  python3 -c "
import json; d=json.load(open('$OUT/$n.json'))
for ph, v in d['phases'].items(): print('  %-7s %6d samples  %s' % (ph, v['samples'], {k: round(x, 2) for k, x in v.items() if 'pct' in k}))"
done
