#!/usr/bin/python3
"""Independent PyTorch Mixture-of-Experts GPT (Megatron-core semantics) checked against
megatron-app.

usage: moe_reference.py DUMP_FILE VARIANT

DUMP_FILE: moe_reference_dump's checkpoint (initial weights under model/; under reference/ a
random batch, our lm loss, our logged load-balancing and z losses, and every parameter gradient
of one training step). VARIANT a: softmax top-2 of 4 experts, aux_loss 1e-2, z-loss 1e-3, shared
experts (20), SwiGLU, dropless, both layers MoE. VARIANT b: sigmoid top-2, seq_aux_loss 1e-2,
GeLU, moe_expert_capacity_factor 1.0 with the "probs" drop policy, layer 0 dense and layer 1 MoE.
The losses and every gradient are recomputed here in float64 with autograd.

Written from Megatron-LM's definitions (megatron/core/transformer/moe/router.py, moe_utils.py,
moe_layer.py, experts.py, shared_experts.py, token_dispatcher.py; models/gpt/gpt_layer_specs.py;
schedules.py for the auxiliary-loss scale), not from the C++ code:
- activations are (S, B, h) and the router sees hidden.view(-1, h): token row s * B + b;
- TopKRouter.gating: logits = hidden @ router.weight^T (no bias);
- apply_z_loss: z_loss = coeff * mean(logsumexp(logits)^2), attached to the logits with
  MoEAuxLossAutoScaler (backward adds its gradient at the main loss's scale: 1 here);
- topk_routing_with_score_function: softmax over the top-k logits (pre_softmax off), or
  sigmoid scores, top-k, normalised over the top-k when topk > 1 (+1e-20); routing_probs and
  routing_map dense (tokens, experts);
- apply_router_token_dropping: capacity = ceil(tokens * topk / experts * factor); per expert the
  capacity tokens of largest routing_probs (torch.topk over dim 0, "probs" policy); probs and map
  masked by it (no padding);
- compute_routing_scores_for_aux_loss: the full softmax (or sigmoid / sum) and its own top-k map;
  switch_load_balancing_loss_func: sum(scores.sum(0) * tokens_per_expert) * E * coeff /
  (topk * T^2); seq_aux_loss reshapes both to (S, B * E), uses T = S, divides by B; logged as
  loss / coeff, averaged over the MoE layers (the tracker's report over num_moe_layers);
- experts (SequentialMLP, what TEGroupedMLP computes): each expert's tokens in token order,
  linear_fc1 (expert e: rows e of experts.linear_fc1.weight), SwiGLU (silu(gate) * up over the
  [gate | up] halves) or F.gelu (exact), linear_fc2; unpermute scatters expert output * prob back
  to its token and sums;
- shared experts (SharedExpertMLP, no gate): a dense MLP of width
  moe_shared_expert_intermediate_size added to the experts' output;
- the rest of GPT as gpt_reference.py (LayerNorm pre-norm layers, causal attention, learned
  positions, tied output layer, pretrain_gpt's masked mean lm loss).
"""
import math
import os
import sys

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402
import h5py  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from gpt_reference import check, load_tensors, masked_loss  # noqa: E402

torch.set_num_threads(1)
LOSS_RTOL = 1e-5
GRAD_RTOL = 1e-4  # relative to each tensor's largest gradient (fp32 ours, fp64 here)


class Config:
    def __init__(self, variant):
        if variant not in ("a", "b"):
            raise SystemExit(f"moe_reference.py: unknown variant '{variant}' (a or b)")
        self.layers, self.h, self.np, self.hn, self.eps = 2, 32, 4, 8, 1e-5
        self.experts, self.topk, self.coeff = 4, 2, 1e-2
        self.swiglu = variant == "a"
        self.moe_layers = [0, 1] if variant == "a" else [1]
        self.score = "softmax" if variant == "a" else "sigmoid"
        self.seq_aux = variant == "b"
        self.z_coeff = 1e-3 if variant == "a" else 0.0
        self.capacity = None if variant == "a" else 1.0
        self.shared = variant == "a"
        self.dropped = 0  # routed pairs the capacity dropped (counted by drop_tokens)


