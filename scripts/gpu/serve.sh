#!/usr/bin/env bash
# `cufall serve` on a GPU machine: the exporter under a bursty load (the engine, run again and
# again with 2 s pauses, its kernels recorded by `cufall record --nvml-only`) for $DURATION
# seconds (default 60), scraped every 15 s by one scraper and every 5 s by a real Prometheus
# where its binary was brought ($PROM); then a flight-recorder dump by POST /dump (a second while
# it runs: 409) and by SIGUSR1, read by info and report; each scrape window's idle ratio and
# gaps set beside the same windows computed from the dump's samples and from the load's kernels
# (analyze_serve.py); the exporter's cores per GPU and memory; SIGTERM ends it; then a 20 s
# flight recorder at the default interval whose dump comes back for the GUI.
# Parts (default: both): main (all of the above but the last), small (the 20 s recorder).
# Prints one line per check; results come back in $OUT (or a temporary folder): serve.log,
# windows.txt, serve-files.tar.xz (scrapes, logs, Prometheus answers), flight-small.tar.xz.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${BIN_DIR:-.dev-bin/all}
C="$B/cufall"
S="$B/specdec"
T=$(mktemp -d)
RES=${OUT:-$T/results}
DIR=$T/run
mkdir -p "$DIR/dumps" "$RES"
LOG=$DIR/serve.log
DURATION=${DURATION:-60}
KEEP=${KEEP:-3m}
PORT=${PORT:-9401}
URL="http://127.0.0.1:$PORT"
pass=0
fail=0
check() { # name, command...
  local name=$1
  shift
  if "$@" >>"$LOG" 2>&1; then
    echo "ok    $name"
    pass=$((pass + 1))
  else
    echo "FAIL  $name (rc $?)"
    fail=$((fail + 1))
  fi
}
series() { # FILE NAME: the values of the series NAME in a scrape
  grep "^$2[{ ]" "$1" | awk '{print $NF}'
}
parts="${*:-main small}"
want() { case " $parts " in *" $1 "*) return 0 ;; esac; return 1; }
if want main; then
  PROM=${PROM:-.dev-bin/all/prometheus}
  "$C" serve --listen "127.0.0.1:$PORT" --keep "$KEEP" --dump-dir "$DIR/dumps" 2>"$DIR/exporter.log" &
  pid=$!
  sleep 5
  check "the exporter runs" kill -0 "$pid"
  check "the log states the flight recorder's memory" grep -q "flight recorder keeps the last" "$DIR/exporter.log"
  # A real Prometheus scraping it every 5 s, where one was brought (Debian's binary, carried).
  prom=
  if [ -x "$PROM" ]; then
    printf 'global:\n  scrape_interval: 5s\nscrape_configs:\n  - job_name: cufall\n    static_configs:\n      - targets: ["127.0.0.1:%s"]\n' "$PORT" >"$T/prometheus.yml"
    "$PROM" --config.file="$T/prometheus.yml" --storage.tsdb.path="$T/prom-data" --web.listen-address=127.0.0.1:9091 >"$DIR/prometheus.log" 2>&1 &
    prom=$!
  fi
  # Scrapes every 15 s as one scraper (`?scraper=bench`); each one's end time is kept for the
  # comparison with the traces (scrape-times.txt: number, unix seconds).
  scrape() { curl -s "$URL/metrics?scraper=bench" >"$DIR/scrape-$1.txt"; echo "$1 $(date +%s.%N)" >>"$DIR/scrape-times.txt"; }
  scrape 0
  # A bursty load: the engine, then a pause, over and over, recorded with its kernels (NVML
  # only: the exporter holds the counters) to compare the exporter's windows with.
  end=$((SECONDS + DURATION))
  "$C" record --force --nvml-only --host-stacks off --capture kernels -o "$DIR/load.cufall" -- bash -c \
    "while [ \$(date +%s) -lt $(($(date +%s) + DURATION)) ]; do '$S' --preset 0.5b --new-tokens 64 >/dev/null 2>&1; sleep 2; done" \
    >"$DIR/load-record.log" 2>&1 &
  load=$!
  n=1
  while [ $SECONDS -lt $end ]; do
    sleep 15
    scrape $n
    n=$((n + 1))
  done
  wait "$load"
  tail -5 "$DIR/load-record.log"
  last="$DIR/scrape-$((n - 1)).txt"
  check "every GPU has an idle ratio in [0, 1]" bash -c "[ -n \"\$(grep '^cufall_idle_ratio{' '$last')\" ] && ! grep '^cufall_idle_ratio{' '$last' | awk '{if (\$NF < 0 || \$NF > 1) bad = 1} END {exit !bad}'"
  check "nvidia-smi's utilisation beside it" grep -q '^cufall_nvml_gpu_utilization_ratio{' "$last"
  check "sampling state is sampling" grep -q '^cufall_sampling_state{state="sampling"} 1' "$last"
  check "no sample lost" bash -c "grep -q '^cufall_samples_lost_total{' '$last' && ! grep '^cufall_samples_lost_total{' '$last' | awk '{if (\$NF > 0) bad = 1} END {exit !bad}'"
  echo "cores per GPU: $(series "$last" cufall_exporter_cores_per_gpu)  resident bytes: $(series "$last" cufall_exporter_resident_memory_bytes)  flight recorder bytes: $(series "$last" cufall_flight_recorder_bytes)" | tee -a "$LOG"
  curl -s -X POST "$URL/dump" >"$DIR/dump.txt" &
  first=$!
  sleep 0.2
  code=$(curl -s -o "$DIR/dump2.txt" -w '%{http_code}' -X POST "$URL/dump")
  wait "$first"
  check "a dump while a dump runs is refused (409)" [ "$code" = 409 ]
  dump=$(sed -n 's/^wrote \(.*\) (.*/\1/p' "$DIR/dump.txt")
  check "POST /dump wrote a trace" test -n "$dump"
  check "info reads the dump, complete" bash -c "'$C' info '$dump' | tee -a '$LOG' | grep -q complete"
  check "report reads the dump" bash -c "'$C' report '$dump' --json > '$DIR/report.json'"
  # Dumps are at least 10 s apart: wait that out before the signal asks for another.
  sleep 10
  kill -USR1 "$pid"
  sleep 10
  check "SIGUSR1 writes a dump too" bash -c "[ \$(ls -d '$DIR'/dumps/flight-*.cufall | wc -l) -ge 2 ]"
  echo "exporter process: $(ps -o rss=,time= -p "$pid" | awk '{printf "%.1f MiB resident, CPU time %s", $1 / 1024, $2}') over $SECONDS s"
  kill -TERM "$pid"
  wait "$pid"
  check "SIGTERM ends it with code 0" [ $? = 0 ]
  if [ -n "$prom" ]; then
    q() { curl -s "http://127.0.0.1:9091/api/v1/query" --data-urlencode "query=$1"; }
    q 'cufall_idle_ratio' >"$DIR/prom-idle.json"
    q 'count_over_time(cufall_samples_total[10m])' >"$DIR/prom-count.json"
    check "Prometheus scraped it: cufall_idle_ratio with dcgm-exporter's labels" \
      bash -c "grep -q '\"gpu\":\"0\"' '$DIR/prom-idle.json' && grep -q '\"UUID\":\"GPU-' '$DIR/prom-idle.json' && grep -q '\"modelName\"' '$DIR/prom-idle.json'"
    echo "prometheus: $(head -c 600 "$DIR/prom-idle.json")"
    echo "prometheus scrapes of cufall_samples_total: $(grep -o '"value":\[[^]]*\]' "$DIR/prom-count.json" | head -1)"
    kill "$prom"
  fi
  PYA=${PY:-$( [ -x /opt/torch/.venv/bin/python ] && echo /opt/torch/.venv/bin/python || echo python3)}
  $PYA scripts/gpu/analyze_serve.py "$DIR" "$dump" "$DIR/load.cufall" 2>&1 | tee "$DIR/windows.txt"
