"""PyTorch's side of bench/decode_bench.sh: greedy decoding with a KV cache, the loop a PyTorch
user writes (torch 1.13 from Debian, float32, Megatron-core's GPT with learned positions and a
tied output layer), on a megatron-app checkpoint's weights. Prints one JSON line: tokens/s for
each batch size, prefill included (as megatron-app's log counts it).

  decode_torch.py CHECKPOINT.h5 PROMPT_LEN NEW_TOKENS BATCH [BATCH...]
"""
import json
import math
import os
import sys
import time

import h5py
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "reference"))
from checkpoint_attrs import config_text  # noqa: E402
from gpt_reference import Config, load_tensors  # noqa: E402


def layer_norm(x, w, b, eps):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps)


@torch.no_grad()
def decode(W, cfg, prompt, new_tokens):
    """prompt (B, P) -> (B, new_tokens) greedy ids, keys and values cached per layer."""
    b, p = prompt.shape
    cache_k = [None] * cfg.layers
    cache_v = [None] * cfg.layers
    out = []
    tokens, start = prompt, 0
    for _ in range(new_tokens):
        s = tokens.shape[1]
        x = W["embedding.word_embeddings.weight"][tokens] + \
            W["embedding.position_embeddings.weight"][start:start + s][None]
        for i in range(cfg.layers):
            g = lambda n: W[f"decoder.layers.{i}." + n]  # noqa: E731
            ln = layer_norm(x, g("input_layernorm.weight"), g("input_layernorm.bias"), cfg.eps)
            qkv = F.linear(ln, g("self_attention.linear_qkv.weight"),
                           g("self_attention.linear_qkv.bias")).view(b, s, cfg.np, 3, cfg.hn)
            q, k, v = (qkv[:, :, :, j].transpose(1, 2) for j in range(3))  # (B, heads, s, hn)
            cache_k[i] = k if cache_k[i] is None else torch.cat([cache_k[i], k], 2)
            cache_v[i] = v if cache_v[i] is None else torch.cat([cache_v[i], v], 2)
            scores = q @ cache_k[i].transpose(-1, -2) / math.sqrt(cfg.hn)
            if s > 1:
                mask = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)
                scores = scores.masked_fill(mask, float("-inf"))
            ctx = (scores.softmax(-1) @ cache_v[i]).transpose(1, 2).reshape(b, s, -1)
            x = x + F.linear(ctx, g("self_attention.linear_proj.weight"),
                             g("self_attention.linear_proj.bias"))
            ln2 = layer_norm(x, g("pre_mlp_layernorm.weight"), g("pre_mlp_layernorm.bias"), cfg.eps)
            h1 = F.gelu(F.linear(ln2, g("mlp.linear_fc1.weight"), g("mlp.linear_fc1.bias")),
                        approximate="tanh")
            x = x + F.linear(h1, g("mlp.linear_fc2.weight"), g("mlp.linear_fc2.bias"))
        x = layer_norm(x[:, -1], W["decoder.final_layernorm.weight"],
                       W["decoder.final_layernorm.bias"], cfg.eps)
        logits = x @ W["embedding.word_embeddings.weight"].t()
        nxt = logits[:, :cfg.vocab].argmax(-1, keepdim=True)
        out.append(nxt)
        start += s
        tokens = nxt
    return torch.cat(out, 1)


def main():
    ckpt, prompt_len, new_tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    with h5py.File(ckpt, "r") as f:
        cfg = Config(config_text(f))
        W = {k: v.float() for k, v in load_tensors(f, "model").items()}
    cfg.vocab = 50257
    result = {}
    for batch in map(int, sys.argv[4:]):
        prompt = torch.randint(0, cfg.vocab, (batch, prompt_len))
        decode(W, cfg, prompt[:, :4], 2)  # warm-up
        start = time.perf_counter()
        ids = decode(W, cfg, prompt, new_tokens)
        seconds = time.perf_counter() - start
        result[f"batch_{batch}"] = round(ids.numel() / seconds, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
