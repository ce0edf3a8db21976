#!/usr/bin/env bash
# A server's workers recorded by window, as vLLM and SGLang expose profiling (neither can be
# installed on the GPU test machine, so examples/workloads/profiler_workers.py makes their hook
# sequence): three workers started with multiprocessing's spawn share GPU 0, run a decode loop
# with NVTX phases, and each call cudaProfilerStart/Stop at their own moments (three windows of
# 300 ms each, 150 ms after the previous worker's), a second start inside a window, and a fourth
# worker opens a window and exits without closing it. Takes about a minute.
#
#   cargo build --release -p cufall -p cufall-inject && scripts/gpu/pack.sh   (development machine)
#   scripts/gpu/unpack.sh && scripts/gpu/servers.sh                           (GPU machine)
#
# Checks, one PASS/FAIL line each (scripts/gpu/analyze_workers.py compares the trace with what
# the workers timed themselves), then a last line `PASS  servers.sh` or `FAIL  servers.sh`:
# - `--capture-range cuda-profiler-api --capture-range-end repeat`: one trace holds each worker's
#   own windows (`process_window` rows of its pid, at the times it timed), their union as the
#   `capture_window` rows, every phase and sample inside the union and none outside, and every
#   phase of each worker inside its own windows; the leaky worker's window ends at its exit with
#   a `window_open_at_exit` row naming it, which `cufall report` prints;
# - `--capture-range-end stop`: the recording ends when the first union window closes, that is
#   when the last of the three overlapping workers stops (one window of about 600 ms).
# Results in $OUT: servers.log (everything), truth-*/ (the workers' timings), the traces
# (servers-traces.tar.xz).
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${BIN_DIR:-.dev-bin/all}
C="$B/cufall"
T=$(mktemp -d /tmp/cufall-servers.XXXX)
OUT=${OUT:-$T/results}
mkdir -p "$OUT"
exec > >(tee "$OUT/servers.log") 2>&1
PY=${PY:-$( [ -x /opt/torch/.venv/bin/python ] && echo /opt/torch/.venv/bin/python || echo python3)}
W=examples/workloads/profiler_workers.py
export PYTHONUNBUFFERED=1
REC=("$C" record --force --devices 0 --interval 100us --capture-range cuda-profiler-api)
fails=0
verdict() { # ok?, name, detail
  if [ "$1" = 0 ]; then echo "PASS  $2${3:+: $3}"; else echo "FAIL  $2${3:+: $3}"; fails=$((fails + 1)); fi
}
hdr() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }

hdr "machine"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
"$C" --version
$PY -c 'import torch; print("torch", torch.__version__)'

hdr "repeat: three staggered workers and a leaky one, every window kept"
timeout 120 "${REC[@]}" --capture-range-end repeat -o "$T/workers.cufall" -- \
  $PY $W --out "$T/truth-repeat" 2>&1 | tail -15
"$C" info "$T/workers.cufall" | head -30
hdr "repeat: the report's capture lines"
"$C" report "$T/workers.cufall" >"$T/report.txt" 2>&1
grep -E "capture|window" "$T/report.txt" | head -12
leaky=$($PY -c 'import glob, json, sys
print(*[t["pid"] for t in map(lambda p: json.load(open(p)), glob.glob(sys.argv[1] + "/worker-*.json")) if t["leaky"]])' "$T/truth-repeat")
grep -q "window_open_at_exit.*pid ${leaky:-none}" "$T/report.txt"
verdict $? "cufall report names the leaky worker's window left open" "pid ${leaky:-none}"
hdr "repeat: the trace against the workers' own timings"
"$C" export --force --format csv -o "$T/workers-csv" "$T/workers.cufall" >/dev/null
$PY scripts/gpu/analyze_workers.py "$T/workers-csv" "$T/truth-repeat" | tee "$T/analysis.txt"
if grep -q "^FAIL" "$T/analysis.txt"; then fails=$((fails + 1)); fi

hdr "stop: the recording ends when the last of the overlapping workers closes the first window"
timeout 120 "${REC[@]}" -o "$T/workers-stop.cufall" -- \
  $PY $W --out "$T/truth-stop" 2>&1 | tail -8
# cufall has left; the workers run on to their end and write their timings.
for _ in $(seq 60); do pgrep -f "^$PY $W --out $T/truth-stop" >/dev/null || break; sleep 0.5; done
"$C" export --force --format csv -o "$T/stop-csv" "$T/workers-stop.cufall" >/dev/null
$PY - "$T/stop-csv" "$T/truth-stop" <<'EOF'
import csv, glob, json, sys
rows = list(csv.DictReader(open(sys.argv[1] + "/capture.csv")))
wins = [(int(r["t_ns"]), int(r["count"])) for r in rows if r["event"] == "capture_window"]
truth = [json.load(open(p)) for p in glob.glob(sys.argv[2] + "/worker-*.json")]
first = [t["windows"][0] for t in truth if not t["leaky"]]
start, end = min(w[0] for w in first), max(w[1] for w in first)
ok = len(wins) == 1 and abs(wins[0][0] - start) < 5e6 and abs(wins[0][0] + wins[0][1] - end) < 5e6
got = f"{wins[0][1] / 1e6:.0f} ms" if wins else "none"
print(f"{'PASS' if ok else 'FAIL'}  one window, from the first worker's start to the last one's stop: "
      f"{len(wins)} window(s), {got}; the workers timed {(end - start) / 1e6:.0f} ms")
sys.exit(0 if ok else 1)
EOF
[ $? = 0 ] || fails=$((fails + 1))

cp -r "$T"/truth-* "$OUT/" 2>/dev/null
tar -C "$T" -cJf "$OUT/servers-traces.tar.xz" workers.cufall workers-stop.cufall 2>/dev/null
hdr "done"
if [ "$fails" = 0 ]; then echo "PASS  servers.sh"; else echo "FAIL  servers.sh ($fails failed)"; fi
