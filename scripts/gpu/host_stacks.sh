#!/usr/bin/env bash
# Host stacks on a GPU machine: third-party programs recorded with host stacks (on by default) and
# what the report says the host was doing in their gaps; then the slowdown that sampling host
# stacks costs a host-bound and a GPU-bound PyTorch decode loop.
#
#   cargo build --release -p cufall -p cufall-inject -p specdec && scripts/gpu/pack.sh
#   scripts/gpu/host_stacks.sh [PART...]     # results and traces under $OUT
#
# Parts (default: all): phases hf engine slowdown
#   phases    examples/workloads/torch_phases.py (a 2 ms host sleep between draft and verify):
#             the report must name the sleep's line as the host's place in draft → verify
#   hf        Hugging Face generate, batch 1: the report's host frames for its gaps
#   engine    specdec --graphs off and on: where its host time goes between passes
#   slowdown  decode_loop.py --mode host|gpu: bare, recorded with --host-stacks off, recorded with
#             host stacks (1 kHz), ROUNDS interleaved rounds of SECONDS each; median step times,
#             the CPU the whole run took (user+sys, cufall and program), samples kept/asked
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/lib.sh
OUT=${OUT:-/tmp/cufall-host}
T=$(mktemp -d /tmp/cufall-host.XXXX)
KEEP="$T/keep"
R="$T/res"
mkdir -p "$OUT" "$KEEP" "$R"
parts="${*:-phases hf engine slowdown}"
ROUNDS=${ROUNDS:-3}
SECONDS_RUN=${SECONDS_RUN:-4}
REC=("$C" record --force --devices 0)
keep() { cp -r "$1" "$KEEP/"; }
host_section() { # the report's host lines (HOST … to the next blank section)
  "$C" report "$1" | awk '/^HOST/{on=1; print; next} /^[A-Z][A-Z]+/{on=0} on' | head -"${2:-40}"
}

hdr "machine"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
"$C" --version
$PY -c 'import sys, torch, transformers; print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__)'
echo "ptrace_scope $(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo none), perf_event_paranoid $(cat /proc/sys/kernel/perf_event_paranoid)"

if want phases; then
  hdr "phases: torch_phases.py, 40 steps, 2 ms host sleep between draft and verify (line 64)"
  "${REC[@]}" -o "$T/torch-phases-host.cufall" --interval 200us -- $PY $WL/torch_phases.py --steps 40 2>&1 | tail -14
  "$C" report "$T/torch-phases-host.cufall" --lines > "$R/torch-phases-host.report.txt"
  "$C" report "$T/torch-phases-host.cufall" --json > "$R/torch-phases-host.report.json"
  host_section "$T/torch-phases-host.cufall" 60
  check "draft → verify gaps: the host in torch_phases.py:64 (the sleep)" \
    bash -c "grep -A6 'draft → verify' '$R/torch-phases-host.report.txt' | grep -q 'main (torch_phases.py) [0-9]*% waiting \[:64 '"
  check "the manifest's host_stacks (format 1.4): every 1 ms, mixed frames, on" \
    $PY -c "import json, sys; h = json.load(open(sys.argv[1]))['host_stacks']; assert (h['interval_ns'], h['frames'], h.get('off_reason')) == (1000000, 'mixed', None), h" \
    "$T/torch-phases-host.cufall/manifest.json"
  check "report: the host interval is the one asked for" \
    $PY -c "import json, sys; h = json.load(open(sys.argv[1]))['host']; assert (h['interval_ns'], h['interval_source']) == (1000000, 'asked'), h" \
    "$R/torch-phases-host.report.json"
  "$C" info "$T/torch-phases-host.cufall" | grep -i "host" | head -8
  du -sh "$T/torch-phases-host.cufall"
  keep "$T/torch-phases-host.cufall"
fi

