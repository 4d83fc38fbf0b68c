#!/usr/bin/python3
"""Times one training step of BERT (Megatron-core BertModel semantics, as in
tests/reference/bert_reference.py, plus dropout) in plain PyTorch fp32 on the CPU.

usage: bert_train_torch.py LAYERS HIDDEN HEADS SEQ MICRO_BATCH ITERATIONS [DROPOUT]

One step = forward, masked-LM + sentence-order losses, backward, clip_grad_norm_(1.0), AdamW
(weight decay 0.01) on one global batch (= the micro batch) that is already in memory: no data
loading, no masking, no tokenization inside the timed region. The batch is random: token types
0/1 split at mid-sequence, sample i has 16*i padding positions at its end (padding mask), 15% of
the real positions carry an LM label. Embeddings: word (vocab 30592 = 30522 padded to 128) +
learned position + token type; pre-LN layers with the padding mask (-10000 fill), attention and
hidden dropout; final LayerNorm; LM head dense -> gelu -> LayerNorm -> logits with the tied word
embeddings + bias; pooler (tanh on position 0) + binary head.
Prints one line: ms per step (mean of ITERATIONS after one warm-up step) and tokens/s (micro batch
* seq / step time, padding included, as for megatron-app).
"""
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))


def main(layers, hidden, heads, seq, mbs, iterations, dropout="0.1"):
    layers, hidden, heads, seq, mbs, iterations = map(int, (layers, hidden, heads, seq, mbs, iterations))
    p_drop = float(dropout)
    vocab, hn, eps = 30592, hidden // heads, 1e-5
    torch.manual_seed(0)
    W = {"word": torch.randn(vocab, hidden) * 0.02, "pos": torch.randn(seq, hidden) * 0.02,
         "type": torch.randn(2, hidden) * 0.02,
         "final_ln.w": torch.ones(hidden), "final_ln.b": torch.zeros(hidden),
         "lm_dense.w": torch.randn(hidden, hidden) * 0.02, "lm_dense.b": torch.zeros(hidden),
         "lm_ln.w": torch.ones(hidden), "lm_ln.b": torch.zeros(hidden),
         "out.b": torch.zeros(vocab),
         "pool.w": torch.randn(hidden, hidden) * 0.02, "pool.b": torch.zeros(hidden),
         "bin.w": torch.randn(2, hidden) * 0.02, "bin.b": torch.zeros(2)}
    for i in range(layers):
        p = f"l{i}."
        for norm in ("ln1", "ln2"):
            W[p + norm + ".w"], W[p + norm + ".b"] = torch.ones(hidden), torch.zeros(hidden)
        for name, out, inp in (("qkv", 3 * hidden, hidden), ("proj", hidden, hidden),
                               ("fc1", 4 * hidden, hidden), ("fc2", hidden, 4 * hidden)):
            W[p + name + ".w"] = torch.randn(out, inp) * 0.02
            W[p + name + ".b"] = torch.zeros(out)
    params = list(W.values())
    for v in params:
        v.requires_grad_(True)
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01)

    text = torch.randint(0, 30522, (mbs, seq))
    types = (torch.arange(seq) >= seq // 2).long().expand(mbs, seq).contiguous()
    lengths = torch.tensor([seq - 16 * i for i in range(mbs)]).clamp(min=seq // 2)
    padding = (torch.arange(seq)[None] < lengths[:, None]).float()
    loss_mask = (torch.rand(mbs, seq) < 0.15).float() * padding
    labels = torch.randint(0, 30522, (mbs, seq))
    is_random = torch.randint(0, 2, (mbs,))
    masked = ((padding[:, None, :] * padding[:, :, None]) < 0.5)[:, None]  # (b, 1, s, s)

    def ln(x, name):
        return F.layer_norm(x, (hidden,), W[name + ".w"], W[name + ".b"], eps)

    def lin(x, name):
        return F.linear(x, W[name + ".w"], W[name + ".b"])

    def forward():
        b, s = text.shape
        x = W["word"][text] + W["pos"][torch.arange(s)][None] + W["type"][types]
        x = F.dropout(x, p_drop)
        for i in range(layers):
            p = f"l{i}."
            qkv = lin(ln(x, p + "ln1"), p + "qkv").view(b, s, heads, 3, hn)
            q, k, v = qkv[:, :, :, 0], qkv[:, :, :, 1], qkv[:, :, :, 2]
            scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(hn)
            probs = F.dropout(scores.masked_fill(masked, -10000.0).softmax(-1), p_drop)
            ctx = torch.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, s, hidden)
            x = x + F.dropout(lin(ctx, p + "proj"), p_drop)
            act = F.gelu(lin(ln(x, p + "ln2"), p + "fc1"), approximate="tanh")
            x = x + F.dropout(lin(act, p + "fc2"), p_drop)
        h = ln(x, "final_ln")
        t = ln(F.gelu(lin(h, "lm_dense")), "lm_ln")
        logits = F.linear(t, W["word"], W["out.b"])
        binary = lin(torch.tanh(lin(h[:, 0], "pool")), "bin")
        return logits, binary

    def step():
        opt.zero_grad()
        logits, binary = forward()
        per_token = F.cross_entropy(logits.reshape(-1, vocab), labels.reshape(-1), reduction="none")
        mask = loss_mask.reshape(-1)
        loss = (per_token * mask).sum() / mask.sum() + F.cross_entropy(binary, is_random)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()

    step()  # warm-up
    start = time.perf_counter()
    for _ in range(iterations):
        step()
    ms = (time.perf_counter() - start) * 1000 / iterations
    print(f"pytorch {torch.__version__} fp32: {ms:.1f} ms/step, {mbs * seq / ms * 1000:.0f} tokens/s")


if __name__ == "__main__":
    main(*sys.argv[1:])
