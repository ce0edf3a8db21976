#!/usr/bin/env bash
# What capture costs the loops it measures: a host-bound, graph-replayed decode loop
# (examples/workloads/graph_step_loop.py) and the bundled engine, bare, under each capture
# setting and under Nsight Systems, the program pinned to one core, every case once per round,
# rounds interleaved, medians and spread. Only such runs say anything on a shared VM: single bare
# runs of the loop vary by 2x.
#
#   scripts/gpu/overhead.sh                 # the loop (--mode graph) and the engine, 5 rounds
#   MODES="compile graph" ROUNDS=7 scripts/gpu/overhead.sh
#   CASES="bare nvtx default nsys" scripts/gpu/overhead.sh
#
# Cases: bare; none (record --nvml-only --capture none: the recorder and the injected library,
# nothing captured); nvtx, graphs, kernels (record --nvml-only --capture nvtx[,graphs|,kernels]
# --host-stacks off); nostacks (record --host-stacks off: the default capture with counters);
# default (record: counters, the default capture, host stacks); nofence (the default with
# CUFALL_CPU_FENCE=off: cufall's threads free to run on the program's core); h_period, h_leaf32,
# h_leaf64, h_noleaf (the default with one host-stack setting of CUFALL_HOST_TUNE: perf samples
# every interval, Python threads' call chains cut at 32 or 64 frames, no perf events on Python processes),
# h_10ms (the default with --host-interval 10ms); cap (record
# --nvml-only --host-stacks off: the default capture alone) and its CUPTI settings cap_perthread,
# cap_hwtrace, cap_pids (CUFALL_CAPTURE_TUNE) and cap_noforce (CUFALL_CAPTURE_FLUSH_MS=0); nsys (nsys profile -t cuda,nvtx
# --cuda-graph-trace=graph --sample=none --cpuctxsw=none). Results: $OUT/overhead.txt (one line
# per run) and the table at the end.
set -u
cd "$(dirname "$0")/../.."
BIN=${BIN:-.dev-bin/all}
C="$BIN/cufall"
OUT=${OUT:-/tmp/cufall-overhead}
ROUNDS=${ROUNDS:-5}
PIN=${PIN:-3}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-2}
MODES=${MODES:-graph}
CASES=${CASES:-"bare none nvtx graphs kernels nostacks default nsys"}
ENGINE=${ENGINE:-1}
T=$(mktemp -d /tmp/cufall-ovh.XXXX)
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
NSYS=$(command -v nsys || ls /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | head -1)
echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo '?') $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
"$C" --version | head -2; echo "nsys: ${NSYS:-none}; pinned to CPU $PIN of $(nproc)"

# prefix CASE: the command in front of the pinned program
prefix() {
  local r=("$C" record --force -o "$T/o.cufall" --devices 0)
  case $1 in
    bare) ;;
    none) echo "${r[@]} --nvml-only --capture none --host-stacks off --" ;;
    nvtx) echo "${r[@]} --nvml-only --capture nvtx --host-stacks off --" ;;
    graphs) echo "${r[@]} --nvml-only --capture nvtx,graphs --host-stacks off --" ;;
    kernels) echo "${r[@]} --nvml-only --capture nvtx,kernels,memcpy --host-stacks off --" ;;
    nostacks) echo "${r[@]} --host-stacks off --" ;;
    default) echo "${r[@]} --" ;;
    nofence) echo "env CUFALL_CPU_FENCE=off ${r[@]} --" ;;
    h_period) echo "env CUFALL_HOST_TUNE=period-full ${r[@]} --" ;;
    h_leaf32) echo "env CUFALL_HOST_TUNE=leaf-stack=32 ${r[@]} --" ;;
    h_leaf64) echo "env CUFALL_HOST_TUNE=leaf-stack=64 ${r[@]} --" ;;
    h_noleaf) echo "env CUFALL_HOST_TUNE=no-leaf-perf ${r[@]} --" ;;
    h_10ms) echo "${r[@]} --host-interval 10ms --" ;;
    cap) echo "${r[@]} --nvml-only --host-stacks off --" ;;
    cap_perthread) echo "env CUFALL_CAPTURE_TUNE=per-thread-buffers ${r[@]} --nvml-only --host-stacks off --" ;;
    cap_hwtrace) echo "env CUFALL_CAPTURE_TUNE=hw-trace ${r[@]} --nvml-only --host-stacks off --" ;;
    cap_pids) echo "env CUFALL_CAPTURE_TUNE=process-thread-ids ${r[@]} --nvml-only --host-stacks off --" ;;
    cap_noforce) echo "env CUFALL_CAPTURE_FLUSH_MS=0 ${r[@]} --nvml-only --host-stacks off --" ;;
    nsys) [ -n "$NSYS" ] && echo "$NSYS profile -t cuda,nvtx --cuda-graph-trace=graph --sample=none --cpuctxsw=none --force-overwrite true -o $T/nsys" ;;
  esac
}

