#!/usr/bin/python3
"""Independent PyTorch Retro model (Megatron-core RetroModel, local spec) checked against
megatron-app.

usage: retro_reference.py DUMP_FILE VARIANT

DUMP_FILE: retro_reference_dump's checkpoint (initial weights under model/; under reference/ a
random batch with random neighbour tokens (B, l, k, r), our lm loss and every parameter gradient
of one evaluation-mode step). VARIANT a: 9 layers (Retro layers 6 and 9), S 10, chunks m 4 (the
first one partial), k 2 neighbours of r 8 tokens, a 2-layer encoder, learned absolute positions,
tied output layer. VARIANT b: 6 layers (Retro layer 6), S 8, m 4, k 3, r 12, a 3-layer encoder,
rotary positions (rotary_dim = kv_channels = 8) in the decoder's self-attention, untied output
layer. The dump must hold exactly the parameters of Megatron's state dict, by Megatron's names.
The loss and every gradient are recomputed here in float64 with autograd.

Written from Megatron-LM core_v0.13.1's definitions (models/retro/{model.py, decoder_spec.py,
decoder_attention.py, encoder_spec.py, encoder_attention.py, base_attention.py, utils.py},
transformer/attention.py, transformer_layer.py, transformer_block.py, models/gpt/gpt_model.py,
models/common/embeddings/language_model_embedding.py, pretrain_retro.py), not from the C++ code.
Activations are Megatron's (S, B, h), and Megatron's tensor operations are followed literally:
- RetroModel.forward: context = self.embedding(neighbor_tokens.view(-1, r), positions 0..r-1)
  (get_ltor_masks_and_position_ids without reset: 0..r-1; with rope no position table), the same
  embedding module as the tokens, transposed to (r, B*l*k, h): column (b*l + c)*k + j is neighbour
  j of chunk c of sample b (RetroDataset gives (l, k, r) per sample);
- the decoder (get_retro_decoder_block_spec): Retro layers at 1-based numbers
  range(6 if layers <= 15 else 9, layers + 1, 3); other layers plain pre-LN GPT layers (causal
  self-attention with Megatron's grouped [q | k | v] linear_qkv, rotary on q and k in variant b;
  MLP with F.gelu; biases on). A Retro layer (TransformerLayer._forward_attention):
    x += self_attention(input_layernorm(x)); y = pre_cross_attn_layernorm(x);
    x = RetroDecoderBiasDropoutAdd(RetroDecoderCrossAttention(y), residual = x);
    x += mlp(pre_mlp_layernorm(x));
- RetroDecoderCrossAttention: in the first Retro layer, chunked_output = y, its first ns % m
  tokens (if any) zero-padded at the end to a chunk, reshape(l, m, bs, d).permute(1, 2, 0, 3)
  .reshape(m, bs*l, d); the encoder (a TransformerBlock without final layernorm) runs on the
  neighbour embeddings with that context; its output (r, k*bs*l, d), reshaped to (r*k, bs*l, d),
  is the context of this and every later Retro layer (TransformerBlock threads `context`).
  Queries: y[pad:], pad = (ns - 1) % m, zero-padded by m - 1 at the end, chunked the same way;
  CrossAttention (linear_q; linear_kv per head [key | value]; no mask, as get_all_true_mask
  returns None; no rotary; linear_proj's bias returned apart);
- RetroDecoderBiasDropoutAdd: (attention output + bias).reshape(m, bs, l, d).permute(2, 0, 1, 3)
  to (l*m, bs, d), `pad` zero rows prepended (no output nor bias there), cut to ns, + residual;
- the encoder (get_retro_encoder_block_spec): no rotary, AttnMaskType.padding with
  attention_mask None (all r tokens see each other). Layer 1: self-attention + residual;
  pre_cross_attn_layernorm; RetroEncoderCrossAttention: input reshape(r, bs*l, k, d), neighbour
  j's queries attend to chunked_output (m, bs*l, d) column by column; RetroEncoderBiasDropoutAdd
  adds output, bias and, as residual, the *layer-normed* input (the layer's own residual is
  dropped), then torch.stack(outputs, dim=1).reshape(r, -1, d): column j*(bs*l) + b*l + c,
  neighbour-major; RetroEncoderLayerNorm (token-wise, so a plain LayerNorm, held as `self.norm`:
  pre_mlp_layernorm.norm.*) and the MLP. Later encoder layers are plain non-causal GPT layers;
- GPTModel: decoder.final_layernorm, output_layer (the word embeddings in variant a) over all
  256 padded vocabulary rows; pretrain_gpt's loss_func: masked mean of the cross-entropy.

Self-checks: as the encoder output is neighbour-major, Megatron's plain reshape gives column
b*l + c exactly chunk c's k neighbours; the logits must equal those of a per-chunk construction
(outputs kept neighbour-fastest, then view (r, bs*l, k, d).permute(0, 2, 1, 3)). Variant a: new
tokens for chunk 1's neighbours must leave the logits at positions < pad + m unchanged and
change later ones.
"""
import math
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import h5py  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_reference import check, load_tensors, masked_loss  # noqa: E402

