#!/usr/bin/env python3
"""Hugging Face `generate` on the GPU with the program's own NVTX phases, for checking that
library NVTX ranges (CUB's `CCCL` domain, which PyTorch's sampling ops emit through CUDA 13's
CUB) stay out of the phases. Two small Llama models with random weights (built from a config:
no download), bf16:

  warmup    a short greedy generate (kernels compiled and cached)
  greedy    greedy decoding
  sampled   top-p sampling (torch.cumsum and sort: CUB scans, ranges in domain CCCL)
  assisted  assisted (speculative) generation with a 2-layer assistant model

  python3 hf_generate.py --new-tokens 48
  cufall record -o hf.cufall -- python3 hf_generate.py

Prints {"greedy_s": .., "sampled_s": .., "assisted_s": .., "tokens": N}.
"""
import argparse
import json
import time

import torch
from torch.cuda import nvtx
from transformers import LlamaConfig, LlamaForCausalLM


def llama(layers, hidden, heads):
    cfg = LlamaConfig(
        vocab_size=32000,
        hidden_size=hidden,
        intermediate_size=hidden * 11 // 4,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=4096,
    )
    m = LlamaForCausalLM(cfg).to("cuda", torch.bfloat16).eval()
    # Random weights never emit a sensible end-of-text: generate the full length every time.
    m.generation_config.eos_token_id = None
    m.generation_config.pad_token_id = 0
    return m


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--new-tokens", type=int, default=48)
    p.add_argument("--prompt-len", type=int, default=128)
    a = p.parse_args()
    torch.manual_seed(0)
    with nvtx.range("load"):
        model = llama(8, 1024, 16)
        assistant = llama(2, 512, 8)
    ids = torch.randint(5, 32000, (1, a.prompt_len), device="cuda")
    mask = torch.ones_like(ids)

    def run(name, **kw):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with nvtx.range(name):
            out = model.generate(input_ids=ids, attention_mask=mask, **kw)
            torch.cuda.synchronize()
        return time.perf_counter() - t0, out.shape[1] - ids.shape[1]

    with torch.inference_mode():
        run("warmup", max_new_tokens=4, do_sample=False)
        greedy_s, n = run("greedy", max_new_tokens=a.new_tokens, do_sample=False)
        sampled_s, _ = run("sampled", max_new_tokens=a.new_tokens, do_sample=True, top_p=0.9)
        assisted_s, _ = run(
            "assisted", max_new_tokens=a.new_tokens, do_sample=False, assistant_model=assistant
        )
    print(json.dumps({
        "greedy_s": round(greedy_s, 3),
        "sampled_s": round(sampled_s, 3),
        "assisted_s": round(assisted_s, 3),
        "tokens": int(n),
    }))


if __name__ == "__main__":
    main()
