#!/usr/bin/python3
"""Check `megatron-app retro query`'s saved neighbours against Megatron's rule, recomputed here.

  check_neighbors.py WORK_RE_DIR CACHE_DIR DATA_PREFIX ENCODER_JSON BERT_VOCAB BERT_CHECKPOINT_H5
                     SAMPLES_TXT [--exact N] [--num-neighbors K] [--num-retrieved-chunks R]

WORK_RE_DIR: the retro workdir (db/chunks.h5, embed/, index/<index string>/index.faiss,
query/<split>/<first>-<last>.h5); the query settings (seq_length, retro_chunk_length,
retro_query_*, retro_index_str, retro_bert_max_chunk_length) are read from the query files'
attributes. CACHE_DIR: the GPT dataset's Megatron index cache (*-GPTDataset-<split>-
{document,sample,shuffle}_index.npy). DATA_PREFIX: the one indexed dataset (blends not covered).
SAMPLES_TXT: `megatron-app data --split train --first 3` output. K, R: retro_num_neighbors and
retro_num_retrieved_chunks of that run (default 2, 2).

1. Every split, every queried chunk g (sample g // l, chunk g % l, l = seq_length / chunk_length):
   no saved neighbour's (dataset, doc) is one of the sample's documents (rebuilt here from the
   cache files: document_index[beg .. end] of the shuffled sample), ids in [0, len(DB)) or -1,
   -1 only at the end of a row, no duplicate in a row, num_neighbors_save columns.
2. Exactness on N chunks spread over the splits: the chunk's tokens [c*64, (c+1)*64) of the
   sample are embedded in float64 by Megatron's rule (check_embeddings.py: detokenize, drop
   <|endoftext|>, WordPiece, [CLS] .. [SEP], BERT, mean of the final-layernorm states), searched
   with python faiss (nprobe, k = num_neighbors_query), filtered, cut to num_neighbors_save and
   compared with the saved row. The C++ embeds in fp32, so near-ties may reorder: a differing row
   passes when, position by position, the float64 squared L2 distances of our id and the
   reference id to the reference query agree within DIST_RTOL (and both rows have the same -1s).
3. SAMPLES_TXT: each listed train sample's tokens equal the rebuilt sample's first seq_length
   tokens, and its neighbor_tokens equal RetroDataset's rule on our saved rows: for each chunk,
   for each of the first K ids n, DB chunks (n + i) % len(DB), i < R (so -1 is the last chunk),
   each padded with EOD to chunk_length.

Written from Megatron-LM core_v0.13.1, not from the C++ code: megatron/core/datasets/retro/
query/query.py (query_embeddings: search :153, filter by doc tuples :166-184, pad -1),
query/gpt_chunk_dataset.py (:61-76 chunk of the sample, its document_ids), core/datasets/
gpt_dataset.py (_query_document_sample_shuffle_indices :249-289: document_ids), query/
retro_dataset.py (__getitem__ :116-146), db/dataset.py (__getitem__ :78-94, EOD padding).
Embedding: check_embeddings.py; sample rebuild: tests/reference/gpt_reference.py (gpt_sample).
Exit 0 on success, 1 with details otherwise.
"""
import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"  # single-threaded: set before numpy / torch / faiss load
import argparse  # noqa: E402
import glob  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import faiss  # noqa: E402
import h5py  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
from check_chunk_db import BertTokenizer, Gpt2Decoder  # noqa: E402
from check_embeddings import load_embeddings, mean_hidden  # noqa: E402
from bert_reference import Config, load_tensors  # noqa: E402
from checkpoint_attrs import config_text  # noqa: E402
from gpt_reference import IndexedDataset, gpt_sample  # noqa: E402

torch.set_num_threads(1)
faiss.omp_set_num_threads(1)
EOD = 50256
DIST_RTOL = 1e-4  # |d_ours - d_ref| <= DIST_RTOL * max(1, d_ref), float64 squared L2
SPLITS = ("train", "valid", "test")


