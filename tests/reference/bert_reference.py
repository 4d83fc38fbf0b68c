#!/usr/bin/python3
"""Independent PyTorch BERT (Megatron-core semantics) checked against megatron-app.

usage: bert_reference.py DUMP_FILE TRAINED_FILE CACHE_DIR DATA_PREFIX VOCAB_FILE

DUMP_FILE: bert_reference_dump's checkpoint (initial weights, a random batch with differently
padded samples, our losses, final hidden states, logits, every parameter gradient and weight-decay
flag). TRAINED_FILE: megatron-app's checkpoint after fine-tuning 3 iterations from those weights
on the bundled sentence corpus. CACHE_DIR / DATA_PREFIX / VOCAB_FILE: the sample-mapping cache,
the sentence-level indexed dataset and the WordPiece vocabulary the trainer read; the batches are
rebuilt here with tests/data/bert_samples_reference.py (an independent Python version of
Megatron's BERTMaskedWordPieceDataset).

Written from Megatron-LM core_v0.13.1's definitions (models/bert/bert_model.py, bert_lm_head.py,
pooler.py, bert_layer_specs.py's local spec, pretrain_bert.py's loss_func), not from the C++ code.
"""
import glob
import json
import math
import os
import sys
import tomllib

import h5py
from checkpoint_attrs import config_text
import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "data"))
from gpt_reference import IndexedDataset, check, load_tensors  # noqa: E402
import bert_samples_reference as samples  # noqa: E402

torch.set_num_threads(2)
# Tolerances: those of gpt_reference.py (fp32 on both sides; summation orders differ).
LOSS_RTOL = 1e-5
HIDDEN_ATOL = 2e-5
LOGITS_ATOL = 2e-5
GRAD_RTOL = 1e-4     # relative to each tensor's largest gradient
PARAM_ATOL = 5e-5    # after 3 AdamW steps at lr 1e-3 (see gpt_reference.py)
PARAM_MEAN_ATOL = 1e-7
MOVED_MIN = 1e-3  # the largest update after 3 AdamW steps at lr 1e-3: about a step of lr or more
UNRESOLVED_RTOL = 0.01  # see part2


class Config:
    def __init__(self, toml_text):
        c = tomllib.loads(toml_text)
        m, d = c["model"], c["data"]
        self.layers = m["num_layers"]
        self.h = m["hidden_size"]
        self.np = m["num_attention_heads"]
        self.hn = m.get("kv_channels", self.h // self.np)
        self.eps = m.get("layernorm_epsilon", 1e-5)
        self.binary_head = m.get("bert_binary_head", True)
        self.seq = d["seq_length"]
        self.data = d
        self.seed = c["training"]["seed"]
        self.training = c["training"]
        self.optimizer = c["optimizer"]
        assert m.get("num_query_groups", self.np) == self.np, "the reference has no GQA"
        assert m.get("position_embedding_type", "learned_absolute") == "learned_absolute"
        assert m.get("normalization", "LayerNorm") == "LayerNorm"
        assert not m.get("swiglu", False)


def layer_norm(x, W, prefix, cfg):
    return F.layer_norm(x, (x.shape[-1],), W[prefix + ".weight"], W[prefix + ".bias"], cfg.eps)


def linear(x, W, prefix):
    return F.linear(x, W[prefix + ".weight"], W[prefix + ".bias"])


def encode(W, text, types, padding_mask, cfg, token_types):
    """BertModel.forward up to encoder.final_layernorm: the final hidden states (b, s, h).
    `token_types`: the embedding has token types (the binary head's, or a task model's)."""
    b, s = text.shape
    # LanguageModelEmbedding: word + position (+ token type); embedding dropout is 0.
    x = W["embedding.word_embeddings.weight"][text]
    x = x + W["embedding.position_embeddings.weight"][torch.arange(s)][None]
    if token_types:
        x = x + W["embedding.tokentype_embeddings.weight"][types]
    # bert_extended_attention_mask for the local spec ("b1ss"): mask[b,1,s] * mask[b,s,1] < 0.5,
    # masked scores filled with -10000 (attention_mask_func) before the softmax.
    m = padding_mask.float()
    masked = ((m[:, None, :] * m[:, :, None]) < 0.5)[:, None]  # (b, 1, s, s)
    for i in range(cfg.layers):
        p = f"encoder.layers.{i}."
        ln = layer_norm(x, W, p + "input_layernorm", cfg)
        qkv = linear(ln, W, p + "self_attention.linear_qkv").view(b, s, cfg.np, 3, cfg.hn)
        q, k, v = qkv[:, :, :, 0], qkv[:, :, :, 1], qkv[:, :, :, 2]
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(cfg.hn)
        probs = scores.masked_fill(masked, -10000.0).softmax(-1)
        ctx = torch.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, s, cfg.np * cfg.hn)
        x = x + linear(ctx, W, p + "self_attention.linear_proj")
        ln2 = layer_norm(x, W, p + "pre_mlp_layernorm", cfg)
        # Megatron's fused bias-gelu: the tanh approximation.
        act = F.gelu(linear(ln2, W, p + "mlp.linear_fc1"), approximate="tanh")
        x = x + linear(act, W, p + "mlp.linear_fc2")
    return layer_norm(x, W, "encoder.final_layernorm", cfg)


