#!/usr/bin/env python3
"""Checks the C++ masked-dataset code (core/include/megatron/data/masked_samples.h) against an
independent Python re-implementation of Megatron-LM core_v0.13.1's rules, written from
MEGATRON_NOTES.md section 3 and the behaviour of megatron/core/datasets: helpers.cpp
build_mapping, masked_dataset.py (_build_sample_index, _create_masked_lm_predictions) and
bert_dataset.py (__getitem__, _get_token_mask).

numpy's own RandomState draws the per-sample randomness. helpers.cpp's std::mt19937 words come
from numpy's MT19937 (the same engine; checked below against the C++ standard's required
10000th output) and its std::mt19937_64 is written out here (checked the same way).

The test writes a sentence-level indexed dataset, runs bert_samples_probe on the cases, and
compares every mapping row and every field of every sample it returns.

usage: bert_samples_reference.py --probe PATH --workdir DIR
"""

import argparse
import collections
import decimal
import hashlib
import json
import os
import shutil
import subprocess
import sys

import numpy

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "data_indices"))
from megatron_numpy_writer import Builder  # noqa: E402
from megatron_reference import parse_and_normalize_split, split_vector_to_matrix  # noqa: E402

M64 = (1 << 64) - 1
LONG_SENTENCE_LEN = 512

# ---------------------------------------------------------------------------------------------
# helpers.cpp's engines
# ---------------------------------------------------------------------------------------------


class Mt19937:
    """std::mt19937(seed): numpy's MT19937 with the same init_genrand seeding; the raw words are
    legacy randint(0, 2**32, dtype=uint32), which returns the next word unchanged."""

    def __init__(self, seed):
        self.state = numpy.random.RandomState(seed)
        self.words = []
        self.next = 0

    def __call__(self):
        if self.next == len(self.words):
            self.words = self.state.randint(0, 2**32, size=1024, dtype=numpy.uint32).tolist()
            self.next = 0
        self.next += 1
        return self.words[self.next - 1]


class Mt19937_64:
    """std::mt19937_64(seed), from the parameters of [rand.predef]."""

    N, M = 312, 156

    def __init__(self, seed):
        mt = [seed & M64]
        for i in range(1, self.N):
            mt.append((6364136223846793005 * (mt[-1] ^ (mt[-1] >> 62)) + i) & M64)
        self.mt = mt
        self.index = self.N

    def _twist(self):
        mt = self.mt
        for i in range(self.N):
            x = (mt[i] & ~((1 << 31) - 1) & M64) | (mt[(i + 1) % self.N] & ((1 << 31) - 1))
            x_a = x >> 1
            if x & 1:
                x_a ^= 0xB5026F5AA96619E9
            mt[i] = mt[(i + self.M) % self.N] ^ x_a
        self.index = 0

    def __call__(self):
        if self.index == self.N:
            self._twist()
        y = self.mt[self.index]
        self.index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & M64


def check_engines():
    """The C++ standard requires the 10000th output of a default-seeded (5489) engine."""
    words = Mt19937(5489)
    for _ in range(9999):
        words()
    assert words() == 4123659995, "numpy's MT19937 words are not std::mt19937's"
    words64 = Mt19937_64(5489)
    for _ in range(9999):
        words64()
    assert words64() == 9981545732273789042, "Mt19937_64 is not std::mt19937_64"


# ---------------------------------------------------------------------------------------------
# build_mapping
# ---------------------------------------------------------------------------------------------


def c_round(x):
    """C's round(): halves away from zero (Python's round() goes to even)."""
    return int(decimal.Decimal(x).to_integral_value(rounding=decimal.ROUND_HALF_UP))