def load_blocks(folder, name):
    """Rows of <first>-<last>.h5 blocks (contiguous from 0) and the first block's attributes."""
    blocks = []
    for path in glob.glob(os.path.join(folder, "*.h5")):
        m = re.fullmatch(r"(\d+)-(\d+)\.h5", os.path.basename(path))
        if m:
            blocks.append((int(m[1]), int(m[2]), path))
    blocks.sort()
    out, expect, attrs = [], 0, None
    for first, last, path in blocks:
        assert first == expect, f"block files not contiguous at {path} (expected start {expect})"
        with h5py.File(path, "r") as f:
            out.append(np.asarray(f[name]))
            attrs = attrs or {k: (v.decode() if isinstance(v, bytes) else str(v))
                              for k, v in f.attrs.items()}
        assert len(out[-1]) == last - first, f"{path}: {len(out[-1])} rows"
        expect = last
    assert out, f"no <first>-<last>.h5 block in {folder}"
    return np.concatenate(out), attrs


class Split:
    """A split's GPT dataset from Megatron's cache files, and its saved neighbours."""
    def __init__(self, cache_dir, re_dir, name):
        def load(kind):
            # Several datasets of a split (other num_samples, same epoch) must hold one index.
            arrays = [np.load(f) for f in glob.glob(f"{cache_dir}/*-GPTDataset-{name}-{kind}.npy")]
            assert arrays and all(np.array_equal(x, arrays[0]) for x in arrays), \
                f"{cache_dir}: {len(arrays)} differing or no {name} {kind} files"
            return arrays[0]
        self.name = name
        self.doc_idx, self.sample_idx = load("document_index"), load("sample_index")
        self.shuffle_idx = load("shuffle_index")
        self.neighbors, self.attrs = load_blocks(os.path.join(re_dir, "query", name), "neighbors")

    def documents(self, s):
        # gpt_dataset.py:249-289: document_index[beg .. end] of the shuffled sample.
        i = self.shuffle_idx[s]
        return self.doc_idx[self.sample_idx[i][0]:self.sample_idx[i + 1][0] + 1]


def embed(texts, W, cfg, ids, bert, max_length):
    """check_embeddings.py's rule, float64: mean final-layernorm state between [CLS] and [SEP]."""
    cls, sep, pad = ids["[CLS]"], ids["[SEP]"], ids["[PAD]"]
    samples = [[cls, *([ids[t] for t in bert(t)][:max_length - 2] or [pad]), sep] for t in texts]
    return mean_hidden(samples, W, cfg, pad, W["embedding.word_embeddings.weight"].shape[1])


def filter_row(found, db, docs, keep):
    """query.py:173-183: drop ids of the sample's (dataset 0, doc) tuples, keep `keep`, pad -1."""
    docs = set(int(d) for d in docs)
    row = [int(i) for i in found if i >= 0 and not (db[i, 0] == 0 and int(db[i, 1]) in docs)]
    return np.array((row + [-1] * keep)[:keep], np.int64)


