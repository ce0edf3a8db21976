#!/usr/bin/env bash
# cufall sampler checks on a GPU machine (the lent H200). Run from the repository root:
#
#   scripts/gpu/sampler.sh first   # ~3 min: CUPTI facts, a short recording, bad-input checks
#   scripts/gpu/sampler.sh full    # everything below but bench60/reuse_test (~20 min with 60 s runs)
#   scripts/gpu/sampler.sh PART... # parts, in order:
#     probe               CUPTI facts, image layout, decode/evaluation costs (probe.json)
#     tests               the #[ignore]d GPU tests, from a prebuilt test binary
#     truth               per-phase means against ncu --clock-control none at TRUTH_IVS
#                         (default 100us; truth_IV.json); TRUTH_ONLY=1 skips the ratio check
#     bench               finest lossless interval for 1/2/4 metrics (5 s screens, BENCH_SECONDS
#                         confirmations), CPU, slowdown of a matmul loop (bench.txt)
#     bench60             BENCH60="2:30us 4:30us ...": long runs of given metric sets/intervals
#     exit_stall          programs that exit while every GPU is sampled (EXIT_IV, default interval)
#     twogpu, twogpu_long both GPUs at once: burst alignment (twogpu.json); BENCH_SECONDS under load
#     busy_and_privileges a second cufall while one records; cufall as user nobody
#     overflow_recovery   forced hardware-buffer overflows must be recorded as drops
#     reuse_test          does decode depend on a slot's old contents? (reuse.json)
#     examples            the example recordings (examples.tgz)
#     rate                RATE="2:10us,20us 1:10us 4:10us,20us": RATE_SECONDS-long runs under a
#                         matmul load; per metric set, the first lossless interval ends the search
#     slowdown            a bf16 matmul loop, SLOW_ROUNDS interleaved rounds bare and sampled (SLOW_IV, default:
#                         the model's interval; SLOW_SET 1|2|4|d|t|u; SLOW_FLAGS more record flags,
#                         e.g. "--capture none"), medians and spread
#     cost_probe          the cost model's inputs under a matmul load: bytes per sample, decode per
#                         byte and per call, timestamps, evaluation (cost_probe.json)
#     cost_model          the model against COST_SECONDS-long runs (default 60) under a matmul load:
#                         DRAM alone, tensor alone and the pair at the model's default and finest
#                         intervals, DRAM alone at 5us for 10 s; predicted beside measured (COST lines)
#
# Binaries come prebuilt in .dev-bin/sampler/ (the GPU machine has no Rust toolchain):
#   cargo build --release -p cufall && strip -o .dev-bin/sampler/cufall target/release/cufall
# Results go to $OUT (or /tmp/cufall-out): log.txt, bench.txt and the JSON files above.
# ncu and PM sampling both need the counters, so they never run at the same time.
set -u
BENCH_SECONDS=${BENCH_SECONDS:-60}
BIN=${CUFALL_BIN:-.dev-bin/sampler/cufall}
OUT=${OUT:-/tmp/cufall-out}
W=examples/workloads/matmul_copy.py
TMP=$(mktemp -d /tmp/cufall-gpu.XXXX)
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
# The default pair is what cufall records without --metric (the tensor counter's `_realtime`
# form where the GPU has it); USUAL is the pair under the names ncu and DCGM use.
DEFAULTS=()
USUAL=(--metric sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed
       --metric dram__throughput.avg.pct_of_peak_sustained_elapsed)

hdr() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }

machine() {
  hdr machine
  date -u
  nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,clocks.mem,power.draw --format=csv
  nproc; "$BIN" --version
}

probe() {
  hdr probe-sampler
  "$BIN" probe-sampler > "$OUT/probe.json"; echo "rc=$?"
  head -c 4000 "$OUT/probe.json"; echo
  hdr metrics
  "$BIN" metrics --filter "pipe_tensor_cycles" | head -20
  "$BIN" metrics | head -5; "$BIN" metrics | tail -5
}

