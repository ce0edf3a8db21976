#!/usr/bin/env bash
# One call for the H200 runs of the open issues, each part under its own time limit, logs under
# $OUT/<part>.log and everything else packed into $OUT/results.tgz (a lent machine returns few
# files). Run from the repository root after `scripts/gpu/unpack.sh`:
#
#   scripts/gpu/open-issues.sh                 # servers capcost leaf slowdown probe
#   PARTS="leaf servers" scripts/gpu/open-issues.sh
#
# Parts: servers (scripts/gpu/servers.sh: workers' profiler windows), capcost
# (scripts/gpu/capcost.sh: the report's capture cost lines), leaf (scripts/gpu/leaf.sh: native
# frames under Python ones in Hugging Face generate), slowdown (a bf16 matmul loop bare against
# sampled, 3 interleaved rounds each, with the default capture off and with the counters off,
# to tell the performance monitor's cost from capture's), probe (`probe-sampler --cost` under a
# matmul load: evaluation's cost per metric set, each step named on stderr as it starts).
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/cufall-open}
export OUT CUFALL_BIN=${CUFALL_BIN:-.dev-bin/all/cufall}
mkdir -p "$OUT/all"
for p in ${PARTS:-servers capcost leaf slowdown probe}; do
  echo "=== $p $(date -u +%H:%M:%S)"
  case $p in
    servers) OUT="$OUT/all/servers" timeout 200 scripts/gpu/servers.sh > "$OUT/$p.log" 2>&1 ;;
    capcost) OUT="$OUT/all/capcost" timeout 170 scripts/gpu/capcost.sh > "$OUT/$p.log" 2>&1 ;;
    leaf) OUT="$OUT/all/leaf" timeout 120 scripts/gpu/leaf.sh > "$OUT/$p.log" 2>&1 ;;
    probe) OUT="$OUT/all/probe" timeout 90 scripts/gpu/sampler.sh cost_probe > "$OUT/$p.log" 2>&1 ;;
    slowdown)
      for f in "--capture none" "--nvml-only"; do
        OUT="$OUT/all/slowdown" SLOW_ROUNDS=3 SLOW_FLAGS="$f" timeout 100 scripts/gpu/sampler.sh slowdown > /dev/null 2>&1
      done
      grep -h SLOWDOWN "$OUT/all/slowdown/bench.txt" > "$OUT/$p.log" 2>&1 ;;
  esac
  echo "rc=$?"
  grep -E "PASS|FAIL|SLOWDOWN|capture added|cost unknown|→|cost probe|Segmentation" "$OUT/$p.log" | cut -c1-400 | head -24
  tar czf "$OUT/results.tgz" -C "$OUT" all
done
