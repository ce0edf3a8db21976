#!/usr/bin/env bash
# On the GPU machine: unpacks what scripts/gpu/pack.sh made (and any other .xz brought in
# .dev-bin/, such as a prometheus binary for scripts/gpu/serve.sh) into .dev-bin/all/.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .dev-bin/all
for f in .dev-bin/*.xz; do xz -dc "$f" > ".dev-bin/all/$(basename "$f" .xz)"; done
chmod +x .dev-bin/all/*
