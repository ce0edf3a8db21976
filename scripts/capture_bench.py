#!/usr/bin/env python3
"""The capture hot path's cost per event on the CPU (no GPU): runs
inject/examples/capture_bench.rs bare and under the capture library, against a stand-in
recorder that accepts the library's connection, keeps the bytes and reads the status rows at
the end (the real recorder's decoding would compete for the same cores). Prints, per round,
ns per NVTX range (bare: NVTX's empty call; captured: cufall's handlers, encoding and
buffering, with the sender thread running beside), ns per encoded record, and the library's own
calibration (the `capture_cost_nvtx` row).

  cargo build --release -p cufall-inject --examples && cargo build --release -p cufall-inject
  python3 scripts/capture_bench.py [--profile release] [--rounds 3] [--pairs 200000]
"""
import argparse
import json
import os
import socket
import struct
import subprocess
import tempfile
import threading


def status_rows(data):
    """The (event, count) of every status frame (tag 6) in a capture stream."""
    rows, buf = [], memoryview(data)
    while len(buf) >= 4:
        n = struct.unpack_from("<I", buf)[0]
        body, buf = buf[4:4 + n], buf[4 + n:]
        if len(body) and body[0] == 6:
            o = 9
            ln = struct.unpack_from("<I", body, o)[0]
            event = bytes(body[o + 4:o + 4 + ln]).decode()
            count = struct.unpack_from("<Q", body, o + 4 + ln)[0]
            rows.append((event, count))
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--profile", default="release")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--pairs", type=int, default=200_000)
    a = p.parse_args()
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    target = os.path.join(root, os.environ.get("CARGO_TARGET_DIR", "target"), a.profile)
    bench = os.path.join(target, "examples", "capture_bench")
    lib = os.path.join(target, "libcufall_inject.so")
    tmp = tempfile.mkdtemp()
    path = os.path.join(tmp, "capture.sock")
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(path)
    srv.listen(4)
    streams = []

    def accept():
        while True:
            c, _ = srv.accept()
            chunks = []
            while d := c.recv(1 << 22):
                chunks.append(d)
            streams.append(b"".join(chunks))

    threading.Thread(target=accept, daemon=True).start()
    env = dict(os.environ, NVTX_INJECTION64_PATH=lib, CUFALL_CAPTURE_SOCKET=path,
               CUFALL_CAPTURE="nvtx")
    for r in range(a.rounds):
        bare = json.loads(subprocess.run([bench, str(a.pairs)], capture_output=True,
                                         check=True, text=True).stdout)
        n = len(streams)
        cap = json.loads(subprocess.run([bench, str(a.pairs)], capture_output=True,
                                        check=True, text=True, env=env).stdout)
        while len(streams) == n:
            threading.Event().wait(0.05)
        cal = [c for e, c in status_rows(streams[-1]) if e == "capture_cost_nvtx"]
        print(json.dumps({"round": r + 1, "bare_ns_per_range": bare["ns_per_range"],
                          "captured_ns_per_range": cap["ns_per_range"],
                          "ns_per_record": cap["ns_per_record"],
                          "calibrated_ns_per_range": cal[0] if cal else None}))


if __name__ == "__main__":
    main()