def build_mapping(docs, sizes, num_samples, max_seq_length, short_seq_prob, seed, min_num_sent):
    """masked_dataset.py passes INT32_MAX - 1 epochs and num_samples when num_samples is set;
    without it the C++ API builds one epoch. The epoch check happens before each epoch."""
    if num_samples is None:
        num_epochs, max_num_samples = 1, float("inf")
    else:
        num_epochs, max_num_samples = 2**31 - 2, num_samples
    ratio = c_round(1.0 / short_seq_prob) if short_seq_prob > 0 else 0
    words = Mt19937(seed)

    def target_length():
        if ratio == 0:
            return max_seq_length
        word = words()
        if word % ratio == 0:
            return 2 + word % (max_seq_length - 1)
        return max_seq_length

    rows = []
    for _ in range(num_epochs):
        if len(rows) >= max_num_samples:
            break
        for first, last in zip(docs[:-1], docs[1:]):
            count = last - first
            has_long = count > 1 and any(sizes[s] > LONG_SENTENCE_LEN for s in range(first, last))
            if count < min_num_sent or has_long:
                continue
            begin, tokens, taken, left = first, 0, 0, count
            target = target_length()
            for s in range(first, last):
                tokens += sizes[s]
                taken += 1
                left -= 1
                if (tokens >= target and left > 1 and taken >= min_num_sent) or left == 0:
                    rows.append((begin, s + 1, target))
                    begin, tokens, taken = s + 1, 0, 0
                    target = target_length()
    shuffle_words = Mt19937_64(seed + 1)
    for i in range(len(rows) - 1, 0, -1):
        j = shuffle_words() % (i + 1)
        rows[i], rows[j] = rows[j], rows[i]
    return numpy.array(rows, dtype=numpy.uint32).reshape(-1, 3)


# ---------------------------------------------------------------------------------------------
# Masking and the BERT sample
# ---------------------------------------------------------------------------------------------


class Vocab:
    def __init__(self, case):
        self.strings = case["vocab"]
        self.cls, self.sep, self.pad, self.mask = (case[k] for k in ("cls", "sep", "pad", "mask"))
        self.lookup = case["token_lookup"]


def bert_replacement(vocab, rs):
    """80% [MASK], then half of the rest a random id from the lookup, else None (kept)."""
    if rs.random() < 0.8:
        return vocab.mask
    if rs.random() >= 0.5:
        return vocab.lookup[rs.randint(0, len(vocab.lookup))]
    return None


def masked_lm(tokens, target, m, vocab, replacement, rs, global_rs):
    # Boundaries and candidate groups: CLS/SEP are neither; "##" pieces continue a word.
    boundaries, groups = [], []
    for i, t in enumerate(tokens):
        if t in (vocab.cls, vocab.sep):
            boundaries.append(1)
        elif not vocab.strings[t].startswith("##"):
            boundaries.append(1)
            groups.append([i])
        else:
            boundaries.append(0)
            if m["masking_do_full_word"] and groups:
                groups[-1].append(i)
            else:
                groups.append([i])

    p = m["masking_probability"]
    budget = min(p * target, max(1, int(round(len(tokens) * p))))
    sizes = numpy.arange(m["masking_max_ngram"], dtype=numpy.int64) + 1
    weights = 1.0 / sizes
    weights = weights / weights.sum(keepdims=True)
    if m["masking_use_longer_ngrams"]:
        weights = weights[::-1]

    # For every group, its n-grams of 1..max groups (shorter near the end), shuffled as lists.
    ngrams = [[groups[g:g + n] for n in sizes] for g in range(len(groups))]
    rs.shuffle(ngrams)

    def pick(options, n, limit, used):
        while True:
            flat = [i for group in options[n - 1] for i in group]
            n -= 1
            if limit >= used + len(flat):
                return flat
            if n == 0:
                return None

    out = list(tokens)
    chosen, spans, taken = [], [], set()
    for options in ngrams:
        if len(chosen) >= budget:
            break
        if m["masking_use_geometric_distribution"]:
            n = min(rs.geometric(0.2), m["masking_max_ngram"])
        else:
            probs = weights[:len(options)] / weights[:len(options)].sum(keepdims=True)
            n = rs.choice(sizes[:len(options)], p=probs)
        flat = pick(options, n, budget, len(chosen))
        if flat is None or any(i in taken for i in flat):
            continue
        for i in flat:
            taken.add(i)
            new = bert_replacement(vocab, rs) if replacement == "bert" else vocab.mask
            out[i] = tokens[i] if new is None else new
            chosen.append((i, tokens[i]))
        spans.append((flat, [tokens[i] for i in flat]))

    rs.shuffle(ngrams)

    if m["masking_do_permutation"]:
        permuted = set()
        for options in ngrams:
            if len(permuted) >= budget:
                break
            probs = weights[:len(options)] / weights[:len(options)].sum(keepdims=True)
            n = global_rs.choice(sizes[:len(options)], p=probs)
            flat = pick(options, n, budget, len(permuted))
            if flat is None or any(i in taken or i in permuted for i in flat):
                continue
            permuted.update(flat)
        where = sorted(permuted)
        source = list(where)
        rs.shuffle(source)
        before = list(out)
        for i, j in zip(where, source):
            out[i] = before[j]
            chosen.append((i, before[i]))

    chosen.sort(key=lambda pair: pair[0])
    spans.sort(key=lambda span: span[0][0])
    return {"tokens": out, "positions": [i for i, _ in chosen], "labels": [t for _, t in chosen],
            "boundaries": boundaries, "spans": [[list(a), list(b)] for a, b in spans]}


