#!/usr/bin/env python3
"""Checks the C++ data-index code against numpy and against an independent Python
re-implementation of Megatron-LM's GPT index building (written from MEGATRON_NOTES.md section 2
and the behaviour of megatron/core/datasets: gpt_dataset.py, helpers.cpp build_sample_idx and the
blending helpers, blended_megatron_dataset_builder.py, utils.normalize).

The cases are generated here with a fixed seed, run through data_indices_probe, and every array
and number the probe writes is compared element by element with what this file computes.

usage: megatron_reference.py --probe PATH --workdir DIR --area AREA
"""

import argparse
import collections
import functools
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys

import numpy

# ---------------------------------------------------------------------------------------------
# Reference implementation
# ---------------------------------------------------------------------------------------------


def normalize(weights):
    w = numpy.array(weights, dtype=numpy.float64)
    return (w / numpy.sum(w)).tolist()


def parse_and_normalize_split(split):
    values = [float(token) for token in re.findall(r"[.0-9]+", split)]
    values = values + [0.0] * (3 - len(values))
    if len(values) != 3:
        raise ValueError("more than three split weights")
    if sum(values) == 0:
        raise ValueError("all-zero split")
    return normalize(values)


def split_vector_to_matrix(vector):
    expansion = functools.reduce(lambda acc, w: acc + [acc[-1] + w], vector, [0])
    matrix = []
    for begin, end in zip(expansion[:-1], expansion[1:]):
        matrix.append(None if end <= begin else (begin, end))
    return matrix


def split_range(bookends, num_elements):
    return (int(round(bookends[0] * float(num_elements))),
            int(round(bookends[1] * float(num_elements))))


def num_epochs_for(tokens_per_epoch, num_samples, seq_length, extra):
    if num_samples is None:
        return 1
    epochs, tokens = 1, tokens_per_epoch
    while tokens < num_samples * seq_length + extra:
        epochs += 1
        tokens += tokens_per_epoch
    return epochs


def document_index(documents, epochs, random_state, separate_final_epoch):
    if not separate_final_epoch or epochs == 1:
        tiled = numpy.tile(numpy.asarray(documents, dtype=numpy.int64), epochs)
        tiled = tiled.astype(numpy.int32)
        random_state.shuffle(tiled)
        return tiled
    first = document_index(documents, epochs - 1, random_state, False)
    last = document_index(documents, 1, random_state, False)
    return numpy.concatenate((first, last))


def sample_index(sizes, doc_index, seq_length, epochs, tokens_per_epoch, drop_last, extra):
    if drop_last:
        n = (epochs * tokens_per_epoch - extra) // seq_length
    else:
        # helpers.cpp divides in single precision before the ceiling.
        n = int(math.ceil(numpy.float32(epochs * tokens_per_epoch - extra) /
                          numpy.float32(seq_length)))
    largest = max(doc_index.shape[0], int(sizes.max()))
    dtype = numpy.int32 if largest <= numpy.iinfo(numpy.int32).max else numpy.int64
    out = numpy.zeros((n + 1, 2), dtype=dtype)
    position, offset = 0, 0
    for sample in range(1, n + 1):
        remaining = seq_length + extra
        while remaining != 0:
            length = int(sizes[doc_index[position]]) - offset
            remaining -= length
            if remaining <= 0:
                offset += remaining + length - extra
                remaining = 0
            elif position == len(doc_index) - 1:
                assert sample == n
                offset = int(sizes[doc_index[position]]) - extra
                break
            else:
                position += 1
                offset = 0
        out[sample] = (position, offset)
    return out


def shuffle_index(num_samples, total_size, random_state):
    dtype = numpy.uint32
    if total_size >= numpy.iinfo(numpy.uint32).max - 1:
        dtype = numpy.int64
    first = numpy.arange(0, num_samples, dtype=dtype)
    random_state.shuffle(first)
    if num_samples == total_size:
        return first
    last = numpy.arange(num_samples, total_size, dtype=dtype)
    random_state.shuffle(last)
    return numpy.concatenate((first, last))


