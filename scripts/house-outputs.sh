#!/usr/bin/env bash
# Writes what every bundled recording reads as (`info`, `report`, `report --json`, CSV tables, the
# Perfetto trace) into one folder, so two builds can be compared with `diff -r`: a change that
# only moves code must leave the folder byte for byte the same.
#   scripts/house-outputs.sh CUFALL_BINARY OUTDIR
set -euo pipefail
bin=$(realpath "$1"); out=$2
cd "$(dirname "$0")/.."
rm -rf "$out"; mkdir -p "$out"
find examples -name '*.cufall' -type d | sort | while read -r t; do
  n=$(echo "$t" | tr '/' '_')
  "$bin" info "$t" >"$out/$n.info" 2>&1 || echo "exit $?" >>"$out/$n.info"
  "$bin" report "$t" >"$out/$n.report" 2>&1 || echo "exit $?" >>"$out/$n.report"
  "$bin" report --json "$t" >"$out/$n.json" 2>&1 || echo "exit $?" >>"$out/$n.json"
  "$bin" export --format csv -o "$out/$n-csv" "$t" >/dev/null 2>"$out/$n.csv.err" || echo "exit $?" >>"$out/$n.csv.err"
  "$bin" export --format perfetto -o "$out/$n.perfetto.json" "$t" >/dev/null 2>"$out/$n.perfetto.err" || echo "exit $?" >>"$out/$n.perfetto.err"
done
echo "wrote $out"