bad_input() {
  hdr bad input
  "$BIN" record -o "$TMP/x1.cufall" --duration 1s --metric dram__thruput.avg.pct_of_peak_sustained_elapsed; echo "rc=$?"
  "$BIN" record -o "$TMP/x2.cufall" --duration 1s --devices 7; echo "rc=$?"
  "$BIN" record -o "$TMP/x3.cufall" --duration 1s --interval 50ns; echo "rc=$?"
  "$BIN" record -o "$TMP/x4.cufall" --duration 1s --metric sm__inst_executed_pipe_tensor_op_gmma.sum; echo "rc=$?"
  "$BIN" record -o "$TMP/x5.cufall" --duration 1s --metric sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapse; echo "rc=$?"
  "$BIN" metrics | head -3; echo "rc=$?"
  ls "$TMP"
}

# record NAME INTERVAL SECONDS [flags...] [-- cmd]: a recording with stats
rec() {
  local name=$1 interval=$2; shift 2
  local iv=(); [ -n "$interval" ] && iv=(--interval "$interval")
  "$BIN" record -o "$TMP/$name.cufall" --force "${iv[@]}" --stats-json "$TMP/$name.stats.json" "$@"
  echo "rc=$?"
  python3 - "$TMP/$name.stats.json" <<'PY'
import json,sys
s=json.load(open(sys.argv[1]))
print(f"  samples={s['samples_written']} loss_records={s['loss_records']} lost={s['lost_samples']} cores={s['cpu_s']/max(s['wall_s'],1e-9):.2f} wall={s['wall_s']:.1f} peak_rss_mib={s.get('peak_rss_mib',0):.0f} drops={s['drops']}")
for d in s["devices"]:
    print(f"  gpu{d['device']}: decoded={d['samples_decoded']} evaluated={d['samples_evaluated']} calls={d['decode_calls']} bps={d['bytes_per_sample']} spi={d['samples_per_image']} imgs={d['images_allocated']} img_mb={d['image_bytes']/2**20:.0f} full={d['counter_data_full']} ovf={d['hw_overflows']} max_seam_ns={d['max_seam_ns']} decode_cpu_s={d['decode_cpu_s']:.2f} eval_cpu_s={d['eval_cpu_s']:.2f} eval_us={d['eval_us_per_sample']:.2f} reset_cpu_s={d['reset_cpu_s']:.2f} reset_kb_per_img={d['reset_bytes_per_image']/1024:.0f} prefix={d['reset_by_prefix']} max_decode_call_ms={d['max_decode_call_ms']:.2f} max_decode_gap_ms={d['max_decode_gap_ms']:.2f} max_per_decode={d['max_samples_per_decode']} late={d['late_decodes']} evaluators={d.get('evaluators')} seal_cpu_s={d.get('seal_cpu_s',0):.2f} eval_panics={d.get('eval_panics',0)}")
    for b in d.get("decode_by_call_size", []):
        print(f"    calls<={b['up_to_samples']}: {b['calls']} calls, {b['samples']} samples, {b['us_per_sample']:.2f} us/sample, {b['ms_per_call']:.2f} ms/call")
PY
}

quick() {
  hdr quick recording: matmul/copy phases at 10us, default metrics
  rec quick 10us -- python3 $W --seconds 1.5 --idle 0.3 --phases-json "$TMP/quick.phases.json"
  python3 scripts/gpu/analyze_truth.py "$TMP/quick.cufall" "$TMP/quick.phases.json" /dev/null /dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); print(json.dumps(d['phases'], indent=1))"
  hdr quick 4 metrics at 10us under load
  python3 $W --load 8 & L=$!; sleep 2
  rec q4 10us --duration 5s --sm-spread
  wait $L
}

tests() {
  hdr GPU tests
  for t in .dev-bin/sampler/gpu-*; do [ -x "$t" ] && "$t" --ignored --test-threads 1 2>&1 | tail -15; done
}