fi
if want small; then
  # A short flight recorder at the default interval (0.3 of a core per GPU), for the GUI: 20 s
  # of a load, dumped; its cores and memory.
  mkdir -p "$DIR/small"
  "$C" serve --listen "127.0.0.1:$PORT" --keep 20s --dump-dir "$DIR/small" 2>"$DIR/exporter-small.log" &
  pid=$!
  sleep 3
  ( for _ in 1 2 3; do "$S" --preset 0.5b --new-tokens 64 >/dev/null 2>&1; sleep 1; done )
  sleep 8
  curl -s "$URL/metrics" >"$DIR/scrape-small.txt"
  curl -s -X POST "$URL/dump" | tee -a "$LOG"
  echo "default-interval exporter: $(grep -o "every [0-9a-zµ]*" "$DIR/exporter-small.log" | head -1); cores per GPU $(series "$DIR/scrape-small.txt" cufall_exporter_cores_per_gpu), resident bytes $(series "$DIR/scrape-small.txt" cufall_exporter_resident_memory_bytes)"
  kill -TERM "$pid"
  wait "$pid"
  small=$(ls -d "$DIR"/small/flight-*.cufall | head -1)
  check "the small dump reads" bash -c "'$C' report '$small' > '$DIR/small-report.txt'"
  [ -n "$small" ] && tar -C "$(dirname "$small")" -cJf "$DIR/flight-small.tar.xz" "$(basename "$small")"
fi
rm -rf "$DIR/dumps" "$DIR/small" "$DIR/load.cufall"
cp "$LOG" "$DIR/windows.txt" "$RES/" 2>/dev/null
[ -f "$DIR/flight-small.tar.xz" ] && mv "$DIR/flight-small.tar.xz" "$RES/"
tar -C "$DIR" -cJf "$RES/serve-files.tar.xz" .
echo "serve: $pass passed, $fail failed (results in $RES)"
[ "$fail" = 0 ]