def bert_sample(sentences, target, idx, case, vocab):
    rs = numpy.random.RandomState((case["seed"] + idx) % 2**32)
    S = case["sequence_length"]
    pivot, swapped = len(sentences), False
    if case["classification_head"]:
        assert len(sentences) > 1
        pivot = rs.randint(1, len(sentences)) if len(sentences) >= 3 else 1
        swapped = rs.random() < 0.5
    a = [t for s in sentences[:pivot] for t in s]
    b = [t for s in sentences[pivot:] for t in s]
    if swapped:
        a, b = b, a
    truncated = len(a) + len(b) > target
    while len(a) + len(b) > target:
        longer = a if len(a) > len(b) else b
        del longer[0 if rs.random() < 0.5 else -1]
    tokens = [vocab.cls] + a + [vocab.sep]
    types = [0] * len(tokens)
    if b:
        tokens += b + [vocab.sep]
        types += [1] * (len(b) + 1)
    masked = masked_lm(tokens, target, case["masking"], vocab, "bert", rs, None)
    n, pads = len(tokens), S - len(tokens)
    assert pads >= 0
    labels = [-1] * S
    loss_mask = [0] * S
    for i, label in zip(masked["positions"], masked["labels"]):
        labels[i] = label
        loss_mask[i] = 1
    return {"text": masked["tokens"] + [vocab.pad] * pads,
            "types": types + [vocab.pad] * pads,
            "labels": labels, "loss_mask": loss_mask,
            "padding_mask": [1] * n + [vocab.pad] * pads,
            "is_random": int(swapped), "truncated": int(truncated)}


def description(case):
    ids = collections.OrderedDict()
    ids["class"] = "BERTMaskedWordPieceDataset"
    ids["dataset_path"] = case["prefix"]
    ids["num_samples"] = case["num_samples"]
    ids["index_split"] = ["train", "valid", "test"][case["split_index"]]
    ids["random_seed"] = case["seed"]
    ids["sequence_length"] = case["sequence_length"]
    ids["split"] = case["split_string"]
    ids["split_matrix"] = split_vector_to_matrix(parse_and_normalize_split(case["split_string"]))
    ids["tokenizer"] = collections.OrderedDict(
        [("class", case["tokenizer_class"]), ("tokenizer_path", case["tokenizer_paths"])])
    for key in ("masking_probability", "masking_max_ngram", "masking_do_full_word",
                "masking_do_permutation", "masking_use_longer_ngrams",
                "masking_use_geometric_distribution"):
        ids[key] = case["masking"][key]
        if key == "masking_probability":
            ids["short_sequence_probability"] = case["short_seq_prob"]
    ids["classification_head"] = case["classification_head"]
    return json.dumps(ids, indent=4)


# ---------------------------------------------------------------------------------------------
# Data and cases
# ---------------------------------------------------------------------------------------------

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def make_vocab(rng, size):
    strings = list(SPECIALS)
    while len(strings) < size:
        k = len(strings)
        strings.append(f"##p{k}" if rng.random_sample() < 0.35 else f"w{k}")
    return strings


def make_documents(rng, vocab_size):
    """Sentences of 0..70 ids (mostly words and pieces, some [UNK], [PAD] and [MASK] too),
    documents of 0..9 sentences, plus: a one-sentence document, a document with a 600-token
    sentence among others, a lone 530-token sentence, and an empty document."""
    def sentence(length):
        ids = rng.randint(5, vocab_size, size=length).tolist()
        for k in range(length):
            if rng.random_sample() < 0.02:
                ids[k] = int(rng.choice([0, 1, 4]))
        return ids

    documents = []
    for d in range(90):
        documents.append([sentence(int(rng.randint(0, 71))) for _ in range(rng.randint(0, 10))])
        if d == 10:
            documents.append([sentence(40)])
            documents.append([sentence(20), sentence(600), sentence(30)])
            documents.append([sentence(530)])
            documents.append([])
    return documents


def write_dataset(prefix, documents):
    builder = Builder(prefix + ".bin", numpy.uint16)
    for document in documents:
        builder.add_document([t for s in document for t in s], [len(s) for s in document])
    builder.finalize(prefix + ".idx")