truth() {
  hdr "truth check: cufall phases at ${TRUTH_IVS:-100us}"
  for iv in ${TRUTH_IVS:-100us}; do
    rec "truth_$iv" "$iv" "${DEFAULTS[@]}" -- python3 $W --seconds 3 --idle 0.5 --phases-json "$TMP/truth_$iv.phases.json"
  done
  hdr truth check: ncu on the same kernels
  local M=sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed
  ncu --clock-control none --metrics $M --csv --launch-skip 12 --launch-count 10 python3 $W --only matmul --iters 25 > "$TMP/ncu_mm.csv" 2>&1; echo "ncu rc=$?"
  ncu --clock-control none --metrics $M --csv --launch-skip 12 --launch-count 10 python3 $W --only copy --iters 25 > "$TMP/ncu_cp.csv" 2>&1; echo "ncu rc=$?"
  for iv in ${TRUTH_IVS:-100us}; do
    python3 scripts/gpu/analyze_truth.py "$TMP/truth_$iv.cufall" "$TMP/truth_$iv.phases.json" "$TMP/ncu_mm.csv" "$TMP/ncu_cp.csv" > "$OUT/truth_$iv.json"
    python3 -c "
import json; d=json.load(open('$OUT/truth_$iv.json'))
for r in d['table']: print('  $iv %-7s %-66s cufall=%s ncu=%s diff=%s ok=%s' % (r['phase'], r['metric'], r['cufall'], r['ncu'], r['diff_pp'], r['within_5pp']))
print('  ncu kernels:', d['ncu']['matmul'].get('kernel'), '|', d['ncu']['copy'].get('kernel'))"
  done
  [ -n "${TRUTH_ONLY-}" ] && return
  hdr ratio: what --denominator gr__cycles_elapsed.max means
  rec ratio 100us --metric sm__pipe_tensor_cycles_active.avg --metric sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed \
      --metric gr__cycles_elapsed.max --metric sm__cycles_elapsed.avg --metric sm__pipe_tensor_cycles_active.avg.peak_sustained \
      -- python3 $W --seconds 1.5 --idle 0.3 --phases-json "$TMP/ratio.phases.json"
  python3 - "$TMP/ratio.cufall" "$TMP/ratio.phases.json" > "$OUT/ratio.json" <<'PY'
import glob, json, os, sys
import pyarrow as pa, pyarrow.parquet as pq
t = pa.concat_tables([pq.read_table(f) for f in sorted(glob.glob(os.path.join(sys.argv[1], "samples", "*.parquet")))]).to_pandas()
t = t[t.device == 0] if "device" in t.columns else t
ph = {p["name"]: p for p in json.load(open(sys.argv[2]))}
p = ph["matmul"]; trim = (p["end_ns"] - p["start_ns"]) // 10
s = t[(t.start_ns >= p["start_ns"] + trim) & (t.end_ns <= p["end_ns"] - trim)]
r = {c: float(s[c].mean()) for c in s.columns if "__" in c}
r["tensor_avg_over_gr_cycles_max"] = float((s["sm__pipe_tensor_cycles_active.avg"] / s["gr__cycles_elapsed.max"]).mean())
r["tensor_avg_over_sm_cycles_avg"] = float((s["sm__pipe_tensor_cycles_active.avg"] / s["sm__cycles_elapsed.avg"]).mean())
r["sample_ns_mean"] = float((s.end_ns - s.start_ns).mean())
print(json.dumps(r, indent=1))
PY
  cat "$OUT/ratio.json"
}

bench() {
  hdr "benchmark: finest lossless interval (5 s screen, then ${BENCH_SECONDS}s confirm) under a bf16 matmul load, GPU 0"
  local results="$OUT/bench.txt"
  python3 $W --load 400 & L=$!; sleep 4
  FINEST2=100us
  for set in 1 2 4; do
    case $set in
      1) M=(--metric sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed);;
      2) M=("${DEFAULTS[@]}");;
      4) M=("${DEFAULTS[@]}" --sm-spread);;
    esac
    for iv in 10us 20us 30us 40us 100us; do
      echo "--- $set metric(s) at $iv (screen)"
      rec "s${set}_$iv" "$iv" --devices 0 --duration 5s "${M[@]}" | tee "$TMP/last.txt"
      echo "SCREEN metrics=$set interval=$iv $(grep -h 'loss_records=' "$TMP/last.txt" | head -1)" >> "$results"
      if grep -q "loss_records=0 " "$TMP/last.txt"; then
        echo "--- $set metric(s) at $iv (confirm, ${BENCH_SECONDS}s)"
        rec "b${set}_$iv" "$iv" --devices 0 --duration "${BENCH_SECONDS}s" "${M[@]}" | tee "$TMP/last.txt"
        echo "CONFIRM metrics=$set interval=$iv $(grep -h 'loss_records=' "$TMP/last.txt" | head -1) $(grep -h 'decoded=' "$TMP/last.txt" | head -1)" >> "$results"
        # A screen can pass by luck; only a clean confirmation ends the search.
        if grep -q "loss_records=0 " "$TMP/last.txt"; then
          [ "$set" = 2 ] && FINEST2=$iv
          break
        fi
      fi
    done
  done
  kill $L 2>/dev/null; wait $L 2>/dev/null
  hdr "slowdown of a bf16 matmul loop while sampled (default metrics at $FINEST2 and at 10us)"
  python3 $W --bench 8 > "$TMP/base1.json"; cat "$TMP/base1.json"
  "$BIN" record -o "$TMP/slow.cufall" --force --devices 0 --interval "$FINEST2" "${DEFAULTS[@]}" -- python3 $W --bench 8 > "$TMP/sampled.json"; cat "$TMP/sampled.json"
  "$BIN" record -o "$TMP/slow10.cufall" --force --devices 0 --interval 10us "${DEFAULTS[@]}" -- python3 $W --bench 8 > "$TMP/sampled10.json"; cat "$TMP/sampled10.json"
  python3 $W --bench 8 > "$TMP/base2.json"; cat "$TMP/base2.json"
  python3 - "$TMP" "$FINEST2" >> "$results" <<'PY'