def gpt_indices(lengths, ids, seq_length, num_samples, seed, extra, drop_last):
    sizes = numpy.asarray(lengths, dtype=numpy.int32)
    ids = numpy.asarray(ids, dtype=numpy.int32)
    if seq_length <= 1:
        raise ValueError("helpers.cpp asserts seq_length > 1")
    if not 0 <= seed < 2**32:
        raise ValueError("RandomState refuses the seed")
    if any(i < 0 or i >= len(lengths) for i in ids):
        raise ValueError("sequence id outside the dataset")
    tokens_per_epoch = int(numpy.sum(sizes[ids]))
    if tokens_per_epoch <= 1:
        raise ValueError("helpers.cpp asserts tokens_per_epoch > 1")
    epochs = num_epochs_for(tokens_per_epoch, num_samples, seq_length, extra)
    separate = False
    if epochs > 1:
        sans_final = ((epochs - 1) * tokens_per_epoch - extra) // seq_length
        from_final = num_samples - sans_final
        per_epoch = (tokens_per_epoch - extra) // seq_length
        assert 0 <= from_final <= per_epoch + 1
        separate = from_final < int(0.80 * per_epoch)
    random_state = numpy.random.RandomState(seed)
    docs = document_index(ids, epochs, random_state, separate)
    samples = sample_index(sizes, docs, seq_length, epochs, tokens_per_epoch, drop_last, extra)
    total = samples.shape[0] - 1
    shuffled = shuffle_index(sans_final if separate else total, total, random_state)
    pieces = []
    for item in range(total):
        j = shuffled[item]
        begin, begin_offset = (int(v) for v in samples[j])
        end, end_offset = (int(v) for v in samples[j + 1])
        if begin == end:
            pieces.append((item, docs[begin], begin_offset, end_offset - begin_offset + extra))
            continue
        for position in range(begin, end + 1):
            offset = begin_offset if position == begin else 0
            length = (end_offset + extra if position == end
                      else int(sizes[docs[position]]) - offset)
            pieces.append((item, docs[position], offset, length))
    meta = {"num_epochs": epochs, "separate_final_epoch": separate,
            "tokens_per_epoch": tokens_per_epoch}
    return docs, samples, shuffled, numpy.asarray(pieces, dtype=numpy.int64).reshape(-1, 4), meta


def blending_indices(weights, size):
    index = numpy.zeros(size, dtype=numpy.int16)
    sample = numpy.zeros(size, dtype=numpy.int64)
    counts = [0] * len(weights)
    for t in range(size):
        position = max(float(t), 1.0)
        best = 0
        best_error = weights[0] * position - counts[0]
        for d in range(1, len(weights)):
            error = weights[d] * position - counts[d]
            if error > best_error:
                best, best_error = d, error
        index[t], sample[t] = best, counts[best]
        counts[best] += 1
    return index, sample


def exhaustive_blending_indices(sizes):
    total = sum(sizes)
    weights = [s / float(total) for s in sizes]
    counts = [0] * len(sizes)
    unspent = sorted(range(len(sizes)))
    index, sample = [], []
    t = 0
    while unspent:
        position = max(float(t), 1.0)
        best, best_error = -1, -math.inf
        for d in unspent:
            error = weights[d] * position - counts[d]
            if error > best_error:
                best, best_error = d, error
        index.append(best)
        sample.append(counts[best])
        counts[best] += 1
        if counts[best] == sizes[best]:
            unspent.remove(best)
        t += 1
    return numpy.asarray(index, dtype=numpy.int16), numpy.asarray(sample, dtype=numpy.int64)


def blend(weights, size, lengths, surplus):
    """Megatron's builder and BlendedDataset for one split; returns plan, weights, size, indices.
    Raises ValueError where Megatron fails: weights without a size, a weight that is not
    positive, or a blend drawing more samples from a constituent than it has."""
    plan, used, size_i, index, sample = blend_unchecked(weights, size, lengths, surplus)
    if any(w <= 0 for w in used):
        raise ValueError("BlendedDataset asserts positive weights")
    drawn = numpy.bincount(index.astype(numpy.int64), minlength=len(lengths))
    if any(drawn[d] > lengths[d] for d in range(len(lengths))):
        raise ValueError("the blend oversamples a constituent")
    return plan, used, size_i, index, sample


