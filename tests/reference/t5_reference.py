#!/usr/bin/python3
"""Independent PyTorch T5 (Megatron-core semantics) checked against megatron-app.

usage: t5_reference.py DUMP_FILE VARIANT

DUMP_FILE: the T5 reference dump (initial weights under model/, and under reference/ a random
batch with differently padded samples, our lm_loss and every parameter gradient). VARIANT: a
(learned_absolute position embeddings) or b (relative position bias, 32 buckets, max distance
128). The loss and every gradient are recomputed here in float64 with autograd.

Written from Megatron-LM core_v0.13.1's definitions (models/T5/t5_model.py, t5_spec.py's local
spec, models/common/embeddings/relative_pos_embedding.py, transformer/attention.py,
transformer_layer.py, pretrain_t5.py with pretrain_gpt's loss_func), not from the C++ code:
- the word embedding (plus learned positions 0..S-1 in variant a) is shared by the encoder and
  the decoder; the LM head is the word embedding transposed plus lm_head.output_layer.bias
  (T5LMHead with share_embeddings_and_output_weights);
- pre-LN layers; encoder: self-attention, MLP (GeLU: the fused bias-gelu's tanh approximation,
  Megatron's default; only --no-bias-gelu-fusion gives the exact erf form); decoder: causal
  self-attention, cross-attention (CrossAttention: linear_q on the pre_cross_attn_layernorm
  output, linear_kv on the encoder's final_layernorm output, rows per head [key (hn) | value
  (hn)]), MLP; final LayerNorm on both;
- relative bias (variant b): RelativePositionEmbedding._compute_bias, bidirectional for the
  encoder, unidirectional for the decoder, added after the 1/sqrt(hn) scaling ("post_scale_bias")
  to every self-attention layer of its stack, never to cross-attention (TransformerLayer passes
  attention_bias to self_attention only). Megatron's local DotProductAttention asserts
  attention_bias is None, so this variant follows the TE core attention's semantics;
- masks (T5MaskedWordPieceDataset._build_b1ss_attention_mask for the local spec), masked scores
  filled with -10000 (attention_mask_func): encoder keys where enc_mask is 0, decoder
  self-attention causal and keys where dec_mask is 0, cross-attention keys where enc_mask is 0.
  Megatron's b1ss mask also masks whole rows of padded queries (they then attend uniformly);
  here padded queries keep their key masks: neither reaches the loss (padded positions are
  masked keys everywhere and padded decoder rows carry loss_mask 0, which is checked);
- loss: sum(cross_entropy * loss_mask) / sum(loss_mask).
"""
import math
import os
import sys

import h5py
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gpt_reference import check, load_tensors  # noqa: E402

torch.set_num_threads(1)
# Tolerances: those of gpt_reference.py (fp32 on our side, fp64 here; summation orders differ).
LOSS_RTOL = 1e-5
GRAD_RTOL = 1e-4     # relative to each tensor's largest gradient
MASK_FILL = -10000.0  # Megatron's attention_mask_func


class Config:
    """The reference configuration (hard-coded; the dump's shapes are checked against it)."""

    def __init__(self, variant):
        if variant not in ("a", "b"):
            raise SystemExit(f"t5_reference.py: unknown variant '{variant}' (a or b)")
        self.variant = variant
        self.relative = variant == "b"
        self.enc_layers = 2
        self.dec_layers = 2
        self.h = 64
        self.np = 4
        self.hn = 16
        self.ffn = 256
        self.eps = 1e-5
        self.se = 32
        self.sd = 16
        self.max_positions = 32            # variant a
        self.num_buckets = 32              # variant b
        self.max_distance = 128


