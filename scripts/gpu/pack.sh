#!/usr/bin/env bash
# Strips and compresses the release binaries and the capture library into .dev-bin/ (ignored by
# git) for a GPU machine that has no Rust toolchain; scripts/gpu/unpack.sh unpacks them there.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .dev-bin
rm -f .dev-bin/*.xz
for f in cufall specdec libcufall_inject.so; do
  strip -o ".dev-bin/$f" "${CARGO_TARGET_DIR:-target}/release/$f"
  xz -T2 -6 -f ".dev-bin/$f"
done
ls -la .dev-bin
