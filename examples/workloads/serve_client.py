#!/usr/bin/env python3
"""The client of serve_model.py: waits for the server, sends --warmup requests, opens the
profiling window (GET /start_profile, or `--control CUFALL` runs `cufall control start` instead),
sends --requests requests, closes the window, sends --after more, and shuts the server down.

  python3 serve_client.py --port 8765 --warmup 5 --requests 20 --after 5
Prints {"window_requests": N, "p50_ms": .., "window_start": t, "window_end": t} (Unix seconds).
"""
import argparse
import json
import statistics
import subprocess
import time
import urllib.request


def call(port, path, body=None):
    url = f"http://127.0.0.1:{port}{path}"
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST" if data else "GET")
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--requests", type=int, default=20)
    p.add_argument("--after", type=int, default=5)
    p.add_argument("--control", help="a cufall binary: open and close the window with it")
    a = p.parse_args()
    for _ in range(600):
        try:
            call(a.port, "/health")
            break
        except OSError:
            time.sleep(0.1)
    gen = {"prompt": 128, "tokens": 16}
    for _ in range(a.warmup):
        call(a.port, "/generate", gen)
    start = time.time()
    if a.control:
        subprocess.run([a.control, "control", "start"], check=True)
    else:
        call(a.port, "/start_profile")
    ms = [call(a.port, "/generate", gen)["ms"] for _ in range(a.requests)]
    if a.control:
        subprocess.run([a.control, "control", "stop"], check=True)
    else:
        call(a.port, "/stop_profile")
    end = time.time()
    for _ in range(a.after):
        call(a.port, "/generate", gen)
    call(a.port, "/shutdown")
    print(json.dumps({
        "window_requests": a.requests,
        "p50_ms": statistics.median(ms),
        "window_start": start,
        "window_end": end,
    }))


if __name__ == "__main__":
    main()