def layer_shapes(cfg, prefix, cross):
    h, p = cfg.h, cfg.np * cfg.hn
    shapes = {
        "input_layernorm.weight": (h,), "input_layernorm.bias": (h,),
        "self_attention.linear_qkv.weight": (3 * p, h), "self_attention.linear_qkv.bias": (3 * p,),
        "self_attention.linear_proj.weight": (h, p), "self_attention.linear_proj.bias": (h,),
        "pre_mlp_layernorm.weight": (h,), "pre_mlp_layernorm.bias": (h,),
        "mlp.linear_fc1.weight": (cfg.ffn, h), "mlp.linear_fc1.bias": (cfg.ffn,),
        "mlp.linear_fc2.weight": (h, cfg.ffn), "mlp.linear_fc2.bias": (h,),
    }
    if cross:
        shapes.update({
            "pre_cross_attn_layernorm.weight": (h,), "pre_cross_attn_layernorm.bias": (h,),
            "cross_attention.linear_q.weight": (p, h), "cross_attention.linear_q.bias": (p,),
            "cross_attention.linear_kv.weight": (2 * p, h),
            "cross_attention.linear_kv.bias": (2 * p,),
            "cross_attention.linear_proj.weight": (h, p), "cross_attention.linear_proj.bias": (h,),
        })
    return {prefix + k: v for k, v in shapes.items()}


def expected_shapes(cfg, vocab):
    """Every parameter of T5Model with this config, in module order, with its shape."""
    h = cfg.h
    shapes = {"embedding.word_embeddings.weight": (vocab, h)}
    if cfg.relative:
        for stack in ("encoder", "decoder"):
            shapes[f"{stack}_relative_pos_emb.relative_attention_bias.weight"] = (
                cfg.num_buckets, cfg.np)
    else:
        shapes["embedding.position_embeddings.weight"] = (cfg.max_positions, h)
    for i in range(cfg.enc_layers):
        shapes.update(layer_shapes(cfg, f"encoder.layers.{i}.", cross=False))
    shapes["encoder.final_layernorm.weight"] = (h,)
    shapes["encoder.final_layernorm.bias"] = (h,)
    for i in range(cfg.dec_layers):
        shapes.update(layer_shapes(cfg, f"decoder.layers.{i}.", cross=True))
    shapes["decoder.final_layernorm.weight"] = (h,)
    shapes["decoder.final_layernorm.bias"] = (h,)
    shapes["lm_head.output_layer.bias"] = (vocab,)
    return shapes


def relative_position_bucket(relative_position, bidirectional=True, num_buckets=32,
                             max_distance=128):
    """RelativePositionEmbedding._relative_position_bucket (HF T5's), verbatim: the logarithmic
    part in float32 as Megatron computes it."""
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    relative_position_if_large = torch.min(
        relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1))
    relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
    return relative_buckets


def relative_bias(table, s, bidirectional, cfg):
    """RelativePositionEmbedding._compute_bias: (1, heads, s, s), bias[0, h, i, j] =
    table[bucket(j - i), h] (memory position minus query position)."""
    pos = torch.arange(s, dtype=torch.long)
    buckets = relative_position_bucket(pos[None, :] - pos[:, None], bidirectional,
                                       cfg.num_buckets, cfg.max_distance)
    return table[buckets].permute(2, 0, 1)[None]


def layer_norm(x, W, prefix, cfg):
    return F.layer_norm(x, (x.shape[-1],), W[prefix + ".weight"], W[prefix + ".bias"], cfg.eps)


def linear(x, W, prefix):
    return F.linear(x, W[prefix + ".weight"], W[prefix + ".bias"])


def attention(q, k, v, masked, bias, cfg):
    """DotProductAttention: q (b, sq, np, hn), k/v (b, sk, np, hn), masked (b, 1, sq, sk) True
    where excluded, bias None or (1, np, sq, sk) added after scaling; returns (b, sq, np * hn)."""
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(cfg.hn)
    if bias is not None:
        scores = scores + bias
    probs = scores.masked_fill(masked, MASK_FILL).softmax(-1)
    ctx = torch.einsum("bhqk,bkhd->bqhd", probs, v)
    return ctx.reshape(ctx.shape[0], ctx.shape[1], cfg.np * cfg.hn)