torch.set_num_threads(1)
# Tolerances: those of the other references (fp32 on our side, fp64 here).
LOSS_RTOL = 1e-5
GRAD_RTOL = 1e-4      # relative to each tensor's largest gradient
SELF_ATOL = 1e-12     # equalities within this reference (float64)
VOCAB = 200           # the dump's vocabulary, padded to a multiple of 128 (Megatron's default)


class Config:
    """The variants of retro_reference_dump.cpp (hard-coded; the dump's shapes are checked)."""

    def __init__(self, variant):
        if variant not in ("a", "b"):
            raise SystemExit(f"retro_reference.py: unknown variant '{variant}' (a or b)")
        a = variant == "a"
        self.layers, self.seq, self.m, self.k = (9, 10, 4, 2) if a else (6, 8, 4, 3)
        self.h, self.np, self.ng, self.hn, self.ffn = 32, 4, 4, 8, 48
        # r = retro_num_retrieved_chunks * retro_chunk_length; retro_encoder_num_layers.
        self.r, self.enc_layers = (2 * self.m, 2) if a else (3 * self.m, 3)
        self.l = math.ceil(self.seq / self.m)
        self.rope = self.untied = not a
        self.rotary = self.rope  # rotary applied in the decoder (off only in a diagnostic)
        self.vocab = math.ceil(VOCAB / 128) * 128
        start = 6 if self.layers <= 15 else 9
        self.retro_layers = [n - 1 for n in range(start, self.layers + 1, 3)]  # 0-based


# ----------------------------------------------------------------------------- parameters
def wb(name, *shape):
    """A module's weight (shape) and bias (shape[0])."""
    return {name + ".weight": shape, name + ".bias": shape[:1]}


def gpt_layer_shapes(cfg, mlp_norm="pre_mlp_layernorm"):
    h, p, qkv = cfg.h, cfg.np * cfg.hn, (cfg.np + 2 * cfg.ng) * cfg.hn
    return {**wb("input_layernorm", h), **wb("self_attention.linear_qkv", qkv, h),
            **wb("self_attention.linear_proj", h, p), **wb(mlp_norm, h),
            **wb("mlp.linear_fc1", cfg.ffn, h), **wb("mlp.linear_fc2", h, cfg.ffn)}


def cross_shapes(cfg):
    h, p, attn = cfg.h, cfg.np * cfg.hn, "cross_attention.attn."
    return {**wb("pre_cross_attn_layernorm", h), **wb(attn + "linear_q", p, h),
            **wb(attn + "linear_kv", 2 * p, h), **wb(attn + "linear_proj", h, p)}


