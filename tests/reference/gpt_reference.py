#!/usr/bin/python3
"""Independent PyTorch GPT (Megatron-core semantics) checked against megatron-app.

usage: gpt_reference.py DUMP_FILE TRAINED_FILE CACHE_DIR DATA_PREFIX

DUMP_FILE: gpt_reference_dump's checkpoint (initial weights, a random batch, our logits, loss
and gradients). TRAINED_FILE: megatron-app's checkpoint after fine-tuning 3 iterations from those
weights on the bundled corpus. CACHE_DIR / DATA_PREFIX: the sample-index cache and the indexed
dataset the trainer read, so this script rebuilds the same batches from Megatron's files itself.
Written from Megatron-LM's definitions, not from the C++ code.
"""
import glob
import math
import sys
import tomllib

import h5py
from checkpoint_attrs import config_text
import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(2)
# Tolerances (fp32 on both sides; summation orders differ).
LOSS_RTOL = 1e-5
LOGITS_ATOL = 2e-5
GRAD_RTOL = 1e-4     # relative to each tensor's largest gradient
# After 3 AdamW steps at lr 1e-3: Adam normalises every element's step, so an element whose
# gradient is at round-off level can move differently by a fraction of lr; bound the worst element
# at 5% of lr and the mean difference far below it. (1% held on AVX-512 machines; an AVX2 Zen 3's
# GEMM kernels gave 1.8% in one element of reference b, with a mean difference of 1.2e-9.)
PARAM_ATOL = 5e-5
PARAM_MEAN_ATOL = 1e-7
MOVED_MIN = 1e-3  # the largest update after 3 AdamW steps at lr 1e-3: about a step of lr or more


def load_tensors(f, group):
    out = {}
    f[group].visititems(lambda name, obj: out.__setitem__(name, torch.from_numpy(obj[()]))
                        if isinstance(obj, h5py.Dataset) else None)
    return out


class Config:
    def __init__(self, toml_text):
        c = tomllib.loads(toml_text)
        m, d = c["model"], c["data"]
        self.layers = m["num_layers"]
        self.h = m["hidden_size"]
        self.np = m["num_attention_heads"]
        self.ng = m.get("num_query_groups", self.np)
        self.hn = m.get("kv_channels", self.h // self.np)
        self.swiglu = m.get("swiglu", False)
        self.rms = m.get("normalization", "LayerNorm") == "RMSNorm"
        self.eps = m.get("layernorm_epsilon", 1e-5)
        self.rope = m.get("position_embedding_type", "learned_absolute") == "rope"
        self.rotary_dim = int(self.hn * m.get("rotary_percent", 1.0))
        self.rotary_base = m.get("rotary_base", 10000.0)
        self.untied = m.get("untie_embeddings_and_output_weights", False)
        self.seq = d["seq_length"]
        self.training = c["training"]
        self.optimizer = c["optimizer"]


def norm(x, w, b, cfg):
    if cfg.rms:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + cfg.eps) * w
    return F.layer_norm(x, (x.shape[-1],), w, b, cfg.eps)


