#!/usr/bin/env bash
# What sampling host stacks costs, without a GPU: a host-bound Python loop (a fixed amount of
# pure-Python work) run bare and under `cufall probe-host-stacks` (the sampler `record` uses,
# with no GPU part), interleaved, then a program with 4 multiprocessing workers for memory.
#
#   cargo build --release -p cufall
#   scripts/bench-host-stacks.sh [RUNS] [INTERVAL]      # default: 5 runs at 1ms (1 kHz)
#
# Prints: the slowdown (median of the per-pair ratios), cufall's CPU (user+sys over wall),
# its peak RSS, samples kept versus asked for, and missed. Needs root (or ptrace permission
# over the child); results go in docs/benchmarks.md ("Host stacks").
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-5}
INTERVAL=${2:-1ms}
C=${CUFALL:-target/release/cufall}
[ -x "$C" ] || { echo "build cufall first: cargo build --release -p cufall" >&2; exit 1; }
# The interpreter itself, not a version manager's shim, so bare and sampled runs start alike.
PY=$(python3 -c 'import sys; print(sys.executable)')
T=$(mktemp -d /tmp/cufall-hostbench.XXXX)
trap 'rm -rf "$T"' EXIT

cat > "$T/loop.py" <<'EOF'
import time
def work(n):
    s = 0
    for i in range(n):
        s += i * i % 7
    return s
t = time.perf_counter()
work(20_000_000)
print(f"{time.perf_counter() - t:.4f}")
EOF

cat > "$T/workers.py" <<'EOF'
import multiprocessing as mp, time
def spin(seconds):
    end = time.time() + seconds
    s = 0
    while time.time() < end:
        s += sum(i * i for i in range(1000))
    return s
if __name__ == "__main__":
    with mp.Pool(4) as pool:
        pool.map(spin, [10] * 4)
EOF

echo "host stacks benchmark: $RUNS runs, interval $INTERVAL, $(nproc) cores, $($PY --version 2>&1), $(date -u +%Y-%m-%dT%H:%MZ)"
for i in $(seq 1 "$RUNS"); do
  bare=$("$PY" "$T/loop.py")
  probed=$("$C" probe-host-stacks -o "$T/run$i.cufall" --force --host-interval "$INTERVAL" \
    --stats-json "$T/run$i.json" -- "$PY" "$T/loop.py" 2>"$T/run$i.err")
  echo "run $i: bare $bare s, sampled $probed s"
  echo "$bare $probed" >> "$T/pairs"
done

echo "multiprocessing: 4 workers for 10 s, sampled at $INTERVAL"
"$C" probe-host-stacks -o "$T/workers.cufall" --force --host-interval "$INTERVAL" \
  --stats-json "$T/workers.json" -- "$PY" "$T/workers.py" 2>"$T/workers.err"
du -sh "$T/workers.cufall" | awk '{print "workers trace: " $1}'

"$PY" - "$T" "$RUNS" <<'EOF'
import json, statistics, sys
t, runs = sys.argv[1], int(sys.argv[2])
pairs = [tuple(map(float, l.split())) for l in open(f"{t}/pairs")]
ratios = [p / b for b, p in pairs]
stats = [json.load(open(f"{t}/run{i}.json")) for i in range(1, runs + 1)]
def med(xs): return statistics.median(xs)
print(f"slowdown (median of sampled/bare): {100 * (med(ratios) - 1):+.2f} %  (ratios {', '.join(f'{r:.3f}' for r in ratios)})")
print(f"cufall CPU: {100 * med([s['cpu_fraction'] for s in stats]):.1f} % of a core (median; user+sys over wall)")
print(f"cufall peak RSS: {max(s['peak_rss_mib'] for s in stats):.1f} MiB (largest run)")
kept = sum(s['samples'] for s in stats); asked = sum(s['asked'] for s in stats)
print(f"samples kept {kept} of {asked} asked for ({100 * kept / max(asked, 1):.2f} %); missed {sum(s['missed'] for s in stats)}"
      f" ({sum(s['host']['late_rounds'] for s in stats)} late rounds, "
      f"{sum(p['failed_reads'] for s in stats for p in s['host']['processes'])} failed reads)")
w = json.load(open(f"{t}/workers.json"))
read = [p for p in w['host']['processes'] if p['interpreter']]
print(f"workers: {len(read)} Python processes, {w['samples']} samples kept of {w['asked']} asked for, "
      f"{w['missed']} missed, {w['host']['stacks']} distinct stacks, "
      f"cufall CPU {100 * w['cpu_fraction']:.1f} % of a core, peak RSS {w['peak_rss_mib']:.1f} MiB, "
      f"wall {w['wall_s']:.1f} s")
EOF
