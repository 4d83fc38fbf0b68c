#!/usr/bin/python3
"""Independent PyTorch computation of Megatron-LM's zero-shot GPT evaluation on a megatron-app
checkpoint: WIKITEXT103 perplexity and LAMBADA cloze accuracy.

usage: zeroshot_reference.py --checkpoint FILE.h5 --task WIKITEXT103|LAMBADA --data PATH
           --seq-length N [--overlapping-eval 32] [--strict-lambada]
           --vocab-file encoder.json --merge-file vocab.bpe [--compare RESULTS.json]

Prints one JSON object on stdout:
  WIKITEXT103: task, avg_loss, ppl, adjusted_ppl, token_ratio, num_original_tokens,
               num_tokenized_tokens, num_windows
  LAMBADA:     task, correct, total, accuracy, num_targets, target_loss (the mean cross-entropy
               of the target tokens: not a Megatron figure, a finer check of the same logits)
With --compare RESULTS.json (megatron-app's results, same key names at top level, unknown keys
ignored) every numeric key printed here must be present there and agree: counts exactly, floats to
a relative 1e-5 (see FLOAT_RTOL). Exit status 1 on any mismatch or missing key, 0 otherwise.

Written from Megatron-LM core_v0.13.0's tasks/zeroshot_gpt (evaluate.py, datasets.py,
detokenizer.py) and megatron/training/tokenizer/gpt2_tokenization.py, not from the C++ code:
- WIKITEXT103 (_build_wikitext103_dataset, _LMDataset): the file's bytes decoded as utf-8;
  num_original_tokens = len(text.strip().split(" ")); the detokenizer picked by
  get_detokenizer(path) (wikitext_detokenizer when the path contains "wiki"); the whole
  detokenized text BPE-tokenized as one stream; windows of seq_len+1 tokens starting every
  overlapping_eval tokens, padded with eod; pad_mask drops padded targets and, for every window
  but the first (when overlapping_eval != seq_len), all but the last overlapping_eval targets.
  loss = sum over windows of per-token cross-entropy * pad_mask; avg_loss = loss / (T - 1);
  ppl = exp(min(20, avg_loss)); token_ratio = (T - 1) / (num_original_tokens - 1);
  adjusted_ppl = exp(min(20, avg_loss * token_ratio)).
- LAMBADA (_LambadaDataset, forward_step's 'accuracy'): one sample per jsonl line; non-strict:
  context = tokenize(text)[:-1], label = its last token; strict: the last whitespace-separated
  word w, start = text.rfind(w), context = tokenize(text[:start].strip()),
  label = tokenize(' ' + w). Padded to seq_len+1 with eod; a sample is correct iff the argmax
  over the (padded) vocabulary equals the label at every label position; accuracy =
  correct / number of samples.
The GPT forward (Megatron-core semantics) is gpt_reference.py's, used verbatim; the BPE encoder
is tests/data/gpt2_reference_encoder.py (a port of OpenAI's encoder.py, the same algorithm as
Megatron's GPT2Tokenizer).
"""
import argparse
import json
import math
import os
import re
import sys

import h5py
from checkpoint_attrs import config_text
import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "data"))
from gpt_reference import Config, forward, load_tensors  # noqa: E402
from gpt2_reference_encoder import Encoder  # noqa: E402

# gpt_reference sets 2 threads on import; the machine is shared, so one is enough here.
torch.set_num_threads(1)

EOD = 50256          # <|endoftext|> in GPT-2's encoder.json: Megatron's tokenizer.eod, the pad
BATCH = 8            # windows per forward; batching does not change the (per-row) results
# Both sides compute the forward in float32 (the checkpoint's weights are f32) with different
# summation orders, so per-token losses agree to ~1e-6 relative, and sums/means of them likewise.
# 1e-5 relative leaves an order of magnitude of head-room while still catching any real
# difference (one token more or less, a mis-masked target, a wrong window, a wrong detokenizer
# rule all move avg_loss by far more). Note for ppl/adjusted_ppl a relative 1e-5 is an absolute
# 1e-5 on their logarithm (avg_loss, avg_loss * token_ratio): tighter than avg_loss's own check,
# still well above fp32 round-off of a mean of per-token losses.
FLOAT_RTOL = 1e-5
INT_KEYS = {"num_original_tokens", "num_tokenized_tokens", "num_windows", "correct", "total",
            "num_targets"}