def self_attention(x, W, p, masked, bias, cfg):
    b, s, _ = x.shape
    # SelfAttention.get_query_key_value_tensors: per query group (= head here) [q | k | v].
    qkv = linear(x, W, p + "self_attention.linear_qkv").view(b, s, cfg.np, 3, cfg.hn)
    ctx = attention(qkv[:, :, :, 0], qkv[:, :, :, 1], qkv[:, :, :, 2], masked, bias, cfg)
    return linear(ctx, W, p + "self_attention.linear_proj")


def cross_attention(x, memory, W, p, masked, cfg):
    b, sq, _ = x.shape
    sk = memory.shape[1]
    # CrossAttention.get_query_key_value_tensors: linear_kv -> (sk, b, np, 2 * hn), split along
    # the last dimension: per head [key (hn) | value (hn)].
    kv = linear(memory, W, p + "cross_attention.linear_kv").view(b, sk, cfg.np, 2, cfg.hn)
    q = linear(x, W, p + "cross_attention.linear_q").view(b, sq, cfg.np, cfg.hn)
    ctx = attention(q, kv[:, :, :, 0], kv[:, :, :, 1], masked, None, cfg)
    return linear(ctx, W, p + "cross_attention.linear_proj")


def mlp(x, W, p):
    # MLP.forward with Megatron's defaults (--bias-gelu-fusion on, linear biases on):
    # bias_gelu_impl, the tanh approximation of GeLU (forward and its matching backward).
    act = F.gelu(linear(x, W, p + "mlp.linear_fc1"), approximate="tanh")
    return linear(act, W, p + "mlp.linear_fc2")


def embed(W, ids, cfg):
    # LanguageModelEmbedding with t5_position_ids (0..S-1 for both stacks); dropout 0.
    x = W["embedding.word_embeddings.weight"][ids]
    if not cfg.relative:
        x = x + W["embedding.position_embeddings.weight"][torch.arange(ids.shape[1])][None]
    return x


def forward(W, text_enc, text_dec, enc_mask, dec_mask, cfg):
    """T5Model.forward up to the logits (b, Sd, V)."""
    se, sd = text_enc.shape[1], text_dec.shape[1]
    enc_pad = (enc_mask == 0)[:, None, None, :]                       # (b, 1, 1, Se)
    dec_pad = (dec_mask == 0)[:, None, None, :]                       # (b, 1, 1, Sd)
    causal = torch.triu(torch.ones(sd, sd, dtype=torch.bool), 1)[None, None]
    enc_self_masked = enc_pad.expand(-1, -1, se, -1)
    dec_self_masked = dec_pad | causal
    cross_masked = enc_pad.expand(-1, -1, sd, -1)
    enc_bias = dec_bias = None
    if cfg.relative:
        enc_bias = relative_bias(W["encoder_relative_pos_emb.relative_attention_bias.weight"],
                                 se, True, cfg)
        dec_bias = relative_bias(W["decoder_relative_pos_emb.relative_attention_bias.weight"],
                                 sd, False, cfg)

    x = embed(W, text_enc, cfg)
    for i in range(cfg.enc_layers):
        p = f"encoder.layers.{i}."
        x = x + self_attention(layer_norm(x, W, p + "input_layernorm", cfg), W, p,
                               enc_self_masked, enc_bias, cfg)
        x = x + mlp(layer_norm(x, W, p + "pre_mlp_layernorm", cfg), W, p)
    memory = layer_norm(x, W, "encoder.final_layernorm", cfg)

    x = embed(W, text_dec, cfg)
    for i in range(cfg.dec_layers):
        p = f"decoder.layers.{i}."
        x = x + self_attention(layer_norm(x, W, p + "input_layernorm", cfg), W, p,
                               dec_self_masked, dec_bias, cfg)
        x = x + cross_attention(layer_norm(x, W, p + "pre_cross_attn_layernorm", cfg), memory,
                                W, p, cross_masked, cfg)
        x = x + mlp(layer_norm(x, W, p + "pre_mlp_layernorm", cfg), W, p)
    x = layer_norm(x, W, "decoder.final_layernorm", cfg)
    # T5LMHead: output_layer with the shared word embeddings and its own bias.
    return F.linear(x, W["embedding.word_embeddings.weight"], W["lm_head.output_layer.bias"])