def check_rows(split, db, l, keep):
    """Check 1 on every saved row of a split; returns a list of problems."""
    bad, n = [], len(db)
    nb = split.neighbors
    if nb.ndim != 2 or nb.shape[1] != keep:
        return [f"{split.name}: neighbours shape {nb.shape}, expected (*, {keep})"]
    for g, row in enumerate(nb):
        docs = split.documents(g // l)
        valid = row[row >= 0]
        problems = []
        if np.any((row < -1) | (row >= n)):
            problems.append(f"id out of range [-1, {n})")
        if np.any(row[:len(valid)] < 0):
            problems.append("-1 before a valid id")
        if len(set(valid.tolist())) != len(valid):
            problems.append("duplicate id")
        inside = [int(i) for i in valid if 0 <= i < n and db[i, 0] == 0 and db[i, 1] in docs]
        if inside:
            problems.append(f"ids {inside} from the sample's documents {docs.tolist()}")
        if problems:
            bad.append(f"{split.name} chunk {g} (sample {g // l}): {'; '.join(problems)}: "
                       f"{row.tolist()}")
    return bad


def main():
    p = argparse.ArgumentParser(usage=__doc__)
    for name in ("re_dir", "cache_dir", "data_prefix", "encoder", "vocab", "checkpoint", "samples"):
        p.add_argument(name)
    p.add_argument("--exact", type=int, default=64, help="chunks recomputed (spread over splits)")
    p.add_argument("--num-neighbors", type=int, default=2, help="retro_num_neighbors (K)")
    p.add_argument("--num-retrieved-chunks", type=int, default=2, help="retro_num_retrieved_chunks")
    a = p.parse_args()
    t0 = time.time()
    ok = True

    with h5py.File(os.path.join(a.re_dir, "db", "chunks.h5"), "r") as f:
        db = np.asarray(f["chunks"], np.int64).reshape(-1, 5)
    splits = [Split(a.cache_dir, a.re_dir, s) for s in SPLITS]
    at = splits[0].attrs
    cl, seq = int(at["retro_chunk_length"]), int(at["seq_length"])
    l, keep = seq // cl, int(at["retro_query_num_neighbors_save"])
    k_query, nprobe = int(at["retro_query_num_neighbors_query"]), int(at["retro_query_nprobe"])
    ds = IndexedDataset(a.data_prefix)

    # 1. Every row: document filter, range, padding, duplicates.
    for s in splits:
        n_samples = int(s.attrs.get(f"samples.{s.name}", -1))
        rows_ok = len(s.neighbors) == n_samples * l and n_samples <= len(s.shuffle_idx)
        bad = check_rows(s, db, l, keep)
        filled = (s.neighbors >= 0).sum(1)
        print(f"{'ok  ' if rows_ok and not bad else 'FAIL'} {s.name}: {len(s.neighbors)} chunks "
              f"({n_samples} samples of {len(s.shuffle_idx)} built, {l} chunks each); "
              f"valid ids per row {filled.min()}-{filled.max()}; {len(bad)} bad rows")
        for b in bad[:5]:
            print(f"     {b}")
        ok &= rows_ok and not bad

    # 2. Exactness on N chunks: float64 embedding, python faiss, Megatron's filter.
    picks = []
    for s, n in zip(splits, np.array_split(np.arange(a.exact), len(splits))):
        picks += [(s, int(g)) for g in np.unique(np.linspace(0, len(s.neighbors) - 1, len(n))
                                                    .round().astype(np.int64))]
    detok, bert = Gpt2Decoder(a.encoder), BertTokenizer(a.vocab)
    texts = [detok(gpt_sample(ds, s.doc_idx, s.sample_idx, s.shuffle_idx, g // l)
                   [g % l * cl:(g % l + 1) * cl].tolist()).replace("<|endoftext|>", "")
             for s, g in picks]
    with h5py.File(a.checkpoint, "r") as f:
        toml_text = config_text(f)
        W = {k: v.double() for k, v in load_tensors(f, "model").items()}
    with open(a.vocab, encoding="utf-8") as f:
        ids = {line.strip(): i for i, line in enumerate(f)}
    q = embed(texts, W, Config(toml_text), ids, bert, int(at["retro_bert_max_chunk_length"]))
    index_name = re.sub(r"[^A-Za-z0-9_-]", "_", at["retro_index_str"])
    index = faiss.read_index(os.path.join(a.re_dir, "index", index_name, "index.faiss"))
    assert index.ntotal == len(db), f"index holds {index.ntotal}, DB has {len(db)} chunks"
    faiss.ParameterSpace().set_index_parameter(index, "nprobe", nprobe)
    _, found = index.search(q.astype(np.float32), k_query)
    xb = load_embeddings(os.path.join(a.re_dir, "embed")).astype(np.float64)
    equal, tied, wrong, dropped = 0, 0, [], []
    for (s, g), qv, fr in zip(picks, q, found):
        docs = s.documents(g // l)
        ref = filter_row(fr, db, docs, keep)
        dropped.append(sum(1 for i in fr if i >= 0 and db[i, 0] == 0 and db[i, 1] in docs))
        ours = s.neighbors[g]
        if np.array_equal(ref, ours):
            equal += 1
            continue
        dist = lambda row: np.array([((xb[i] - qv) ** 2).sum() if i >= 0 else np.inf for i in row])
        d_ref, d_ours = dist(ref), dist(ours)
        same_pad = np.array_equal(ref < 0, ours < 0)
        v = ref >= 0
        close = np.all(np.abs(d_ours - d_ref)[v] <= DIST_RTOL * np.maximum(1, d_ref[v]))
        if same_pad and close:
            tied += 1
            continue
        p0 = int(np.nonzero(ref != ours)[0][0])
        wrong.append(f"{s.name} chunk {g}: first difference at position {p0}: ours "
                     f"{ours[p0:p0 + 5].tolist()} (d {np.round(d_ours[p0:p0 + 5], 6).tolist()}), "
                     f"Megatron's rule {ref[p0:p0 + 5].tolist()} "
                     f"(d {np.round(d_ref[p0:p0 + 5], 6).tolist()})")
    print(f"{'ok  ' if not wrong else 'FAIL'} exact search on {len(picks)} chunks (IVF nprobe "
          f"{nprobe}, k {k_query}, keep {keep}): {equal} rows identical, {tied} differ only by "
          f"near-ties (distance rtol {DIST_RTOL}), {len(wrong)} wrong; the document filter dropped "
          f"{sum(dropped)} found ids ({k_query} per row) in {np.count_nonzero(dropped)} rows")
    for w in wrong[:5]:
        print(f"     {w}")
    ok &= not wrong

    # 3. samples.txt: neighbor_tokens = RetroDataset's rule on the saved train rows.
    K, R, train = a.num_neighbors, a.num_retrieved_chunks, splits[0]

    def db_text(c):  # db/dataset.py: the chunk's tokens padded with EOD to chunk_length
        _, doc, start, end, _ = db[c]
        return np.concatenate([ds.get(doc, start, end - start), [EOD] * (cl - (end - start))])
    sample, got = None, {}
    for line in open(a.samples, encoding="utf-8"):
        m = re.match(r"sample (\d+) \|", line)
        if m:
            sample = int(m[1])
        elif sample is not None and line.strip().startswith(("tokens:", "neighbor_tokens:")):
            key, vals = line.strip().split(":", 1)
            got.setdefault(sample, {})[key] = np.array(vals.split(), np.int64)
    bad = []
    for i, fields in sorted(got.items()):
        text = gpt_sample(ds, train.doc_idx, train.sample_idx, train.shuffle_idx, i)
        want = np.concatenate([db_text((n + j) % len(db)) for c in range(l)
                               for n in train.neighbors[i * l + c, :K] for j in range(R)])
        if not np.array_equal(fields.get("tokens"), text[:seq]):
            bad.append(f"sample {i}: tokens differ from the rebuilt GPT sample")
        nt = fields.get("neighbor_tokens")
        if nt is None or nt.shape != want.shape or not np.array_equal(nt, want):
            pos = "shape" if nt is None or nt.shape != want.shape else int(np.argmax(nt != want))
            bad.append(f"sample {i}: neighbor_tokens differ (at {pos}); saved rows "
                       f"{train.neighbors[i * l:(i + 1) * l, :K].tolist()}")
    print(f"{'ok  ' if got and not bad else 'FAIL'} {a.samples}: {len(got)} train samples, "
          f"neighbor_tokens of {l} x {K} x {R * cl} by RetroDataset's rule")
    for b in bad[:5]:
        print(f"     {b}")
    ok &= bool(got) and not bad
    print(f"{'OK' if ok else 'FAIL'} ({time.time() - t0:.1f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
