#!/usr/bin/env python3
"""Checks `megatron-app data` end to end against the independent Python re-implementation of
Megatron-LM's GPT index building and blending (tests/data_indices/megatron_reference.py): the
split sizes, the token ids of the first samples of every split, and the cache file names (the
MD5 of Megatron's dataset description), for one dataset split by `split` and for a weighted blend.

usage: data_command_reference.py --app APP --data-dir DIR --reference-dir DIR --workdir DIR
"""

import argparse
import math
import os
import re
import shutil
import subprocess
import sys

import numpy

DTYPES = {1: numpy.uint8, 2: numpy.int8, 3: numpy.int16, 4: numpy.int32, 5: numpy.int64,
          6: numpy.float64, 7: numpy.float32, 8: numpy.uint16}
SPLITS = ["train", "valid", "test"]
EOD = 50256


def read_indexed(prefix):
    """Sequence lengths and a per-sequence token reader of a Megatron indexed dataset."""
    with open(prefix + ".idx", "rb") as f:
        header = f.read(34)
        assert header[:9] == b"MMIDIDX\x00\x00", prefix
        dtype = DTYPES[header[17]]
        count = int.from_bytes(header[18:26], "little")
        lengths = numpy.frombuffer(f.read(4 * count), dtype=numpy.int32)
        pointers = numpy.frombuffer(f.read(8 * count), dtype=numpy.int64)
    tokens = numpy.fromfile(prefix + ".bin", dtype=dtype)
    itemsize = numpy.dtype(dtype).itemsize

    def get(i, offset, length):
        start = int(pointers[i]) // itemsize + offset
        return tokens[start:start + length].astype(numpy.int64)
    return lengths, get


def write_indexed(prefix, documents):
    """Megatron's format, one sequence per document, uint16 tokens."""
    lengths = numpy.array([len(d) for d in documents], dtype=numpy.int32)
    pointers = numpy.zeros(len(documents), dtype=numpy.int64)
    pointers[1:] = numpy.cumsum(lengths[:-1].astype(numpy.int64) * 2)
    with open(prefix + ".bin", "wb") as f:
        for d in documents:
            f.write(numpy.asarray(d, dtype=numpy.uint16).tobytes())
    with open(prefix + ".idx", "wb") as f:
        f.write(b"MMIDIDX\x00\x00")
        f.write((1).to_bytes(8, "little"))
        f.write(bytes([8]))
        f.write(len(documents).to_bytes(8, "little"))
        f.write((len(documents) + 1).to_bytes(8, "little"))
        f.write(lengths.tobytes())
        f.write(pointers.tobytes())
        f.write(numpy.arange(len(documents) + 1, dtype=numpy.int64).tobytes())


class Checker:
    def __init__(self):
        self.failures = 0

    def expect(self, condition, message):
        if not condition:
            self.failures += 1
            print("FAIL: " + message)


def run_data(app, config, split, first, overrides=()):
    command = [app, "data", "--config", config, "--split", split, "--first", str(first)]
    for o in overrides:
        command += ["--set", o]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit("megatron-app data failed (%d):\n%s%s" % (result.returncode, result.stdout,
                                                         result.stderr))
    sizes = {m.group(1): (int(m.group(2)), int(m.group(3)))
             for m in re.finditer(r" (train|valid|test) (\d+)/(\d+)", result.stdout)}
    samples = {}
    sample = None
    for line in result.stdout.splitlines():
        m = re.match(r"sample (\d+) \| ", line)
        if m:
            sample = int(m.group(1))
        m = re.match(r"  tokens: ([0-9 ]+)$", line)
        if m and sample is not None:
            samples[sample] = [int(t) for t in m.group(1).split()]
    return sizes, samples


def texts_of(reference, get, lengths, ids, seq_length, num_samples, seed, drop_last=True):
    """Every item's seq_length + 1 tokens, as GPTDataset serves them (no padding needed here)."""
    _, _, _, pieces, _ = reference.gpt_indices(lengths, ids, seq_length, num_samples, seed, 1,
                                               drop_last)
    texts = {}
    for item, doc, offset, length in pieces.tolist():
        texts.setdefault(item, []).extend(get(doc, offset, length).tolist())
    return [texts[i] for i in range(len(texts))]


def split_ids(reference, split, index, count):
    matrix = reference.split_vector_to_matrix(reference.parse_and_normalize_split(split))
    if matrix[index] is None:
        return None
    begin, end = reference.split_range(matrix[index], count)
    return list(range(begin, end))


def write_config(path, data_path, split, seq_length, vocab, merges):
    with open(path, "w") as f:
        f.write("[training]\nmicro_batch_size = 2\nglobal_batch_size = 4\ntrain_iters = 20\n"
                "eval_interval = 10\neval_iters = 2\nseed = 1234\n\n[data]\ntype = \"gpt\"\n"
                "data_path = %s\nsplit = \"%s\"\nseq_length = %d\nvocab_file = \"%s\"\n"
                "merge_file = \"%s\"\n" % (data_path, split, seq_length, vocab, merges))