def rope(x, cfg):
    # Megatron's non-interleaved rotary embedding on the first rotary_dim features.
    s, r = x.shape[1], cfg.rotary_dim
    inv_freq = 1.0 / (cfg.rotary_base ** (torch.arange(0, r, 2, dtype=torch.float32) / r))
    freqs = torch.outer(torch.arange(s, dtype=torch.float32), inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos()[None, :, None, :], emb.sin()[None, :, None, :]
    xr, rest = x[..., :r], x[..., r:]
    x1, x2 = xr[..., : r // 2], xr[..., r // 2:]
    rotated = torch.cat([-x2, x1], dim=-1)
    return torch.cat([xr * cos + rotated * sin, rest], dim=-1)


def forward(W, tokens, cfg):
    b, s = tokens.shape
    x = W["embedding.word_embeddings.weight"][tokens]
    if not cfg.rope:
        x = x + W["embedding.position_embeddings.weight"][:s][None]
    r = cfg.np // cfg.ng
    for i in range(cfg.layers):
        p = f"decoder.layers.{i}."
        g = lambda n: W.get(p + n)
        ln = norm(x, g("input_layernorm.weight"), g("input_layernorm.bias"), cfg)
        qkv = F.linear(ln, g("self_attention.linear_qkv.weight"), g("self_attention.linear_qkv.bias"))
        qkv = qkv.view(b, s, cfg.ng, r + 2, cfg.hn)  # per query group: r queries, a key, a value
        q = qkv[:, :, :, :r].reshape(b, s, cfg.np, cfg.hn)
        k, v = qkv[:, :, :, r], qkv[:, :, :, r + 1]
        if cfg.rope:
            q, k = rope(q, cfg), rope(k, cfg)
        k = k.repeat_interleave(r, dim=2)
        v = v.repeat_interleave(r, dim=2)
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(cfg.hn)
        causal = torch.triu(torch.ones(s, s, dtype=torch.bool), 1)
        probs = scores.masked_fill(causal, float("-inf")).softmax(-1)
        ctx = torch.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, s, cfg.np * cfg.hn)
        x = x + F.linear(ctx, g("self_attention.linear_proj.weight"), g("self_attention.linear_proj.bias"))
        ln2 = norm(x, g("pre_mlp_layernorm.weight"), g("pre_mlp_layernorm.bias"), cfg)
        h1 = F.linear(ln2, g("mlp.linear_fc1.weight"), g("mlp.linear_fc1.bias"))
        if cfg.swiglu:
            gate, up = torch.chunk(h1, 2, dim=-1)
            act = F.silu(gate) * up
        else:
            act = F.gelu(h1, approximate="tanh")
        x = x + F.linear(act, g("mlp.linear_fc2.weight"), g("mlp.linear_fc2.bias"))
    x = norm(x, W["decoder.final_layernorm.weight"], W.get("decoder.final_layernorm.bias"), cfg)
    out = W["output_layer.weight"] if cfg.untied else W["embedding.word_embeddings.weight"]
    return x @ out.t()


def masked_loss(logits, labels, mask):
    per_token = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1).long(),
                                reduction="none")
    return (per_token * mask.reshape(-1)).sum() / mask.sum()


class IndexedDataset:
    """Megatron's MMIDIDX .idx/.bin pair, read with numpy."""
    DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64,
              7: np.float32, 8: np.uint16}

    def __init__(self, prefix):
        idx = open(prefix + ".idx", "rb").read()
        assert idx[:9] == b"MMIDIDX\x00\x00", "not an MMIDIDX index"
        dtype_code = idx[17]
        n = int.from_bytes(idx[18:26], "little")
        offset = 34
        self.sizes = np.frombuffer(idx, np.int32, n, offset)
        self.pointers = np.frombuffer(idx, np.int64, n, offset + 4 * n)
        self.dtype = self.DTYPES[dtype_code]
        self.bin = np.memmap(prefix + ".bin", dtype=np.uint8, mode="r")

    def get(self, i, offset=0, length=None):
        length = self.sizes[i] - offset if length is None else length
        start = self.pointers[i] + offset * np.dtype(self.dtype).itemsize
        return np.frombuffer(self.bin, self.dtype, length, start).astype(np.int64)


def gpt_sample(ds, doc_idx, sample_idx, shuffle_idx, i):
    # Megatron GPTDataset._query_document_sample_shuffle_indices.
    i = shuffle_idx[i]
    beg, beg_off = sample_idx[i]
    end, end_off = sample_idx[i + 1]
    if beg == end:
        return ds.get(doc_idx[beg], beg_off, end_off - beg_off + 1)
    parts = [ds.get(doc_idx[beg], beg_off)]
    parts += [ds.get(doc_idx[j]) for j in range(beg + 1, end)]
    parts.append(ds.get(doc_idx[end], 0, end_off + 1))
    return np.concatenate(parts)


def check(name, ok, detail):
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")
    return ok


