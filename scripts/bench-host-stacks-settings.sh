#!/usr/bin/env bash
# What each host-stack setting costs a pinned, host-bound Python loop, without a GPU: the loop
# (a fixed amount of pure-Python work, about 1 s) bare and under `cufall probe-host-stacks` (the
# sampler `record` uses, with no GPU part) with the shipped settings and with one
# CUFALL_HOST_TUNE setting or --host-interval changed, the loop pinned to CPU $PIN and cufall to
# CPU $OTHER, every setting once per round, rounds interleaved.
#
#   cargo build --release -p cufall
#   scripts/bench-host-stacks-settings.sh [ROUNDS]      # default 9
#
# Prints each setting's slowdown: the median over rounds of its time over the same round's bare
# time, with the smallest and largest. Results go in docs/benchmarks.md ("Host stacks").
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-9}
PIN=${PIN:-1}
# cufall on another CPU (probe-host-stacks has no CPU fence of its own).
OTHER=${OTHER:-0}
C=${CUFALL:-target/release/cufall}
[ -x "$C" ] || { echo "build cufall first: cargo build --release -p cufall" >&2; exit 1; }
PY=$(python3 -c 'import sys; print(sys.executable)')
T=$(mktemp -d /tmp/cufall-hostset.XXXX)
trap 'rm -rf "$T"' EXIT
cat > "$T/loop.py" <<'PY'
import time
def f(i):
    return i * i % 7
def work(n):
    s = 0
    for i in range(n):
        s += f(i)
    return s
t = time.perf_counter()
work(6_000_000)
print(f"{time.perf_counter() - t:.4f}")
PY
SETTINGS=${SETTINGS:-"bare shipped period-full leaf-stack=32 no-leaf-perf 10ms"}
echo "host-stack settings: $ROUNDS rounds, loop pinned to CPU $PIN of $(nproc), $($PY --version 2>&1), $(date -u +%Y-%m-%dT%H:%MZ)"
for r in $(seq 1 "$ROUNDS"); do
  for s in $SETTINGS; do
    case $s in
      bare) t=$(taskset -c "$PIN" "$PY" "$T/loop.py") ;;
      shipped) t=$(taskset -c "$OTHER" "$C" probe-host-stacks -o "$T/p.cufall" --force -- taskset -c "$PIN" "$PY" "$T/loop.py" 2>/dev/null) ;;
      10ms) t=$(taskset -c "$OTHER" "$C" probe-host-stacks -o "$T/p.cufall" --force --host-interval 10ms -- taskset -c "$PIN" "$PY" "$T/loop.py" 2>/dev/null) ;;
      *) t=$(CUFALL_HOST_TUNE=$s taskset -c "$OTHER" "$C" probe-host-stacks -o "$T/p.cufall" --force -- taskset -c "$PIN" "$PY" "$T/loop.py" 2>/dev/null) ;;
    esac
    echo "$r $s $t" | tee -a "$T/runs"
  done
done
python3 - "$T/runs" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    r, s, t = line.split()
    runs.setdefault(s, {})[r] = float(t)
bare = runs.pop("bare")
print("\n%-16s %8s %8s %8s" % ("setting", "median", "min", "max"))
for s, by_round in runs.items():
    ratios = [100 * (t / bare[r] - 1) for r, t in by_round.items() if r in bare]
    print("%-16s %+7.1f%% %+7.1f%% %+7.1f%%" % (s, statistics.median(ratios), min(ratios), max(ratios)))
PY