# --- Megatron's tasks/zeroshot_gpt/detokenizer.py, verbatim (standard `re`, as there) ---------

def ptb_detokenizer(string):
    string = string.replace(" '", "'")
    string = string.replace(" \n", "\n")
    string = string.replace("\n ", "\n")
    string = string.replace(" n't", "n't")
    string = string.replace(" N ", "1 ")
    string = string.replace("$ 1", "$1")
    string = string.replace("# 1", "#1")
    return string


def wikitext_detokenizer(string):
    # contractions
    string = string.replace("s '", "s'")
    string = re.sub(r"/' [0-9]/", r"/'[0-9]/", string)
    # number separators
    string = string.replace(" @-@ ", "-")
    string = string.replace(" @,@ ", ",")
    string = string.replace(" @.@ ", ".")
    # punctuation
    string = string.replace(" : ", ": ")
    string = string.replace(" ; ", "; ")
    string = string.replace(" . ", ". ")
    string = string.replace(" ! ", "! ")
    string = string.replace(" ? ", "? ")
    string = string.replace(" , ", ", ")
    # double brackets
    string = re.sub(r"\(\s*([^\)]*?)\s*\)", r"(\1)", string)
    string = re.sub(r"\[\s*([^\]]*?)\s*\]", r"[\1]", string)
    string = re.sub(r"{\s*([^}]*?)\s*}", r"{\1}", string)
    string = re.sub(r"\"\s*([^\"]*?)\s*\"", r'"\1"', string)
    string = re.sub(r"'\s*([^']*?)\s*'", r"'\1'", string)
    # miscellaneous
    string = string.replace("= = = =", "====")
    string = string.replace("= = =", "===")
    string = string.replace("= =", "==")
    string = string.replace(" " + chr(176) + " ", chr(176))
    string = string.replace(" \n", "\n")
    string = string.replace("\n ", "\n")
    string = string.replace(" N ", " 1 ")
    string = string.replace(" 's", "'s")
    return string


def lambada_detokenizer(string):
    return string


# Dict order matters: the first key found anywhere in the *path* wins ('ptb' before 'wiki').
_DETOKENIZERS = {"ptb": ptb_detokenizer, "wiki": wikitext_detokenizer, "lambada": lambada_detokenizer}


def get_detokenizer(path):
    for key, fn in _DETOKENIZERS.items():
        if key in path:
            return fn
    # Megatron returns None here and then fails calling it; say why instead.
    sys.exit(f"zeroshot_reference: no detokenizer for {path!r} (the path must contain one of "
             f"{list(_DETOKENIZERS)}, as Megatron's get_detokenizer requires)")


# --- datasets (Megatron's tasks/zeroshot_gpt/datasets.py) ---------------------------------------

def lm_num_windows(num_tokens, seq_len, stride):
    # _LMDataset.__init__: the first window scores seq_len targets, every later one `stride` new.
    targets = max(num_tokens - 1 - stride, 0)
    return max(math.ceil(targets / stride) + 1, 1)


def lm_window(tokens, idx, seq_len, stride):
    """_LMDataset.__getitem__: (seq_len+1 token ids, seq_len target mask) for window idx."""
    start = idx * stride
    window = tokens[start:start + seq_len + 1]
    pad_mask = [1] * len(window)
    if len(window) < seq_len + 1:
        num_pad = seq_len + 1 - len(window)
        pad_mask += [0] * num_pad
        window = window + [EOD] * num_pad
    pad_mask = np.array(pad_mask[1:])          # mask of targets: token j+1 predicted at j
    if stride != seq_len and idx != 0:
        pad_mask[:-stride] *= 0                # earlier targets were scored by earlier windows
    return window, pad_mask