def blend_unchecked(weights, size, lengths, surplus):
    if weights is not None and size is None:
        raise ValueError("Using client-specified weights requires client-specified size")
    if weights is not None:
        weights = normalize(weights)
        plan = [int(math.ceil(math.ceil(size * w) * (1 + surplus))) for w in weights]
        size_i = sum(int(math.ceil(size * w)) for w in weights)
        used = normalize(weights)
        index, sample = blending_indices(used, size_i)
        return plan, used, size_i, index, sample
    plan = [None] * len(lengths)
    if size is not None:
        used = normalize(lengths)
        size_i = min(size, sum(lengths))
        index, sample = blending_indices(used, size_i)
        return plan, used, size_i, index, sample
    index, sample = exhaustive_blending_indices(lengths)
    return plan, [float(x) for x in lengths], None, index, sample


def description(case):
    tokenizer = collections.OrderedDict()
    tokenizer["class"] = case["tokenizer_class"]
    tokenizer["tokenizer_path"] = list(case["tokenizer_paths"])
    for key, value in case["tokenizer_options"].items():
        tokenizer[key] = str(value)
    ids = collections.OrderedDict()
    ids["class"] = "GPTDataset"
    ids["dataset_path"] = case["dataset_path"]
    ids["num_samples"] = case["num_samples"]
    ids["index_split"] = ["train", "valid", "test"][case["split_index"]]
    ids["random_seed"] = case["seed"]
    ids["sequence_length"] = case["seq_length"]
    ids["split"] = case["split"]
    ids["split_matrix"] = (None if case["split"] is None else
                           split_vector_to_matrix(parse_and_normalize_split(case["split"])))
    ids["tokenizer"] = tokenizer
    text = json.dumps(ids, indent=4)
    return text, hashlib.md5(text.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------------

def numpy_random_cases(rng):
    cases = []
    for seed in (0, 1, 1234, 2**31 - 1, 2**32 - 1):
        for n in (0, 1, 2, 3, 17, 1000, 2**16 + 3):
            for dtype in ("int32", "uint32", "int64"):
                cases.append({"kind": "shuffle", "seed": seed, "n": n, "dtype": dtype})
        cases.append({"kind": "raw32", "seed": seed, "count": 2000})
        maxes = [0, 1, 2, 3, 7, 8, 1000, 2**31, 2**32 - 1, 2**32, 2**32 + 5, 2**40 + 123,
                 2**62 + 1, 2**63 - 1]
        maxes += [int(x) for x in rng.integers(0, 2**63 - 1, size=50, dtype=numpy.int64)]
        maxes += [int(x) for x in rng.integers(0, 2**20, size=50)]
        cases.append({"kind": "interval", "seed": seed, "maxes": maxes})
    return cases


def split_cases(rng):
    strings = ["949,50,1", "969, 30, 1", "99,1,0", "1,1,1", "100", "0,1", "0,0,1", "0.7,0.2,0.1",
               "0.1 0.7 0.2", "98/2", "1.5,2.25,3", "3,0,0", "7,-1,2", "0,0,0", "1,2,3,4", "1.2.3",
               "", "."]
    for _ in range(30):
        strings.append(",".join(str(x) for x in rng.integers(0, 1000, size=int(rng.integers(1, 4)))))
    cases = []
    for s in strings:
        cases.append({"kind": "split", "split": s,
                      "num_elements": [0, 1, 2, 3, 10, 999, 1000, 1001, 12345, 2**31 - 1]})
    return cases


def gpt_case(rng, num_docs, max_len, seq_length, num_samples, extra=True, drop_last=True,
             min_len=1, ids=None):
    lengths = [int(x) for x in rng.integers(min_len, max_len + 1, size=num_docs)]
    if ids is None:
        begin = int(rng.integers(0, max(1, num_docs // 3)))
        ids = list(range(begin, num_docs))
    return {"kind": "gpt", "lengths": lengths, "ids": ids, "seq_length": seq_length,
            "num_samples": num_samples, "seed": int(rng.integers(0, 2**32)),
            "add_extra_token": extra, "drop_last": drop_last}


def gpt_cases(rng):
    cases = [
        # Single epoch, many documents per sample and many samples per document.
        gpt_case(rng, 50, 40, 16, 10),
        gpt_case(rng, 20, 500, 8, 100),
        # One epoch exactly, and num_samples unset (one epoch).
        gpt_case(rng, 30, 30, 8, None),
        gpt_case(rng, 30, 30, 8, None, extra=False),
        # Sequence longer than every document.
        gpt_case(rng, 40, 5, 64, 3),
        gpt_case(rng, 40, 5, 64, 50),
        # Multi-epoch: final epoch large (not separate) and tiny (separate).
        gpt_case(rng, 25, 20, 8, 200),
        gpt_case(rng, 25, 20, 8, 161),
        # Without the extra token and keeping the last partial sample.
        gpt_case(rng, 25, 20, 8, 200, extra=False),
        gpt_case(rng, 25, 20, 7, None, drop_last=False),
        gpt_case(rng, 25, 20, 7, 90, drop_last=False),
        # Empty sequences inside the split.
        gpt_case(rng, 60, 6, 4, 40, min_len=0),
        # A single document, split across samples and epochs.
        gpt_case(rng, 1, 50, 4, 30),
    ]
    # Tiny last epochs, searched so that both sides of the 0.80 threshold are covered.
    for _ in range(12):
        case = gpt_case(rng, int(rng.integers(1, 40)), int(rng.integers(2, 60)),
                        int(rng.integers(2, 40)), None)
        tokens = sum(case["lengths"][i] for i in case["ids"])
        per_epoch = max(1, (tokens - 1) // case["seq_length"])
        case["num_samples"] = int(rng.integers(0, 4 * per_epoch + 2))
        cases.append(case)
    for _ in range(20):
        cases.append(gpt_case(rng, int(rng.integers(1, 120)), int(rng.integers(1, 300)),
                              int(rng.integers(2, 200)), int(rng.integers(0, 400)),
                              extra=bool(rng.integers(0, 2)), drop_last=bool(rng.integers(0, 2))))
    # Bad inputs the C++ must refuse.
    cases.append({**gpt_case(rng, 5, 5, 1, 3), "expect_error": "sequence length 1"})
    cases.append({**gpt_case(rng, 5, 5, 4, 3, ids=[]), "expect_error": "at least 2 tokens"})
    cases.append({**gpt_case(rng, 5, 5, 4, 3, ids=[7]), "expect_error": "sequence id 7"})
    cases.append({**gpt_case(rng, 5, 5, 4, 3), "seed": 2**32, "expect_error": "random seed"})
    return cases


def blend_cases(rng):
    cases = [
        {"weights": [0.3, 0.7], "size": 1000, "lengths": [400, 800]},
        {"weights": [1, 1, 1], "size": 10, "lengths": [5, 5, 5]},
        {"weights": [0.5], "size": 17, "lengths": [20]},
        {"weights": None, "size": 50, "lengths": [30, 10, 25]},
        {"weights": None, "size": 500, "lengths": [30, 10, 25]},
        {"weights": None, "size": None, "lengths": [30, 10, 25]},
        {"weights": None, "size": None, "lengths": [1, 1]},
        {"weights": [0.3, 0.7], "size": 1000, "lengths": [200, 800], "expect_error": "draws"},
        {"weights": [0.3, 0.7], "size": None, "lengths": [200, 800], "expect_error": "size"},
        {"weights": [0.3, 0.0], "size": 10, "lengths": [200, 800], "expect_error": "positive"},
    ]
    for _ in range(15):
        n = int(rng.integers(1, 12))
        weights = [float(x) for x in rng.random(n) + 0.01]
        size = int(rng.integers(0, 3000))
        lengths = [int(math.ceil(math.ceil(size * w) * 1.005)) + int(rng.integers(0, 5))
                   for w in normalize(weights)]
        cases.append({"weights": weights, "size": size, "lengths": [max(1, x) for x in lengths]})
    for _ in range(5):
        n = int(rng.integers(2, 20))
        lengths = [int(x) for x in rng.integers(1, 200, size=n)]
        cases.append({"weights": None, "size": None, "lengths": lengths})
        cases.append({"weights": None, "size": int(rng.integers(1, 3000)), "lengths": lengths})
    for case in cases:
        case["kind"] = "blend"
        case.setdefault("surplus", 0.005)
    return cases


def description_cases(rng):
    base = {"kind": "description", "dataset_path": "/data/my-gpt2_text_document",
            "num_samples": 1000, "split_index": 0, "seed": 1234, "seq_length": 1024,
            "split": "949,50,1", "tokenizer_class": "_GPT2BPETokenizer",
            "tokenizer_paths": ["/data/gpt2-vocab.json", "/data/gpt2-merges.txt"],
            "tokenizer_options": {}, "add_extra_token": True, "drop_last": True}
    return [
        base,
        {**base, "split_index": 1, "num_samples": None},
        {**base, "split_index": 2, "split": "0,0.7,0.3"},
        {**base, "split": None},
        {**base, "split": "98,2", "seed": 7},
        {**base, "dataset_path": "/data/caf\u00e9 \"quoted\"\\path", "tokenizer_options": {"a": "1"}},
        {**base, "tokenizer_paths": []},
    ]


def npy_cases(rng, workdir):
    cases = []
    arrays = [numpy.arange(0, dtype=numpy.int32), numpy.array([7], dtype=numpy.int16),
              numpy.arange(10, dtype=numpy.uint32)[::-1].copy(),
              rng.integers(-2**62, 2**62, size=(33, 2), dtype=numpy.int64),
              rng.integers(-2**31, 2**31 - 1, size=(1000, 2), dtype=numpy.int32),
              numpy.zeros((0, 2), dtype=numpy.int64),
              numpy.array([2**32 - 1, 0, 5], dtype=numpy.uint32),
              rng.integers(-2**15, 2**15 - 1, size=12345, dtype=numpy.int16)]
    for i, array in enumerate(arrays):
        path = os.path.join(workdir, "numpy_written_%d.npy" % i)
        numpy.save(path, array)
        cases.append({"kind": "npy_read", "path": path, "array": array})
        cases.append({"kind": "npy_write", "dtype": str(array.dtype), "shape": list(array.shape),
                      "values": array.reshape(-1).tolist(), "array": array})
    return cases


# ---------------------------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------------------------

class Checker:
    def __init__(self, outdir, results):
        self.outdir = outdir
        self.results = results
        self.failures = []
        self.checked = 0

    def fail(self, case_id, message):
        self.failures.append("%s: %s" % (case_id, message))

    def array(self, case_id, suffix, expected):
        path = os.path.join(self.outdir, case_id + suffix)
        got = numpy.load(path)
        self.checked += 1
        if got.dtype != expected.dtype or got.shape != expected.shape:
            self.fail(case_id, "%s: dtype/shape %s %s, expected %s %s" % (
                suffix, got.dtype, got.shape, expected.dtype, expected.shape))
        elif not numpy.array_equal(got, expected):
            where = numpy.argwhere(got != expected)[0]
            self.fail(case_id, "%s: first difference at %s: %s, expected %s" % (
                suffix, tuple(where), got[tuple(where)], expected[tuple(where)]))

    def value(self, case_id, name, got, expected):
        self.checked += 1
        if got != expected:
            self.fail(case_id, "%s = %r, expected %r" % (name, got, expected))


def exact(x):
    return float(x)


def check_case(checker, case):
    cid, kind = case["id"], case["kind"]
    result = checker.results.get(cid, {})
    if "expect_error" in case:
        checker.checked += 1
        if "error" not in result or case["expect_error"] not in result["error"]:
            checker.fail(cid, "expected an error mentioning %r, got %r" % (case["expect_error"],
                                                                             result))
        return
    if kind == "split":
        try:
            weights = parse_and_normalize_split(case["split"])
        except ValueError:
            checker.value(cid, "error", "error" in result, True)
            return
        if "error" in result:
            checker.fail(cid, "unexpected error " + result["error"])
            return
        checker.value(cid, "weights", [exact(w) for w in result["weights"]], weights)
        matrix = split_vector_to_matrix(weights)
        got_matrix = [None if m is None else (exact(m[0]), exact(m[1])) for m in result["matrix"]]
        checker.value(cid, "matrix", got_matrix, [None if m is None else (float(m[0]), m[1])
                                                  for m in matrix])
        for elements, got in zip(case["num_elements"], result["ranges"]):
            expected = [None if m is None else list(split_range(m, elements)) for m in matrix]
            checker.value(cid, "ranges(%d)" % elements, got, expected)
        return
    reference = None
    try:
        if kind == "gpt":
            reference = gpt_indices(case["lengths"], case["ids"], case["seq_length"],
                                    case["num_samples"], case["seed"],
                                    1 if case["add_extra_token"] else 0, case["drop_last"])
        elif kind == "blend":
            reference = blend(case["weights"], case["size"], case["lengths"], case["surplus"])
    except ValueError as error:
        checker.value(cid, "refused (%s)" % error, "error" in result, True)
        return
    if "error" in result:
        checker.fail(cid, "unexpected error " + result["error"])
        return
    if kind == "shuffle":
        expected = numpy.arange(case["n"], dtype=case["dtype"])
        numpy.random.RandomState(case["seed"]).shuffle(expected)
        checker.array(cid, ".npy", expected)
    elif kind == "raw32":
        expected = numpy.random.RandomState(case["seed"]).randint(
            0, 2**32, size=case["count"], dtype=numpy.uint32)
        checker.array(cid, ".npy", expected)
    elif kind == "interval":
        random_state = numpy.random.RandomState(case["seed"])
        # Legacy randint(0, m + 1, dtype=uint64) is random_interval(m): the same masked rejection.
        expected = numpy.array([int(random_state.randint(0, m + 1, dtype=numpy.uint64))
                                for m in case["maxes"]], dtype=numpy.int64)
        checker.array(cid, ".npy", expected)
    elif kind == "gpt":
        docs, samples, shuffled, pieces, meta = reference
        checker.array(cid, ".document_index.npy", docs)
        checker.array(cid, ".sample_index.npy", samples)
        checker.array(cid, ".shuffle_index.npy", shuffled)
        checker.array(cid, ".pieces.npy", pieces)
        for key, value in meta.items():
            checker.value(cid, key, result[key], value)
    elif kind == "blend":
        plan, weights, size, index, sample = reference
        checker.value(cid, "plan", result["plan"], plan)
        checker.value(cid, "weights", [exact(w) for w in result["weights"]], weights)
        checker.value(cid, "size", result["size"], size)
        checker.array(cid, ".dataset_index.npy", index)
        checker.array(cid, ".dataset_sample_index.npy", sample)
    elif kind == "description":
        text, md5 = description(case)
        checker.value(cid, "description", result["description"], text)
        checker.value(cid, "md5", result["md5"], md5)
    elif kind == "npy_read":
        array = case["array"]
        checker.value(cid, "dtype", result["dtype"], str(array.dtype))
        checker.value(cid, "shape", result["shape"], list(array.shape))
        checker.value(cid, "values", result["values"], array.reshape(-1).tolist())
    elif kind == "npy_write":
        checker.array(cid, ".npy", case["array"])
        expected_path = os.path.join(checker.outdir, cid + ".numpy.npy")
        numpy.save(expected_path, case["array"])
        with open(expected_path, "rb") as a, open(os.path.join(checker.outdir, cid + ".npy"),
                                                   "rb") as b:
            checker.value(cid, "bytes identical to numpy.save", a.read() == b.read(), True)


AREAS = {
    "numpy_random": lambda rng, workdir: numpy_random_cases(rng),
    "split": lambda rng, workdir: split_cases(rng),
    "gpt_indices": lambda rng, workdir: gpt_cases(rng),
    "blend": lambda rng, workdir: blend_cases(rng),
    "description": lambda rng, workdir: description_cases(rng),
    "npy": npy_cases,
}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--probe", required=True)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--area", required=True, choices=sorted(AREAS))
    args = parser.parse_args()

    workdir = os.path.join(args.workdir, args.area)
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    rng = numpy.random.default_rng(20240817)
    cases = AREAS[args.area](rng, workdir)
    for i, case in enumerate(cases):
        case["id"] = "%s_%03d" % (case["kind"], i)

    cases_path = os.path.join(workdir, "cases.json")
    with open(cases_path, "w") as out:
        json.dump([{k: v for k, v in c.items() if k != "array"} for c in cases], out)
    subprocess.run([args.probe, cases_path, workdir], check=True)
    with open(os.path.join(workdir, "results.json")) as results:
        checker = Checker(workdir, json.load(results))

    for case in cases:
        check_case(checker, case)
    print("%s: %d cases, %d comparisons, %d failures" % (args.area, len(cases), checker.checked,
                                                          len(checker.failures)))
    for failure in checker.failures[:50]:
        print("FAIL " + failure)
    return 1 if checker.failures or checker.checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
