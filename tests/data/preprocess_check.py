#!/usr/bin/env python3
"""End-to-end check of `megatron-app preprocess` against independent references: the ids of a
Python port of OpenAI's encoder.py (itself checked on reference_ids.jsonl), the dataset read with
numpy, 1 and 2 workers byte-identical, and no files left behind by a refused run.

Usage: preprocess_check.py MEGATRON_APP DATA_DIR TOKENIZER_TEST_DATA_DIR
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_reference_encoder import Encoder  # noqa: E402

EOD = 50256
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message, file=sys.stderr)


def read_dataset(prefix):
    """The .idx/.bin read with struct/numpy as Megatron's _IndexReader does."""
    with open(prefix + ".idx", "rb") as f:
        idx = f.read()
    assert idx[:9] == b"MMIDIDX\x00\x00", prefix
    assert int.from_bytes(idx[9:17], "little") == 1
    code = idx[17]
    n = int.from_bytes(idx[18:26], "little")
    d = int.from_bytes(idx[26:34], "little")
    lengths = numpy.frombuffer(idx, numpy.int32, n, 34)
    pointers = numpy.frombuffer(idx, numpy.int64, n, 34 + 4 * n)
    documents = numpy.frombuffer(idx, numpy.int64, d, 34 + 12 * n)
    dtype = {4: numpy.int32, 8: numpy.uint16}[code]
    tokens = numpy.fromfile(prefix + ".bin", dtype=dtype)
    sequences = [tokens[p // tokens.itemsize: p // tokens.itemsize + l].tolist()
                 for p, l in zip(pointers, lengths)]
    docs = [sequences[documents[k]:documents[k + 1]] for k in range(d - 1)]
    return code, docs


def preprocess(app, data_dir, jsonl, prefix, workers, *extra):
    command = [app, "preprocess", "--input", jsonl, "--output-prefix", prefix,
               "--json-keys", "text", "--append-eod", "--tokenizer-type", "GPT2BPETokenizer",
               "--vocab-file", os.path.join(data_dir, "encoder.json"),
               "--merge-file", os.path.join(data_dir, "vocab.bpe"),
               "--workers", str(workers), *extra]
    return subprocess.run(command, capture_output=True, text=True)


def main():
    app, data_dir, vectors_dir = sys.argv[1:4]
    encoder = Encoder(os.path.join(data_dir, "encoder.json"), os.path.join(data_dir, "vocab.bpe"))
    with open(os.path.join(vectors_dir, "reference_ids.jsonl"), encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            check(encoder.encode(record["text"]) == record["ids"],
                  "the Python reference encoder disagrees with reference_ids.jsonl on %r"
                  % record["text"])

    tmp = tempfile.mkdtemp(prefix="megatron-preprocess-")
    # Documents covering what preprocess must handle: unicode, emoji, whitespace runs, an empty
    # text (an empty document: no EOD), a pre-split list of sentences (one sequence each).
    small = [
        {"text": "Hello world, this is a test."},
        {"text": "Ünïcödé façade — naïve café 🤖👍🏽 and   spaces\n\n\ttabs."},
        {"text": ""},
        {"text": ["First sentence.", " Second one.", ""]},
        {"text": "I'm sure you're right; they'll say it's what we've done."},
    ]
    small_path = os.path.join(tmp, "small.jsonl")
    with open(small_path, "w", encoding="utf-8") as f:
        for record in small:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    run = preprocess(app, data_dir, small_path, os.path.join(tmp, "small"), 2)
    check(run.returncode == 0, "preprocess small.jsonl: exit %d\n%s" % (run.returncode, run.stderr))
    code, docs = read_dataset(os.path.join(tmp, "small_text_document"))
    check(code == 8, "GPT-2 ids are stored as uint16 (code 8), found code %d" % code)
    check(len(docs) == len(small), "expected %d documents, found %d" % (len(small), len(docs)))
    for record, doc in zip(small, docs):
        sentences = record["text"] if isinstance(record["text"], list) else [record["text"]]
        expected = [encoder.encode(s) for s in sentences]
        expected = [ids for ids in expected if ids]
        if expected:
            expected[-1] = expected[-1] + [EOD]
        check(doc == expected, "document %r: sequences %r, expected %r" % (record, doc, expected))
        flat = [t for sequence in doc for t in sequence]
        if flat:
            check(encoder.decode(flat[:-1]) == "".join(sentences),
                  "document %r does not decode back to its text" % record)

    # The bundled corpus: ids equal the reference encoder's, and 1 and 2 workers write the same
    # bytes.
    corpus = os.path.join(data_dir, "austen_chapters.jsonl")
    for workers in (1, 2):
        run = preprocess(app, data_dir, corpus, os.path.join(tmp, "austen%d" % workers), workers)
        check(run.returncode == 0, "preprocess austen, %d workers: exit %d\n%s"
              % (workers, run.returncode, run.stderr))
        check("269 documents" in run.stdout, "summary lacks '269 documents': %s" % run.stdout)
    for suffix in (".bin", ".idx"):
        with open(os.path.join(tmp, "austen1_text_document" + suffix), "rb") as a, \
                open(os.path.join(tmp, "austen2_text_document" + suffix), "rb") as b:
            check(a.read() == b.read(), "1 and 2 workers wrote different %s files" % suffix)
    _, docs = read_dataset(os.path.join(tmp, "austen2_text_document"))
    with open(corpus, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    check(len(docs) == len(texts), "austen: %d documents, expected %d" % (len(docs), len(texts)))
    for number, (text, doc) in enumerate(zip(texts, docs), 1):
        if doc != [encoder.encode(text) + [EOD]]:
            check(False, "austen document %d differs from the reference encoder" % number)
            break

    # A refused run leaves neither the dataset nor temporary files.
    bad_path = os.path.join(tmp, "bad.jsonl")
    with open(bad_path, "w") as f:
        f.write('{"text": "fine"}\n{"text": 1}\n')
    before = set(os.listdir(tmp))
    run = preprocess(app, data_dir, bad_path, os.path.join(tmp, "refused"), 1, "--on-bad-line",
                     "error")
    check(run.returncode == 2, "refused run: exit %d, expected 2" % run.returncode)
    check("bad.jsonl:2: \"text\" is a number" in run.stderr, "refused run: %s" % run.stderr)
    check(set(os.listdir(tmp)) == before,
          "refused run left files: %s" % sorted(set(os.listdir(tmp)) - before))

    subprocess.run(["rm", "-rf", tmp])
    if failures:
        print("%d check(s) failed" % len(failures), file=sys.stderr)
        return 1
    print("preprocess end-to-end: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
