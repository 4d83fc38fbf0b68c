#!/usr/bin/env python3
"""Check a `megatron-app retro build-db` chunk database against Megatron's rule, recomputed here.

  check_chunk_db.py CHUNKS_H5 DATA_PREFIX ENCODER_JSON BERT_VOCAB CHUNK_LENGTH TRAIN_FRACTION

DATA_PREFIX may be a comma-separated list (dataset index = position). For every sequence of each
indexed dataset (.idx/.bin read with numpy) the trailing GPT-2 EOD (50256) is dropped, the tokens
are cut into consecutive CHUNK_LENGTH chunks (last one shorter), each chunk is GPT-2 detokenized
and BERT (lower-case WordPiece) tokenized; chunks with no BERT token are invalid. The merged
"train" DB keeps the valid chunks of the first int(TRAIN_FRACTION * n_docs) documents. Compared
exactly: `chunks` [ds, doc, start, end, bert_len], `datasets` [n_docs, n_docs_train, n_chunks_valid,
n_chunks_train, n_chunks_invalid, first_row] and `doc_offsets` [ds, doc, cumulative end row].

Written from Megatron-LM core_v0.13.1, not from the C++ code: megatron/core/datasets/retro/db/
build.py (build_partial_db, update_chunk_counts, merge_dbs) and db/utils.py
(get_individual_chunk_db, get_individual_doc_offsets); megatron/training/tokenizer/
gpt2_tokenization.py (bytes_to_unicode, GPT2Tokenizer.decode, errors='replace'),
bert_tokenization.py (FullTokenizer = BasicTokenizer + WordpieceTokenizer) and
megatron/core/datasets/indexed_dataset.py (the MMIDIDX format). Exit 0 when equal, 1 otherwise.
"""
import json
import struct
import sys
import time
import unicodedata

import h5py
import numpy as np

GPT_EOD = 50256
DTYPES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 6: np.float64,
          7: np.float32, 8: np.uint16}


def read_indexed(prefix):
    """Sequences (as numpy arrays) and the document-index count of a Megatron indexed dataset."""
    with open(prefix + ".idx", "rb") as f:
        assert f.read(9) == b"MMIDIDX\x00\x00", "not a Megatron indexed dataset"
        version, code, n_seq, n_doc = struct.unpack("<QBQQ", f.read(25))
        assert version == 1
        lengths = np.frombuffer(f.read(4 * n_seq), np.int32)
        pointers = np.frombuffer(f.read(8 * n_seq), np.int64)
        doc_indices = np.frombuffer(f.read(8 * n_doc), np.int64)
    data = np.memmap(prefix + ".bin", np.uint8, mode="r")
    dtype = np.dtype(DTYPES[code])
    seqs = [data[p:p + n * dtype.itemsize].view(dtype) for p, n in zip(pointers, lengths)]
    return seqs, len(doc_indices) - 1


def bytes_to_unicode():  # gpt2_tokenization.py: the reversible byte <-> unicode table
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, [chr(c) for c in cs]))


class Gpt2Decoder:
    def __init__(self, encoder_json):
        with open(encoder_json, encoding="utf-8") as f:
            self.decoder = {v: k for k, v in json.load(f).items()}
        self.byte_decoder = {v: k for k, v in bytes_to_unicode().items()}

    def __call__(self, ids):
        text = "".join(self.decoder[i] for i in ids)
        return bytearray(self.byte_decoder[c] for c in text).decode("utf-8", errors="replace")


def is_whitespace(c):
    return c in " \t\n\r" or unicodedata.category(c) == "Zs"


def is_control(c):
    return c not in "\t\n\r" and unicodedata.category(c) in ("Cc", "Cf")


def is_punctuation(c):
    cp = ord(c)
    return (33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126
            or unicodedata.category(c).startswith("P"))


