#!/usr/bin/python3
"""Times one training step of the PyTorch reference GPT (tests/reference/gpt_reference.py's
model: Megatron-core GPT in plain PyTorch ops) on random tokens: forward, masked cross-entropy,
backward, clip_grad_norm_ and AdamW, as megatron-app's step does.

usage: gpt_train_torch.py LAYERS HIDDEN HEADS SEQ MICRO_BATCH {fp32|bf16} ITERATIONS
Prints one line: ms per step (mean of ITERATIONS after one warm-up step) and tokens/s.
"""
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "reference"))
import gpt_reference as ref  # noqa: E402

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))


def main(layers, hidden, heads, seq, mbs, precision, iterations):
    layers, hidden, heads, seq, mbs, iterations = map(int, (layers, hidden, heads, seq, mbs, iterations))
    vocab = 50304
    cfg = ref.Config(f"""
[model]
num_layers = {layers}
hidden_size = {hidden}
num_attention_heads = {heads}
[data]
seq_length = {seq}
[training]
[optimizer]
""")
    torch.manual_seed(0)
    W = {"embedding.word_embeddings.weight": torch.randn(vocab, hidden) * 0.02,
         "embedding.position_embeddings.weight": torch.randn(seq, hidden) * 0.02,
         "decoder.final_layernorm.weight": torch.ones(hidden),
         "decoder.final_layernorm.bias": torch.zeros(hidden)}
    for i in range(layers):
        p = f"decoder.layers.{i}."
        for norm in ("input_layernorm", "pre_mlp_layernorm"):
            W[p + norm + ".weight"], W[p + norm + ".bias"] = torch.ones(hidden), torch.zeros(hidden)
        for name, out, inp in (("self_attention.linear_qkv", 3 * hidden, hidden),
                               ("self_attention.linear_proj", hidden, hidden),
                               ("mlp.linear_fc1", 4 * hidden, hidden),
                               ("mlp.linear_fc2", hidden, 4 * hidden)):
            W[p + name + ".weight"] = torch.randn(out, inp) * 0.02
            W[p + name + ".bias"] = torch.zeros(out)
    for v in W.values():
        v.requires_grad_(True)
    opt = torch.optim.AdamW(list(W.values()), lr=1e-4)
    tokens = torch.randint(0, 50257, (mbs, seq))
    labels = torch.randint(0, 50257, (mbs, seq))
    mask = torch.ones(mbs, seq)

    def step():
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            logits = ref.forward(W, tokens, cfg)
        loss = ref.masked_loss(logits.float(), labels, mask)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(W.values()), 1.0)
        opt.step()

    step()  # warm-up
    start = time.perf_counter()
    for _ in range(iterations):
        step()
    ms = (time.perf_counter() - start) * 1000 / iterations
    print(f"pytorch {torch.__version__} {precision}: {ms:.1f} ms/step, {mbs * seq / ms * 1000:.0f} tokens/s")


if __name__ == "__main__":
    main(*sys.argv[1:])
