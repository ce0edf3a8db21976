#!/usr/bin/env bash
# Runs every specdec GPU check and benchmark on the device machine and prints a short table.
# Expects prebuilt x86-64 binaries in .dev-bin/engine/ (specdec and the gpu test executable):
#   cargo build --release -p specdec && cargo test --release -p specdec --no-run
#   mkdir -p .dev-bin/engine && cp target/release/specdec .dev-bin/engine/
#   cp "$(ls -t target/release/deps/gpu-* | grep -v '\.d$' | head -1)" .dev-bin/engine/gpu-tests
# The summary and log go to $OUT/engine.log, every command's full output to $OUT/outputs.txt
# (OUT defaults to ./engine-out; each command's own file is kept in $RUNS).
# QUICK=1 runs only the ceilings, the correctness check, the 64k attention figures (split-KV
# variants and a second chunk size included), the scattered page-1 run and the MoE run.
set -u
QUICK=${QUICK:-0}
# Split-KV kernel variants to time beside the default (kernel-name suffixes), a second chunk size
# (keys per block) to time, and a variant to run the correctness check with as well.
BENCH_VARIANTS=${BENCH_VARIANTS:-s3}
ALT_CHUNK=${ALT_CHUNK:-576}
CHECK_VARIANT=${CHECK_VARIANT:-}
BIN=${BIN:-.dev-bin/engine}
OUT=${OUT:-engine-out}
RUNS=${RUNS:-$(mktemp -d)}
mkdir -p "$OUT"
S="$BIN/specdec"
LOG="$OUT/engine.log"
: > "$LOG"
: > "$OUT/outputs.txt"
step() { echo "== $*" | tee -a "$LOG"; }
run() { # run LIMIT_S NAME CMD...: output to $OUT/NAME.txt, status to the log
  local lim=$1 name=$2; shift 2
  local t0=$(date +%s.%N)
  timeout "$lim" "$@" > "$RUNS/$name.txt" 2>&1; local rc=$?
  { echo "===== $name: $*"; cat "$RUNS/$name.txt"; } >> "$OUT/outputs.txt"
  local t1=$(date +%s.%N)
  printf '%-28s rc=%-3s %6.1fs  %s\n' "$name" "$rc" "$(awk "BEGIN{print $t1 - $t0}")" "$*" | tee -a "$LOG"
  return $rc
}
step "$(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"

