#!/usr/bin/python3
"""Check `megatron-app retro embed`'s chunk embeddings against Megatron's rule, recomputed here.

  check_embeddings.py BERT_CHECKPOINT_H5 CHUNKS_H5 EMBED_DIR DATA_PREFIX ENCODER_JSON BERT_VOCAB
                      MAX_LENGTH [--rows N]

For each row [ds, doc, start, end, bert_len] of the chunk database (CHUNKS_H5): the GPT-2 tokens
[start, end) of sequence `doc` of DATA_PREFIX (comma-separated list: ds = position) are
detokenized, "<|endoftext|>" removed, BERT (lower-case WordPiece) tokenized, cut to MAX_LENGTH - 2
tokens ([PAD] alone when empty), and framed as [CLS] ids [SEP] (types 0, padding mask 1); batches
are padded with [PAD] / mask 0. The BERT of BERT_CHECKPOINT_H5 (config from its stored TOML) runs
in float64, eval mode (no dropout), padded positions masked; the embedding is the mean of the
final-layernorm output over positions 1 .. mask_sum - 2. Compared with the rows of
EMBED_DIR/<first>-<last>.h5 (`embeddings`, concatenated): max |diff| <= 1e-5 * max(1, max |ref|)
per row (the C++ runs in fp32). Also checks the tokenizer against the DB's bert_len. Every row by
default; --rows N checks N evenly spaced rows. Exit 0 on success, 1 with the worst rows.

Written from Megatron-LM core_v0.13.1, not from the C++ code: tools/bert_embedding/dataset.py
(BertEmbeddingDataset), tools/bert_embedding/embed.py (collate_batch, embed_data_loader: eval,
no_grad), pretrain_bert.py (forward_step: types only with bert_binary_head),
megatron/legacy/model/bert_model.py (bert_extended_attention_mask, output_bert_embeddings:
`torch.mean(embedding[1: mask - 1])`), megatron/core/datasets/retro/utils.py (GPTToTextDataset).
The chunk text and tokenizers come from check_chunk_db.py, the BERT encoder from
tests/reference/bert_reference.py (encode: Megatron's BERT forward up to the final layernorm).
"""
import argparse
import glob
import os
import re
import sys
import time

import h5py
import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
from check_chunk_db import BertTokenizer, Gpt2Decoder, read_indexed  # noqa: E402
from bert_reference import Config, encode, load_tensors  # noqa: E402
from checkpoint_attrs import config_text  # noqa: E402
import tomllib  # noqa: E402

torch.set_num_threads(1)
RTOL = 1e-5  # max |diff| <= RTOL * max(1, max |ref|) per row
BATCH = 128  # Megatron's --retro-bert-batch-size default; padding does not change the result


def load_embeddings(embed_dir):
    blocks = []
    for path in glob.glob(os.path.join(embed_dir, "*.h5")):
        m = re.fullmatch(r"(\d+)-(\d+)\.h5", os.path.basename(path))
        if m:
            blocks.append((int(m[1]), int(m[2]), path))
    blocks.sort()
    out, expect = [], 0
    for first, last, path in blocks:
        assert first == expect, f"block files not contiguous at {path} (expected start {expect})"
        with h5py.File(path, "r") as f:
            e = np.asarray(f["embeddings"])
        assert len(e) == last - first, f"{path}: {len(e)} rows"
        out.append(e)
        expect = last
    assert out, f"no <first>-<last>.h5 block in {embed_dir}"
    return np.concatenate(out)


def mean_hidden(samples, W, cfg, pad, hidden):
    """Megatron's embeddings of [CLS] ... [SEP] id lists, float64: batches padded as collate_batch
    (text with pad_id, the mask with 0), the mean final-layernorm state between the markers."""
    out = np.zeros((len(samples), hidden))
    with torch.no_grad():
        for b0 in range(0, len(samples), BATCH):
            batch = samples[b0:b0 + BATCH]
            s = max(map(len, batch))
            text = torch.tensor([x + [pad] * (s - len(x)) for x in batch])
            mask = torch.tensor([[1] * len(x) + [0] * (s - len(x)) for x in batch])
            hidden_states = encode(W, text, torch.zeros_like(text), mask, cfg, cfg.binary_head)
            for i, m in enumerate(mask.sum(1).tolist()):
                out[b0 + i] = hidden_states[i, 1:m - 1].mean(0).numpy()
    return out


