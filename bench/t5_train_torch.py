#!/usr/bin/python3
"""Times one training step of T5 (Megatron-core T5Model semantics, as in
tests/reference/t5_reference.py variant a, plus dropout) in plain PyTorch fp32 on the CPU.

usage: t5_train_torch.py ENC_LAYERS DEC_LAYERS HIDDEN HEADS FFN ENC_SEQ DEC_SEQ MICRO_BATCH
                         ITERATIONS [DROPOUT]

The model is t5_reference.py's (written again here with dropout; that file hard-codes its tiny
shape and loads an HDF5 dump): word embedding (vocab 30720 = 30522 + 100 sentinels + 2 padded to
128) plus learned absolute positions 0..S-1 from one table of ENC_SEQ rows, shared by the encoder
and the decoder, embedding dropout; pre-LN layers, kv channels HIDDEN / HEADS; encoder:
self-attention (padding mask), MLP; decoder: causal self-attention, cross-attention (linear_q,
linear_kv rows per head [key | value]), MLP; final LayerNorm on both stacks; GeLU's tanh
approximation; attention dropout on the probabilities and hidden dropout after every attention
and MLP output; masked scores filled with -10000; LM head = the word embedding transposed plus its
own output bias; loss sum(cross_entropy * loss_mask) / sum(loss_mask) over the decoder positions.

One step = forward, loss, backward, clip_grad_norm_(1.0), AdamW (weight decay 0.01) on one global
batch (= the micro batch) that is already in memory: no data loading, no span masking, no
tokenization inside the timed region. The batch is random and shaped like a T5 span-corruption
batch: every encoder position is a real token (mask all ones, still applied); the decoder of
sample i holds min(DEC_SEQ, 1 + ceil(0.2 * ENC_SEQ) - i % 3) real tokens (<bos>, the ~15% masked
tokens and one sentinel per span), the rest padding, and the loss covers exactly the real decoder
positions. Every position, padded or not, goes through every layer and the output layer (as in
Megatron-LM).
Prints one line: ms per step (mean of ITERATIONS after one warm-up step), tokens/s (micro batch *
ENC_SEQ / step time, encoder tokens only, as bench/t5_train_bench.sh counts megatron-app's) and
every timed step's ms.
"""
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
VOCAB, REAL_VOCAB = 30720, 30624  # 30522 + 100 sentinels + 2, padded to a multiple of 128