def is_chinese(cp):
    return any(a <= cp <= b for a, b in (
        (0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
        (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)))


class BertTokenizer:
    """bert_tokenization.FullTokenizer(do_lower_case=True).tokenize."""

    def __init__(self, vocab_file, max_chars_per_word=200):  # WordpieceTokenizer's default
        with open(vocab_file, encoding="utf-8") as f:
            self.vocab = {line.strip() for line in f}
        self.max_chars = max_chars_per_word

    def basic(self, text):
        text = "".join(" " if is_whitespace(c) else c for c in text
                       if not (c in "\x00\ufffd" or is_control(c)))
        text = "".join(f" {c} " if is_chinese(ord(c)) else c for c in text)
        out = []
        for token in text.split():
            token = "".join(c for c in unicodedata.normalize("NFD", token.lower())
                            if unicodedata.category(c) != "Mn")
            word = ""
            for c in token:
                if is_punctuation(c):
                    out += [word, c] if word else [c]
                    word = ""
                else:
                    word += c
            if word:
                out.append(word)
        return " ".join(out).split()

    def wordpiece(self, token):
        if len(token) > self.max_chars:
            return ["[UNK]"]
        pieces, start = [], 0
        while start < len(token):
            for end in range(len(token), start, -1):
                piece = token[start:end] if start == 0 else "##" + token[start:end]
                if piece in self.vocab:
                    break
            else:
                return ["[UNK]"]
            pieces.append(piece)
            start = end
        return pieces

    def __call__(self, text):
        return [p for t in self.basic(text) for p in self.wordpiece(t)]


def expected_db(datasets_seqs, detok, bert, chunk_length, train_fraction):
    chunks, datasets, doc_offsets = [], [], []
    for ds, (seqs, n_docs) in enumerate(datasets_seqs):
        n_docs_train = int(train_fraction * n_docs)
        n_valid = n_train = n_invalid = 0
        first_row = len(chunks)
        for doc_id, doc in enumerate(seqs):  # build_partial_db: every sequence of the dataset
            if len(doc) and doc[-1] == GPT_EOD:
                doc = doc[:-1]
            for start in range(0, len(doc), chunk_length):
                end = min(len(doc), start + chunk_length)
                bert_len = len(bert(detok(doc[start:end].tolist())))
                if bert_len == 0:
                    n_invalid += 1
                    continue
                n_valid += 1
                if doc_id < n_docs_train:  # update_chunk_counts / merge_dbs ("train")
                    n_train += 1
                    chunks.append((ds, doc_id, start, end, bert_len))
            if doc_id < n_docs_train:
                doc_offsets.append((ds, doc_id, len(chunks)))
        datasets.append((n_docs, n_docs_train, n_valid, n_train, n_invalid, first_row))
    as_array = lambda rows, width: np.array(rows, np.int64).reshape(-1, width)
    return as_array(chunks, 5), as_array(datasets, 6), as_array(doc_offsets, 3)


def compare(name, got, want, limit=5):
    """Prints the first differing rows (a missing/extra row counts); returns their indices."""
    n = min(len(got), len(want))
    rows = np.nonzero((got[:n] != want[:n]).any(axis=1))[0][:limit].tolist()
    if got.shape != want.shape:
        print(f"MISMATCH {name}: shape {got.shape} in the file, expected {want.shape}")
        rows = rows or ([n] if n < max(len(got), len(want)) else [])
    for r in rows:
        print(f"MISMATCH {name}[{r}]: file {got[r].tolist() if r < len(got) else None}, "
              f"expected {want[r].tolist() if r < len(want) else None}")
    return rows if rows or got.shape == want.shape else [None]


def main():
    if len(sys.argv) != 7:
        sys.exit(__doc__)
    path, prefixes, encoder, vocab, chunk_length, train_fraction = sys.argv[1:]
    t0 = time.time()
    detok, bert = Gpt2Decoder(encoder), BertTokenizer(vocab)
    data = [read_indexed(prefix) for prefix in prefixes.split(",")]
    want_chunks, want_ds, want_offsets = expected_db(
        data, detok, bert, int(chunk_length), float(train_fraction))
    with h5py.File(path, "r") as f:
        got_chunks, got_ds, got_offsets = (np.asarray(f[k], np.int64).reshape(-1, w) for k, w in
                                           (("chunks", 5), ("datasets", 6), ("doc_offsets", 3)))
    bad = compare("datasets", got_ds, want_ds) + compare("doc_offsets", got_offsets, want_offsets)
    bad_chunks = compare("chunks", got_chunks, want_chunks)
    for r in bad_chunks:  # the text of both rows, with the BERT tokens computed here
        shown = None
        for side, rows in (("file", got_chunks), ("expected", want_chunks)):
            if r is not None and r < len(rows) and 0 <= rows[r, 0] < len(data):
                ds, doc, start, end = rows[r, :4]
                if (ds, doc, start, end) != shown and 0 <= doc < len(data[ds][0]):
                    text = detok(data[ds][0][doc][start:end].tolist())
                    print(f"  {side} chunk {r} text: {text!r}\n    BERT tokens here "
                          f"({len(bert(text))}): {bert(text)}")
                shown = (ds, doc, start, end)
    for ds, row in enumerate(want_ds):
        print(f"dataset {ds} ({prefixes.split(',')[ds]}): {row[0]} documents, {row[1]} train "
              f"documents, {row[2]} valid chunks, {row[3]} train chunks, {row[4]} invalid chunks")
    lengths = want_chunks[:, 4]
    if len(lengths):
        print(f"BERT length of train chunks: min {lengths.min()}, mean {lengths.mean():.2f}, "
              f"max {lengths.max()}; counts per 16: {np.bincount(lengths // 16).tolist()}")
    ok = not (bad or bad_chunks)
    print(f"{'OK' if ok else 'FAIL'}: {path} ({time.time() - t0:.1f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
