#!/usr/bin/env bash
# Runs every GPU check and benchmark of cufall on a machine with an NVIDIA GPU and prints a short
# table per part. Binaries are built elsewhere (the GPU machine may have no Rust toolchain):
#
#   cargo build --release -p cufall -p specdec
#   mkdir -p .dev-bin/all .dev-bin/sampler .dev-bin/engine
#   cp target/release/{cufall,specdec} .dev-bin/all/
#   cp target/release/cufall .dev-bin/sampler/; cp target/release/specdec .dev-bin/engine/
#   scripts/gpu-check.sh [OUT_DIR]
#
# Parts: scripts/gpu/sampler.sh (GPU tests, truth check against ncu, interval benchmark, example
# recordings), scripts/gpu/engine.sh (specdec checks and benchmarks) and
# scripts/gpu/integration.sh (live view, two GPUs, the engine under cufall), scripts/gpu/graphs.sh
# (CUDA graphs off and on, bare and under each capture mode), scripts/gpu/serve.sh (the
# exporter under load, its dumps, cores and memory), scripts/gpu/pause.sh (the exporter and a
# recording step aside for ncu), scripts/gpu/host_stacks.sh (host stacks of
# third-party programs and the engine, and their cost), scripts/gpu/gaps.sh (the verdict line's
# causes against a program's own shares). Each prints a short
# table; results go to OUT_DIR (default: ./gpu-results).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-gpu-results}}"
mkdir -p "$out"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | tee "$out/gpus.txt"
status=0
run_part() { # NAME CMD...
  local name=$1; shift
  echo "=== $name"
  if ! OUT="$out/$name" "$@" 2>&1 | tee "$out/$name.log"; then
    echo "=== $name FAILED"
    status=1
  fi
}
run_part sampler bash scripts/gpu/sampler.sh full
run_part engine bash scripts/gpu/engine.sh
run_part integration bash scripts/gpu/integration.sh
run_part graphs bash scripts/gpu/graphs.sh
run_part serve bash scripts/gpu/serve.sh
run_part pause bash scripts/gpu/pause.sh
run_part host_stacks bash scripts/gpu/host_stacks.sh
run_part gaps bash scripts/gpu/gaps.sh
exit $status