def build(enc_layers, dec_layers, hidden, heads, ffn, max_positions, p_drop, vocab=VOCAB):
    """The parameters W (name -> tensor, requiring grad) and forward(text_enc, text_dec, enc_mask,
    dec_mask) -> logits (b, Sd, vocab); masks are 1 on real tokens, 0 on padding."""
    hn, eps = hidden // heads, 1e-5
    W = {"word": torch.randn(vocab, hidden) * 0.02, "pos": torch.randn(max_positions, hidden) * 0.02,
         "enc_ln.w": torch.ones(hidden), "enc_ln.b": torch.zeros(hidden),
         "dec_ln.w": torch.ones(hidden), "dec_ln.b": torch.zeros(hidden),
         "out.b": torch.zeros(vocab)}

    def add_layer(p, cross):
        norms = ("ln1", "ln2") + (("ln_x",) if cross else ())
        for norm in norms:
            W[p + norm + ".w"], W[p + norm + ".b"] = torch.ones(hidden), torch.zeros(hidden)
        linears = [("qkv", 3 * hidden, hidden), ("proj", hidden, hidden),
                   ("fc1", ffn, hidden), ("fc2", hidden, ffn)]
        if cross:
            linears += [("xq", hidden, hidden), ("xkv", 2 * hidden, hidden),
                        ("xproj", hidden, hidden)]
        for name, out, inp in linears:
            W[p + name + ".w"] = torch.randn(out, inp) * 0.02
            W[p + name + ".b"] = torch.zeros(out)

    for i in range(enc_layers):
        add_layer(f"e{i}.", cross=False)
    for i in range(dec_layers):
        add_layer(f"d{i}.", cross=True)
    for v in W.values():
        v.requires_grad_(True)

    def ln(x, name):
        return F.layer_norm(x, (hidden,), W[name + ".w"], W[name + ".b"], eps)

    def lin(x, name):
        return F.linear(x, W[name + ".w"], W[name + ".b"])

    def attention(q, k, v, masked):
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(hn)
        probs = F.dropout(scores.masked_fill(masked, -10000.0).softmax(-1), p_drop)
        ctx = torch.einsum("bhqk,bkhd->bqhd", probs, v)
        return ctx.reshape(ctx.shape[0], ctx.shape[1], hidden)

    def self_attention(x, p, masked):
        b, s, _ = x.shape
        qkv = lin(x, p + "qkv").view(b, s, heads, 3, hn)  # per head [q | k | v]
        return lin(attention(qkv[:, :, :, 0], qkv[:, :, :, 1], qkv[:, :, :, 2], masked), p + "proj")

    def cross_attention(x, memory, p, masked):
        b, sq, _ = x.shape
        kv = lin(memory, p + "xkv").view(b, memory.shape[1], heads, 2, hn)  # per head [k | v]
        q = lin(x, p + "xq").view(b, sq, heads, hn)
        return lin(attention(q, kv[:, :, :, 0], kv[:, :, :, 1], masked), p + "xproj")

    def mlp(x, p):
        return lin(F.gelu(lin(x, p + "fc1"), approximate="tanh"), p + "fc2")

    def embed(ids):
        return F.dropout(W["word"][ids] + W["pos"][torch.arange(ids.shape[1])][None], p_drop)

    def forward(text_enc, text_dec, enc_mask, dec_mask):
        se, sd = text_enc.shape[1], text_dec.shape[1]
        enc_pad = (enc_mask == 0)[:, None, None, :]                   # (b, 1, 1, Se)
        dec_pad = (dec_mask == 0)[:, None, None, :]                   # (b, 1, 1, Sd)
        causal = torch.triu(torch.ones(sd, sd, dtype=torch.bool), 1)[None, None]
        enc_self_masked = enc_pad.expand(-1, -1, se, -1)
        dec_self_masked = dec_pad | causal
        cross_masked = enc_pad.expand(-1, -1, sd, -1)
        x = embed(text_enc)
        for i in range(enc_layers):
            p = f"e{i}."
            x = x + F.dropout(self_attention(ln(x, p + "ln1"), p, enc_self_masked), p_drop)
            x = x + F.dropout(mlp(ln(x, p + "ln2"), p), p_drop)
        memory = ln(x, "enc_ln")
        x = embed(text_dec)
        for i in range(dec_layers):
            p = f"d{i}."
            x = x + F.dropout(self_attention(ln(x, p + "ln1"), p, dec_self_masked), p_drop)
            x = x + F.dropout(cross_attention(ln(x, p + "ln_x"), memory, p, cross_masked), p_drop)
            x = x + F.dropout(mlp(ln(x, p + "ln2"), p), p_drop)
        return F.linear(ln(x, "dec_ln"), W["word"], W["out.b"])

    return W, forward


def main(enc_layers, dec_layers, hidden, heads, ffn, se, sd, mbs, iterations, dropout="0.1"):
    enc_layers, dec_layers, hidden, heads, ffn, se, sd, mbs, iterations = map(
        int, (enc_layers, dec_layers, hidden, heads, ffn, se, sd, mbs, iterations))
    torch.manual_seed(0)
    W, forward = build(enc_layers, dec_layers, hidden, heads, ffn, se, float(dropout))
    params = list(W.values())
    opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01)

    text_enc = torch.randint(0, REAL_VOCAB, (mbs, se))
    text_dec = torch.randint(0, REAL_VOCAB, (mbs, sd))
    labels = torch.randint(0, REAL_VOCAB, (mbs, sd))
    enc_mask = torch.ones(mbs, se)
    dec_len = torch.tensor([min(sd, 1 + math.ceil(0.2 * se) - i % 3) for i in range(mbs)])
    dec_mask = (torch.arange(sd)[None] < dec_len[:, None]).float()
    loss_mask = dec_mask.clone()

    def step():
        opt.zero_grad()
        logits = forward(text_enc, text_dec, enc_mask, dec_mask)
        per_token = F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), reduction="none")
        mask = loss_mask.reshape(-1)
        loss = (per_token * mask).sum() / mask.sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()

    step()  # warm-up
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1000)
    ms = sum(times) / iterations
    print(f"pytorch {torch.__version__} fp32: {ms:.1f} ms/step, {mbs * se / ms * 1000:.0f} tokens/s "
          f"(per iteration: {', '.join(f'{t:.0f}' for t in times)})")


if __name__ == "__main__":
    if len(sys.argv) not in (10, 11):
        sys.exit(__doc__.split("\n\n")[1])
    main(*sys.argv[1:])