def forward(W, text, types, padding_mask, cfg):
    """BertModel.forward up to the heads: (final hidden (b, s, h), LM logits (b, s, V), binary
    logits (b, 2) or None)."""
    hidden = encode(W, text, types, padding_mask, cfg, cfg.binary_head)
    # BertLMHead: dense -> torch.nn.functional.gelu (exact) -> LayerNorm; then output_layer with
    # the shared word embeddings and its own bias.
    t = F.gelu(linear(hidden, W, "lm_head.dense"))
    t = layer_norm(t, W, "lm_head.layer_norm", cfg)
    logits = F.linear(t, W["embedding.word_embeddings.weight"], W["output_layer.bias"])
    binary = None
    if cfg.binary_head:
        pooled = torch.tanh(linear(hidden[:, 0], W, "pooler.dense"))  # Pooler(hidden, 0)
        binary = linear(pooled, W, "binary_head")
    return hidden, logits, binary


def losses(logits, binary, labels, loss_mask, is_random):
    """pretrain_bert.loss_func: masked mean of the per-token LM loss; mean SOP cross-entropy.
    Labels are -1 where loss_mask is 0 (vocab_parallel_cross_entropy masks them; any target
    gives the same masked sum)."""
    per_token = F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                labels.reshape(-1).long().clamp(min=0), reduction="none")
    mask = loss_mask.reshape(-1).float()
    lm = (per_token * mask).sum() / mask.sum()
    sop = F.cross_entropy(binary, is_random.reshape(-1).long(), ignore_index=-1)
    return lm, sop


def rel(a, b):
    return abs(a - b) / abs(a)


