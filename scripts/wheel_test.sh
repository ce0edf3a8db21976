#!/usr/bin/env bash
# Builds the wheel (scripts/build-wheel.sh), installs it into a fresh virtual environment, and
# runs the installed `cufall` as a pip user would: --version (naming the capture library the
# install holds), a replay and a report of the bundled recording, and the first command on a
# machine without a GPU. Prints the wheel's size, its platform tag and the glibc it needs.
#
# Arguments go to scripts/build-wheel.sh: scripts/check.sh passes `--profile dev`, so that CI
# packages the debug build its tests made (seconds, where a second, release build of the
# workspace took 10 minutes on 2 cores); without them the wheel is the release build that is
# published.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
scripts/build-wheel.sh "$@" >/dev/null
built=$(date +%s)
wheel=$(ls target/wheels/cufall-*.whl)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q --disable-pip-version-check --no-index "$wheel"
cufall="$tmp/venv/bin/cufall"
fail() { echo "wheel test: $*" >&2; exit 1; }

[ -x "$cufall" ] || fail "the wheel put no cufall into the environment's bin/"
version=$("$cufall" --version)
echo "$version" | grep -q "writes trace format" || fail "--version: $version"
lib="$tmp/venv/lib/cufall/libcufall_inject.so"
echo "$version" | grep -qF "capture library: $lib" || fail "--version does not name $lib: $version"

recording="$tmp/venv/share/cufall/examples/h200-matmul-copy.cufall"
[ -f "$recording/manifest.json" ] || fail "no bundled recording at $recording"
"$cufall" replay "$recording" --print --width 100 | grep -q "cufall replay" || fail "replay --print"
"$cufall" report "$recording" | grep -q "PHASES" || fail "report"

# No GPU and no terminal: the error, exit code 1, and the installed recording in the hint
# (run outside the clone, whose examples/ the hint would name first).
if out=$(cd "$tmp" && "$cufall" </dev/null 2>&1); then
  echo "wheel test: this machine has a GPU: the no-GPU check is skipped"
else
  echo "$out" | grep -qF "replay $recording" || fail "the no-GPU hint does not name the bundled recording: $out"
fi

size=$(du -k "$wheel" | cut -f1)
echo "wheel: $(basename "$wheel"), ${size} KiB, built in $((built - started)) s"
.venv-wheel/bin/auditwheel show "$wheel" | tr '\n' ' ' | sed 's/  */ /g'; echo
echo "wheel test: passed"