def main():
    p = argparse.ArgumentParser(usage=__doc__)
    for name in ("checkpoint", "chunks", "embed_dir", "data_prefix", "encoder", "vocab"):
        p.add_argument(name)
    p.add_argument("max_length", type=int)
    p.add_argument("--rows", type=int, default=0, help="check N evenly spaced rows")
    a = p.parse_args()
    t0 = time.time()

    with h5py.File(a.checkpoint, "r") as f:
        toml_text = config_text(f)
        W = {k: v.double() for k, v in load_tensors(f, "model").items()}
    cfg = Config(toml_text)  # asserts learned positions, LayerNorm, no SwiGLU, no GQA
    # Megatron's bias_gelu_fusion (the tanh GeLU that encode() applies) needs the linear biases;
    # --disable-bias-linear turns it off (arguments.py) and the MLP then uses erf F.gelu.
    assert not tomllib.loads(toml_text)["model"].get("disable_bias_linear", False), \
        "disable_bias_linear (erf GeLU, no biases) is not covered by this check"

    with open(a.vocab, encoding="utf-8") as f:
        ids = {line.strip(): i for i, line in enumerate(f)}
    cls, sep, pad = ids["[CLS]"], ids["[SEP]"], ids["[PAD]"]
    detok, bert = Gpt2Decoder(a.encoder), BertTokenizer(a.vocab)
    data = [read_indexed(prefix)[0] for prefix in a.data_prefix.split(",")]
    with h5py.File(a.chunks, "r") as f:
        chunks = np.asarray(f["chunks"], np.int64).reshape(-1, 5)
    got = load_embeddings(a.embed_dir)
    if len(got) != len(chunks):
        print(f"FAIL: {len(got)} embedding rows for {len(chunks)} database rows")
        return 1
    n = len(chunks)
    rows = np.arange(n) if not a.rows or a.rows >= n else \
        np.unique(np.linspace(0, n - 1, a.rows).round().astype(np.int64))

    # BertEmbeddingDataset.__getitem__ + build_sample, for the GPTToTextDataset text of each row.
    samples, len_bad, truncated = [], [], 0
    for r in rows:
        ds, doc, start, end, bert_len = chunks[r]
        text = detok(data[ds][doc][start:end].tolist()).replace("<|endoftext|>", "")
        tokens = bert(text)
        if len(tokens) != bert_len:
            len_bad.append(int(r))
        truncated += len(tokens) > a.max_length - 2
        body = [ids[t] for t in tokens][:a.max_length - 2] or [pad]  # the "hack when empty seq"
        samples.append([cls, *body, sep])

    ref = mean_hidden(samples, W, cfg, pad, got.shape[1])

    diff = np.abs(got[rows].astype(np.float64) - ref).max(1)
    tol = RTOL * np.maximum(1.0, np.abs(ref).max(1))
    bad = np.nonzero(diff > tol)[0]
    worst = int(np.argmax(diff / tol))
    lengths = np.array([len(x) - 2 for x in samples])
    print(f"{len(rows)} of {n} rows{' (evenly spaced)' if len(rows) < n else ''}; BERT tokens "
          f"per chunk {lengths.min()}-{lengths.max()}, {truncated} cut to {a.max_length - 2}; "
          f"max |ref| {np.abs(ref).max():.3f}")
    print(f"worst row {rows[worst]}: max |diff| {diff[worst]:.3e} (tolerance {tol[worst]:.1e}); "
          f"max |diff| over all rows {diff.max():.3e}, mean {diff.mean():.3e}")
    for r in len_bad[:5]:
        print(f"MISMATCH row {r}: database bert_len {chunks[r, 4]}, tokenized here "
              f"{len(bert(detok(data[chunks[r, 0]][chunks[r, 1]][chunks[r, 2]:chunks[r, 3]].tolist())))}")
    for i in bad[np.argsort(-(diff[bad] / tol[bad]))][:5]:
        print(f"MISMATCH row {rows[i]} {chunks[rows[i]].tolist()}: max |diff| {diff[i]:.3e} "
              f"(tolerance {tol[i]:.1e}); file {got[rows[i], :4]}, expected {ref[i, :4]}")
    ok = not len(bad) and not len_bad
    print(f"{'OK' if ok else 'FAIL'}: {a.embed_dir} ({len(bad)} rows over tolerance, "
          f"{len(len_bad)} bert_len mismatches; {time.time() - t0:.1f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
