#!/usr/bin/env bash
# Third-party programs under cufall on a GPU machine: library NVTX domains (Hugging Face generate,
# JAX), torch.compile with CUDA graphs and compile workers, a model server recorded by window,
# a program killed mid-run, and what graph tracing and periodic flushes cost.
#
#   cargo build --release -p cufall -p cufall-inject -p specdec && scripts/gpu/pack.sh
#   scripts/gpu/real_programs.sh PART...     # results and traces under $OUT
#
# Parts (default: all): library compile graphs server kill flush
set -u
cd "$(dirname "$0")/../.."
. scripts/gpu/lib.sh
OUT=${OUT:-/tmp/cufall-real}
T=$(mktemp -d /tmp/cufall-real.XXXX)
KEEP="$T/keep"
mkdir -p "$OUT" "$KEEP"
parts="${*:-library compile graphs server kill flush}"
ROUNDS=${ROUNDS:-3} # interleaved rounds of the overhead measurements (0: recordings only)
REC=("$C" record --force --devices 0)
# Traces are folders: they come back as one archive per run ($OUT/traces-PARTS.tar.xz).
keep() { cp -r "$1" "$KEEP/"; "$C" info "$1" | head -40; }

hdr "machine"
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
"$C" --version
$PY -c 'import torch, transformers, jax; print("torch", torch.__version__, "transformers", transformers.__version__, "jax", jax.__version__)'

if want library; then
  hdr "library: Hugging Face generate (CCCL ranges from CUB)"
  "${REC[@]}" -o "$T/hf-generate.cufall" --interval 200us -- $PY $WL/hf_generate.py --new-tokens 32 2>&1 | tail -12
  keep "$T/hf-generate.cufall"
  hdr "library: JAX training loop (TSL ranges from XLA)"
  "${REC[@]}" -o "$T/jax-train.cufall" --interval 200us -- $PY $WL/jax_train.py --steps 40 2>&1 | tail -12
  keep "$T/jax-train.cufall"
fi

if want compile; then
  hdr "compile: torch.compile(mode=reduce-overhead) recorded (compile workers: no noise warnings expected)"
  "${REC[@]}" -o "$T/torch-compile.cufall" --interval 200us -- $PY $WL/torch_compile_decode.py --steps 500 2>&1 | tail -14
  keep "$T/torch-compile.cufall"
  hdr "compile: step p50 (us), 3 interleaved rounds: bare, graphs whole (default), graph-nodes (--nvml-only)"
  for round in $(seq "$ROUNDS"); do
    echo "bare $($PY $WL/torch_compile_decode.py --steps 2000 2>/dev/null | tail -1)"
    echo "graphs $("${REC[@]}" --nvml-only -o "$T/o.cufall" -- $PY $WL/torch_compile_decode.py --steps 2000 2>/dev/null | tail -1)"
    echo "graph-nodes $("${REC[@]}" --nvml-only -o "$T/o.cufall" --capture nvtx,kernels,memcpy,graph-nodes -- $PY $WL/torch_compile_decode.py --steps 2000 2>/dev/null | tail -1)"
  done | tee "$OUT/compile-overhead.txt"
fi

if want graphs; then
  hdr "graphs: specdec --graphs on, 3 interleaved rounds: none, graphs whole (default), graph-nodes (--nvml-only)"
  A=(--preset 0.5b --context 256 --graphs on --new-tokens 64)
  med() { "$@" 2>&1 | grep -o 'median step [0-9.]* ms' | head -1; }
  for round in $(seq "$ROUNDS"); do
    echo "bare $(med "$S" "${A[@]}")"
    echo "none $(med "${REC[@]}" --nvml-only -o "$T/o.cufall" --capture none -- "$S" "${A[@]}")"
    echo "graphs $(med "${REC[@]}" --nvml-only -o "$T/o.cufall" -- "$S" "${A[@]}")"
    echo "graph-nodes $(med "${REC[@]}" --nvml-only -o "$T/o.cufall" --capture nvtx,kernels,memcpy,graph-nodes -- "$S" "${A[@]}")"
  done | tee "$OUT/specdec-graphs.txt"
  "${REC[@]}" -o "$T/specdec-graphs-whole.cufall" --interval 100us -- "$S" --preset 0.5b --context 256 --graphs on --new-tokens 32 2>&1 | tail -8
  keep "$T/specdec-graphs-whole.cufall"
