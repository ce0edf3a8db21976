#!/usr/bin/env python3
"""A JAX training loop with the program's own NVTX phases, for checking that XLA's NVTX ranges
(domain `TSL`: compiler passes, `XlaPassPipeline:#name=...#`, thunks) stay out of the phases. The
phases come from `torch.cuda.nvtx` (default domain), which needs no CUDA from torch: JAX owns the
GPU.

  compile   the first step (XLA compiles the jitted train step)
  train     --steps steps of a 4-layer MLP (bf16, batch 1024, width 4096), each in "step"
  eval      a forward pass over a held-out batch

  XLA_PYTHON_CLIENT_PREALLOCATE=false python3 jax_train.py --steps 50
  cufall record -o jax.cufall -- python3 jax_train.py

Prints {"steps": N, "ms_per_step": .., "loss": ..}.
"""
import argparse
import json
import os
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from torch.cuda import nvtx  # noqa: E402


def init(key, width, layers):
    keys = jax.random.split(key, layers)
    return [jax.random.normal(k, (width, width), jnp.bfloat16) / width**0.5 for k in keys]


def forward(params, x):
    for w in params[:-1]:
        x = jax.nn.relu(x @ w)
    return x @ params[-1]


def loss_fn(params, x, y):
    return jnp.mean((forward(params, x).astype(jnp.float32) - y) ** 2)


@jax.jit
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return [w - 1e-3 * g.astype(w.dtype) for w, g in zip(params, grads)], loss


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--width", type=int, default=4096)
    a = p.parse_args()
    key = jax.random.PRNGKey(0)
    params = init(key, a.width, 4)
    x = jax.random.normal(key, (1024, a.width), jnp.bfloat16)
    y = jnp.zeros((1024, a.width), jnp.float32)
    with nvtx.range("compile"):
        params, loss = train_step(params, x, y)
        loss.block_until_ready()
    t0 = time.perf_counter()
    with nvtx.range("train"):
        for _ in range(a.steps):
            with nvtx.range("step"):
                params, loss = train_step(params, x, y)
                loss.block_until_ready()
    ms = (time.perf_counter() - t0) * 1e3 / a.steps
    with nvtx.range("eval"):
        out = jax.jit(forward)(params, x)
        out.block_until_ready()
    print(json.dumps({"steps": a.steps, "ms_per_step": round(ms, 3), "loss": float(loss)}))


if __name__ == "__main__":
    main()