def expected_shapes(cfg):
    """Every parameter of Megatron's RetroModel (local spec) with this config, and its shape."""
    h = cfg.h
    shapes = {"embedding.word_embeddings.weight": (cfg.vocab, h)}
    if not cfg.rope:
        shapes["embedding.position_embeddings.weight"] = (cfg.seq, h)  # max_sequence_length
    for i in range(cfg.layers):
        p = f"decoder.layers.{i}."
        layer = {**gpt_layer_shapes(cfg), **(cross_shapes(cfg) if i in cfg.retro_layers else {})}
        if i == cfg.retro_layers[0]:
            for j in range(cfg.enc_layers):
                # Encoder layer 1: RetroEncoderLayerNorm holds its LayerNorm as `self.norm`.
                enc = ({**gpt_layer_shapes(cfg, "pre_mlp_layernorm.norm"), **cross_shapes(cfg)}
                       if j == 0 else gpt_layer_shapes(cfg))
                layer.update({f"cross_attention.encoder.layers.{j}.{n}": s
                              for n, s in enc.items()})
        shapes.update({p + n: s for n, s in layer.items()})
    shapes.update(wb("decoder.final_layernorm", h))
    if cfg.untied:
        shapes["output_layer.weight"] = (cfg.vocab, h)
    return shapes


def shape_diff(want, have):
    """What differs between the expected shapes `want` and the dumped tensors `have`."""
    missing, extra = sorted(set(want) - set(have)), sorted(set(have) - set(want))
    wrong = [f"{n} {tuple(have[n].shape)} (expected {s})" for n, s in want.items()
             if n in have and tuple(have[n].shape) != s]
    return ((f"; missing: {missing}" if missing else "")
            + (f"; unexpected: {extra}" if extra else "")
            + (f"; shapes differ: {wrong}" if wrong else ""))


def check_inputs(cfg, W0, ref):
    """The dump must hold exactly Megatron's parameters (names and shapes), their gradients and
    the batch."""
    shapes = expected_shapes(cfg)
    batch = {"tokens": (2, cfg.seq), "labels": (2, cfg.seq), "loss_mask": (2, cfg.seq),
             "neighbor_tokens": (2, cfg.l, cfg.k, cfg.r), "loss": (1,)}
    good = True
    for what, want, have in (
            ("parameters", shapes, W0),
            ("reference/grad/", shapes, {k[5:]: t for k, t in ref.items() if k[:5] == "grad/"}),
            ("batch", batch, {k: t for k, t in ref.items() if k[:5] != "grad/"})):
        diff = shape_diff(want, have)
        good &= check(f"{what} names and shapes", not diff,
                      f"{len(have)} dumped, {len(want)} expected" + diff)
    if good:
        ids = torch.cat([ref[k].flatten() for k in ("tokens", "labels", "neighbor_tokens")])
        good &= check("token ids", 0 <= int(ids.min()) and int(ids.max()) < VOCAB,
                      f"in [0, {VOCAB})")
    return good


# ----------------------------------------------------------------------------- modules
def layer_norm(x, W, p):
    return F.layer_norm(x, (x.shape[-1],), W[p + ".weight"], W[p + ".bias"], 1e-5)