def build_wikitext(path, encoder, seq_len, stride):
    with open(path, "rb") as f:
        text = f.read().decode("utf-8")
    # Counted on the raw (tokenized-by-WikiText) text, before detokenization.
    num_original = len(text.strip().split(" "))
    tokens = encoder.encode(get_detokenizer(path)(text))
    windows = [lm_window(tokens, i, seq_len, stride)
               for i in range(lm_num_windows(len(tokens), seq_len, stride))]
    return tokens, num_original, windows


def lambada_split(text, encoder, strict):
    """_LambadaDataset.get_tokens: (context ids, label ids)."""
    if not strict:
        ids = encoder.encode(text)
        return ids[:-1], [ids[-1]]
    last_word = text.split()[-1]
    start = text.rfind(last_word)
    return encoder.encode(text[:start].strip()), encoder.encode(" " + last_word)


def lambada_sample(context, labels, seq_len):
    """_LambadaDataset.__getitem__: (seq_len+1 token ids, seq_len target mask)."""
    tokens = context + labels
    pad_mask = [0] * len(context) + [1] * len(labels)
    if len(tokens) < seq_len + 1:
        num_pad = seq_len + 1 - len(tokens)
        pad_mask += [0] * num_pad
        tokens = tokens + [EOD] * num_pad
    if len(tokens) > seq_len + 1:
        # Megatron does not truncate: such a sample cannot be collated with the others nor fit
        # the model's positions. Refuse rather than guess a truncation.
        sys.exit(f"zeroshot_reference: a LAMBADA sample has {len(tokens)} tokens, more than "
                 f"seq_length+1 = {seq_len + 1} (Megatron has no truncation rule for this)")
    return tokens, np.array(pad_mask[1:])


def build_lambada(path, encoder, seq_len, strict):
    samples = []
    with open(path, "r", encoding="utf-8") as f:
        for line in f.readlines():               # every line is a sample, as in Megatron
            context, labels = lambada_split(json.loads(line)["text"], encoder, strict)
            samples.append(lambada_sample(context, labels, seq_len))
    return samples


# --- model ------------------------------------------------------------------------------------

def load_model(path, seq_len):
    with h5py.File(path, "r") as f:
        cfg = Config(config_text(f))
        W = load_tensors(f, "model")
    if not cfg.rope and seq_len > W["embedding.position_embeddings.weight"].shape[0]:
        sys.exit(f"zeroshot_reference: --seq-length {seq_len} exceeds the checkpoint's "
                 f"{W['embedding.position_embeddings.weight'].shape[0]} learned positions")
    return W, cfg


def batches(samples):
    """(inputs, labels, mask) tensors for BATCH samples at a time: Megatron's process_batch
    (tokens = text[:, :-1], labels = text[:, 1:], loss_mask = pad_mask)."""
    for i in range(0, len(samples), BATCH):
        chunk = samples[i:i + BATCH]
        text = torch.tensor(np.stack([np.asarray(t, dtype=np.int64) for t, _ in chunk]))
        mask = torch.tensor(np.stack([m for _, m in chunk]))
        yield text[:, :-1], text[:, 1:], mask


def per_token_ce(logits, labels):
    # vocab_parallel_cross_entropy over the full (padded) vocabulary, unreduced, float32.
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1),
                           reduction="none").view(labels.shape)


# --- tasks (Megatron's tasks/zeroshot_gpt/evaluate.py) ------------------------------------------