def masked_loss(logits, labels, loss_mask):
    """pretrain_gpt.loss_func as pretrain_t5 uses it. Labels outside the loss mask may be
    negative (any target gives the same masked sum)."""
    per_token = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                labels.reshape(-1).long().clamp(min=0), reduction="none")
    mask = loss_mask.reshape(-1).to(per_token.dtype)
    return (per_token * mask).sum() / mask.sum()


def check_inputs(W0, ref, cfg):
    """Parameter names and shapes, batch shapes and masks. Returns (ok, vocabulary size)."""
    good = True
    if "embedding.word_embeddings.weight" not in W0:
        check("parameter names", False, "no embedding.word_embeddings.weight in the dump")
        return False, 0
    vocab = W0["embedding.word_embeddings.weight"].shape[0]
    shapes = expected_shapes(cfg, vocab)
    missing = [n for n in shapes if n not in W0]
    extra = sorted(n for n in W0 if n not in shapes)
    good &= check("parameter names", not missing and not extra,
                  f"{len(shapes)} expected, {len(W0)} in the dump"
                  + (f"; missing from the dump: {missing}" if missing else "")
                  + (f"; not in the model: {extra}" if extra else ""))
    wrong = [f"{n} {tuple(W0[n].shape)} (expected {s})" for n, s in shapes.items()
             if n in W0 and tuple(W0[n].shape) != s]
    good &= check("parameter shapes", not wrong,
                  f"vocabulary {vocab}" + (f"; differ: {wrong}" if wrong else ""))
    no_grad = [n for n in shapes if f"grad/{n}" not in ref]
    extra_grad = sorted(k[len("grad/"):] for k in ref if k.startswith("grad/")
                        and k[len("grad/"):] not in shapes)
    good &= check("gradient names", not no_grad and not extra_grad,
                  "one reference/grad/<name> per parameter"
                  + (f"; missing: {no_grad}" if no_grad else "")
                  + (f"; not in the model: {extra_grad}" if extra_grad else ""))
    bad = [f"grad/{n} {tuple(ref[f'grad/{n}'].shape)}" for n in shapes
           if f"grad/{n}" in ref and n in W0 and ref[f"grad/{n}"].shape != W0[n].shape]
    good &= check("gradient shapes", not bad,
                  "as the parameters" + (f"; differ: {bad}" if bad else ""))

    fields = {"text_enc": cfg.se, "text_dec": cfg.sd, "labels": cfg.sd, "loss_mask": cfg.sd,
              "enc_mask": cfg.se, "dec_mask": cfg.sd}
    absent = [k for k in list(fields) + ["lm_loss"] if k not in ref]
    if absent:
        check("batch", False, f"missing reference/{absent}")
        return False, vocab
    b = ref["text_enc"].shape[0]
    wrong = [f"{k} {tuple(ref[k].shape)}" for k, s in fields.items()
             if tuple(ref[k].shape) != (b, s)]
    good &= check("batch shapes", not wrong,
                  f"B {b}, Se {cfg.se}, Sd {cfg.sd}" + (f"; differ: {wrong}" if wrong else ""))
    if wrong:
        return False, vocab
    ids_ok = all(0 <= int(ref[k].min()) and int(ref[k].max()) < vocab
                 for k in ("text_enc", "text_dec"))
    lm = ref["loss_mask"] != 0
    labels_ok = bool(((ref["labels"] >= 0) & (ref["labels"] < vocab))[lm].all())
    good &= check("token ids", ids_ok and labels_ok,
                  f"inputs and loss-masked labels in [0, {vocab})")
    enc_len = ref["enc_mask"].sum(1).tolist()
    dec_len = ref["dec_mask"].sum(1).tolist()
    # Padded decoder rows' handling is unspecified (see the docstring): they must not carry loss.
    on_pad = int((lm & (ref["dec_mask"] == 0)).sum())
    good &= check("batch masks", on_pad == 0 and min(enc_len) > 0 and min(dec_len) > 0
                  and lm.any().item(),
                  f"real tokens per sample: encoder {enc_len} of {cfg.se}, decoder {dec_len} of "
                  f"{cfg.sd}; {int(lm.sum())} loss tokens, {on_pad} of them on decoder padding")
    return good, vocab


