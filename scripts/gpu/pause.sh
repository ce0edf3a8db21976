#!/usr/bin/env bash
# Sharing the counters on a GPU machine, meant to take under three minutes:
# `cufall serve` samples GPU 0 under a bf16 matmul load; `ncu` fails while it samples
# and a second `cufall record` is told which cufall holds the counters and how to pause it;
# `POST /pause?for=150s` releases them (the gauge reads paused, NVML goes on) and `ncu` profiles a
# matmul; `cufall control resume` takes them back (samples flow again); a second pause of 5 s
# ends by itself; a flight-recorder dump holds the two pauses as `paused` drops, which `info`
# and `report` read; then a `cufall record` is paused the same way and its trace holds the
# pause. Prints one line per check, then a PASS/FAIL table.
# Results in $OUT (or a temporary folder): pause.log (everything), scrapes, ncu output, the
# dump (flight-pause.tar.xz, a real 1.3 trace holding `paused` drops).
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${BIN_DIR:-.dev-bin/all}
C="$B/cufall"
T=$(mktemp -d)
RES=${OUT:-$T/results}
DIR=$T/run
mkdir -p "$DIR/dumps" "$RES"
LOG=$DIR/pause.log
PORT=${PORT:-9401}
URL="http://127.0.0.1:$PORT"
PY=${PY:-$( [ -x /opt/torch/.venv/bin/python ] && echo /opt/torch/.venv/bin/python || echo python3)}
NCU=${NCU:-$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | tail -1)}
W=examples/workloads/matmul_copy.py
M=sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed
export PYTHONUNBUFFERED=1
results=()
check() { # name, command...
  local name=$1
  shift
  if "$@" >>"$LOG" 2>&1; then
    echo "ok    $name" | tee -a "$LOG"
    results+=("PASS|$name")
  else
    echo "FAIL  $name (rc $?)" | tee -a "$LOG"
    results+=("FAIL|$name")
  fi
}
scrape() { curl -s "$URL/metrics?scraper=pause" >"$DIR/scrape-$1.txt"; }
series() { # FILE NAME [LABEL]: the value of the series NAME (with LABEL) in a scrape
  grep "^$2[{ ]" "$1" | grep -F -- "${3:-}" | head -1 | awk '{print $NF}'
}
state_is() { # STATE: the gauge reads it now
  curl -s "$URL/metrics?scraper=state" | grep -q "^cufall_sampling_state{state=\"$1\"} 1"
}
wait_state() { # STATE SECONDS
  local end=$((SECONDS + $2))
  while [ $SECONDS -lt $end ]; do state_is "$1" && return 0; sleep 0.5; done
  return 1
}
ncu_run() { # OUTFILE: a short matmul program under ncu, the metric per kernel as CSV
  timeout 120 "$NCU" --clock-control none --metrics "$M" --csv --launch-skip 3 --launch-count 2 \
    "$PY" "$W" --only matmul --iters 6 >"$1" 2>&1
}
ncu_has_value() { # FILE: a row with the metric and a number
  grep -F "\"$M\"" "$1" | grep -Eq '"[0-9]+([.,][0-9]+)?"$'
}
ncu_failed() { ! ncu_has_value "$1" && grep -qE '==ERROR==|unavailable|ERR_NVGPU' "$1"; }
echo "cufall $("$C" --version 2>&1) · ncu ${NCU:-none} · python $PY" | tee "$LOG"
check "ncu is on this machine" test -x "$NCU"

"$C" serve --listen "127.0.0.1:$PORT" --devices 0 --keep 3m --dump-dir "$DIR/dumps" 2>"$DIR/exporter.log" &
pid=$!
"$PY" "$W" --load 240 >"$DIR/load.log" 2>&1 &
load=$!
check "the exporter samples the counters" wait_state sampling 60

# 1. Counters held: ncu cannot profile, and another cufall is told who holds them.
ncu_run "$DIR/ncu-while-sampling.txt"
rc=$?
echo "ncu while sampling, rc $rc: $(grep -m2 -E 'ERR|rror|unavailable' "$DIR/ncu-while-sampling.txt" | tr '\n' ' ')" | tee -a "$LOG"
check "ncu fails while the exporter samples" ncu_failed "$DIR/ncu-while-sampling.txt"
"$C" record -o "$DIR/second.cufall" --devices 0 --duration 2s >"$DIR/second-record.txt" 2>&1
cat "$DIR/second-record.txt" >>"$LOG"
check "a second cufall names the holder and the pause command" \
  bash -c "grep -q 'held by cufall serve' '$DIR/second-record.txt' && grep -q 'control pause --pid $pid' '$DIR/second-record.txt'"

# 2. A pause: released at once, NVML goes on, ncu profiles.
curl -s -o "$DIR/pause.txt" -w '%{http_code}\n' -X POST "$URL/pause?for=150s" >"$DIR/pause-code.txt"
cat "$DIR/pause.txt" "$DIR/pause-code.txt" | tee -a "$LOG"
check "POST /pause?for=150s answers 200, paused" bash -c "grep -q 200 '$DIR/pause-code.txt' && grep -q '^paused:' '$DIR/pause.txt'"
# Batches decoded before the release reach the exporter within a few tens of ms.
sleep 1
scrape paused-1
sleep 2
scrape paused-2
check "the gauge reads paused, with the time left" bash -c \
  "grep -q '^cufall_sampling_state{state=\"paused\"} 1' '$DIR/scrape-paused-2.txt' && awk '/^cufall_pause_remaining_seconds /{exit !(\$2 > 0 && \$2 <= 150)}' '$DIR/scrape-paused-2.txt'"