def eval_wikitext(W, cfg, args, encoder):
    stride = max(1, args.overlapping_eval if args.overlapping_eval is not None else args.seq_length)
    tokens, num_original, windows = build_wikitext(args.data, encoder, args.seq_length, stride)
    total, scored = 0.0, 0
    for inputs, labels, mask in batches(windows):
        ce = per_token_ce(forward(W, inputs, cfg), labels)
        # Per-token losses in f32 like the app; accumulated in f64 so the reference's own sum adds
        # no round-off worth mentioning.
        total += (ce.double() * mask.double()).sum().item()
        scored += int(mask.sum())
    num_tokenized = len(tokens)
    if stride <= args.seq_length:
        # Every target 1..T-1 is scored exactly once (a check on the windowing above).
        assert scored == num_tokenized - 1, (scored, num_tokenized)
    print(f"zeroshot_reference: {len(windows)} windows, {scored} scored targets", file=sys.stderr)
    avg_loss = total / (num_tokenized - 1)
    token_ratio = (num_tokenized - 1) / (num_original - 1)
    return {"task": "WIKITEXT103", "avg_loss": avg_loss, "ppl": math.exp(min(20, avg_loss)),
            "adjusted_ppl": math.exp(min(20, avg_loss * token_ratio)), "token_ratio": token_ratio,
            "num_original_tokens": num_original, "num_tokenized_tokens": num_tokenized,
            "num_windows": len(windows)}


def eval_lambada(W, cfg, args, encoder):
    samples = build_lambada(args.data, encoder, args.seq_length, args.strict_lambada)
    correct, loss, targets = 0, 0.0, 0
    for inputs, labels, mask in batches(samples):
        logits = forward(W, inputs, cfg)
        predicted = logits.argmax(-1)                    # over all padded vocabulary rows
        ok = (predicted == labels).float()
        ok[(1 - mask).bool()] = 1                        # positions outside the label don't count
        correct += int(ok.prod(-1).sum())
        # Not a Megatron figure: the mean cross-entropy of the target tokens, which checks the
        # logits behind the argmax far more finely than a handful of correct answers can.
        loss += (per_token_ce(logits, labels).double() * mask.double()).sum().item()
        targets += int(mask.sum())
    return {"task": "LAMBADA", "correct": correct, "total": len(samples),
            "accuracy": correct / len(samples), "num_targets": targets,
            "target_loss": loss / targets}


# --- comparison -------------------------------------------------------------------------------

def compare(ours, path):
    with open(path, encoding="utf-8") as f:
        theirs = json.load(f)
    good = True
    if "task" in theirs and str(theirs["task"]).upper() != ours["task"]:
        # Not numeric, but a results file of the other task would make every check meaningless.
        print(f"FAIL task: reference {ours['task']} app {theirs['task']}")
        good = False
    for key, want in ours.items():
        if key == "task":
            continue
        if key not in theirs:
            print(f"FAIL {key}: missing from {path}")
            good = False
            continue
        got = theirs[key]
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            print(f"FAIL {key}: {got!r} in {path} is not a number")
            good = False
            continue
        if key in INT_KEYS:
            ok = got == want
            detail = f"reference {want} app {got} (exact)"
        else:
            diff = abs(got - want)
            ok = diff <= FLOAT_RTOL * max(abs(want), abs(got))
            rel = diff / max(abs(want), abs(got)) if diff else 0.0
            detail = f"reference {want:.9g} app {got:.9g} rel {rel:.2e} (tolerance {FLOAT_RTOL})"
        print(f"{'ok  ' if ok else 'FAIL'} {key}: {detail}")
        good &= ok
    return good


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--task", required=True, choices=["WIKITEXT103", "LAMBADA"])
    p.add_argument("--data", required=True)
    p.add_argument("--seq-length", type=int, required=True)
    p.add_argument("--overlapping-eval", type=int, default=32)   # Megatron's tasks/main.py default
    p.add_argument("--strict-lambada", action="store_true")
    p.add_argument("--vocab-file", required=True)
    p.add_argument("--merge-file", required=True)
    p.add_argument("--compare")
    args = p.parse_args()

    encoder = Encoder(args.vocab_file, args.merge_file)
    assert encoder.encoder["<|endoftext|>"] == EOD
    W, cfg = load_model(args.checkpoint, args.seq_length)
    with torch.no_grad():
        evaluate = eval_wikitext if args.task == "WIKITEXT103" else eval_lambada
        result = evaluate(W, cfg, args, encoder)
    print(json.dumps(result))
    if args.compare:
        return 0 if compare(result, args.compare) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