fi

serve() { # name, port, cufall flags... (the driver runs server and client; client output to $T/NAME.client)
  local name=$1 port=$2
  shift 2
  local client=(--port "$port" --warmup 4 --requests 12 --after 4)
  [ "$name" = serve-signal ] && client+=(--control "$C")
  "${REC[@]}" -o "$T/$name.cufall" --interval 100us "$@" -- bash -c \
    "$PY $WL/serve_model.py --port $port & $PY $WL/serve_client.py ${client[*]} > $T/$name.client; wait" 2>&1 | tail -12
  # With --capture-range-end stop the recording ends at the window's end and the server runs on.
  for _ in $(seq 120); do pgrep -f "serve_model.py --port $port" >/dev/null || break; sleep 0.5; done
  echo "client: $(cat "$T/$name.client" 2>/dev/null)"
  keep "$T/$name.cufall"
}

if want server; then
  hdr "server: --capture-range cuda-profiler-api (end: repeat, the trace ends with the program)"
  serve serve-profiler-api 8765 --capture-range cuda-profiler-api --capture-range-end repeat
  hdr "server: --capture-range cuda-profiler-api (end: stop, the server runs on)"
  serve serve-stop 8766 --capture-range cuda-profiler-api
  hdr "server: --capture-range nvtx:profile_window"
  serve serve-nvtx 8767 --capture-range nvtx:profile_window --capture-range-end repeat
  hdr "server: --capture-range signal (the client runs cufall control start/stop)"
  serve serve-signal 8768 --capture-range signal --capture-range-end repeat
  hdr "server: --capture-range cuda-profiler-api, the program never calls start"
  "${REC[@]}" -o "$T/never.cufall" --capture-range cuda-profiler-api -- $PY $WL/torch_graphs.py --replays 50 2>&1 | tail -6
  "$C" info "$T/never.cufall" | tail -8
fi

if want kill; then
  hdr "kill: a PyTorch matmul loop SIGKILLed after 6 s (kernel records must reach the trace)"
  "${REC[@]}" -o "$T/killed.cufall" --interval 200us -- $PY $WL/matmul_copy.py --bench 20 > "$T/killed.log" 2>&1 &
  rec=$!
  sleep 8
  # Only the program: cufall's own command line holds the same words.
  pkill -9 -f "^$PY $WL/matmul_copy.py --bench 20"
  wait $rec
  tail -8 "$T/killed.log"
  "$C" info "$T/killed.cufall" | grep -iE "kernel|capture|goodbye" | head
fi

if want flush; then
  hdr "flush: launch loop, 300k empty kernels, us per launch, 5 interleaved rounds: forced flush off, every 100 ms (default), every 20 ms (--nvml-only, nvtx,kernels)"
  nvcc -O2 -arch=sm_90 -o "$T/launch_loop" $WL/launch_loop.cu -ldl
  one() { "$@" 2>/dev/null | grep -o '"us_per_launch":[0-9.]*' | cut -d: -f2; }
  for round in 1 2 3 4 5; do
    for ms in 0 100 20; do
      echo "flush_${ms}ms $(CUFALL_CAPTURE_FLUSH_MS=$ms one "${REC[@]}" --nvml-only -o "$T/f.cufall" --capture nvtx,kernels -- "$T/launch_loop" --launches 300000 --nvtx per-batch)"
    done
  done | sort | awk '{a[$1]=a[$1]" "$2} END {for (k in a) print k":"a[k]}' | tee "$OUT/flush.txt"
fi
if [ -n "$(ls -A "$KEEP")" ]; then
  tar -C "$KEEP" -cJf "$OUT/traces-$(echo $parts | tr ' ' '-').tar.xz" .
  ls -la "$OUT"
fi
hdr "done"
