#!/usr/bin/env bash
# Capture checks and benchmarks on a GPU machine: the profiled program's NVTX ranges, kernels and
# copies recorded beside the counters, checked for alignment, completeness and overhead.
#
#   cargo build --release -p cufall -p cufall-inject -p specdec
#   scripts/gpu/pack.sh                      # strips and compresses them into .dev-bin/
#   scripts/gpu/capture.sh PART...           # results under $OUT (default /tmp/cufall-capture)
#
# Parts (default: all): nvtxcost overhead stress align torch engine bad examples
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/lib.sh
OUT=${OUT:-/tmp/cufall-capture}
T=$(mktemp -d /tmp/cufall-cap.XXXX)
mkdir -p "$OUT"
parts="${*:-nvtxcost overhead stress align torch engine bad examples}"

build_workloads() {
  [ -x "$T/launch_loop" ] && return
  nvcc -O2 -arch=sm_90 -o "$T/launch_loop" $WL/launch_loop.cu -ldl
  nvcc -O2 -arch=sm_90 -o "$T/nvtx_stress" $WL/nvtx_stress.cu -ldl
  gcc -O2 -shared -fPIC -o "$T/libcupti_floor.so" $WL/cupti_floor.c -I/usr/local/cuda/include \
    -L/usr/local/cuda/lib64 -lcupti -ldl -lpthread
  gcc -O2 -o "$T/nvtx_loop" $WL/nvtx_loop.c -I/usr/local/cuda/include -ldl
}
REC=("$C" record --force --stats-json "$T/stats.json")

hdr "machine"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
"$C" --version
build_workloads

if want nvtxcost; then
  hdr "NVTX: ns per push/pop pair, 2M pairs, 7 interleaved rounds (bare, cufall, CUPTI's NVTX)"
  for round in 1 2 3 4 5 6 7; do
    echo "bare $("$T/nvtx_loop" 2000000 | grep -o '"ns_per_pair":[0-9.]*' | cut -d: -f2)"
    echo "cufall $("$C" record --force --nvml-only -o "$T/n.cufall" --capture nvtx -- "$T/nvtx_loop" 2000000 2>/dev/null | grep -o '"ns_per_pair":[0-9.]*' | cut -d: -f2)"
    echo "cupti $(CUPTI_FLOOR_NVTX=1 NVTX_INJECTION64_PATH=$T/libcupti_floor.so "$T/nvtx_loop" 2000000 2>/dev/null | grep -o '"ns_per_pair":[0-9.]*' | cut -d: -f2)"
  done | sort | awk '{a[$1]=a[$1]" "$2} END {for (k in a) print k":"a[k]}' | tee "$OUT/nvtxcost.txt"
  "$C" info "$T/n.cufall" | grep -A2 "^nvtx"
fi

if want overhead; then
  # Interleaved runs (one of each case per round) so drifts of this shared machine hit every case
  # alike; the recordings are --nvml-only so the counter sampler's CPU use stays out of the way.
  hdr "overhead: launch-heavy loop, 300k empty kernels, 7 interleaved rounds (us per launch)"
  L="$T/launch_loop --launches 300000"
  R=("$C" record --force --nvml-only -o "$T/o.cufall")
  one() { "$@" 2>/dev/null | grep -o '"us_per_launch":[0-9.]*' | cut -d: -f2; }
  for round in 1 2 3 4 5 6 7; do
    for nv in per-batch per-launch; do
      echo "plain/$nv $(one $L --nvtx $nv)"
      echo "cupti_floor/$nv $(CUDA_INJECTION64_PATH=$T/libcupti_floor.so one $L --nvtx $nv)"
      for cap in none nvtx nvtx,kernels nvtx,kernels,memcpy; do
        echo "cufall_capture_$cap/$nv $(one "${R[@]}" --capture $cap -- $L --nvtx $nv)"
      done
    done
  done > "$T/overhead-raw.txt"
  python3 - "$T/overhead-raw.txt" <<'PY' | tee "$OUT/overhead.txt"
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    parts = line.split()
    if len(parts) == 2:
        runs[parts[0]].append(float(parts[1]))
med = {k: statistics.median(v) for k, v in runs.items()}
print(f"{'case':<40} {'median us':>9} {'min':>7} {'max':>7} runs")
for k in sorted(med):
    print(f"{k:<40} {med[k]:>9.3f} {min(runs[k]):>7.3f} {max(runs[k]):>7.3f} {len(runs[k])}")
for nv in ("per-batch", "per-launch"):
    base = med[f"plain/{nv}"]
    none = med[f"cufall_capture_none/{nv}"]
    floor = med[f"cupti_floor/{nv}"] - base
    print(f"{nv}: NVTX capture {100 * (med[f'cufall_capture_nvtx/{nv}'] / none - 1):+.1f} %, "
          f"kernel capture {100 * (med[f'cufall_capture_nvtx,kernels/{nv}'] / none - 1):+.1f} % "
          f"(+{med[f'cufall_capture_nvtx,kernels/{nv}'] - none:.3f} us per launch); "
          f"CUPTI alone +{floor:.3f} us per launch ({100 * floor / base:+.1f} %)")
PY
fi