import json, sys
d = sys.argv[1]
b1, s, s10, b2 = (json.load(open(f"{d}/{n}.json"))["tflops"] for n in ("base1", "sampled", "sampled10", "base2"))
base = (b1 + b2) / 2
print(f"SLOWDOWN base1={b1:.1f} base2={b2:.1f} sampled@{sys.argv[2]}={s:.1f} ({(1 - s / base) * 100:.2f}%) sampled@10us={s10:.1f} ({(1 - s10 / base) * 100:.2f}%) TFLOP/s; baseline spread {abs(b1 - b2) / base * 100:.2f}%")
PY
  cat "$results"
}

twogpu() {
  hdr "two GPUs sampled at once (${TWO_IV:-default interval}, default metrics), bursts launched on both at the same instant"
  if [ "$(nvidia-smi -L | wc -l)" -lt 2 ]; then echo "only one GPU here: skipped"; return; fi
  rec two "${TWO_IV-}" -- python3 examples/workloads/two_gpu_steps.py "$TMP/edges.json"
  python3 - "$TMP/two.cufall" "$TMP/edges.json" > "$OUT/twogpu.json" <<'PY'
import glob, json, os, sys
import pyarrow as pa, pyarrow.parquet as pq
t = pa.concat_tables([pq.read_table(f) for f in sorted(glob.glob(os.path.join(sys.argv[1], "samples", "*.parquet")))]).to_pandas()
edges = json.load(open(sys.argv[2]))
m = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"
out = {"per_device": {}, "rise_ns": []}
for dev, g in t.groupby("device"):
    g = g.sort_values("start_ns")
    seams = (g.start_ns.values[1:] - g.end_ns.values[:-1])
    out["per_device"][int(dev)] = {"samples": int(len(g)), "first": int(g.start_ns.min()), "last": int(g.end_ns.max()), "max_seam_ns": int(seams.max()) if len(seams) else None}
for e in edges:
    rise = {}
    for dev, g in t.groupby("device"):
        w = g[(g.start_ns >= e - 100_000_000) & (g.start_ns <= e + 300_000_000)].sort_values("start_ns")
        hit = w[w[m] > 20.0]
        rise[int(dev)] = int(hit.start_ns.iloc[0]) if len(hit) else None
    out["rise_ns"].append({"launch": e, **{str(k): (v - e if v else None) for k, v in rise.items()}})
print(json.dumps(out, indent=1))
PY
  cat "$OUT/twogpu.json"
}