def bert_masking(max_ngram=3):
    return {"masking_probability": 0.15, "masking_max_ngram": max_ngram,
            "masking_do_full_word": True, "masking_do_permutation": False,
            "masking_use_longer_ngrams": False, "masking_use_geometric_distribution": False}


def cases(rng, prefix, vocab, documents):
    lookup = list(range(len(vocab)))
    shuffled_lookup = list(lookup)
    rng.shuffle(shuffled_lookup)
    common = {"vocab": vocab, "cls": 2, "sep": 3, "pad": 0, "mask": 4, "token_lookup": lookup}
    out = []
    base = {**common, "kind": "bert", "prefix": prefix, "document_begin": 0,
            "document_end": len(documents), "short_seq_prob": 0.1, "num_samples": 500,
            "samples": 300, "masking": bert_masking(), "split_index": 0,
            "split_string": "969, 30, 1", "tokenizer_class": "_BertWordPieceTokenizer",
            "tokenizer_paths": ["/data/bert-vocab.txt"]}
    for head in (True, False):
        for seed in (1234, 7):
            for length in (64, 128):
                out.append({**base, "id": f"bert_head{int(head)}_seed{seed}_S{length}",
                            "classification_head": head, "seed": seed,
                            "sequence_length": length})
    out += [
        # One epoch (num_samples None), a document sub-range, a later split's description.
        {**base, "id": "one_epoch_subrange", "classification_head": True, "seed": 99,
         "sequence_length": 96, "num_samples": None, "document_begin": 5, "document_end": 60,
         "split_index": 1, "split_string": "98,2"},
        # Short targets every round(1 / 0.4) = 3 rows (C rounding), a shuffled lookup list,
        # mask probability 0.3, a pad id that is not 0 (Megatron pads types and masks with it).
        {**base, "id": "short_often", "classification_head": True, "seed": 5,
         "sequence_length": 48, "short_seq_prob": 0.4, "token_lookup": shuffled_lookup,
         "masking": {**bert_masking(), "masking_probability": 0.3}, "pad": 1},
        {**base, "id": "never_short", "classification_head": False, "seed": 11,
         "sequence_length": 40, "short_seq_prob": 0.0},
        {**base, "id": "always_short", "classification_head": True, "seed": 12,
         "sequence_length": 40, "short_seq_prob": 1.0, "num_samples": 40, "samples": 40},
    ]

    def masking_case(case_id, masking, replacement, global_seed=None):
        sequences = []
        for k in range(120):
            sentences = [rng.randint(5, len(vocab), size=rng.randint(0, 40)).tolist()
                         for _ in range(rng.randint(1, 4))]
            tokens = [2]
            for s in sentences:
                tokens += s + [3]
            target = int(rng.randint(2, 130))
            sequences.append({"tokens": tokens, "target": target, "seed": int(rng.randint(2**32))})
        return {**common, "id": case_id, "kind": "masking", "masking": masking,
                "replacement": replacement, "global_seed": global_seed, "sequences": sequences}

    t5 = {**bert_masking(10), "masking_use_geometric_distribution": True}
    out += [
        masking_case("mask_bert", bert_masking(), "bert"),
        masking_case("mask_t5", t5, "always"),
        masking_case("mask_t5_prob_0.3", {**t5, "masking_probability": 0.3}, "always"),
        masking_case("mask_longer", {**bert_masking(4), "masking_use_longer_ngrams": True}, "bert"),
        masking_case("mask_pieces", {**bert_masking(), "masking_do_full_word": False}, "bert"),
        masking_case("mask_permute", {**bert_masking(), "masking_do_permutation": True}, "bert",
                     global_seed=321),
        masking_case("mask_ngram_12", bert_masking(12), "always"),
    ]
    return out


