#!/usr/bin/python3
"""Independent greedy decoding of a megatron-app GPT checkpoint in PyTorch, checked against
`megatron-app generate --top-k 1 --output-json`.

usage: generate_reference.py --checkpoint FILE.h5 --vocab-file encoder.json
           --merge-file vocab.bpe --compare GENERATED.json
       generate_reference.py --model mamba --checkpoint FILE.h5 --compare GENERATED.json
       generate_reference.py --model moe --checkpoint FILE.h5 --vocab-file encoder.json
           --merge-file vocab.bpe --compare GENERATED.json

A Mixture-of-Experts GPT (--model moe: LayerNorm, learned positions, tied output, no linear
biases, dropless top-k softmax routing, every layer MoE or per moe_layer_freq) runs
moe_reference.py's forward with its configuration read from the checkpoint. A Mamba or hybrid
checkpoint (--model mamba) runs mamba_reference.py's MambaModel forward, with
its configuration read from the checkpoint's stored config; its SentencePiece prompt ids are
taken from GENERATED.json with its end-of-document id and vocabulary size (the tokenizer
is checked against spm_encode in tests/tokenizer).

For each prompt of GENERATED.json: the prompt's GPT-2 BPE ids (tests/data/gpt2_reference_encoder.py,
a port of OpenAI's encoder.py) must equal megatron-app's; then each step of Megatron's legacy
greedy loop (megatron/inference/text_generation/generation.py with top_k = 1: the whole sequence
recomputed, the argmax over the vocabulary without its padding, stop at the end-of-document id),
with gpt_reference.py's Megatron-core GPT forward in float64 on the checkpoint's weights, must
pick megatron-app's token after megatron-app's prefix (a near tie, within TIE, counted apart), and
the end of document where megatron-app stopped there. An empty prompt starts from the
end-of-document id. Prints a line per prompt; exit status 1 on any difference.
"""
import argparse
import json
import os
import sys

import h5py
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "data"))
from checkpoint_attrs import config_text  # noqa: E402
from gpt_reference import Config, forward, load_tensors  # noqa: E402
from gpt2_reference_encoder import Encoder  # noqa: E402
import mamba_reference  # noqa: E402
import moe_reference  # noqa: E402

torch.set_num_threads(1)
EOD = 50256  # GPT-2's <|endoftext|>, Megatron's eod for GPT2BPETokenizer
TIE = 1e-4   # float32 logits against float64 ones: a near tie may go either way
LOGPROB_ATOL = 2e-4  # megatron-app's float32 log-probabilities against float64 ones


class MambaConfig:
    """mamba_reference.py's configuration attributes from a checkpoint's [model] table."""

    def __init__(self, config_toml):
        import tomllib
        m = tomllib.loads(config_toml)["model"]
        self.pattern = m["hybrid_layer_pattern"]
        self.layers = len(self.pattern)
        self.h = m["hidden_size"]
        self.eps = m.get("layernorm_epsilon", 1e-5)
        self.d_inner = 2 * self.h                     # Megatron's mamba expand of 2
        self.headdim = m["mamba_head_dim"]
        self.nheads = self.d_inner // self.headdim
        self.d_state = m["mamba_state_dim"]
        self.ngroups = m["mamba_num_groups"]
        self.d_conv = 4
        self.norm_eps = 1e-5
        self.conv_dim = self.d_inner + 2 * self.ngroups * self.d_state
        self.np = m.get("num_attention_heads", 1)
        self.ng = m.get("num_query_groups") or self.np
        self.hn = m.get("kv_channels") or self.h // self.np
        self.ffn = m.get("ffn_hidden_size") or 4 * self.h


class MoeConfig:
    """moe_reference.py's configuration attributes from a checkpoint's [model] table."""

    def __init__(self, config_toml):
        import tomllib
        m = tomllib.loads(config_toml)["model"]
        self.layers, self.h = m["num_layers"], m["hidden_size"]
        self.np = m["num_attention_heads"]
        self.hn = m.get("kv_channels") or self.h // self.np
        self.eps = m.get("layernorm_epsilon", 1e-5)
        self.experts, self.topk = m["num_experts"], m.get("moe_router_topk", 2)
        self.coeff = m.get("moe_aux_loss_coeff", 0.0)
        self.swiglu = m.get("swiglu", False)
        freq = m.get("moe_layer_freq", 1)
        self.moe_layers = [i for i in range(self.layers) if i % freq == 0]
        self.score = m.get("moe_router_score_function", "softmax")
        self.seq_aux = False
        self.z_coeff = 0.0
        self.capacity = None
        self.shared = bool(m.get("moe_shared_expert_intermediate_size"))
        self.dropped = 0