check "NVML goes on during the pause (power in the window)" test -n "$(series "$DIR/scrape-paused-2.txt" cufall_power_watts 'gpu="0"')"
check "no samples during the pause" test "$(series "$DIR/scrape-paused-1.txt" cufall_samples_total 'gpu="0"')" = "$(series "$DIR/scrape-paused-2.txt" cufall_samples_total 'gpu="0"')"
ncu_run "$DIR/ncu-paused.txt"
rc=$?
echo "ncu during the pause, rc $rc:" | tee -a "$LOG"
grep -F "\"$M\"" "$DIR/ncu-paused.txt" | tee -a "$LOG"
check "ncu profiles the matmul during the pause" ncu_has_value "$DIR/ncu-paused.txt"

# 3. Resume, then a short pause that ends by itself.
"$C" control resume --pid "$pid" 2>&1 | tee "$DIR/resume.txt" | tee -a "$LOG"
check "cufall control resume answers resumed" grep -q 'resumed: sampling the GPU counters again' "$DIR/resume.txt"
check "the gauge reads sampling after the resume" wait_state sampling 10
sleep 2
scrape resumed-1
sleep 2
scrape resumed-2
check "samples flow again" bash -c "[ \"\$(grep '^cufall_samples_total{' '$DIR/scrape-resumed-2.txt' | head -1 | awk '{print \$NF}')\" != \"\$(grep '^cufall_samples_total{' '$DIR/scrape-resumed-1.txt' | head -1 | awk '{print \$NF}')\" ]"
echo "tensor mean after resume: $(series "$DIR/scrape-resumed-2.txt" cufall_metric_mean 'gpu="0"')" | tee -a "$LOG"
"$C" control pause --pid "$pid" --for 5s 2>&1 | tee -a "$LOG"
check "a pause of 5 s: the gauge reads paused" state_is paused
check "... and sampling again by itself after it" wait_state sampling 30
refused_in_one_line() { # the answer to a pause of two days
  local out rc
  out=$("$C" control pause --pid "$pid" --for 2d 2>&1)
  rc=$?
  echo "$out"
  [ "$rc" != 0 ] && [ "$(echo "$out" | wc -l)" = 1 ] && echo "$out" | grep -q 'longer than a day'
}
check "a pause longer than a day is refused in one line" refused_in_one_line

# 4. The flight recorder holds both pauses.
sleep 3
curl -s -X POST "$URL/dump" | tee "$DIR/dump.txt" | tee -a "$LOG"
dump=$(sed -n 's/^wrote \(.*\) (.*/\1/p' "$DIR/dump.txt")
check "POST /dump wrote a trace" test -n "$dump"
"$C" info "$dump" 2>&1 | tee "$DIR/info.txt" >>"$LOG"
"$C" report "$dump" 2>&1 | tee "$DIR/report.txt" >>"$LOG"
grep -A4 '^DROPS' "$DIR/report.txt" | tee -a "$LOG"
check "info reads the dump and shows the paused time apart from the lost" grep -q ' paused)' "$DIR/info.txt"
check "report lists the two pauses as paused drops" grep -q 'paused ×2' "$DIR/report.txt"
kill -TERM "$pid"
wait "$pid"
check "SIGTERM ends the exporter with code 0" [ $? = 0 ]

# 5. A recording pauses the same way: its trace holds the pause.
"$C" record -o "$DIR/paused.cufall" --devices 0 --duration 12s >"$DIR/record.txt" 2>&1 &
rpid=$!
pause_record() { # asks until the recording runs (it refuses while it starts)
  local end=$((SECONDS + 20))
  while [ $SECONDS -lt $end ]; do
    "$C" control pause --pid "$rpid" --for 3s && return 0
    sleep 0.5
  done
  return 1
}
check "cufall control pause reaches a running record" pause_record
wait "$rpid"
check "the recording ends with code 0" [ $? = 0 ]
cat "$DIR/record.txt" >>"$LOG"
"$C" info "$DIR/paused.cufall" 2>&1 | tee "$DIR/record-info.txt" >>"$LOG"
check "its trace holds the pause (info)" grep -q ' paused)' "$DIR/record-info.txt"
check "its summary says it was paused" grep -q 'sampling was paused' "$DIR/record.txt"
kill "$load" 2>/dev/null
wait "$load" 2>/dev/null
grep -E 'pause|counters' "$DIR/exporter.log" >>"$LOG"
[ -n "$dump" ] && tar -C "$(dirname "$dump")" -cJf "$RES/flight-pause.tar.xz" "$(basename "$dump")"
cp "$LOG" "$DIR"/scrape-*.txt "$DIR"/ncu-*.txt "$DIR/exporter.log" "$DIR/second-record.txt" "$DIR/record.txt" "$RES/" 2>/dev/null

echo
echo "| check | result |"
echo "|---|---|"
pass=0
fail=0
for r in "${results[@]}"; do
  echo "| ${r#*|} | ${r%%|*} |"
  case $r in PASS*) pass=$((pass + 1)) ;; *) fail=$((fail + 1)) ;; esac
done
echo "pause: $pass passed, $fail failed (results in $RES)"
[ "$fail" = 0 ]
