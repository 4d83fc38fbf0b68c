#!/usr/bin/env python3
"""Checks the `bert` dataset plugin end to end through `megatron-app data` against Megatron-LM
core_v0.13.1's rules for every split (train, valid, test).

Megatron (pretrain_bert.py -> BlendedMegatronDatasetBuilder -> BERTMaskedWordPieceDataset) splits
the sentence-level IndexedDataset by DOCUMENTS (MaskedWordPieceDataset.numel_low_level_dataset =
len(document_indices) - 1) with the split matrix, int(round(bookend * num_documents)); each split
is built with num_samples = get_train_valid_test_num_samples()[split]; helpers.build_mapping makes
its sentence mapping and __getitem__ its samples with RandomState((seed + idx) % 2**32); the
tokenizer is _BertWordPieceTokenizer (bert-base-uncased plus [BOS] [EOS]: 30524 ids, token_lookup
= list(inv_vocab.keys())). The mapping and the samples come from the independent Python
re-implementation in tests/data/bert_samples_reference.py (build_mapping, bert_sample), fed with
the .idx/.bin read here with numpy.

Compared: the split sizes the command prints (built / asked for), the document range of each
split (the plugin's log), every row of each split's cached sample_index.npy, every field of every
printed sample (train: the first --train-samples, valid and test: all), and the cache files:
<md5>-BERTMaskedWordPieceDataset-{description.txt,sample_index.npy}, the description being
Megatron's json.dumps(unique_identifiers, indent=4) (MegatronTokenizer stores its options as
str(value)), the md5 that of the description.

usage: bert_data_command_check.py --app APP --config TOML --reference-dir tests/data
                                  --workdir DIR [--train-samples N] [--reference-seed SEED]
(--reference-seed gives the reference another seed than the config's: the check must then fail.)
"""

import argparse
import collections
import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib

import numpy

DTYPES = {1: numpy.uint8, 2: numpy.int8, 3: numpy.int16, 4: numpy.int32, 5: numpy.int64,
          6: numpy.float64, 7: numpy.float32, 8: numpy.uint16}
SPLITS = ["train", "valid", "test"]
FIELDS = ["text", "types", "labels", "loss_mask", "padding_mask", "is_random", "truncated"]
CLASS = "BERTMaskedWordPieceDataset"


# ---------------------------------------------------------------------------------------------
# Megatron's side: data, tokenizer, split, schedule, description
# ---------------------------------------------------------------------------------------------


