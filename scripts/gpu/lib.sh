# Sourced by the scripts of scripts/gpu/, after they `cd` to the repository root: what each of
# them sets up the same way.
#   BIN   the binaries scripts/gpu/unpack.sh unpacked (default .dev-bin/all); C and S: cufall
#         and specdec in it
#   WL    the workloads' folder
#   PY    the Python with PyTorch: /opt/torch/.venv/bin/python where it exists, else python3
#         (PY set beforehand wins)
#   PYTHONUNBUFFERED=1, so that a workload's lines reach the logs as they are printed
#   hdr TEXT    a section header with the time
#   want PART   whether PART is among $parts, the parts the script was asked to run
#   check NAME COMMAND...   runs COMMAND with its output appended to $T/checks.log (the script
#         sets T), prints `ok    NAME` or `FAIL  NAME`, and counts $pass and $fail
BIN=${BIN:-.dev-bin/all}
C="$BIN/cufall"
S="$BIN/specdec"
WL=examples/workloads
export PYTHONUNBUFFERED=1
if [ -x /opt/torch/.venv/bin/python ]; then PY=${PY:-/opt/torch/.venv/bin/python}; else PY=${PY:-python3}; fi
hdr() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
want() { case " $parts " in *" $1 "*) return 0 ;; esac; return 1; }
pass=0
fail=0
check() {
  local name=$1
  shift
  if "$@" >>"$T/checks.log" 2>&1; then echo "ok    $name"; pass=$((pass + 1)); else echo "FAIL  $name"; fail=$((fail + 1)); fi
}