def compare(W0, ref, cfg, vocab, dtype, against_dump=True):
    """Loss and, per parameter in module order, max|grad - other| / max|grad| with grad this
    model's float64 gradient and other the dump's gradient (against_dump) or this model's
    gradient computed in dtype (round-off estimate)."""
    def run(dt):
        W = {k: v.to(dt).requires_grad_(True) for k, v in W0.items()}
        logits = forward(W, ref["text_enc"].long(), ref["text_dec"].long(), ref["enc_mask"],
                         ref["dec_mask"], cfg)
        loss = masked_loss(logits, ref["labels"], ref["loss_mask"])
        loss.backward()
        return loss.item(), {n: (W[n].grad if W[n].grad is not None else torch.zeros_like(W[n]))
                             .double() for n in W}
    loss, grads = run(torch.float64)
    other = ({n: ref[f"grad/{n}"].double() for n in grads} if against_dump else run(dtype)[1])
    errors = {}
    for name in expected_shapes(cfg, vocab):
        scale = grads[name].abs().max().item() or 1.0
        errors[name] = (grads[name] - other[name]).abs().max().item() / scale
    return loss, errors


def main(dump_file, variant):
    cfg = Config(variant)
    with h5py.File(dump_file, "r") as f:
        W0 = load_tensors(f, "model")
        ref = load_tensors(f, "reference")
    good, vocab = check_inputs(W0, ref, cfg)
    if not good:
        print(f"t5_reference: variant {variant}: the dump does not match the model; not compared")
        return 1

    torch_value, errors = compare(W0, ref, cfg, vocab, torch.float64)
    ours = ref["lm_loss"].double().reshape(-1)[0].item()
    rel = abs(torch_value - ours) / abs(torch_value)
    good &= check("lm_loss", rel <= LOSS_RTOL,
                  f"torch {torch_value:.8f} ours {ours:.8f} rel {rel:.2e} (tolerance {LOSS_RTOL})")
    worst_name, worst = max(errors.items(), key=lambda e: e[1])
    bad = [(n, e) for n, e in errors.items() if not e <= GRAD_RTOL]  # NaN counts as a mismatch
    good &= check("gradients", not bad,
                  f"{len(errors)} tensors, worst max|diff|/max|grad| {worst:.2e} at {worst_name} "
                  f"(tolerance {GRAD_RTOL})")
    if bad:
        # To tell a real difference from float32 round-off: the same error measure for this
        # model run in float32 instead of float64.
        _, fp32 = compare(W0, ref, cfg, vocab, torch.float32, against_dump=False)
        print(f"     first mismatching gradient: {bad[0][0]}; {len(bad)} mismatching in all "
              "(ours vs fp64, and this model's own fp32 vs fp64 for scale):")
        for n, e in bad:
            print(f"       {n}: {e:.2e} (fp32 round-off here {fp32[n]:.2e})")
    kind = "relative position bias" if cfg.relative else "learned absolute positions"
    print(f"t5_reference: variant {variant} ({kind}): "
          + ("everything matches" if good else "MISMATCH"))
    return 0 if good else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n\n")[1])
    sys.exit(main(*sys.argv[1:]))