def part1(W0, ref, cfg):
    good = True
    b, s = ref["text"].shape
    real = ref["padding_mask"].bool()
    lengths = real.sum(1).tolist()
    good &= check("batch padding", len(set(lengths)) == len(lengths) and max(lengths) == s,
                  f"real tokens per sample {lengths} of {s}")
    # Megatron: weight decay for every parameter but biases and 1-D ones (norms).
    flags = {n[len("weight_decay/"):]: int(t.item()) for n, t in ref.items()
             if n.startswith("weight_decay/")}
    wrong = sorted(n for n in W0 if flags.get(n) != int(W0[n].dim() > 1))
    good &= check("weight decay flags", not wrong,
                  f"{len(flags)} tensors, decay exactly on dim > 1"
                  + (f"; differ: {wrong}" if wrong else ""))

    W = {k: v.clone().requires_grad_(True) for k, v in W0.items()}
    hidden, logits, binary = forward(W, ref["text"].long(), ref["types"].long(),
                                     ref["padding_mask"], cfg)
    # Ours is (S * B, h) in rows s * B + b; compare real positions only (Megatron's local spec
    # lets padded queries attend everywhere; ours keeps them on real keys: neither reaches a loss).
    ours_hidden = ref["final_hidden"].view(s, b, -1).transpose(0, 1)
    d = (hidden - ours_hidden).abs()[real].max().item()
    good &= check("final hidden (real positions)", d <= HIDDEN_ATOL,
                  f"max |diff| {d:.3e} (tolerance {HIDDEN_ATOL})")
    ours_logits = ref["logits"].view(s, b, -1).transpose(0, 1)
    d = (logits - ours_logits).abs()[real].max().item()
    good &= check("LM logits (real positions)", d <= LOGITS_ATOL,
                  f"max |diff| {d:.3e} (tolerance {LOGITS_ATOL})")
    lm, sop = losses(logits, binary, ref["labels"], ref["loss_mask"], ref["is_random"])
    for name, torch_value in (("lm_loss", lm.item()), ("sop_loss", sop.item())):
        ours = ref[name].item()
        r = rel(torch_value, ours)
        good &= check(name, r <= LOSS_RTOL, f"torch {torch_value:.8f} ours {ours:.8f} rel {r:.2e}")
    (lm + sop).backward()
    worst, worst_name = 0.0, ""
    for name, p in W.items():
        grad = p.grad if p.grad is not None else torch.zeros_like(p)  # unused: zero gradient
        scale = grad.abs().max().item() or 1.0
        r = (grad - ref[f"grad/{name}"]).abs().max().item() / scale
        if r >= worst:
            worst, worst_name = r, name
    good &= check("gradients", worst <= GRAD_RTOL,
                  f"{len(W)} tensors, worst max|diff|/max|grad| {worst:.2e} at {worst_name} "
                  f"(tolerance {GRAD_RTOL})")
    return good


def train_split_mapping(cache_dir):
    """The trainer's cached train-split mapping (rows: first sentence, end sentence, target)."""
    for desc in glob.glob(f"{cache_dir}/*-BERTMaskedWordPieceDataset-description.txt"):
        with open(desc) as f:
            if json.load(f)["index_split"] == "train":
                return np.load(desc.replace("-description.txt", "-sample_index.npy")), desc
    raise SystemExit(f"no train-split BERT sample index in {cache_dir}")