examples() {
  hdr example recordings
  local E=$TMP/examples; mkdir -p "$E"
  "$BIN" record -o "$E/h200-matmul-copy.cufall" --devices 0 --interval 200us -- python3 $W --seconds 1.5 --idle 0.4; echo "rc=$?"
  "$BIN" record -o "$E/h200-sm-spread.cufall" --devices 0 --interval 500us --sm-spread -- python3 $W --seconds 1.0 --idle 0.3; echo "rc=$?"
  "$BIN" record -o "$E/h200-nvml-only.cufall" --devices 0 --nvml-only -- python3 $W --seconds 0.8 --idle 0.3; echo "rc=$?"
  du -sh "$E"/*
  tar czf "$OUT/examples.tgz" -C "$E" .
}

# Both GPUs sampled at once for BENCH_SECONDS under a matmul load on each, at ${TWO_IV:-40us}.
twogpu_long() {
  hdr "two GPUs sampled at once for ${BENCH_SECONDS}s at ${TWO_IV:-the default interval}, matmul load on both"
  if [ "$(nvidia-smi -L | wc -l)" -lt 2 ]; then echo "only one GPU here: skipped"; return; fi
  CUDA_VISIBLE_DEVICES=0 python3 $W --load $(( BENCH_SECONDS + 20 )) & L0=$!
  CUDA_VISIBLE_DEVICES=1 python3 $W --load $(( BENCH_SECONDS + 20 )) & L1=$!
  sleep 5
  rec two_long "${TWO_IV-}" --devices 0,1 --duration "${BENCH_SECONDS}s" "${DEFAULTS[@]}" | tee "$TMP/last.txt"
  echo "TWO_LONG interval=${TWO_IV:-default} $(grep -h 'loss_records=' "$TMP/last.txt" | head -1)" >> "$OUT/bench.txt"
  grep -h 'max_decode_gap_ms' "$TMP/last.txt" | sed 's/^/TWO_LONG   /' >> "$OUT/bench.txt"
  kill $L0 $L1 2>/dev/null; wait $L0 $L1 2>/dev/null
}

# The two "counters out of reach" paths: another profiler (a second cufall) holding the counters,
# and an unprivileged user on a driver that restricts profiling to admins.
busy_and_privileges() {
  hdr "another profiler holds the counters: a second cufall while one records GPU 0"
  "$BIN" record -o "$TMP/busy1.cufall" --force --devices 0 --duration 6s > "$TMP/busy1.txt" 2>&1 & B=$!
  sleep 3
  "$BIN" record -o "$TMP/busy2.cufall" --force --devices 0 --duration 1s; echo "rc=$?"
  [ -e "$TMP/busy2.cufall" ] && echo "UNEXPECTED: $TMP/busy2.cufall exists"
  "$BIN" --devices 0 --print --print-after 1s 2>&1 | head -12; echo "live rc=$?"
  wait $B; tail -3 "$TMP/busy1.txt"
  hdr "insufficient privileges: cufall as user nobody"
  grep -i "RmProfilingAdminOnly" /proc/driver/nvidia/params
  install -m 755 "$BIN" /tmp/cufall-nobody
  local AS=(setpriv --reuid=65534 --regid=65534 --clear-groups)
  "${AS[@]}" /tmp/cufall-nobody record -o /tmp/nobody1.cufall --duration 1s; echo "rc=$?"
  "${AS[@]}" /tmp/cufall-nobody metrics --filter tensor_cycles | head -5; echo "rc=$?"
  "${AS[@]}" /tmp/cufall-nobody record -o /tmp/nobody2.cufall --nvml-only --duration 1s; echo "rc=$?"
  "${AS[@]}" /tmp/cufall-nobody info /tmp/nobody2.cufall | head -12
  "${AS[@]}" /tmp/cufall-nobody --print --print-after 1s 2>&1 | head -12; echo "live rc=$?"
}

# Recovery from a hardware-buffer overflow: a tiny hardware buffer at 10us under load overflows;
# cufall must record each hole as a drop, re-arm the device and keep sampling.
overflow_recovery() {
  hdr "hardware-buffer overflow: 16 MiB hardware buffer at 10us under a matmul load, GPU 0"
  python3 $W --load 14 & L=$!; sleep 4
  rec ovf 10us --devices 0 --duration 6s --hw-buffer-mib 16 | tee "$TMP/last.txt"
  python3 - "$TMP/ovf.stats.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
for d in s["devices"]:
    print(f"  gpu{d['device']}: restarts={d['restarts']} hw_overflows={d['hw_overflows']} decode_errors={d['decode_errors']}")
print("  messages:", s["messages"][:3])
PY
  "$BIN" info "$TMP/ovf.cufall" | head -14
  kill $L 2>/dev/null; wait $L 2>/dev/null
}

metric_set() { # 1 | 2 | 4 | d (DRAM alone) | t (tensor alone) | u (the usual pair) -> M=(...)
  case $1 in
    1|t) M=(--metric sm__pipe_tensor_cycles_active_realtime.avg.pct_of_peak_sustained_elapsed);;
    u) M=("${USUAL[@]}");;
    d) M=(--metric dram__throughput.avg.pct_of_peak_sustained_elapsed);;
    2) M=("${DEFAULTS[@]}");;
    4) M=("${DEFAULTS[@]}" --sm-spread);;
  esac
}

# BENCH60="4:30us 2:40us": BENCH_SECONDS-long runs of those metric sets and intervals under a
# matmul load on GPU 0; on a loss, the next coarser interval of 30/40/50/100us is tried.
bench60() {
  hdr "long runs (${BENCH_SECONDS}s each) under a bf16 matmul load, GPU 0: ${BENCH60:-2:40us}"
  python3 $W --load 3000 & L=$!; sleep 4
  for pair in ${BENCH60:-2:40us}; do
    local set=${pair%%:*} iv=${pair##*:}
    metric_set "$set"
    while :; do
      echo "--- $set metric(s) at $iv (${BENCH_SECONDS}s)"
      rec "l${set}_$iv" "$iv" --devices 0 --duration "${BENCH_SECONDS}s" "${M[@]}" | tee "$TMP/last.txt"
      echo "LONG metrics=$set interval=$iv $(grep -h 'loss_records=' "$TMP/last.txt" | head -1) $(grep -h 'decoded=' "$TMP/last.txt" | head -1)" >> "$OUT/bench.txt"
      grep -q "loss_records=0 " "$TMP/last.txt" && break
      case $iv in 20us) iv=30us;; 30us) iv=40us;; 40us) iv=50us;; 50us) iv=100us;; *) break;; esac
    done
  done
  kill $L 2>/dev/null; wait $L 2>/dev/null
}

reuse_test() {
  hdr "does decode overwrite sample slots? (busy samples, then idle ones into the same slots)"
  python3 $W --load 3.0 & L=$!
  for _ in $(seq 100); do
    [ "$(nvidia-smi -i 0 --query-gpu=utilization.gpu --format=csv,noheader,nounits)" -gt 50 ] && break; sleep 0.1
  done
  "$BIN" probe-sampler --reuse-test > "$OUT/reuse.json"; echo "rc=$?"
  wait $L
  python3 -c "import json; print(json.dumps(json.load(open('$OUT/reuse.json'))['reuse_test'], indent=1))"
}

# Does a profiled program's exit hold the decoders up? (It did on two GPUs: docs/benchmarks-sampler.md.)
exit_stall() {
  hdr "program exit while sampled at ${EXIT_IV:-the default interval}: decode lateness and holes (every GPU)"
  for i in 1 2 3; do
    rec "exit$i" "${EXIT_IV-}" -- python3 $W --seconds 0.6 --idle 0.2 | tee "$TMP/last.txt"
    echo "EXIT run=$i gpus=$(nvidia-smi -L | wc -l) $(grep -h 'loss_records=' "$TMP/last.txt" | head -1)" >> "$OUT/bench.txt"
    grep -h 'max_decode_gap_ms' "$TMP/last.txt" | sed 's/^/EXIT   /' >> "$OUT/bench.txt"
  done
  if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
    for i in 1 2; do
      rec "exit2_$i" "${EXIT_IV-}" -- python3 examples/workloads/two_gpu_steps.py "$TMP/edges$i.json" | tee "$TMP/last.txt"
      echo "EXIT2 run=$i $(grep -h 'loss_records=' "$TMP/last.txt" | head -1)" >> "$OUT/bench.txt"
      grep -h 'max_decode_gap_ms' "$TMP/last.txt" | sed 's/^/EXIT2   /' >> "$OUT/bench.txt"
    done
  fi
}

cost_probe() {
  hdr "cost model inputs (probe-sampler --cost) under a bf16 matmul load, GPU 0"
  python3 $W --load 60 & L=$!; sleep 4
  "$BIN" probe-sampler --cost > "$OUT/cost_probe.json"; echo "rc=$?"
  kill $L 2>/dev/null; wait $L 2>/dev/null
  python3 - "$OUT/cost_probe.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["cost"]
for r in c["bytes_of_single_metrics"]:
    print(f"  {r['metric']:66s} {r.get('bytes_per_sample', r.get('error'))} B/sample (configure {r.get('config_ms', 0):.1f} ms, query {r.get('size_query_us', 0):.0f} us)")
for r in c["sets_at_10us"]:
    if "error" in r: print("  ", r["metrics"], r["error"]); continue
    ev = lambda k: r[k]["us_per_sample"]
    print(f"  {'+'.join(m.split('.')[0] for m in r['metrics']):50s} {r['bytes_per_sample']} B: decode {r['decode_us_per_sample']:.2f} us/sample ({r['decode_ns_per_byte']:.2f} ns/B, backlog {r['backlog_samples']}, {r['backlog_stop']}), call overhead {r['decode_ms_per_call_overhead']:.3f} ms, times {r['sample_times_us_per_sample']:.3f} us, eval first {ev('evaluate_first_2000'):.2f} last {ev('evaluate_last_2000'):.2f} sliced {ev('evaluate_first_2000_sliced'):.2f} us (sliced ok {r['evaluate_first_2000_sliced']['ok']}), alone {r['evaluate_each_metric_alone_us']}")
    for k, v in r.get("evaluate_plain_rollups", {}).items(): print(f"      plain {k}: {v}")
PY
}

cost_model() {
  hdr "cost model against ${COST_SECONDS:-60}s runs under a bf16 matmul load, GPU 0"
  python3 $W --load 3000 & L=$!; sleep 4
  for spec in ${COST_RUNS:-d: d:10us d:7us t: t:25us 2: 2:30us}; do
    local set=${spec%%:*} iv=${spec#*:}
    metric_set "$set"
    echo "--- $set at ${iv:-the default of the model}"
    rec "cm_${set}_${iv:-default}" "$iv" --devices 0 --duration "${COST_SECONDS:-60}s" "${M[@]}" | tee "$TMP/last.txt"
    cost_line "$set" "${COST_SECONDS:-60}" "$TMP/cm_${set}_${iv:-default}.stats.json"
  done
  metric_set d
  rec cm_d_5us 5us --devices 0 --duration 10s "${M[@]}" | tee "$TMP/last.txt"
  cost_line d 10 "$TMP/cm_d_5us.stats.json"
  kill $L 2>/dev/null; wait $L 2>/dev/null
  hdr "what cufall metrics says"
  "$BIN" metrics --filter "dram__throughput" | tail -4
  "$BIN" metrics --metric sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed --metric dram__throughput.avg.pct_of_peak_sustained_elapsed
  grep "^COST" "$OUT/bench.txt"
}

# cost_line SET SECONDS STATS_JSON: the model's prediction beside what the run measured.
cost_line() {
  python3 - "$1" "$2" "$3" >> "$OUT/bench.txt" <<'PY'
import json, sys
s = json.load(open(sys.argv[3])); p = s.get("predicted") or {}
d = s["devices"][0]; n = max(d["samples_decoded"], 1)
dec_busy = (d["decode_cpu_s"] + d.get("seal_cpu_s", 0)) / max(s["wall_s"], 1e-9)
cores = s["cpu_s"] / max(s["wall_s"], 1e-9)
err = (p.get("cores", 0) - cores) / cores * 100 if cores else 0
print(f"COST set={sys.argv[1]} seconds={sys.argv[2]} interval_ns={p.get('interval_ns')} chosen={p.get('interval_chosen')} "
      f"bytes={p.get('bytes_per_sample')} predicted_cores={p.get('cores', 0):.2f} measured_cores={cores:.2f} error={err:+.0f}% "
      f"predicted_decoder={p.get('decode_busy', 0) * 100:.0f}% measured_decoder={dec_busy * 100:.0f}% "
      f"predicted_lossless={p.get('lossless')} lost={s['lost_samples']} of {n} peak_rss_mib={s.get('peak_rss_mib', 0):.0f} "
      f"decode_us={d['decode_cpu_s'] * 1e6 / n:.2f} eval_us={d['eval_us_per_sample']:.2f} reset_us={d['reset_cpu_s'] * 1e6 / n:.2f} "
      f"finest_ns={p.get('finest_lossless_ns')}")
PY
  tail -1 "$OUT/bench.txt"
}

default_long() {
  hdr "the default settings (2 metrics, default interval) for ${LONG_SECONDS:-40}s under a matmul load"
  python3 $W --load $(( ${LONG_SECONDS:-40} + 15 )) & L=$!; sleep 4
  rec long_default "" --devices 0 --duration "${LONG_SECONDS:-40}s" | tee -a "$OUT/bench.txt"
  kill $L 2>/dev/null; wait $L 2>/dev/null
}

rate() {
  hdr "finest lossless interval, ${RATE_SECONDS:-20}s runs under a bf16 matmul load, GPU 0: ${RATE:-2:10us,20us}"
  python3 $W --load 3000 & L=$!; sleep 4
  for spec in ${RATE:-2:10us,20us}; do
    local set=${spec%%:*} ivs=${spec#*:}
    metric_set "$set"
    for iv in ${ivs//,/ }; do
      echo "--- $set metric(s) at $iv (${RATE_SECONDS:-20}s)"
      rec "r${set}_$iv" "$iv" --devices 0 --duration "${RATE_SECONDS:-20}s" "${M[@]}" ${RATE_FLAGS-} | tee "$TMP/last.txt"
      echo "RATE metrics=$set interval=$iv seconds=${RATE_SECONDS:-20} $(grep -h 'loss_records=' "$TMP/last.txt" | head -1) $(grep -h 'decoded=' "$TMP/last.txt" | head -1)" >> "$OUT/bench.txt"
      grep -q "loss_records=0 " "$TMP/last.txt" && break
    done
  done
  kill $L 2>/dev/null; wait $L 2>/dev/null
  grep RATE "$OUT/bench.txt"
}

slowdown() {
  metric_set "${SLOW_SET:-2}"
  local iv=(); [ "${SLOW_IV:-default}" != default ] && iv=(--interval "$SLOW_IV")
  hdr "slowdown of a bf16 matmul loop sampled at ${SLOW_IV:-default} (${SLOW_SET:-2} metric set), ${SLOW_ROUNDS:-5} interleaved rounds of ${SLOW_BENCH:-4} s"
  : > "$TMP/slow.txt"
  for r in $(seq "${SLOW_ROUNDS:-5}"); do
    python3 $W --bench "${SLOW_BENCH:-4}" | sed "s/^/bare /" >> "$TMP/slow.txt"
    "$BIN" record -o "$TMP/slow.cufall" --force --devices 0 "${iv[@]}" --stats-json "$TMP/slow.stats.json" "${M[@]}" ${SLOW_FLAGS:-} -- \
      python3 $W --bench "${SLOW_BENCH:-4}" 2>"$TMP/slow.err" | sed "s/^/sampled /" >> "$TMP/slow.txt"
    grep -h "sampling\|lost" "$TMP/slow.err" | head -3
  done
  cat "$TMP/slow.txt"
  python3 - "$TMP" "${SLOW_IV:-default}" "${SLOW_SET:-2}" "${SLOW_FLAGS:-}" >> "$OUT/bench.txt" <<'PY'
import json, statistics as st, sys
d = sys.argv[1]
runs = {"bare": [], "sampled": []}
for line in open(f"{d}/slow.txt"):
    kind, _, js = line.partition(" ")
    runs[kind].append(json.loads(js)["tflops"])
s = json.load(open(f"{d}/slow.stats.json"))
p = s.get("predicted") or {}
b, m = st.median(runs["bare"]), st.median(runs["sampled"])
spread = lambda v: (max(v) - min(v)) / st.median(v) * 100
print(f"SLOWDOWN set={sys.argv[3]} flags={sys.argv[4] or '-'} interval={sys.argv[2]} ({p.get('interval_ns')} ns) rounds={len(runs['bare'])} "
      f"bare median {b:.1f} TFLOP/s (spread {spread(runs['bare']):.1f}%), sampled median {m:.1f} (spread {spread(runs['sampled']):.1f}%): "
      f"slowdown {(1 - m / b) * 100:+.2f}%; last run lost={s['lost_samples']} cores={s['cpu_s'] / max(s['wall_s'], 1e-9):.2f}")
PY
  grep SLOWDOWN "$OUT/bench.txt"
}

machine
for MODE in "$@"; do
  case $MODE in
    first) probe; bad_input; quick;;
    full) tests; truth; bench; exit_stall; twogpu; twogpu_long; busy_and_privileges; overflow_recovery; examples;;
    *) $MODE;;
  esac
done
hdr done
