#!/usr/bin/env bash
# Records the example recordings that scripts/gpu/capture.sh and sampler.sh do not make, with the
# release binaries unpacked by scripts/gpu/unpack.sh. Each lands in $OUT/examples/ with the exact
# command in $OUT/examples/commands.txt; copy them into examples/ after checking their size.
#
#   seed-tensor-cycles: the design's first command, `--metric sm__pipe_tensor_cycles_active.avg
#   --denominator gr__cycles_elapsed.max`, over the matmul/copy workload, so the Hopper caveat in
#   docs/metrics.md (the ratio reaches ~3, not 1) has a recording to point at.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${BIN_DIR:-.dev-bin/all}
O=${OUT:-/tmp/cufall-out}/examples
mkdir -p "$O"
run() { # name, cufall args...
  local name=$1
  shift
  echo "cufall $*" | sed "s|$O/||" >> "$O/commands.txt"
  "$B/cufall" "$@"
  echo "rc=$? $name"
  "$B/cufall" info "$O/$name.cufall" | head -20
  "$B/cufall" report "$O/$name.cufall" | head -30
  du -sh "$O/$name.cufall"
}
run h200-seed-tensor-cycles record -o "$O/h200-seed-tensor-cycles.cufall" --force --devices 0 \
  --interval 200us --metric sm__pipe_tensor_cycles_active.avg --denominator gr__cycles_elapsed.max \
  -- python3 examples/workloads/matmul_copy.py --seconds 1.5 --idle 0.4