def moe_forward(W, tokens, cfg):
    return moe_reference.forward(W, tokens, cfg, [])


def check_steps(W, cfg, start, generated, eod_at_end, vocab, forward=forward, eod=EOD,
                top=None):
    """Each generated id (and the final end of document) is the argmax of the logits after the
    prefix megatron-app had: exact, or within TIE of the maximum (float64 here, float32 there).
    Returns (exact steps, near-tie steps, first failing step or None)."""
    targets = generated + ([eod] if eod_at_end else [])
    exact = ties = 0
    for i, token in enumerate(targets):
        full = forward(W, torch.tensor([start + generated[:i]]), cfg)[0, -1]
        if top is not None and i < len(top):
            # The N most likely ids and their log-probabilities (log-softmax over the padded row,
            # Megatron's), where --top-logprobs asked for them.
            logp = torch.log_softmax(full, -1)
            want = torch.topk(logp[:vocab], len(top[i]))
            for (tid, lp), wid, wlp in zip(top[i], want.indices.tolist(), want.values.tolist()):
                if abs(float(logp[tid]) - lp) > LOGPROB_ATOL or abs(lp - wlp) > LOGPROB_ATOL:
                    print(f"     step {i}: top log-probability ({tid}, {lp:.6f}), reference "
                          f"({wid}, {wlp:.6f}), its own {float(logp[tid]):.6f}")
                    return exact, ties, i
        logits = full[:vocab]
        best = float(logits.max())
        if int(torch.argmax(logits)) == token:
            exact += 1
        elif float(logits[token]) >= best - TIE:
            ties += 1
        else:
            return exact, ties, i
    return exact, ties, None


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["gpt", "mamba", "moe"], default="gpt")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--vocab-file")
    parser.add_argument("--merge-file")
    parser.add_argument("--compare", required=True)
    args = parser.parse_args()
    if args.model == "mamba":
        return check_mamba(args)
    with h5py.File(args.checkpoint, "r") as f:
        cfg = (MoeConfig if args.model == "moe" else Config)(config_text(f))
        W = {k: v.double() for k, v in load_tensors(f, "model").items()}
    step_forward = moe_forward if args.model == "moe" else forward
    encoder = Encoder(args.vocab_file, args.merge_file)
    vocab = len(encoder.encoder)
    ok = True
    for item in json.load(open(args.compare)):
        prompt, tokens = item["prompt"], item["tokens"]
        prompt_ids = encoder.encode(prompt)
        if prompt_ids != item["prompt_tokens"]:
            print(f"FAIL {prompt!r}: prompt ids {item['prompt_tokens']}, expected {prompt_ids}")
            ok = False
            continue
        eod = item["stopped_by"] == "eod"
        exact, ties, bad = check_steps(W, cfg, prompt_ids or [EOD], tokens, eod, vocab,
                                       step_forward, top=item.get("top_logprobs"))
        if bad is not None:
            print(f"FAIL {prompt!r}: step {bad} ({(tokens + [EOD])[bad]}) differs from the reference")
            ok = False
            continue
        checked = " and top log-probabilities" if item.get("logprobs") else ""
        print(f"ok   {prompt!r}: {len(tokens)} tokens ({item['stopped_by']}), {exact} exact "
              f"argmax, {ties} within {TIE} of it{checked}")
    sys.exit(0 if ok else 1)


def check_mamba(args):
    with h5py.File(args.checkpoint, "r") as f:
        cfg = MambaConfig(config_text(f))
        W = {k: v.double() for k, v in load_tensors(f, "model").items()}
    ok = True
    for item in json.load(open(args.compare)):
        prompt, tokens = item["prompt"], item["tokens"]
        eod, vocab = item["eod"], item["vocab_size"]
        start = item["prompt_tokens"] or [eod]
        exact, ties, bad = check_steps(W, cfg, start, tokens, item["stopped_by"] == "eod",
                                       vocab, mamba_reference.forward, eod,
                                       top=item.get("top_logprobs"))
        if bad is not None:
            print(f"FAIL {prompt!r}: step {bad} differs from the reference")
            ok = False
            continue
        checked = " and top log-probabilities" if item.get("logprobs") else ""
        print(f"ok   {prompt!r} ({cfg.pattern}): {len(tokens)} tokens ({item['stopped_by']}), "
              f"{exact} exact argmax, {ties} within {TIE} of it{checked}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
