#!/usr/bin/env bash
# Runs every GPU check and benchmark of cufall on a machine with an NVIDIA GPU and prints a short
# table per part. Binaries are built elsewhere (the GPU machine may have no Rust toolchain):
#
#   cargo build --release -p cufall -p specdec
#   mkdir -p .dev-bin && cp target/release/{cufall,specdec} .dev-bin/
#   scripts/gpu-check.sh [OUT_DIR]
#
# Each part is scripts/gpu/<part>.sh; results go to OUT_DIR (default: ./gpu-results).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-${OUT:-gpu-results}}"
mkdir -p "$out"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | tee "$out/gpus.txt"
status=0
for part in scripts/gpu/*.sh; do
  name=$(basename "$part" .sh)
  echo "=== $name"
  if ! bash "$part" "$out" 2>&1 | tee "$out/$name.log"; then
    echo "=== $name FAILED"
    status=1
  fi
done
exit $status