def main(dump_file, trained_file, cache_dir, data_prefix):
    good = True
    with h5py.File(trained_file, "r") as f:
        cfg = Config(config_text(f))
        trained = load_tensors(f, "model")
    with h5py.File(dump_file, "r") as f:
        W0 = load_tensors(f, "model")
        ref = load_tensors(f, "reference")

    # 1. logits, loss and every gradient on the dumped batch.
    W = {k: v.clone().requires_grad_(True) for k, v in W0.items()}
    logits = forward(W, ref["tokens"].long(), cfg)
    diff = (logits - ref["logits"]).abs().max().item()
    good &= check("logits", diff <= LOGITS_ATOL, f"max |diff| {diff:.3e} (tolerance {LOGITS_ATOL})")
    loss = masked_loss(logits, ref["labels"], ref["loss_mask"])
    ours = ref["loss"].item()
    rel = abs(loss.item() - ours) / abs(loss.item())
    good &= check("loss", rel <= LOSS_RTOL, f"torch {loss.item():.8f} ours {ours:.8f} rel {rel:.2e}")
    loss.backward()
    worst = 0.0
    for name, p in W.items():
        g = ref[f"grad/{name}"]
        scale = p.grad.abs().max().item() or 1.0
        worst = max(worst, (p.grad - g).abs().max().item() / scale)
    good &= check("gradients", worst <= GRAD_RTOL,
                  f"{len(W)} tensors, worst max|diff|/max|grad| {worst:.2e} (tolerance {GRAD_RTOL})")

    # 2. Three AdamW iterations on the trainer's own batches, rebuilt from Megatron's files.
    t, o = cfg.training, cfg.optimizer
    ds = IndexedDataset(data_prefix)
    load = lambda kind: np.load(glob.glob(f"{cache_dir}/*-GPTDataset-train-{kind}.npy")[0])
    doc_idx, sample_idx, shuffle_idx = load("document_index"), load("sample_index"), load("shuffle_index")
    W = {k: v.clone().requires_grad_(True) for k, v in W0.items()}
    decay = [p for n, p in W.items() if p.dim() > 1]
    no_decay = [p for n, p in W.items() if p.dim() == 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": t["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=t["lr"], betas=(o["adam_beta1"], o["adam_beta2"]), eps=o["adam_eps"])
    mbs, gbs = t["micro_batch_size"], t["global_batch_size"]
    consumed = 0
    for it in range(t["train_iters"]):
        opt.zero_grad()
        micro = gbs // mbs
        for k in range(micro):
            rows = [gpt_sample(ds, doc_idx, sample_idx, shuffle_idx, consumed + k * mbs + j)
                    for j in range(mbs)]
            sample = torch.from_numpy(np.stack(rows))
            tokens, labels = sample[:, :-1], sample[:, 1:]
            loss = masked_loss(forward(W, tokens, cfg), labels, torch.ones(labels.shape))
            (loss / micro).backward()
        torch.nn.utils.clip_grad_norm_(list(W.values()), t["clip_grad"])
        opt.step()
        consumed += gbs
    good &= check("same parameter names", set(W) == set(trained), f"{sorted(set(W) ^ set(trained))}")
    worst, worst_name, total, count = 0.0, "", 0.0, 0
    for name, p in W.items():
        d = (p.detach() - trained[name]).abs()
        total, count = total + d.sum().item(), count + d.numel()
        if d.max().item() > worst:
            worst, worst_name = d.max().item(), name
    good &= check("parameters after 3 AdamW steps", worst <= PARAM_ATOL and total / count <= PARAM_MEAN_ATOL,
                  f"max |diff| {worst:.2e} at {worst_name} (tolerance {PARAM_ATOL}), "
                  f"mean |diff| {total / count:.2e} (tolerance {PARAM_MEAN_ATOL})")
    moved = max((W0[n] - trained[n]).abs().max().item() for n in W0)
    good &= check("training moved the weights", moved > MOVED_MIN, f"max |update| {moved:.2e}")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