def part2(W0, trained, cfg, cache_dir, data_prefix, vocab_file):
    good = True
    t, o, d = cfg.training, cfg.optimizer, cfg.data
    ds = IndexedDataset(data_prefix)
    mapping, _ = train_split_mapping(cache_dir)
    with open(vocab_file, encoding="utf-8") as f:
        strings = [line.strip() for line in f]
    strings += ["[BOS]", "[EOS]"]  # _BertWordPieceTokenizer appends them
    ids = {tok: i for i, tok in enumerate(strings)}
    vocab = samples.Vocab({"vocab": strings, "cls": ids["[CLS]"], "sep": ids["[SEP]"],
                           "pad": ids["[PAD]"], "mask": ids["[MASK]"],
                           "token_lookup": list(range(len(strings)))})
    masking = samples.bert_masking()
    masking["masking_probability"] = d.get("mask_prob", 0.15)
    case = {"seed": cfg.seed, "sequence_length": cfg.seq, "classification_head": cfg.binary_head,
            "masking": masking}

    def sample(i):
        first, end, target = (int(x) for x in mapping[i])
        return samples.bert_sample([ds.get(j).tolist() for j in range(first, end)], target, i,
                                   case, vocab)

    W = {k: v.clone().requires_grad_(True) for k, v in W0.items()}
    decay = [p for p in W.values() if p.dim() > 1]
    no_decay = [p for p in W.values() if p.dim() == 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": t["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=t["lr"], betas=(o["adam_beta1"], o["adam_beta2"]), eps=o["adam_eps"])
    mbs, gbs = t["micro_batch_size"], t["global_batch_size"]
    micro = gbs // mbs
    # Elements whose fp32 gradient fp32 cannot resolve at some step (off the fp64 gradient at the
    # same weights by more than UNRESOLVED_RTOL: round-off, e.g. a key bias's exactly-zero
    # gradient, or an fc2 column fed by tanh-gelu outputs of very negative inputs, where
    # 1 + tanh(.) cancels). Adam normalises every element's step, so such an element can move
    # differently on two correct fp32 implementations by a fraction of lr per step.
    unresolved = {k: torch.zeros_like(v, dtype=torch.bool) for k, v in W0.items()}
    consumed, masked_tokens, swapped = 0, 0, 0
    for it in range(t["train_iters"]):
        opt.zero_grad()
        grad64 = {k: torch.zeros_like(v, dtype=torch.float64) for k, v in W0.items()}
        for k in range(micro):
            rows = [sample(consumed + k * mbs + j) for j in range(mbs)]
            field = lambda name: torch.tensor([r[name] for r in rows])
            inputs = (field("text"), field("types"), field("padding_mask"))
            targets = (field("labels"), field("loss_mask"), field("is_random"))
            _, logits, binary = forward(W, *inputs, cfg)
            lm, sop = losses(logits, binary, *targets)
            ((lm + sop) / micro).backward()
            W64 = {n: p.detach().double().requires_grad_(True) for n, p in W.items()}
            _, logits, binary = forward(W64, *inputs, cfg)
            lm, sop = losses(logits, binary, *targets)
            ((lm + sop) / micro).backward()
            for n, p in W64.items():
                grad64[n] += p.grad
            masked_tokens += int(field("loss_mask").sum())
            swapped += int(field("is_random").sum())
        for n, p in W.items():
            unresolved[n] |= (p.grad.double() - grad64[n]).abs() > UNRESOLVED_RTOL * grad64[n].abs()
        torch.nn.utils.clip_grad_norm_(list(W.values()), t["clip_grad"])
        opt.step()
        consumed += gbs
    good &= check("rebuilt batches", masked_tokens > 0 and 0 < swapped < consumed,
                  f"{consumed} samples, {masked_tokens} masked tokens, {swapped} swapped pairs")
    good &= check("same parameter names", set(W) == set(trained), f"{sorted(set(W) ^ set(trained))}")
    worst, worst_name, total, count = 0.0, "", 0.0, 0
    worst_unresolved, unresolved_count = 0.0, 0
    for name, p in W.items():
        diff = (p.detach() - trained[name]).abs()
        total, count = total + diff.sum().item(), count + diff.numel()
        u = unresolved[name]
        unresolved_count += int(u.sum())
        if u.any():
            worst_unresolved = max(worst_unresolved, diff[u].max().item())
        if (~u).any() and diff[~u].max().item() > worst:
            worst, worst_name = diff[~u].max().item(), name
    good &= check("parameters after 3 AdamW steps",
                  worst <= PARAM_ATOL and total / count <= PARAM_MEAN_ATOL,
                  f"max |diff| {worst:.2e} at {worst_name} (tolerance {PARAM_ATOL}), "
                  f"mean |diff| {total / count:.2e} over all {count} (tolerance {PARAM_MEAN_ATOL})")
    bound = t["lr"] * t["train_iters"]
    good &= check("round-off-gradient elements", worst_unresolved <= bound,
                  f"{unresolved_count} elements with an fp32 gradient off fp64 by "
                  f"> {UNRESOLVED_RTOL:.0%} at some step: max |diff| {worst_unresolved:.2e} "
                  f"(tolerance lr * iterations = {bound})")
    moved = max((W0[n] - trained[n]).abs().max().item() for n in W0)
    good &= check("training moved the weights", moved > MOVED_MIN, f"max |update| {moved:.2e}")
    return good


def main(dump_file, trained_file, cache_dir, data_prefix, vocab_file):
    with h5py.File(trained_file, "r") as f:
        cfg = Config(config_text(f))
        trained = load_tensors(f, "model")
    with h5py.File(dump_file, "r") as f:
        W0 = load_tensors(f, "model")
        ref = load_tensors(f, "reference")
    good = part1(W0, ref, cfg)
    good &= part2(W0, trained, cfg, cache_dir, data_prefix, vocab_file)
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