if want hf; then
  hdr "hf: Hugging Face generate, batch 1, 32 new tokens"
  "${REC[@]}" -o "$T/hf-generate-host.cufall" --interval 200us -- $PY $WL/hf_generate.py --new-tokens 32 2>&1 | tail -14
  "$C" report "$T/hf-generate-host.cufall" > "$R/hf-generate-host.report.txt"
  host_section "$T/hf-generate-host.cufall" 80
  check "hf: sampled generation's gaps name transformers' logits processors" \
    bash -c "grep -A3 '^  sampled (' '$R/hf-generate-host.report.txt' | grep -q 'logits_process.py'"
  du -sh "$T/hf-generate-host.cufall"
  keep "$T/hf-generate-host.cufall"
fi

if want engine; then
  for g in off on; do
    hdr "engine: specdec --graphs $g, host stacks"
    "${REC[@]}" -o "$T/specdec-graphs-$g-host.cufall" --interval 200us -- "$S" --preset 0.5b --context 256 --graphs $g --new-tokens 64 2>&1 | tail -10
    "$C" report "$T/specdec-graphs-$g-host.cufall" > "$R/specdec-graphs-$g-host.report.txt"
    host_section "$T/specdec-graphs-$g-host.cufall" 50
    "$C" info "$T/specdec-graphs-$g-host.cufall" | grep -i "host" | head -6
    du -sh "$T/specdec-graphs-$g-host.cufall"
    keep "$T/specdec-graphs-$g-host.cufall"
  done
fi

if want slowdown; then
  hdr "slowdown: decode_loop.py, $ROUNDS interleaved rounds of ${SECONDS_RUN} s: bare, record --host-stacks off, record (host stacks at 1 kHz)"
  TIMEFORMAT='%U %S'
  one() { # label, mode, command... → "label mode median_us mean_us steps cpu_s"
    local label=$1 mode=$2
    shift 2
    local res cpu
    { time "$@" $PY $WL/decode_loop.py --mode "$mode" --seconds "$SECONDS_RUN" >"$T/one.out" 2>"$T/one.err"; } 2>"$T/one.time"
    res=$(grep '^{' "$T/one.out" | tail -1)
    cpu=$(awk '{print $1 + $2}' "$T/one.time")
    echo "$label $mode $(echo "$res" | $PY -c 'import json,sys; d=json.load(sys.stdin); print(d["median_us"], d["mean_us"], d["steps"])') $cpu"
    grep -h "host stacks" "$T/one.err" | head -3 | sed "s/^/    [$label $mode] /" >&2
  }
  for round in $(seq "$ROUNDS"); do
    for mode in host gpu; do
      one bare "$mode"
      one stacks_off "$mode" "${REC[@]}" -o "$T/s.cufall" --host-stacks off --
      one stacks_on "$mode" "${REC[@]}" -o "$T/s.cufall" --
    done
  done 2> >(tee "$R/slowdown-host-lines.txt" >&2) | tee "$R/slowdown.txt"
  sleep 1
  $PY - "$R/slowdown.txt" <<'EOF'
import statistics, sys, collections
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 6:
        rows[(f[0], f[1])].append((float(f[2]), float(f[3]), int(f[4]), float(f[5])))
for mode in ("host", "gpu"):
    med = {k: statistics.median(r[0] for r in v) for (k, m), v in rows.items() if m == mode}
    cpu = {k: statistics.median(r[3] for r in v) for (k, m), v in rows.items() if m == mode}
    if not med:
        continue
    print(f"{mode}-bound: median step {med.get('bare', 0):.1f} us bare, {med.get('stacks_off', 0):.1f} us recorded without host stacks, "
          f"{med.get('stacks_on', 0):.1f} us with host stacks: host stacks cost {100 * (med['stacks_on'] / med['stacks_off'] - 1):+.2f} % "
          f"(recording in all {100 * (med['stacks_on'] / med['bare'] - 1):+.2f} % over bare); "
          f"CPU of the whole run {cpu.get('stacks_off', 0):.2f} s -> {cpu.get('stacks_on', 0):.2f} s")
EOF
fi

tar -C "$R" -cJf "$OUT/host-results.tar.xz" .
if [ -n "$(ls -A "$KEEP")" ]; then
  tar -C "$KEEP" -cJf "$OUT/traces-host-$(echo $parts | tr ' ' '-').tar.xz" .
  ls -la "$OUT"
fi
hdr "host stacks: $pass checks passed, $fail failed"