if want stress; then
  hdr "a million NVTX ranges and a million kernels: everything recorded, memory bounded"
  timeout 300 "${REC[@]}" -o "$T/stress.cufall" -- "$T/nvtx_stress" --ranges 1000000 > "$T/stress.json"; echo "rc=$?"
  cat "$T/stress.json"
  python3 scripts/gpu/analyze_capture.py counts "$T/stress.cufall" "$T/stress.json" | tee "$OUT/stress.txt"
  python3 -c "import json; s=json.load(open('$T/stats.json')); print('cufall peak RSS MiB', round(s['peak_rss_mib']), 'cpu_s', round(s['cpu_s'],1), 'wall_s', round(s['wall_s'],1))" | tee -a "$OUT/stress.txt"
fi

if want align; then
  hdr "alignment: kernel edges against counter edges (matmul and copy phases, 30 us)"
  timeout 120 "${REC[@]}" -o "$T/align.cufall" -- python3 $WL/matmul_copy.py --seconds 1 --idle 0.3; echo "rc=$?"
  python3 scripts/gpu/analyze_capture.py align "$T/align.cufall" | tee "$OUT/align.txt"
  "$C" report "$T/align.cufall" | head -30
fi

if want torch; then
  hdr "PyTorch with torch.cuda.nvtx phases"
  timeout 120 "${REC[@]}" -o "$T/torch-phases.cufall" -- python3 $WL/torch_phases.py; echo "rc=$?"
  "$C" report "$T/torch-phases.cufall" | head -40
  hdr "worker processes (spawn) and a grandchild"
  timeout 120 "${REC[@]}" -o "$T/torch-workers.cufall" -- python3 $WL/torch_workers.py; echo "rc=$?"
  "$C" info "$T/torch-workers.cufall" | sed -n '/^nvtx/,$p' | head -20
  python3 scripts/gpu/analyze_capture.py procs "$T/torch-workers.cufall" | tee "$OUT/workers.txt"
  hdr "CUDA graphs: per-kernel records, then whole-graph records"
  timeout 120 "${REC[@]}" -o "$T/torch-graphs.cufall" -- python3 $WL/torch_graphs.py; echo "rc=$?"
  python3 scripts/gpu/analyze_capture.py kinds "$T/torch-graphs.cufall"
  timeout 120 "${REC[@]}" -o "$T/torch-graphs2.cufall" --capture nvtx,graphs,api -- python3 $WL/torch_graphs.py; echo "rc=$?"
  python3 scripts/gpu/analyze_capture.py kinds "$T/torch-graphs2.cufall"
fi

if want engine; then
  hdr "specdec 64k, page size 1, scattered verify attention (latency-bound verify)"
  timeout 200 "${REC[@]}" -o "$T/spec-scattered.cufall" --devices 0 --interval 100us -- "$S" \
    --context 65536 --page-size 1 --verify-attn scattered --new-tokens 8; echo "rc=$?"
  "$C" report "$T/spec-scattered.cufall" | head -60
  hdr "specdec 64k, page size 16, split-KV verify attention"
  timeout 200 "${REC[@]}" -o "$T/spec-splitkv.cufall" --devices 0 --interval 100us -- "$S" \
    --context 65536 --page-size 16 --verify-attn split-kv --new-tokens 48; echo "rc=$?"
  "$C" report "$T/spec-splitkv.cufall" | sed -n '/^VERDICT/,$p' 
  for g in off on; do
    hdr "specdec 0.5b --graphs $g"
    timeout 200 "${REC[@]}" -o "$T/spec-graphs-$g.cufall" --devices 0 -- "$S" --preset 0.5b --graphs $g \
      --new-tokens 64; echo "rc=$?"
    "$C" report "$T/spec-graphs-$g.cufall" | head -45
  done
  hdr "diff graphs off -> on"
  "$C" diff "$T/spec-graphs-off.cufall" "$T/spec-graphs-on.cufall" | head -40
fi

if want bad; then
  hdr "bad input: another tool's CUDA injection already set"
  CUDA_INJECTION64_PATH=$T/libcupti_floor.so timeout 60 "${REC[@]}" -o "$T/bad1.cufall" -- "$T/launch_loop" --launches 1000 --nvtx per-launch; echo "rc=$?"
  hdr "bad input: the program runs torch.profiler (CUPTI taken)"
  timeout 120 "${REC[@]}" -o "$T/bad2.cufall" -- python3 -c "
import torch
x = torch.randn(1024, 1024, device='cuda')
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as p:
    for _ in range(20): y = x @ x
    torch.cuda.synchronize()
print('profiler saw', len(p.key_averages()), 'ops')
for _ in range(20): y = x @ x
torch.cuda.synchronize()
"; echo "rc=$?"
  python3 scripts/gpu/analyze_capture.py kinds "$T/bad2.cufall"
  hdr "bad input: a program that never initialises CUDA"
  timeout 60 "${REC[@]}" -o "$T/bad3.cufall" -- python3 -c "print('no cuda here')"; echo "rc=$?"
  hdr "bad input: the capture library missing"
  CUFALL_INJECT_LIBRARY=/nonexistent.so timeout 60 "$C" record -o "$T/bad4.cufall" -- true; echo "rc=$?"
fi

if want examples; then
  hdr "example recordings (captured), sizes"
  mkdir -p "$T/ex"
  for f in spec-scattered spec-splitkv spec-graphs-off spec-graphs-on torch-phases; do
    [ -d "$T/$f.cufall" ] && cp -r "$T/$f.cufall" "$T/ex/" && du -sh "$T/ex/$f.cufall"
  done
  tar -C "$T/ex" -cJf "$OUT/examples.tar.xz" . && ls -la "$OUT/examples.tar.xz"
fi
