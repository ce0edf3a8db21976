#!/usr/bin/env python3
"""A model behind an HTTP endpoint, as a serving stack runs one, for recording a server by window.
Python's standard-library HTTP server; a small decoder-style model in PyTorch (bf16, 8 blocks
of width 2048, on the GPU). Every request is an NVTX range "request" holding "prefill" and one
"decode" per token.

  POST /generate {"prompt": 128, "tokens": 16}   run one request, answer {"ms": ..}
  GET  /start_profile   torch.cuda.profiler.start() (cudaProfilerStart) and an NVTX start/end
                        range "profile_window" begins
  GET  /stop_profile    the range ends; torch.cuda.profiler.stop()
  GET  /health          200 once the model is loaded
  GET  /shutdown        ends the server

  python3 serve_model.py --port 8765 &
  python3 serve_client.py --port 8765
  cufall record -o serve.cufall --capture-range cuda-profiler-api -- python3 serve_model.py
"""
import argparse
import json
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

import torch
from torch.cuda import nvtx


class Model:
    def __init__(self, width=2048, blocks=8):
        with nvtx.range("load"):
            torch.manual_seed(0)
            dev, bf = "cuda", torch.bfloat16
            self.ws = [torch.randn(width, width, device=dev, dtype=bf) / 45 for _ in range(blocks)]
            self.emb = torch.randn(32000, width, device=dev, dtype=bf)
            # Loading a real model takes seconds: stand in for it so a window that leaves the
            # load out is visible in the trace.
            time.sleep(2.0)
            torch.cuda.synchronize()

    def forward(self, h):
        for w in self.ws:
            h = h + torch.nn.functional.gelu(h @ w)
        return h

    @torch.inference_mode()
    def generate(self, prompt, tokens):
        with nvtx.range("request"):
            ids = torch.randint(0, 32000, (prompt,), device="cuda")
            with nvtx.range("prefill"):
                h = self.forward(self.emb[ids])
                nxt = (h[-1] @ self.emb.T).argmax()
            for _ in range(tokens):
                with nvtx.range("decode"):
                    h = self.forward(self.emb[nxt].unsqueeze(0))
                    nxt = (h[-1] @ self.emb.T).argmax()
                    nxt.item()  # the host waits for each token, as a sampler would


def handler(model, state):
    class H(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def reply(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                self.reply(200, {"ok": True})
            elif self.path == "/start_profile":
                torch.cuda.profiler.start()
                state["range"] = torch.cuda.nvtx.range_start("profile_window")
                self.reply(200, {"profiling": True})
            elif self.path == "/stop_profile":
                if state.get("range") is not None:
                    torch.cuda.nvtx.range_end(state.pop("range"))
                torch.cuda.synchronize()
                torch.cuda.profiler.stop()
                self.reply(200, {"profiling": False})
            elif self.path == "/shutdown":
                self.reply(200, {"bye": True})
                state["stop"] = True
            else:
                self.reply(404, {"error": self.path})

        def do_POST(self):
            if self.path != "/generate":
                self.reply(404, {"error": self.path})
                return
            n = int(self.headers.get("Content-Length", "0"))
            req = json.loads(self.rfile.read(n) or b"{}")
            t0 = time.perf_counter()
            model.generate(int(req.get("prompt", 128)), int(req.get("tokens", 16)))
            self.reply(200, {"ms": round((time.perf_counter() - t0) * 1e3, 3)})

    return H


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=8765)
    a = p.parse_args()
    model = Model()
    state = {}
    server = HTTPServer(("127.0.0.1", a.port), handler(model, state))
    while not state.get("stop"):
        server.handle_request()
    server.server_close()


if __name__ == "__main__":
    main()