run_loop() { # MODE CASE -> steps/s line
  local p; p=$(prefix "$2")
  [ "$2" != bare ] && [ -z "$p" ] && return
  local line
  line=$($p taskset -c "$PIN" python3 examples/workloads/graph_step_loop.py --mode "$1" \
    --seconds "$SECONDS_PER_RUN" 2>"$T/err.txt" | grep '^{' | tail -1)
  if [ -z "$line" ]; then echo "$1 $2 FAILED $(tail -c 300 "$T/err.txt" | tr '\n' ' ')"; return; fi
  echo "$1 $2 $line"
  if [ "$2" != bare ] && [ "$2" != nsys ]; then
    # What the report says capture added per step (its CAPTURE COST section), for the table.
    local said; said=$("$C" report "$T/o.cufall" --json 2>/dev/null | python3 -c '
import json, sys
c = json.load(sys.stdin).get("capture_cost") or {}
p = [p for p in c.get("phases", []) if p.get("per_step_ns") is not None]
print(p[0]["per_step_ns"] if p else "unknown")' 2>/dev/null)
    echo "$1 $2 REPORT ${said:-unknown}"
  fi
  case $2 in cap_*) "$C" info "$T/o.cufall" 2>/dev/null | grep -o "tuned ([^)]*)" | head -1 ;; esac
}

run_engine() { # GRAPHS CASE -> the engine's own median step
  local p; p=$(prefix "$2")
  [ "$2" != bare ] && [ -z "$p" ] && return
  $p taskset -c "$PIN" "$BIN/specdec" --preset 0.5b --context 256 --graphs "$1" --new-tokens 64 \
    > "$T/eng.txt" 2>&1
  local ms; ms=$(grep -o 'median step [0-9.]* ms' "$T/eng.txt" | grep -o '[0-9.]*' | tail -1)
  if [ -z "$ms" ]; then echo "engine-graphs-$1 $2 FAILED $(tail -c 300 "$T/eng.txt" | tr '\n' ' ')"; return; fi
  echo "engine-graphs-$1 $2 {\"median_step_ms\": $ms}"
}

for round in $(seq "$ROUNDS"); do
  for mode in $MODES; do
    for c in $CASES; do run_loop "$mode" "$c"; done
  done
  if [ "$ENGINE" = 1 ] && [ -x "$BIN/specdec" ]; then
    for g in off on; do for c in bare nostacks default nsys; do run_engine "$g" "$c"; done; done
  fi
done | tee "$OUT/overhead.txt"

python3 - "$OUT/overhead.txt" <<'PY'
import json, re, statistics, sys
rows = {}
said = {}
for line in open(sys.argv[1]):
    parts = line.split(" ", 2)
    if len(parts) == 3 and parts[2].startswith("REPORT"):
        v = parts[2].split()[1]
        said.setdefault(parts[0], {}).setdefault(parts[1], []).append(None if v == "unknown" else float(v))
        continue
    if len(parts) < 3 or not parts[2].startswith("{"):
        continue
    d = json.loads(parts[2])
    v = d.get("steps") or d.get("median_step_ms")
    rows.setdefault(parts[0], {}).setdefault(parts[1], []).append((v, d))
print("\n%-18s %-9s %6s %10s %10s %9s %11s %11s  %s" % ("workload", "case", "runs", "median", "spread", "vs bare", "us/step +", "report says", "threads (cpu ms, involuntary switches of the busiest)"))
for w, cases in rows.items():
    higher_better = w in ("graph", "compile")
    bare = statistics.median([v for v, _ in cases.get("bare", [])]) if "bare" in cases else None
    for c, runs in cases.items():
        vs = [v for v, _ in runs]
        m = statistics.median(vs)
        ch = "" if not bare else "%+.1f%%" % (100 * ((m / bare - 1) if higher_better else (bare / m - 1)))
        th = runs[len(runs) // 2][1].get("threads", {})
        busy = sorted(th.items(), key=lambda kv: -kv[1]["cpu_ms"])[:4]
        ts = ", ".join("%s %d/%s" % (k, t["cpu_ms"], t["involuntary"]) for k, t in busy)
        # Added host time per step: the median over rounds of this case's µs per step minus the
        # same round's bare run's (loops only), beside the median of what its reports said.
        added = ""
        if higher_better and "bare" in cases and c != "bare":
            diffs = [d["us_per_step"] - b["us_per_step"] for (_, d), (_, b) in zip(runs, cases["bare"])]
            added = "%.1f" % statistics.median(diffs) if diffs else ""
        s = [x for x in said.get(w, {}).get(c, []) if x is not None]
        rep = "%.1f" % (statistics.median(s) / 1000) if s else ("unknown" if c in said.get(w, {}) else "")
        print("%-18s %-9s %6d %10.1f %10s %9s %11s %11s  %s" % (w, c, len(vs), m, "%.0f-%.0f" % (min(vs), max(vs)), ch, added, rep, ts))
PY
