#!/usr/bin/env bash
# Strips and compresses the release binaries and the capture library into .dev-bin/ (ignored by
# git) for a GPU machine that has no Rust toolchain; scripts/gpu/unpack.sh unpacks them there.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .dev-bin
rm -f .dev-bin/*.xz
for f in cufall specdec libcufall_inject.so; do
  # The engine keeps its symbol table (debug info only is stripped): native host frames name
  # its functions.
  if [ "$f" = specdec ]; then how=--strip-debug; else how=--strip-all; fi
  strip "$how" -o ".dev-bin/$f" "${CARGO_TARGET_DIR:-target}/release/$f"
  xz -T2 -6 -f ".dev-bin/$f"
done
ls -la .dev-bin
