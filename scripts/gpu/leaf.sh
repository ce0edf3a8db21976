#!/usr/bin/env bash
# Mixed stacks on the H200: Hugging Face generate recorded with host stacks (on by default, no
# API capture, so the verdict's causes come from the stacks alone), then
#   - record's host-stack lines (perf events refused would be said there, once),
#   - the report's HOST per phase lines and VERDICT lines (innermost frames: a native one such
#     as `cudaStreamSynchronize (libcudart.so.13)` or `futex` is named there),
#   - the most sampled Python → native pairs of the trace's stacks (the innermost Python frame and
#     the native frame appended under it: `sdpa_attention_forward (…:158) → cudaStreamSynchronize
#     (libcudart.so.13)`), from `cufall export --format csv`,
#   - checks: some Python frame has a native frame of libcudart/libcuda/libtorch/libc10 under it,
#     and some has a GPU call (cuda*/cu*Synchronize, Memcpy, Launch) or a futex.
# About 60 s.
#
#   cargo build --release -p cufall -p cufall-inject -p specdec && scripts/gpu/pack.sh
#   scripts/gpu/unpack.sh && scripts/gpu/leaf.sh        # logs and the trace under $OUT
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/lib.sh
OUT=${OUT:-/tmp/cufall-leaf}
T=$(mktemp -d /tmp/cufall-leaf.XXXX)
mkdir -p "$OUT"

{
  hdr "machine"
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
  "$C" --version
  echo "perf_event_paranoid $(cat /proc/sys/kernel/perf_event_paranoid), ptrace_scope $(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo none)"

  hdr "hf: Hugging Face generate, batch 1, 24 new tokens, host stacks at 1 kHz"
  "$C" record --force --devices 0 -o "$T/hf-leaf.cufall" --interval 200us -- \
    $PY $WL/hf_generate.py --new-tokens 24 > "$T/record.log" 2>&1
  echo "record exit $?"
  grep -i "host stacks" "$T/record.log" | cut -c1-600
  "$C" report "$T/hf-leaf.cufall" > "$OUT/hf-leaf.report.txt"

  hdr "report: HOST per phase"
  awk '/^HOST per phase/{on=1; print; next} /^[A-Z][A-Z]+/{on=0} on' "$OUT/hf-leaf.report.txt" | cut -c1-400 | head -30
  hdr "report: VERDICT"
  awk '/^VERDICT/{on=1} on' "$OUT/hf-leaf.report.txt" | cut -c1-400 | head -20

  hdr "stacks: the most sampled innermost Python frame → the native frame under it"
  "$C" export --format csv --force -o "$T/csv" "$T/hf-leaf.cufall" > /dev/null
  $PY - "$T/csv" > "$OUT/hf-leaf.pairs.txt" <<'EOF'
import collections, csv, os, sys
d = sys.argv[1]
frames = collections.defaultdict(dict)
for r in csv.DictReader(open(os.path.join(d, "stacks.csv"))):
    frames[r["stack_id"]][int(r["depth"])] = r
pairs = collections.Counter()
for s in csv.DictReader(open(os.path.join(d, "host_samples.csv"))):
    st = frames.get(s["stack_id"], {})
    ordered = [st[i] for i in sorted(st)]
    k = next((i for i, f in enumerate(ordered) if f["kind"] == "python"), None)
    if not k:
        continue
    py, under = ordered[k], ordered[:k]
    where = f'{py["function"]} ({os.path.basename(py["file"])}:{py["line"]})'
    native = " → ".join(f'{f["function"]} ({f["module"]})' for f in reversed(under))
    pairs[f"{where} → {native}"] += 1
total = sum(pairs.values())
print(f"{total} samples with a native frame under a Python frame, {len(pairs)} distinct")
for k, n in pairs.most_common(25):
    print(f"{n:7d}  {k[:300]}")
EOF
  cat "$OUT/hf-leaf.pairs.txt"

  hdr "checks"
  check "a Python frame has a native frame of libcudart/libcuda/libtorch/libc10 under it" \
    grep -Eq '→ [^→]*\((libcudart|libcuda|libtorch|libc10)[^)]*\)' "$OUT/hf-leaf.pairs.txt"
  check "a Python frame has a GPU call (synchronise, copy, launch) or a futex under it" \
    grep -Eq '→ (cuda[A-Za-z]*|cu[A-Z][A-Za-z_0-9]*|futex)( |$)' "$OUT/hf-leaf.pairs.txt"
  check "record did not say perf events were refused for the Python process" \
    bash -c "! grep -q 'native frames of the Python threads' '$T/record.log'"
  echo "$pass passed, $fail failed"
  cp "$T/record.log" "$OUT/hf-leaf.record.log"
  cp -r "$T/hf-leaf.cufall" "$OUT/"
} 2>&1 | tee "$OUT/leaf.log"