def rotary(x):
    """Megatron's RotaryEmbedding (non-interleaved, rotary_percent 1, base 10000) on x
    (s, b, np, hn), positions 0..s-1."""
    s, dim = x.shape[0], x.shape[-1]
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    freqs = torch.outer(torch.arange(s, dtype=torch.float64), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)[:, None, None, :]
    x1, x2 = x[..., : dim // 2], x[..., dim // 2:]
    return x * emb.cos() + torch.cat([-x2, x1], dim=-1) * emb.sin()


def core_attention(q, k, v, causal, cfg):
    """DotProductAttention: q (sq, b, np, hn), k/v (sk, b, np, hn) -> (sq, b, np * hn)."""
    scores = torch.einsum("qbhd,kbhd->bhqk", q, k) / math.sqrt(cfg.hn)
    if causal:
        mask = torch.triu(torch.ones(q.shape[0], k.shape[0], dtype=torch.bool), 1)
        scores = scores.masked_fill(mask, -10000.0)
    ctx = torch.einsum("bhqk,kbhd->qbhd", scores.softmax(-1), v)
    return ctx.reshape(ctx.shape[0], ctx.shape[1], cfg.np * cfg.hn)


def self_attention(x, W, p, causal, rope, cfg):
    """SelfAttention incl. linear_proj's bias (the bda adds it): x (s, b, h)."""
    (s, b, _), g = x.shape, cfg.np // cfg.ng
    qkv = F.linear(x, W[p + "linear_qkv.weight"], W[p + "linear_qkv.bias"]).view(s, b, cfg.ng, -1)
    q, k, v = torch.split(qkv, [g * cfg.hn, cfg.hn, cfg.hn], dim=3)
    q = q.reshape(s, b, cfg.np, cfg.hn)
    if rope:
        q, k = rotary(q), rotary(k)
    k, v = k.repeat_interleave(g, dim=2), v.repeat_interleave(g, dim=2)
    ctx = core_attention(q, k, v, causal, cfg)
    return F.linear(ctx, W[p + "linear_proj.weight"], W[p + "linear_proj.bias"])


def cross_attention(x, memory, W, p, cfg):
    """CrossAttention (no mask, no rotary): x (sq, b, h), memory (sk, b, h). Returns the output
    without linear_proj's bias, and that bias."""
    (sq, b, _), sk = x.shape, memory.shape[0]
    kv = F.linear(memory, W[p + "linear_kv.weight"], W[p + "linear_kv.bias"])
    key, value = torch.split(kv.view(sk, b, cfg.np, -1), cfg.hn, dim=-1)  # per head [key | value]
    q = F.linear(x, W[p + "linear_q.weight"], W[p + "linear_q.bias"]).view(sq, b, cfg.np, cfg.hn)
    ctx = core_attention(q, key, value, False, cfg)
    return F.linear(ctx, W[p + "linear_proj.weight"]), W[p + "linear_proj.bias"]


def mlp(x, W, p):
    h1 = F.linear(x, W[p + "mlp.linear_fc1.weight"], W[p + "mlp.linear_fc1.bias"])
    return F.linear(F.gelu(h1), W[p + "mlp.linear_fc2.weight"], W[p + "mlp.linear_fc2.bias"])


def gpt_layer(x, W, p, causal, rope, cfg):
    x = x + self_attention(layer_norm(x, W, p + "input_layernorm"), W, p + "self_attention.",
                           causal, rope, cfg)
    return x + mlp(layer_norm(x, W, p + "pre_mlp_layernorm"), W, p)


def encoder(x, chunked_output, W, p, cfg, per_chunk=False):
    """The retrieval encoder: x (r, bs*l*k, d) neighbour embeddings, column (b*l + c)*k + j;
    chunked_output (m, bs*l, d). Returns the decoder's context (r*k, bs*l, d): Megatron's
    torch.stack(outputs, dim=1) in RetroEncoderBiasDropoutAdd (column j*(bs*l) + b*l + c),
    reshaped as it lies; per_chunk (self-check only): the outputs kept neighbour-fastest
    (column (b*l + c)*k + j), each chunk's k neighbours then gathered explicitly."""
    r, _, d = x.shape
    for j in range(cfg.enc_layers):
        q = f"{p}layers.{j}."
        x = x + self_attention(layer_norm(x, W, q + "input_layernorm"), W, q + "self_attention.",
                               False, False, cfg)
        if j == 0:
            y = layer_norm(x, W, q + "pre_cross_attn_layernorm")
            chunked_outputs = y.reshape(r, -1, cfg.k, d)          # (r, bs*l, k, d)
            outputs = []
            for n in range(cfg.k):  # residual: the normed input
                out, bias = cross_attention(chunked_outputs[:, :, n], chunked_output, W,
                                            q + "cross_attention.attn.", cfg)
                outputs.append(out + bias + chunked_outputs[:, :, n])
            x = torch.stack(outputs, dim=2 if per_chunk else 1).reshape(r, -1, d)
        # Layer 1's pre_mlp_layernorm is RetroEncoderLayerNorm: its LayerNorm is `.norm`.
        norm = q + ("pre_mlp_layernorm.norm" if j == 0 else "pre_mlp_layernorm")
        x = x + mlp(layer_norm(x, W, norm), W, q)
    cols = x.shape[1] // cfg.k
    if per_chunk:
        x = x.view(r, cols, cfg.k, d).permute(0, 2, 1, 3)
    return x.reshape(r * cfg.k, cols, d)


def chunk(x, l, m):
    """(l*m, bs, d) -> (m, bs*l, d): column b*l + c is chunk c of sample b."""
    _, bs, d = x.shape
    return x.reshape(l, m, bs, d).permute(1, 2, 0, 3).reshape(m, bs * l, d)


def retro_layer(x, context, embedded, W, p, cfg, per_chunk):
    """A Retro decoder layer's attention part, then its MLP. Returns (x, context)."""
    (ns, bs, d), m = x.shape, cfg.m
    l = math.ceil(ns / m)
    x = x + self_attention(layer_norm(x, W, p + "input_layernorm"), W, p + "self_attention.",
                           True, cfg.rotary, cfg)
    residual = x
    y = layer_norm(x, W, p + "pre_cross_attn_layernorm")
    if context is None:  # the first Retro layer: run the encoder
        first_ns = ns % m  # the first chunk, zero-padded at its end if partial
        chunked_output = chunk(y if first_ns == 0 else torch.cat(
            [F.pad(y[:first_ns], (0, 0, 0, 0, 0, m - first_ns)), y[first_ns:]]), l, m)
        context = encoder(embedded, chunked_output, W, p + "cross_attention.encoder.", cfg,
                          per_chunk)
    pad = (ns - 1) % m
    queries = chunk(F.pad(y[pad:], (0, 0, 0, 0, 0, m - 1)), l, m)
    out, bias = cross_attention(queries, context, W, p + "cross_attention.attn.", cfg)
    # RetroDecoderBiasDropoutAdd.
    z = (out + bias).reshape(m, bs, l, d).permute(2, 0, 1, 3).reshape(m * l, bs, d)
    z = F.pad(z, (0, 0, 0, 0, pad, 0))[:ns]
    x = z + residual
    return x + mlp(layer_norm(x, W, p + "pre_mlp_layernorm"), W, p), context


def embed(W, ids, cfg):
    """LanguageModelEmbedding: ids (b, s), positions 0..s-1 -> (s, b, h)."""
    x = W["embedding.word_embeddings.weight"][ids]
    if not cfg.rope:
        x = x + W["embedding.position_embeddings.weight"][torch.arange(ids.shape[1])][None]
    return x.transpose(0, 1)


def forward(W, tokens, neighbor_tokens, cfg, per_chunk=False):
    """RetroModel.forward up to the logits (b, s, V)."""
    embedded = embed(W, neighbor_tokens.reshape(-1, cfg.r), cfg)   # (r, bs*l*k, d)
    x = embed(W, tokens, cfg)                                        # (s, b, d)
    context = None
    for i in range(cfg.layers):
        p = f"decoder.layers.{i}."
        if i in cfg.retro_layers:
            x, context = retro_layer(x, context, embedded, W, p, cfg, per_chunk)
        else:
            x = gpt_layer(x, W, p, True, cfg.rotary, cfg)
    x = layer_norm(x, W, "decoder.final_layernorm")
    out = W["output_layer.weight"] if cfg.untied else W["embedding.word_embeddings.weight"]
    return (x @ out.t()).transpose(0, 1)


# ----------------------------------------------------------------------------- checks
def run(W0, ref, cfg):
    """float64 loss and each gradient's max|diff|/max|grad| against the dump's."""
    W = {n: t.double().clone().requires_grad_(True) for n, t in W0.items()}
    loss = masked_loss(forward(W, ref["tokens"].long(), ref["neighbor_tokens"].long(), cfg),
                       ref["labels"], ref["loss_mask"].double())
    loss.backward()
    errors = {}
    for n, w in W.items():
        g = w.grad if w.grad is not None else torch.zeros_like(w)
        scale = g.abs().max().item() or 1.0
        errors[n] = (g - ref[f"grad/{n}"].double()).abs().max().item() / scale
    return loss.item(), errors


def logits_of(W0, ref, cfg, per_chunk=False, neighbor_tokens=None):
    nt = ref["neighbor_tokens"] if neighbor_tokens is None else neighbor_tokens
    with torch.no_grad():
        return forward({n: t.double() for n, t in W0.items()}, ref["tokens"].long(), nt.long(),
                       cfg, per_chunk)


def main(dump_file, variant):
    cfg = Config(variant)
    with h5py.File(dump_file, "r") as f:
        W0 = load_tensors(f, "model")
        ref = load_tensors(f, "reference")
    if not check_inputs(cfg, W0, ref):
        print(f"retro_reference: variant {variant}: the dump does not match Megatron's model; "
              "not compared")
        return 1

    # Self-check: Megatron's reshape of its neighbour-major encoder output is the per-chunk one.
    base = logits_of(W0, ref, cfg)
    d = (base - logits_of(W0, ref, cfg, per_chunk=True)).abs().max().item()
    good = check("Megatron's reshape == per-chunk construction", d <= SELF_ATOL,
                 f"max |logit diff| {d:.1e} (every chunk attends to its own k neighbours)")
    if variant == "a":
        # Self-check: chunk 1's neighbours reach no position before the end of attending chunk 0.
        end = (cfg.seq - 1) % cfg.m + cfg.m
        nt = ref["neighbor_tokens"].clone()
        nt[:, 1] = (nt[:, 1] + 1 + torch.arange(nt[:, 1].numel()).view(nt[:, 1].shape) % 7) % VOCAB
        change = (logits_of(W0, ref, cfg, neighbor_tokens=nt) - base).abs()
        early, late = change[:, :end].max().item(), change[:, end:].max().item()
        good &= check(f"chunk-1 neighbours vs positions < {end}",
                      early <= SELF_ATOL and late > 1e-6,
                      f"max |logit change| there {early:.1e} (must be 0), after {late:.1e}")

    loss, errors = run(W0, ref, cfg)
    ours = ref["loss"].double().item()
    rel = abs(loss - ours) / abs(loss)
    good &= check("lm loss", rel <= LOSS_RTOL,
                  f"torch {loss:.8f} ours {ours:.8f} rel {rel:.2e} (tolerance {LOSS_RTOL})")
    ranked = sorted(errors.items(), key=lambda e: -e[1] if e[1] == e[1] else -math.inf)  # NaN 1st
    (worst_name, worst), bad = ranked[0], [e for e in ranked if not e[1] <= GRAD_RTOL]
    good &= check("gradients", not bad,
                  f"{len(errors)} tensors, worst max|diff|/max|grad| {worst:.2e} "
                  f"at {worst_name} (tolerance {GRAD_RTOL})")
    if bad or not rel <= LOSS_RTOL:
        print(f"     {len(bad)} mismatching gradients; worst: "
              + ", ".join(f"{n} {e:.1e}" for n, e in ranked[:8]))
        if cfg.rope:  # localisation aid only: not what Megatron computes here
            cfg.rotary = False
            l2, e2 = run(W0, ref, cfg)
            n2, w2 = max(e2.items(), key=lambda e: e[1] if e[1] == e[1] else math.inf)
            print(f"     diagnostic, no rotary: loss {l2:.8f} (rel {abs(l2 - ours) / abs(l2):.2e}),"
                  f" worst gradient {w2:.2e} at {n2}")
    print(f"retro_reference: variant {variant} ({'rope' if cfg.rope else 'learned positions'}): "
          + ("everything matches" if good else "MISMATCH"))
    return 0 if good else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n\n")[1])
    sys.exit(main(*sys.argv[1:]))
