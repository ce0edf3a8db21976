#!/usr/bin/env bash
# Gaps that add up, and what the host was doing in them: a Python loop that mixes four host causes
# of idle GPU time in known proportions (examples/workloads/four_causes.py: pure-Python work,
# torch.cuda.synchronize on a spinning kernel, pageable device-to-host copies, many tiny kernel
# launches, a thread's Event.wait), recorded with host stacks and the CUDA calls; the report's
# verdict line for its `step` place next to the shares the program measured itself, each cause
# within 10 points. Then, as time allows, the same verdict lines on the engine (graphs off and
# on), Hugging Face generate and a JAX loop.
#
#   cargo build --release -p cufall -p cufall-inject -p specdec && scripts/gpu/pack.sh
#   scripts/gpu/unpack.sh && scripts/gpu/gaps.sh [PART...]   # logs and traces under $OUT
#
# Parts (default: four engine; about 1 minute): four engine hf jax (hf and jax: about 1 minute
# more each).
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/lib.sh
OUT=${OUT:-/tmp/cufall-gaps}
T=$(mktemp -d /tmp/cufall-gaps.XXXX)
mkdir -p "$OUT"
parts="${*:-four engine}"
REC=("$C" record --force --devices 0)
# The verdict section's host lines, and the IDLE GAPS head and places.
verdict() { "$C" report "$1" | awk '/^VERDICT/{on=1} on' | cut -c1-400; }
places() { "$C" report "$1" | awk '/^IDLE GAPS/{on=1} /^  longest/{on=0} on' | head -"${2:-16}"; }

{
  hdr "machine"
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
  "$C" --version

  if want four; then
    hdr "four causes: four_causes.py, 20 steps of 100 ms (cpu 35, sync 15, copy 20, launch 15, wait 15 %)"
    "${REC[@]}" -o "$T/four-causes.cufall" --capture nvtx,kernels,memcpy,api -- \
      $PY $WL/four_causes.py 2>&1 | tee "$T/four.out" | tail -6
    grep '^{' "$T/four.out" | tail -1 > "$OUT/four-causes.measured.json"
    "$C" report "$T/four-causes.cufall" > "$OUT/four-causes.report.txt"
    "$C" report "$T/four-causes.cufall" --json > "$OUT/four-causes.report.json"
    places "$T/four-causes.cufall"
    verdict "$T/four-causes.cufall"
    hdr "four causes: the report's step line against the program's own shares (10-point check)"
    $PY - "$OUT/four-causes.measured.json" "$OUT/four-causes.report.json" <<'EOF'
import json, sys
measured = json.load(open(sys.argv[1]))["measured_shares"]
report = json.load(open(sys.argv[2]))
host = report.get("host") or {}
cls = [c for c in host.get("gap_classes", []) if c["scope"] == "place" and c["name"] == "step"]
if not cls:
    print("FAIL  no host class for the place `step` (host samples or gaps missing)")
    sys.exit(1)
c = cls[0]
view = c.get("launching") or c["all"]
got = {x["cause"]: x["share"] for x in view["causes"]["causes"]}
pairs = [("cpu", "computing"), ("sync", "waiting_for_gpu"), ("copy", "copying"),
         ("launch", "launching"), ("wait", "waiting_on_thread")]
print(f"  step: {c['time_ns'] / 1e9:.3f} s of gaps, host bound {c['host_bound']}, "
      f"causes from API calls {view['causes']['from_api_calls']}, unsampled "
      f"{view['causes']['unsampled'] * 100:.1f} %")
print(f"  {'part':8s} {'measured':>9s} {'report':>9s} {'diff':>7s}")
bad = 0
for part, cause in pairs:
    m, r = measured.get(part, 0.0) * 100, got.get(cause, 0.0) * 100
    ok = abs(m - r) <= 10
    bad += not ok
    print(f"  {part:8s} {m:8.1f}% {r:8.1f}% {r - m:+6.1f}  {'ok' if ok else 'FAIL'}")
# The places add up to the gaps' total, and no phase has more gap time than its time.
places = sum(g["totals"]["total_ns"] for g in report["gap_groups"])
run = sum(d["gaps"]["total_ns"] for d in report["whole_run"]["devices"])
over = [p["path"] for p in report["phases"] if any(d["gaps"]["total_ns"] > p["total_ns"] for d in p["devices"])]
print(f"  places {places / 1e9:.3f} s, gap total {run / 1e9:.3f} s, phases with more gap time than time: {over or 'none'}")
bad += places != run or bool(over)
print("PASS four causes" if bad == 0 else f"FAIL four causes ({bad})")
EOF
  fi

  if want engine; then
    for g in off on; do
      hdr "engine: specdec --preset 0.5b --context 256 --graphs $g (host stacks, API calls)"
      "${REC[@]}" -o "$T/specdec-$g.cufall" --capture nvtx,kernels,memcpy,api -- \
        "$S" --preset 0.5b --context 256 --graphs $g --new-tokens 64 2>&1 | tail -4
      places "$T/specdec-$g.cufall"
      verdict "$T/specdec-$g.cufall"
    done
  fi

  if want hf; then
    hdr "hf: Hugging Face generate, batch 1, 32 new tokens (host stacks)"
    "${REC[@]}" -o "$T/hf.cufall" --interval 200us -- $PY $WL/hf_generate.py --new-tokens 32 2>&1 | tail -4
    places "$T/hf.cufall"
    verdict "$T/hf.cufall"
  fi

  if want jax; then
    hdr "jax: jax_train.py, 40 steps (kernels captured, no API calls: launching thread from the kernels' process)"
    "${REC[@]}" -o "$T/jax.cufall" --interval 200us -- $PY $WL/jax_train.py --steps 40 2>&1 | tail -4
    "$C" report "$T/jax.cufall" | grep -m1 "launching thread"
    places "$T/jax.cufall"
    verdict "$T/jax.cufall"
  fi
} 2>&1 | tee "$OUT/gaps.log"
tar -C "$T" -cf "$OUT/gaps-traces.tar" --exclude='*.out' . 2>/dev/null
echo "log: $OUT/gaps.log; traces: $OUT/gaps-traces.tar"