def check_single(checker, reference, args, prefix, vocab, merges):
    config = os.path.join(args.workdir, "single.toml")
    split, seq = "98,1,1", 64
    write_config(config, '["%s"]' % prefix, split, seq, vocab, merges)
    lengths, get = read_indexed(prefix)
    wanted = [20 * 4, (20 // 10 + 1) * 2 * 4, 2 * 4]
    for index, name in enumerate(SPLITS):
        sizes, samples = run_data(args.app, config, name, 12)
        ids = split_ids(reference, split, index, len(lengths))
        texts = texts_of(reference, get, lengths, ids, seq, wanted[index], 1234)
        checker.expect(sizes.get(name) == (len(texts), wanted[index]),
                       "single %s: sizes %s, expected (%d, %d)" % (name, sizes.get(name),
                                                                  len(texts), wanted[index]))
        checker.expect(sorted(samples) == list(range(12)), "single %s: samples printed %s"
                       % (name, sorted(samples)))
        for k, tokens in samples.items():
            checker.expect(tokens == texts[k][:-1], "single %s sample %d differs" % (name, k))
        # The cache files carry the MD5 of Megatron's description of this GPTDataset.
        text, md5 = reference.description({
            "tokenizer_class": "_GPT2BPETokenizer", "tokenizer_paths": [vocab, merges],
            "tokenizer_options": {}, "dataset_path": prefix, "num_samples": wanted[index],
            "split_index": index, "seed": 1234, "seq_length": seq, "split": split})
        path = os.path.join(prefix, "cache", "GPTDataset_indices",
                            "%s-GPTDataset-%s-description.txt" % (md5, name))
        checker.expect(os.path.isfile(path), "single %s: no cache file %s" % (name, path))
        if os.path.isfile(path):
            with open(path) as f:
                checker.expect(f.read() == text, "single %s: description differs" % name)


def check_blend(checker, reference, args, prefixes, vocab, merges):
    config = os.path.join(args.workdir, "blend.toml")
    split, seq, weights = "90,5,5", 32, [0.4, 0.6]
    write_config(config, '[0.4, "%s", 0.6, "%s"]' % tuple(prefixes), split, seq, vocab, merges)
    readers = [read_indexed(p) for p in prefixes]
    wanted = [20 * 4, (20 // 10 + 1) * 2 * 4, 2 * 4]
    for index, name in enumerate(SPLITS):
        plan = [int(math.ceil(math.ceil(wanted[index] * w) * 1.005))
                for w in reference.normalize(weights)]
        constituents = []
        for d, (lengths, get) in enumerate(readers):
            ids = split_ids(reference, split, index, len(lengths))
            constituents.append(texts_of(reference, get, lengths, ids, seq, plan[d], 1234))
        _, _, size, dataset_index, sample_index = reference.blend(
            weights, wanted[index], [len(c) for c in constituents], 0.005)
        sizes, samples = run_data(args.app, config, name, 20)
        checker.expect(sizes.get(name) == (size, wanted[index]),
                       "blend %s: sizes %s, expected (%d, %d)" % (name, sizes.get(name), size,
                                                                 wanted[index]))
        checker.expect(len(samples) == min(20, size), "blend %s: %d samples printed"
                       % (name, len(samples)))
        for k, tokens in samples.items():
            d, j = int(dataset_index[k]), int(sample_index[k])
            checker.expect(tokens == constituents[d][j][:-1],
                           "blend %s sample %d (dataset %d sample %d) differs" % (name, k, d, j))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--app", required=True)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--reference-dir", required=True)
    parser.add_argument("--workdir", required=True)
    args = parser.parse_args()
    sys.path.insert(0, args.reference_dir)
    import megatron_reference as reference

    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    vocab = os.path.join(args.data_dir, "encoder.json")
    merges = os.path.join(args.data_dir, "vocab.bpe")
    subprocess.run([args.app, "preprocess", "--input",
                    os.path.join(args.data_dir, "austen_chapters.jsonl"), "--output-prefix",
                    os.path.join(args.workdir, "austen"), "--json-keys", "text", "--append-eod",
                    "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", vocab,
                    "--merge-file", merges, "--workers", "2"], check=True, capture_output=True)
    austen = os.path.join(args.workdir, "austen_text_document")
    rng = numpy.random.RandomState(5)
    other = os.path.join(args.workdir, "numbers")
    write_indexed(other, [list(rng.randint(30000, 31000, size=rng.randint(3, 200))) + [EOD]
                          for _ in range(150)])

    checker = Checker()
    check_single(checker, reference, args, austen, vocab, merges)
    check_blend(checker, reference, args, [austen, other], vocab, merges)
    if checker.failures:
        sys.exit("%d check(s) failed" % checker.failures)
    print("megatron-app data matches the reference for a single dataset and a weighted blend")


if __name__ == "__main__":
    main()