# 1. Ceilings of this card: bf16 matrix rate and device-to-device copy bandwidth (PyTorch).
run 120 ceilings python3 - <<'PY'
import torch, time
dev = torch.device("cuda")
a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
for _ in range(3): a @ b
torch.cuda.synchronize()
ts = []
for _ in range(10):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); a @ b; e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
ts.sort(); ms = ts[len(ts)//2]
print(f"bf16_matmul_tflops {2*8192**3/ms/1e9:.1f}")
n = 4 << 30
x = torch.empty(n, dtype=torch.uint8, device=dev); x.random_(0, 255); y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
torch.cuda.synchronize()
ts = []
for _ in range(10):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record(); y.copy_(x); e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
ts.sort(); ms = ts[len(ts)//2]
print(f"d2d_copy_gbps {2*n/ms/1e6:.1f}")
PY
cat "$RUNS/ceilings.txt" | tee -a "$LOG"

# 2. Correctness: GPU logits vs the CPU reference, speculative == greedy on the GPU.
run 240 check "$S" check
cat "$RUNS/check.txt" | tee -a "$LOG"
if [ -n "$CHECK_VARIANT" ]; then
  SPECDEC_SPLIT_VARIANT=$CHECK_VARIANT run 240 check-$CHECK_VARIANT "$S" check
  cat "$RUNS/check-$CHECK_VARIANT.txt" | tee -a "$LOG"
fi
if [ "$QUICK" != 1 ] && [ -x "$BIN/gpu-tests" ]; then run 240 gpu-tests "$BIN/gpu-tests" --ignored --test-threads 1; tail -3 "$RUNS/gpu-tests.txt" | tee -a "$LOG"; fi

M="--preset 7b-8l"
# 3. Prefill matrix products: 4 x 1024 prompt tokens.
[ "$QUICK" = 1 ] || run 180 prefill "$S" $M --context 0 --batch 4 --prompt-len 1024 --new-tokens 8 --bench --json
# 4. 64k context, split-KV verify (page 16), graphs on; bench times split-KV and scattered at page 16.
#    SPECDEC_BENCH_SPLIT_VARIANTS also times the alternative split-KV kernel (s3: a 3-stage load
#    ring instead of 5); a run after step 5 times both with ALT_CHUNK keys per block.
SPECDEC_BENCH_SPLIT_VARIANTS=$BENCH_VARIANTS run 240 ctx64k-split "$S" $M --context 65536 --prompt-len 64 --new-tokens 32 --page-size 16 --verify-attn split-kv --bench --json
# An MoE target (8 experts, top-2; sparse dispatch) end to end.
run 120 moe "$S" --preset 8b-gqa-8l --experts 8 --top-k 2 --context 4096 --prompt-len 64 --new-tokens 32 --bench --json
# 5. 64k context, scattered verify with page size 1 (the first diagnosis).
run 240 ctx64k-scattered-ps1 "$S" $M --context 65536 --prompt-len 64 --new-tokens 4 --page-size 1 --verify-attn scattered --warmup off --bench --json
SPECDEC_BENCH_SPLIT_VARIANTS=$BENCH_VARIANTS SPECDEC_SPLIT_CHUNK=$ALT_CHUNK run 120 ctx64k-split-chunk$ALT_CHUNK "$S" $M --context 65536 --prompt-len 64 --new-tokens 4 --page-size 16 --verify-attn split-kv --warmup off --bench --json
# 6. Graphs on vs off (the second diagnosis): a 24-layer d=1024 model whose kernels are shorter
#    than their launch cost, and the 7B layout whose kernels are not.
if [ "$QUICK" != 1 ]; then
G="--context 4096 --prompt-len 64 --new-tokens 64 --bench --json"
run 120 graphs-on-0.5b "$S" --preset 0.5b $G --graphs on
run 120 graphs-off-0.5b "$S" --preset 0.5b $G --graphs off
run 120 graphs-on-0.5b-tree "$S" --preset 0.5b $G --width 2 --depth 3 --graphs on
run 120 graphs-off-0.5b-tree "$S" --preset 0.5b $G --width 2 --depth 3 --graphs off
run 120 graphs-on-7b "$S" $M $G --graphs on
run 120 graphs-off-7b "$S" $M $G --graphs off
# 7. 128k context.
run 240 ctx128k "$S" $M --context 131072 --prompt-len 64 --new-tokens 16 --json
fi
if [ "$QUICK" != 1 ]; then
# 8. Bad input: too big for the GPU, context over the maximum.
run 60 bad-oom "$S" --preset 7b --context 1000000 --batch 8
run 60 bad-maxctx "$S" $M --context 70000 --max-context 65536
echo "not a safetensors file" > "$RUNS/junk.safetensors"
run 60 bad-weights "$S" --weights "$RUNS/junk.safetensors"
step "bad input messages:"; cat "$RUNS/bad-oom.txt" "$RUNS/bad-maxctx.txt" "$RUNS/bad-weights.txt" | tee -a "$LOG"
fi

# Summary table.
ALT_CHUNK=$ALT_CHUNK python3 - "$RUNS" <<'PY' | tee -a "$LOG"
import json, sys, os, re
out = sys.argv[1]
def load(n):
    try:
        t = open(os.path.join(out, n + ".txt")).read()
        return json.loads(t[t.index("{"):])
    except Exception as e:
        return None
ceil = {}
for line in open(os.path.join(out, "ceilings.txt")):
    p = line.split()
    if len(p) == 2:
        try: ceil[p[0]] = float(p[1])
        except ValueError: pass
peak, bw = ceil.get("bf16_matmul_tflops"), ceil.get("d2d_copy_gbps")
print(f"ceilings: bf16 matmul {peak} TFLOP/s, D2D copy {bw} GB/s")
r = load("prefill")
if r and r.get("bench"):
    g = r["bench"]["prefill_gemm"]
    print(f"prefill matmuls ({g['rows']} rows): {g['tflops']:.0f} TFLOP/s = {100*g['tflops']/peak:.0f}% of measured peak (target >= 60%)" if peak else g)
for name in ["ctx64k-split", "ctx64k-split-chunk" + os.environ.get("ALT_CHUNK", "576"), "ctx64k-scattered-ps1"]:
    r = load(name)
    if r and r.get("bench"):
        for a in r["bench"]["attention"]:
            pct = f" = {100*a['gb_per_s']/bw:.0f}% of D2D" if bw else ""
            var = f" {a.get('variant') or 'default'} chunk {a.get('chunk')}" if a['kind'] == 'split-kv' else ""
            print(f"{name}: attention {a['kind']}{var} page {a['page_size']} {a['kv_tokens']} KV tokens: {a['ms']:.3f} ms, {a['gb_per_s']:.0f} GB/s{pct}")
s, c = load("ctx64k-split"), load("ctx64k-scattered-ps1")
if s and c and s.get("bench") and c.get("bench"):
    split_ms = s["bench"]["attention"][0]["ms"]; scat_ms = c["bench"]["attention"][1]["ms"]
    print(f"scattered page-1 / split-KV page-16 attention time at 64k: {scat_ms/split_ms:.1f}x (target >= 5x)")
    print(f"64k step: split-KV {s['median_step_ms']:.2f} ms, scattered page-1 {c['median_step_ms']:.2f} ms")
for name in ["graphs-on-0.5b", "graphs-off-0.5b", "graphs-on-0.5b-tree", "graphs-off-0.5b-tree", "graphs-on-7b", "graphs-off-7b", "ctx64k-split", "ctx128k", "moe"]:
    r = load(name)
    if r:
        b = r.get("bench") or {}
        gpu = f"  pass event time (no graph): verify {b['verify_pass_gpu_ms']:.3f} draft {b['draft_pass_gpu_ms']:.3f} ms" if b else ""
        print(f"{name:20s} median step {r['median_step_ms']:8.3f} ms  draft {r['draft_ms']/max(r['steps'],1):7.3f}  verify {r['verify_ms']/max(r['steps'],1):7.3f} ms/step  {r['tokens_per_s']:8.1f} tok/s  committed/step {r['mean_committed_per_step']:.2f}{gpu}")
    else:
        print(f"{name:20s} no result")
PY
