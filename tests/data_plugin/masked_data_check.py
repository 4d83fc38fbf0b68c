"""What bert_data_command_check.py and t5_data_command_check.py share: Megatron's side (the
sentence-level data read with numpy, _BertWordPieceTokenizer's vocabulary, the schedule's sample
counts), running `megatron-app data` and parsing its output, the cache file checks and the
report."""

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
import types

import numpy

DTYPES = {1: numpy.uint8, 2: numpy.int8, 3: numpy.int16, 4: numpy.int32, 5: numpy.int64,
          6: numpy.float64, 7: numpy.float32, 8: numpy.uint16}
SPLITS = ["train", "valid", "test"]


def start(samples_option, samples_default):
    """Parses the checks' arguments (--app, --config, --reference-dir, --workdir,
    --reference-seed and `samples_option`), imports the Python references from --reference-dir,
    reads the config (one data_path) and empties --workdir. Returns the args, the reference
    modules (bert: bert_samples_reference, reference: megatron_reference), the config's data and
    training tables, the dataset prefix and vocab file resolved against the config's folder, the
    seed (the config's, or --reference-seed) and the cache folder inside --workdir."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--app", required=True)
    parser.add_argument("--config", required=True)
    parser.add_argument("--reference-dir", required=True, help="tests/data")
    parser.add_argument("--workdir", required=True)
    parser.add_argument(samples_option, type=int, default=samples_default)
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

    shutil.rmtree(args.workdir, ignore_errors=True)
    os.makedirs(args.workdir)
    return types.SimpleNamespace(
        args=args, bert=bert, reference=reference, data=data, training=training,
        prefix=resolve(data["data_path"][0]), vocab_file=resolve(data["vocab_file"]),
        seed=training["seed"] if args.reference_seed is None else args.reference_seed,
        cache_dir=os.path.join(args.workdir, "cache"))


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


def masked_dataset_identity(reference, class_name, dataset_path, num_samples, index, seed,
                            sequence_length, split, vocab_file, lower_case, vocab_extra_ids):
    """The start of a masked dataset's MegatronDataset.unique_description, up to the tokenizer
    (MegatronTokenizer's unique_identifiers: class, tokenizer_path, then each option as
    str(value)); the caller adds the masking fields and its own."""
    tokenizer = collections.OrderedDict()
    tokenizer["class"] = "_BertWordPieceTokenizer"
    tokenizer["tokenizer_path"] = [vocab_file]
    tokenizer["lower_case"] = str(lower_case)
    tokenizer["vocab_extra_ids"] = str(vocab_extra_ids)
    ids = collections.OrderedDict()
    ids["class"] = class_name
    ids["dataset_path"] = dataset_path
    ids["num_samples"] = num_samples
    ids["index_split"] = SPLITS[index]
    ids["random_seed"] = seed
    ids["sequence_length"] = sequence_length
    ids["split"] = split
    ids["split_matrix"] = reference.split_vector_to_matrix(
        reference.parse_and_normalize_split(split))
    ids["tokenizer"] = tokenizer
    return ids


def num_samples_per_split(training):
    """megatron/training/training.py get_train_valid_test_num_samples."""
    gbs = training["global_batch_size"]
    train = training.get("train_samples") or training["train_iters"] * gbs
    eval_iters = (training["train_iters"] // training["eval_interval"] + 1) * training["eval_iters"]
    return [train, eval_iters * gbs, training["eval_iters"] * gbs]


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


def parse_samples(stdout, length_of, token_fields, mask_fields, scalar_fields):
    """The samples `data --first` printed, back into full fields: token ids (token_fields),
    position:target labels, masks (mask_fields) and ints (scalar_fields); length_of(field) is the
    field's length."""
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
        if name in token_fields:
            current[name] = [int(x) for x in shown.split()]
        elif name == "labels":
            current[name] = parse_labels(shown, length_of(name))
        elif name in mask_fields:
            current[name] = parse_mask(shown, length_of(name))
        elif name in scalar_fields:
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


def check_cache_files(check, cache_dir, class_name, name, text, mapping):
    """The cache files of split `name`: Megatron's names <md5>-<class_name>-{description.txt,
    sample_index.npy}, the md5 of Megatron's description `text`, one description written for the
    split and equal to `text`, and its sample index equal to the reference `mapping`."""
    where = "%s: " % name
    md5 = hashlib.md5(text.encode("utf-8")).hexdigest()
    stem = os.path.join(cache_dir, "%s-%s-" % (md5, class_name))
    check.expect("description file exists", os.path.isfile(stem + "description.txt"), True,
                 where)
    check.expect("sample index file exists", os.path.isfile(stem + "sample_index.npy"), True,
                 where)
    written = {}
    for file in sorted(os.listdir(cache_dir)):
        m = re.fullmatch(r"([0-9a-f]{32})-%s-description\.txt" % class_name, file)
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
        ours = numpy.load(os.path.join(cache_dir, "%s-%s-sample_index.npy" % (got_md5, class_name)))
        check.expect("sample index dtype", str(ours.dtype), "uint32", where)
        check.expect("sample index shape", ours.shape, mapping.shape, where)
        if ours.shape == mapping.shape:
            bad = numpy.flatnonzero((ours != mapping).any(axis=1))
            check.expect("sample index rows differing", bad[:5].tolist(), [], where)
            check.checked["sample index rows"] += len(mapping)


def report(check, seen, cases, plugin):
    """Fails the check for each of `cases` the samples never showed, prints the counts and the
    first mismatches; returns the exit status."""
    for what in cases:
        if not seen[what]:
            check.failures.append("the samples never show a %s case" % what)
    print("checked:", dict(check.checked))
    print("seen:", dict(seen))
    if check.failures:
        print("%d mismatches; the first ones:" % len(check.failures))
        for line in check.failures[:30]:
            print("  " + line)
        return 1
    print("megatron-app data (%s plugin) matches Megatron's rules for train, valid and test" %
          plugin)
    return 0