def read_sentences(prefix):
    """Megatron's MMIDIDX index: sentence lengths, pointers, document_indices; the .bin tokens."""
    with open(prefix + ".idx", "rb") as f:
        header = f.read(34)
        assert header[:9] == b"MMIDIDX\x00\x00", prefix
        assert int.from_bytes(header[9:17], "little") == 1, "index version"
        dtype = DTYPES[header[17]]
        count = int.from_bytes(header[18:26], "little")
        doc_count = int.from_bytes(header[26:34], "little")
        lengths = numpy.frombuffer(f.read(4 * count), dtype=numpy.int32)
        pointers = numpy.frombuffer(f.read(8 * count), dtype=numpy.int64)
        documents = numpy.frombuffer(f.read(8 * doc_count), dtype=numpy.int64)
    tokens = numpy.fromfile(prefix + ".bin", dtype=dtype)
    itemsize = numpy.dtype(dtype).itemsize
    sentences = [tokens[p // itemsize:p // itemsize + n].astype(numpy.int64).tolist()
                 for p, n in zip(pointers.tolist(), lengths.tolist())]
    return lengths.tolist(), documents.tolist(), sentences


def bert_vocabulary(vocab_file, vocab_extra_ids):
    """_BertWordPieceTokenizer: bert_tokenization.load_vocab (stripped lines, later duplicates
    overwrite), inv_vocab, then add_token([BOS]), add_token([EOS]) and the <extra_id_N>."""
    vocab = collections.OrderedDict()
    with open(vocab_file, encoding="utf-8") as f:
        for index, line in enumerate(f):
            vocab[line.strip()] = index
    inv_vocab = {v: k for k, v in vocab.items()}
    for token in ["[BOS]", "[EOS]"] + ["<extra_id_%d>" % i for i in range(vocab_extra_ids)]:
        if token not in vocab:
            inv_vocab[len(vocab)] = token
            vocab[token] = len(vocab)
    strings = [inv_vocab.get(i, "") for i in range(max(inv_vocab) + 1)]
    return {"vocab": strings, "cls": vocab["[CLS]"], "sep": vocab["[SEP]"],
            "pad": vocab["[PAD]"], "mask": vocab["[MASK]"], "token_lookup": list(inv_vocab)}


def num_samples_per_split(training):
    """megatron/training/training.py get_train_valid_test_num_samples."""
    gbs = training["global_batch_size"]
    train = training.get("train_samples") or training["train_iters"] * gbs
    eval_iters = (training["train_iters"] // training["eval_interval"] + 1) * training["eval_iters"]
    return [train, eval_iters * gbs, training["eval_iters"] * gbs]


def description(reference, dataset_path, num_samples, index, data, seed, vocab_file):
    """MegatronDataset.unique_description of a BERTMaskedWordPieceDataset from pretrain_bert.py:
    MaskedWordPieceDataset and BERT key attributes; the tokenizer as MegatronTokenizer's
    unique_identifiers (class, tokenizer_path, then each option as str(value))."""
    tokenizer = collections.OrderedDict()
    tokenizer["class"] = "_BertWordPieceTokenizer"
    tokenizer["tokenizer_path"] = [vocab_file]
    tokenizer["lower_case"] = str(data.get("tokenizer_type", "BertWordPieceLowerCase")
                                  == "BertWordPieceLowerCase")
    tokenizer["vocab_extra_ids"] = str(data.get("vocab_extra_ids", 0))
    ids = collections.OrderedDict()
    ids["class"] = CLASS
    ids["dataset_path"] = dataset_path
    ids["num_samples"] = num_samples
    ids["index_split"] = SPLITS[index]
    ids["random_seed"] = seed
    ids["sequence_length"] = data["seq_length"]
    ids["split"] = data["split"]
    ids["split_matrix"] = reference.split_vector_to_matrix(
        reference.parse_and_normalize_split(data["split"]))
    ids["tokenizer"] = tokenizer
    ids["masking_probability"] = data.get("mask_prob", 0.15)
    ids["short_sequence_probability"] = data.get("short_seq_prob", 0.1)
    ids["masking_max_ngram"] = 3
    ids["masking_do_full_word"] = True
    ids["masking_do_permutation"] = False
    ids["masking_use_longer_ngrams"] = False
    ids["masking_use_geometric_distribution"] = False
    ids["classification_head"] = data.get("bert_binary_head", True)
    return json.dumps(ids, indent=4)


# ---------------------------------------------------------------------------------------------
# The command's side: its output, parsed back into full fields
# ---------------------------------------------------------------------------------------------


def parse_mask(shown, length):
    m = re.fullmatch(r"all (\d+) set", shown)
    if m:
        assert int(m.group(1)) == length, shown
        return [1] * length
    m = re.fullmatch(r"none of (\d+) set", shown)
    if m:
        assert int(m.group(1)) == length, shown
        return [0] * length
    m = re.fullmatch(r"(\d+) of (\d+) set(, at|; 0 at) ([0-9 ]+)", shown)
    assert m and int(m.group(2)) == length, "unexpected mask %r" % shown
    listed = [int(x) for x in m.group(4).split()]
    on = m.group(3) == ", at"
    out = [0 if on else 1] * length
    for i in listed:
        out[i] = 1 if on else 0
    assert sum(out) == int(m.group(1)), shown
    return out


def parse_labels(shown, length):
    m = re.fullmatch(r"(\d+) targets: ?([0-9: ]*)", shown)
    if not m:
        values = [int(x) for x in shown.split()]
        assert len(values) == length, shown
        return values
    out = [-1] * length
    pairs = m.group(2).split()
    assert len(pairs) == int(m.group(1)), shown
    for pair in pairs:
        i, t = pair.split(":")
        out[int(i)] = int(t)
    return out


def parse_samples(stdout, length):
    samples, current = [], None
    for line in stdout.splitlines():
        m = re.match(r"sample (\d+) \| ", line)
        if m:
            assert int(m.group(1)) == len(samples), "sample %s out of order" % m.group(1)
            current = {}
            samples.append(current)
            continue
        m = re.fullmatch(r"  (\w+): (.*)", line)
        if not m or current is None:
            continue
        name, shown = m.groups()
        if name in ("text", "types"):
            current[name] = [int(x) for x in shown.split()]
        elif name == "labels":
            current[name] = parse_labels(shown, length)
        elif name in ("loss_mask", "padding_mask"):
            current[name] = parse_mask(shown, length)
        elif name in ("is_random", "truncated"):
            current[name] = int(shown)
        else:
            raise AssertionError("unexpected field line %r" % line)
    return samples


def run_data(app, config, cache_dir, split, first):
    command = [app, "data", "--config", config, "--split", split, "--first", str(first),
               "--set", "data.data_cache_path=%s" % json.dumps(cache_dir)]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit("%s\nfailed (%d):\n%s%s" % (" ".join(command), result.returncode, result.stdout,
                                             result.stderr))
    sizes = {m.group(1): (int(m.group(2)), int(m.group(3)))
             for m in re.finditer(r" (train|valid|test) (\d+)/(\d+)",
                                  re.search(r"split sizes .*", result.stdout).group(0))}
    ranges = {m.group(1): (int(m.group(2)), int(m.group(3)), int(m.group(4)))
              for m in re.finditer(r"data: (train|valid|test) split of .*?\((\d+) samples from "
                                   r"documents \[(\d+), (\d+)\)\)", result.stdout + result.stderr)}
    return sizes, ranges, result.stdout


# ---------------------------------------------------------------------------------------------


class Checker:
    def __init__(self):
        self.failures = []
        self.checked = collections.Counter()

    def expect(self, what, got, expected, where=""):
        self.checked[what] += 1
        if got == expected:
            return
        if isinstance(got, list) and isinstance(expected, list) and len(got) == len(expected):
            at = next(i for i, (a, b) in enumerate(zip(got, expected)) if a != b)
            self.failures.append("%s%s: first difference at %d: got %r, expected %r" % (
                where, what, at, got[at:at + 8], expected[at:at + 8]))
        else:
            self.failures.append("%s%s: got %r, expected %r" % (where, what, got, expected))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--app", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--reference-dir", required=True, help="tests/data")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--train-samples", type=int, default=200)
    parser.add_argument("--reference-seed", type=int)
    args = parser.parse_args()
    sys.path.insert(0, os.path.abspath(args.reference_dir))
    import bert_samples_reference as bert  # noqa: E402  (also puts tests/data_indices on the path)
    import megatron_reference as reference  # noqa: E402
    bert.check_engines()

    with open(args.config, "rb") as f:
        config = tomllib.load(f)
    data, training = config["data"], config["training"]
    here = os.path.dirname(os.path.abspath(args.config))
    resolve = lambda p: os.path.normpath(os.path.join(here, p))  # noqa: E731
    assert len(data["data_path"]) == 1
    prefix, vocab_file = resolve(data["data_path"][0]), resolve(data["vocab_file"])
    seed = training["seed"] if args.reference_seed is None else args.reference_seed
    head = data.get("bert_binary_head", True)
    S = data["seq_length"]

    shutil.rmtree(args.workdir, ignore_errors=True)
    cache_dir = os.path.join(args.workdir, "cache")
    os.makedirs(args.workdir)

    lengths, documents, sentences = read_sentences(prefix)
    vocab = bert_vocabulary(vocab_file, data.get("vocab_extra_ids", 0))
    check = Checker()
    check.expect("vocabulary size", len(vocab["token_lookup"]), 30524)
    wanted = num_samples_per_split(training)
    matrix = reference.split_vector_to_matrix(reference.parse_and_normalize_split(data["split"]))
    num_documents = len(documents) - 1
    case = {**vocab, "seed": seed, "sequence_length": S, "classification_head": head,
            "masking": {**bert.bert_masking(), "masking_probability": data.get("mask_prob", 0.15)}}
    view = bert.Vocab(case)
    seen = collections.Counter()

    for index, name in enumerate(SPLITS):
        assert matrix[index] is not None, "this check expects three non-empty splits"
        begin, end = reference.split_range(matrix[index], num_documents)
        mapping = bert.build_mapping(documents[begin:end + 1], lengths, wanted[index], S - 3,
                                     data.get("short_seq_prob", 0.1), seed, 2 if head else 1)
        first = args.train_samples if name == "train" else len(mapping)
        sizes, ranges, stdout = run_data(args.app, config=args.config, cache_dir=cache_dir,
                                         split=name, first=first)
        where = "%s: " % name
        check.expect("sizes built/asked", sizes.get(name), (len(mapping), wanted[index]), where)
        if name in ranges:  # logged when the caches are built or loaded
            check.expect("documents", ranges[name], (len(mapping), begin, end), where)
        else:
            check.failures.append(where + "no 'samples from documents' line in the output")

        # Cache files: Megatron's names, the md5 of Megatron's description.
        text = description(reference, prefix, wanted[index], index, data, seed, vocab_file)
        md5 = hashlib.md5(text.encode("utf-8")).hexdigest()
        stem = os.path.join(cache_dir, "%s-%s-" % (md5, CLASS))
        check.expect("description file exists", os.path.isfile(stem + "description.txt"), True,
                     where)
        check.expect("sample index file exists", os.path.isfile(stem + "sample_index.npy"), True,
                     where)
        written = {}
        for file in sorted(os.listdir(cache_dir)):
            m = re.fullmatch(r"([0-9a-f]{32})-%s-description\.txt" % CLASS, file)
            if m:
                with open(os.path.join(cache_dir, file), encoding="utf-8") as f:
                    content = f.read()
                check.expect("md5 of the written description", m.group(1),
                             hashlib.md5(content.encode("utf-8")).hexdigest(), file + ": ")
                if json.loads(content).get("index_split") == name:
                    written[m.group(1)] = content
        check.expect("descriptions written for the split", len(written), 1, where)
        for got_md5, content in written.items():
            if content != text:
                diff = difflib.unified_diff(text.splitlines(), content.splitlines(),
                                            "megatron", "plugin", lineterm="", n=0)
                check.failures.append(where + "description differs from Megatron's:\n      " +
                                      "\n      ".join(list(diff)[2:]))
            else:
                check.checked["description text"] += 1
            # The plugin's sample index (found by its own description) against build_mapping.
            ours = numpy.load(os.path.join(cache_dir, "%s-%s-sample_index.npy" % (got_md5, CLASS)))
            check.expect("sample index dtype", str(ours.dtype), "uint32", where)
            check.expect("sample index shape", ours.shape, mapping.shape, where)
            if ours.shape == mapping.shape:
                bad = numpy.flatnonzero((ours != mapping).any(axis=1))
                check.expect("sample index rows differing", bad[:5].tolist(), [], where)
                check.checked["sample index rows"] += len(mapping)

        # Every field of every printed sample.
        samples = parse_samples(stdout, S)
        check.expect("samples printed", len(samples), min(first, len(mapping)), where)
        for idx, got in enumerate(samples):
            b, e, target = (int(x) for x in mapping[idx])
            expected = bert.bert_sample([list(s) for s in sentences[b:e]], target, idx, case, view)
            expected["padding_mask"] = [int(v != 0) for v in expected["padding_mask"]]
            for field in FIELDS:
                check.expect(field, got.get(field), expected[field], "%s sample %d: " % (name, idx))
            check.checked["samples"] += 1
            seen["swapped"] += expected["is_random"]
            seen["truncated"] += expected["truncated"]
            seen["padded"] += expected["padding_mask"][-1] == 0
            for i, flag in enumerate(expected["loss_mask"]):
                if flag:
                    t, label = expected["text"][i], expected["labels"][i]
                    seen["[MASK]" if t == vocab["mask"] else "kept" if t == label else "random"] += 1
        # The padding above is only lossless in the mask display when [PAD] is 0.
        assert vocab["pad"] == 0

    for what in ("swapped", "truncated", "padded", "[MASK]", "kept", "random"):
        if not seen[what]:
            check.failures.append("the samples never show a %s case" % what)
    print("checked:", dict(check.checked))
    print("seen:", dict(seen))
    if check.failures:
        print("%d mismatches; the first ones:" % len(check.failures))
        for line in check.failures[:30]:
            print("  " + line)
        return 1
    print("megatron-app data (bert plugin) matches Megatron's rules for train, valid and test")
    return 0


if __name__ == "__main__":
    sys.exit(main())