def activation(x, cfg):
    if cfg.swiglu:
        gate, up = torch.chunk(x, 2, dim=-1)
        return F.silu(gate) * up
    return F.gelu(x)


def route(logits, cfg):
    """topk_routing_with_score_function (pre_softmax off, no groups, no scaling)."""
    if cfg.score == "softmax":
        top, idx = torch.topk(logits, cfg.topk, dim=1)
        probs = torch.softmax(top, dim=-1)
    else:
        scores = torch.sigmoid(logits)
        top, idx = torch.topk(scores, cfg.topk, dim=1)
        probs = top / (top.sum(dim=-1, keepdim=True) + 1e-20) if cfg.topk > 1 else top
    routing_probs = torch.zeros_like(logits).scatter(1, idx, probs)
    routing_map = torch.zeros_like(logits).scatter(1, idx, 1.0).bool()
    return routing_probs, routing_map


def drop_tokens(probs, routing_map, cfg):
    """apply_router_token_dropping, "probs" policy, no padding."""
    tokens, experts = probs.shape
    capacity = math.ceil(tokens * cfg.topk / experts * cfg.capacity)
    if capacity > tokens:
        return probs, routing_map
    _, keep_idx = torch.topk(probs, k=capacity, dim=0)
    keep = torch.zeros_like(probs).scatter(0, keep_idx, 1.0).bool()
    final_map = routing_map & keep
    cfg.dropped += int(routing_map.sum() - final_map.sum())
    return probs * final_map, final_map


def aux_loss(logits, cfg, seq, batch):
    """compute_routing_scores_for_aux_loss + switch_load_balancing_loss_func (per micro-batch, or
    per sequence)."""
    if cfg.score == "softmax":
        scores = torch.softmax(logits, dim=-1)
    else:
        s = torch.sigmoid(logits)
        scores = s / (s.sum(dim=-1, keepdim=True) + 1e-20)
    _, idx = torch.topk(scores, cfg.topk, dim=1)
    aux_map = torch.zeros_like(logits).scatter(1, idx, 1.0)
    e = cfg.experts
    if cfg.seq_aux:
        scores, aux_map = scores.reshape(seq, -1), aux_map.reshape(seq, -1)
        total = seq
    else:
        total = logits.shape[0]
    tokens_per_expert = aux_map.sum(dim=0)
    loss = torch.sum(scores.sum(dim=0) * tokens_per_expert) * (
        e * cfg.coeff / (cfg.topk * total * total))
    return loss / batch if cfg.seq_aux else loss


def moe_layer(x, g, cfg, aux):
    """x (S, B, h) normed -> (S, B, h); appends (load-balancing, z) losses to aux."""
    s, b, h = x.shape
    rows = x.reshape(-1, h)
    logits = rows @ g("mlp.router.weight").t()
    z = cfg.z_coeff * torch.logsumexp(logits, dim=-1).pow(2).mean() if cfg.z_coeff else None
    probs, routing_map = route(logits, cfg)
    if cfg.capacity is not None:
        probs, routing_map = drop_tokens(probs, routing_map, cfg)
    aux.append((aux_loss(logits, cfg, s, b), z))
    out = torch.zeros_like(rows)
    w1, w2 = g("mlp.experts.linear_fc1.weight"), g("mlp.experts.linear_fc2.weight")
    for e in range(cfg.experts):
        token_ids = routing_map[:, e].nonzero().flatten()
        expert_out = activation(rows[token_ids] @ w1[e].t(), cfg) @ w2[e].t()
        out = out.index_add(0, token_ids, expert_out * probs[token_ids, e].unsqueeze(-1))
    if cfg.shared:
        out = out + activation(rows @ g("mlp.shared_experts.linear_fc1.weight").t(), cfg) @ \
            g("mlp.shared_experts.linear_fc2.weight").t()
    return out.view(s, b, h)