# ---------------------------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--probe", required=True)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()
    check_engines()

    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    rng = numpy.random.RandomState(20250601)
    vocab = make_vocab(rng, 700)
    documents = make_documents(rng, len(vocab))
    prefix = os.path.join(args.workdir, "sentences")
    write_dataset(prefix, documents)
    docs = numpy.cumsum([0] + [len(d) for d in documents])
    sentences = [s for d in documents for s in d]
    sizes = [len(s) for s in sentences]

    all_cases = cases(rng, prefix, vocab, documents)
    with open(os.path.join(args.workdir, "cases.json"), "w") as f:
        json.dump(all_cases, f)
    subprocess.run([args.probe, os.path.join(args.workdir, "cases.json"), args.workdir],
                   check=True)
    with open(os.path.join(args.workdir, "results.json")) as f:
        results = json.load(f)

    failures, checked = [], collections.Counter()

    def expect(case_id, what, got, expected):
        checked[what] += 1
        if got != expected:
            failures.append(f"{case_id}: {what}: got {got!r}, expected {expected!r}")

    for case in all_cases:
        cid, got = case["id"], results[case["id"]]
        vocab_view = Vocab(case)
        if case["kind"] == "masking":
            m = case["masking"]
            global_rs = (numpy.random.RandomState(case["global_seed"])
                         if case["global_seed"] is not None else None)
            for k, (seq, result) in enumerate(zip(case["sequences"], got)):
                rs = numpy.random.RandomState(seq["seed"])
                expected = masked_lm(seq["tokens"], seq["target"], m, vocab_view,
                                     case["replacement"], rs, global_rs)
                expected["next_word"] = int(rs.randint(0, 2**32, dtype=numpy.uint32))
                for field, value in expected.items():
                    expect(f"{cid}[{k}]", field, result[field], value)
            expect(cid, "sequence count", len(got), len(case["sequences"]))
            continue

        head = case["classification_head"]
        mapping = build_mapping(
            docs[case["document_begin"]:case["document_end"] + 1].tolist(), sizes,
            case["num_samples"], case["sequence_length"] - 3, case["short_seq_prob"],
            case["seed"], 2 if head else 1)
        ours = numpy.load(os.path.join(args.workdir, cid + ".mapping.npy"))
        expect(cid, "mapping dtype", str(ours.dtype), "uint32")
        expect(cid, "mapping shape", ours.shape, mapping.shape)
        if ours.shape == mapping.shape:
            for r in numpy.flatnonzero((ours != mapping).any(axis=1))[:5]:
                expect(cid, f"mapping row {r}", ours[r].tolist(), mapping[r].tolist())
            checked["mapping rows"] += len(mapping)
        if case["num_samples"] is not None:
            expect(cid, "at least num_samples rows", len(mapping) >= case["num_samples"], True)
        count = min(case["samples"], len(mapping))
        expect(cid, "sample count", len(got["samples"]), count)
        for idx in range(min(count, len(got["samples"]))):
            first, end, target = (int(x) for x in mapping[idx])
            expected = bert_sample([list(s) for s in sentences[first:end]], target, idx, case,
                                   vocab_view)
            for field, value in expected.items():
                expect(f"{cid}[{idx}]", field, got["samples"][idx][field], value)

        text = description(case)
        md5 = hashlib.md5(text.encode("utf-8")).hexdigest()
        expect(cid, "description", got["description"], text)
        expect(cid, "description file", got["description_file"],
               f"CACHE/{md5}-BERTMaskedWordPieceDataset-description.txt")
        expect(cid, "sample index file", got["sample_index_file"],
               f"CACHE/{md5}-BERTMaskedWordPieceDataset-sample_index.npy")
        expect(cid, "default cache dir", got["default_cache_dir"],
               os.path.join(prefix, "cache", "BERTMaskedWordPieceDataset_indices"))

    # The data must exercise what the cases are about.
    all_samples = [s for case in all_cases if case["kind"] == "bert"
                   for s in results[case["id"]]["samples"]]
    masked = [(s["text"][i], s["labels"][i]) for s in all_samples
              for i, flag in enumerate(s["loss_mask"]) if flag]
    for name, seen in [("a swapped pair", any(s["is_random"] for s in all_samples)),
                       ("a truncated sample", any(s["truncated"] for s in all_samples)),
                       ("an untruncated sample", any(not s["truncated"] for s in all_samples)),
                       ("a [MASK] replacement", any(t == 4 for t, _ in masked)),
                       ("a random replacement", any(t not in (4, label) for t, label in masked)),
                       ("a kept masked token", any(t == label for t, label in masked)),
                       ("a padded sample", any(s["padding_mask"][-1] != 1 for s in all_samples)),
                       ("a full sample", any(s["padding_mask"][-1] == 1 for s in all_samples))]:
        if not seen:
            failures.append(f"the cases never produce {name}")

    print("checked:", dict(checked))
    if failures:
        print(f"{len(failures)} mismatches; the first ones:")
        for line in failures[:30]:
            print("  " + line)
        return 1
    print("all fields equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
