#!/usr/bin/env bash
# A short end-to-end check of the release binaries on a GPU machine: the engine's phases (prefill,
# draft, verify; graphs on/off; split-KV and scattered attention; MoE), `record` with capture and
# the command line's duration syntax, Ctrl-C closing the trace, and report/diff/export on what was
# recorded. Prints one line per check; the whole log goes to $OUT/smoke.log when $OUT is set.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${BIN_DIR:-.dev-bin/all}
C="$B/cufall"
S="$B/specdec"
T=$(mktemp -d)
LOG=${OUT:-$T}/smoke.log
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
check "specdec check" "$S" check
check "specdec 64k split-kv --bench" "$S" --context 65536 --prompt-len 64 --new-tokens 32 --bench
check "specdec 0.5b graphs off, scattered, page 1, tree" "$S" --preset 0.5b --graphs off --verify-attn scattered --page-size 1 --width 2 --depth 3 --bench
check "specdec 8b MoE --bench" "$S" --preset 8b-gqa-8l --experts 8 --top-k 2 --prompt-len 64 --bench
check "record --duration 3 (bare seconds)" "$C" record -o "$T/idle.cufall" --duration 3
check "info reads it, complete" bash -c "'$C' info '$T/idle.cufall' | tee -a '$LOG' | grep -q complete"
check "NVML opened and polled (readings in the trace)" bash -c "'$C' info '$T/idle.cufall' | grep -E ' [1-9][0-9]* NVML readings'"
check "record --nvml-only" "$C" record -o "$T/nvml.cufall" --nvml-only --duration 2
check "an NVML-only trace has readings" bash -c "'$C' info '$T/nvml.cufall' | tee -a '$LOG' | grep -E ' [1-9][0-9]* NVML readings'"
check "record with capture (graphs off)" "$C" record -o "$T/g0.cufall" --interval 50us -- "$S" --preset 0.5b --graphs off --new-tokens 48
check "record with capture (graphs on)" "$C" record -o "$T/g1.cufall" --interval 50us -- "$S" --preset 0.5b --graphs on --new-tokens 48
check "report has phases and verdicts" bash -c "'$C' report '$T/g0.cufall' | tee -a '$LOG' | grep -q 'VERDICT'"
check "report --json verdict is data" bash -c "'$C' report '$T/g0.cufall' --json | grep -q '\"kind\"'"
check "diff graphs off vs on" "$C" diff "$T/g0.cufall" "$T/g1.cufall"
check "export perfetto" "$C" export "$T/g0.cufall" --format perfetto -o "$T/g0.json"
check "record --force replaces" "$C" record -o "$T/idle.cufall" --force --duration 1s
check "record refuses an existing trace, names --force" bash -c "'$C' record -o '$T/idle.cufall' --duration 1s 2>&1 | tee -a '$LOG' | grep -q -- '--force'"
# Ctrl-C: SIGINT to cufall while it records a sleeping program; the trace must be complete.
"$C" record -o "$T/int.cufall" -- sleep 30 >>"$LOG" 2>&1 &
pid=$!
sleep 4
kill -INT "$pid"
wait "$pid"
echo "ctrl-c rc $?" >>"$LOG"
check "Ctrl-C closes the trace" bash -c "'$C' info '$T/int.cufall' | tee -a '$LOG' | grep -q complete"
echo "smoke: $pass passed, $fail failed (log: $LOG)"
[ "$fail" = 0 ]
