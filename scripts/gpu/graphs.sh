#!/usr/bin/env bash
# What CUDA graphs do to the bundled engine's idle gaps, with and without cufall watching: bare
# step times, then recordings with graphs off and on under the default capture and under
# `--capture nvtx,kernels,graphs` (one record per graph launch), for the 0.5b model at its 4k
# default context and at a 256-token context (launch-bound: attention no longer dominates).
# Recordings land in $OUT/graphs/recordings.tar (with commands.txt), reports and diffs beside it;
# $OUT/graphs.tar holds all of it.
set -uo pipefail
cd "$(dirname "$0")/../.."
B=${BIN_DIR:-.dev-bin/all}
O=${OUT:-/tmp/cufall-out}/graphs
R=$(mktemp -d /tmp/cufall-graphs.XXXX)
mkdir -p "$O"
hdr() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
hdr "specdec check (graphs on: the draft levels fed on the device)"
timeout 300 "$B/specdec" check; echo "rc=$?"
for ctx in 4096 256; do
  for g in off on; do
    hdr "bare: specdec --preset 0.5b --context $ctx --graphs $g"
    timeout 120 "$B/specdec" --preset 0.5b --context "$ctx" --graphs "$g" --new-tokens 64 | tail -12
  done
done
rec() { # name, capture, specdec args...
  local name=$1 cap=$2
  shift 2
  local cmd=(record -o "$R/$name.cufall" --force --devices 0 --interval 30us)
  [ "$cap" != default ] && cmd+=(--capture "$cap")
  cmd+=(-- .dev-bin/all/specdec "$@")
  echo "cufall ${cmd[*]}" | sed "s|$R/|examples/|" >> "$R/commands.txt"
  hdr "cufall ${cmd[*]}"
  timeout 200 "$B/cufall" "${cmd[@]}" 2>&1 | tail -15
  "$B/cufall" report "$R/$name.cufall" > "$O/$name.report.txt" 2>&1
  sed -n '/^PHASES/,/^PER DEVICE/p;/^IDLE GAPS/,/^  longest/p;/^VERDICT/,$p' "$O/$name.report.txt"
  du -sh "$R/$name.cufall"
}
for ctx in 4096 256; do
  for cap in default nvtx,kernels,graphs; do
    tag=$([ "$cap" = default ] && echo k || echo g)
    for g in off on; do
      rec "c$ctx-$tag-graphs-$g" "$cap" --preset 0.5b --context "$ctx" --graphs "$g" --new-tokens 64
    done
    hdr "diff c$ctx-$tag: graphs off -> on"
    "$B/cufall" diff "$R/c$ctx-$tag-graphs-off.cufall" "$R/c$ctx-$tag-graphs-on.cufall" 2>&1 |
      tee "$O/c$ctx-$tag.diff.txt" | head -30
  done
done
tar -C "$R" -cf "$O/recordings.tar" .
ls -la "$O"
# Everything in one file too, for a caller that fetches few files.
tar -C "$O" -cf "$O.tar" .