def forward(W, tokens, cfg, aux):
    b, s = tokens.shape
    x = W["embedding.word_embeddings.weight"][tokens] + W["embedding.position_embeddings.weight"][:s][None]
    x = x.transpose(0, 1)  # (S, B, h), Megatron's layout
    for i in range(cfg.layers):
        p = f"decoder.layers.{i}."
        g = lambda n: W.get(p + n)  # noqa: E731
        ln = F.layer_norm(x, (cfg.h,), g("input_layernorm.weight"), g("input_layernorm.bias"), cfg.eps)
        qkv = (ln @ g("self_attention.linear_qkv.weight").t()).view(s, b, cfg.np, 3, cfg.hn)
        q, k, v = qkv[:, :, :, 0], qkv[:, :, :, 1], qkv[:, :, :, 2]
        scores = torch.einsum("qbhd,kbhd->bhqk", q, k) / math.sqrt(cfg.hn)
        causal = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)
        attn = scores.masked_fill(causal, float("-inf")).softmax(-1)
        ctx = torch.einsum("bhqk,kbhd->qbhd", attn, v).reshape(s, b, cfg.np * cfg.hn)
        x = x + ctx @ g("self_attention.linear_proj.weight").t()
        ln2 = F.layer_norm(x, (cfg.h,), g("pre_mlp_layernorm.weight"), g("pre_mlp_layernorm.bias"), cfg.eps)
        if i in cfg.moe_layers:
            x = x + moe_layer(ln2, g, cfg, aux)
        else:
            x = x + activation(ln2 @ g("mlp.linear_fc1.weight").t(), cfg) @ g("mlp.linear_fc2.weight").t()
    x = F.layer_norm(x, (cfg.h,), W["decoder.final_layernorm.weight"], W["decoder.final_layernorm.bias"], cfg.eps)
    return (x @ W["embedding.word_embeddings.weight"].t()).transpose(0, 1)  # (B, S, vocab)


def main(dump_file, variant):
    cfg = Config(variant)
    with h5py.File(dump_file, "r") as f:
        W0 = load_tensors(f, "model")
        ref = load_tensors(f, "reference")
    W = {k: v.double().clone().requires_grad_(True) for k, v in W0.items()}
    aux = []
    logits = forward(W, ref["tokens"].long(), cfg, aux)
    lm = masked_loss(logits, ref["labels"], ref["loss_mask"].double())
    total = lm + sum(a for a, _ in aux) + sum(z for _, z in aux if z is not None)
    total.backward()
    good = True
    name = "seq_load_balancing_loss" if cfg.seq_aux else "load_balancing_loss"
    figures = [("lm loss", lm.item()),
               (name, sum(a.item() for a, _ in aux) / cfg.coeff / len(aux))]
    if cfg.z_coeff:
        figures.append(("z_loss", sum(z.item() for _, z in aux) / cfg.z_coeff / len(aux)))
    for key, want in figures:
        ours = ref[f"loss/{key}"].item()
        rel = abs(want - ours) / abs(want)
        good &= check(key, rel <= LOSS_RTOL, f"torch {want:.8f} ours {ours:.8f} rel {rel:.2e}")
    worst, worst_name = 0.0, ""
    for n, p in W.items():
        scale = p.grad.abs().max().item() or 1.0
        d = (p.grad - ref[f"grad/{n}"].double()).abs().max().item() / scale
        if d > worst:
            worst, worst_name = d, n
    good &= check("gradients", worst <= GRAD_RTOL,
                  f"{len(W)} tensors, worst max|diff|/max|grad| {worst:.2e} at {worst_name} "
                  f"(tolerance {GRAD_RTOL})")
    if cfg.capacity is not None:
        good &= check("capacity drops", cfg.dropped > 0, f"{cfg.dropped} routed pairs dropped")
    return 0 if good else 1


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
