#!/usr/bin/env bash
# Exactly what CI runs after installing its tools: formatting, lints, and every CPU test.
# GPU tests are #[ignore]d here; scripts/gpu-check.sh runs them on a machine with a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# The capture tests run the built capture library inside the built engine: build them first.
cargo build --workspace --locked
cargo test --workspace --locked
if [ -x .venv-interop/bin/python ]; then py=.venv-interop/bin/python; else py=python3; fi
"$py" scripts/interop_test.py
# The wheel: built, installed into a fresh venv, and the installed cufall run. It packages the
# debug build above (`--profile dev`) rather than building the workspace again in release: the
# check tests the packaging, not the optimiser; the published wheel stays a release build.
scripts/wheel_test.sh --profile dev
