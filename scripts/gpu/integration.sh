#!/usr/bin/env bash
# Whole-tool checks on a GPU machine: the bare live view printing a frame while a workload runs,
# two GPUs sampled at once, and the bundled engine recorded under cufall, then reported on.
#
#   cargo build --release -p cufall -p specdec
#   mkdir -p .dev-bin/all && cp target/release/{cufall,specdec} .dev-bin/all/
#   scripts/gpu/integration.sh            # results under $OUT (default /tmp/cufall-int)
set -u
. "$(dirname "$0")/lib.sh"
OUT=${OUT:-/tmp/cufall-int}
W=examples/workloads/matmul_copy.py
T=$(mktemp -d /tmp/cufall-int.XXXX)
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
ngpu=$(nvidia-smi -L | wc -l)

hdr "machine: $ngpu GPU(s)"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
"$C" --version

hdr "live view, --print after 3 s, while a matmul/copy workload runs on GPU 0"
python3 $W --load 12 >/dev/null 2>&1 & L=$!
sleep 3
timeout 60 "$C" --print --print-after 3s --width 140 > "$OUT/live-mono.txt" 2> "$OUT/live.err"; echo "rc=$?"
timeout 60 "$C" --print --print-after 3s --width 140 --color > "$OUT/live-color.txt" 2>>"$OUT/live.err"; echo "rc=$?"
kill $L 2>/dev/null; wait $L 2>/dev/null
cat "$OUT/live-mono.txt"; cat "$OUT/live.err"

if [ "$ngpu" -ge 2 ]; then
  for iv in 100us 60us; do
    hdr "two GPUs at $iv, default metrics, bursts launched on both at the same instant"
    timeout 90 "$C" record -o "$T/two-$iv.cufall" --interval $iv -- python3 examples/workloads/two_gpu_steps.py "$T/edges-$iv.json"; echo "rc=$?"
    "$C" info "$T/two-$iv.cufall" | sed -n '/^devices/,/^nvtx/p'
    python3 - "$T/two-$iv.cufall" "$T/edges-$iv.json" <<'PY'
import glob, json, os, sys
import pyarrow.dataset as ds
t = ds.dataset(os.path.join(sys.argv[1], "samples"), format="parquet").to_table().to_pandas()
edges = json.load(open(sys.argv[2]))
m = next(c for c in t.columns if c.startswith("sm__pipe_tensor_cycles_active") and c.endswith(".avg.pct_of_peak_sustained_elapsed"))
for e in edges:
    rise = {}
    for dev, g in t.groupby("device"):
        w = g[(g.start_ns >= e - 100_000_000) & (g.start_ns <= e + 300_000_000)].sort_values("start_ns")
        hit = w[w[m] > 20.0]
        rise[int(dev)] = (int(hit.start_ns.iloc[0]) - e) / 1e6 if len(hit) else None
    print("burst launch -> first busy sample (ms) per GPU:", rise)
PY
  done
else
  hdr "two-GPU check skipped: one GPU here"
fi

hdr "specdec at 64k context recorded under cufall (split-KV, then scattered page size 1)"
timeout 120 "$C" record -o "$T/specdec.cufall" --devices 0 --interval 100us -- \
  "$S" --context 65536 --page-size 16 --verify-attn split-kv --new-tokens 48; echo "rc=$?"
"$C" info "$T/specdec.cufall"
"$C" report "$T/specdec.cufall" | head -40
timeout 120 "$C" record -o "$T/specdec-scattered.cufall" --devices 0 --interval 100us -- \
  "$S" --context 65536 --page-size 1 --verify-attn scattered --new-tokens 4; echo "rc=$?"
"$C" report "$T/specdec-scattered.cufall" | head -30
for f in specdec specdec-scattered two-100us; do
  [ -d "$T/$f.cufall" ] && tar czf "$OUT/$f.tgz" -C "$T" "$f.cufall"
done
du -sh "$T"/*.cufall
hdr done
