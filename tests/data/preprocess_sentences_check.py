#!/usr/bin/env python3
"""End-to-end check of `megatron-app preprocess` at sentence level (--split-sentences,
--keep-newlines, lists of sentences) against an independent reference: Megatron's
Encoder.encode rules written out below, token ids from the Python GPT-2 encoder, and the files
written by megatron_numpy_writer.Builder (Megatron's IndexedDatasetBuilder with numpy), compared
byte for byte. Sentences of split texts are written by hand here, not taken from our splitter.

Usage: preprocess_sentences_check.py MEGATRON_APP DATA_DIR TOKENIZER_TEST_DATA_DIR
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_reference_encoder import Encoder  # noqa: E402
from megatron_numpy_writer import Builder, read_index  # noqa: E402
from preprocess_check import read_dataset  # noqa: E402

EOD = 50256
failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message, file=sys.stderr)


def megatron_encode(sentences, encoder, append_eod):
    """tools/preprocess_data.py's Encoder.encode for one key: every sentence tokenized, empty
    results dropped, EOD appended to the last sentence of a non-empty document."""
    doc_ids, sentence_lens = [], []
    for sentence in sentences:
        ids = encoder.encode(sentence)
        if ids:
            doc_ids.extend(ids)
            sentence_lens.append(len(ids))
    if doc_ids and append_eod:
        doc_ids.append(EOD)
        sentence_lens[-1] += 1
    return doc_ids, sentence_lens


def write_reference(prefix, documents, encoder, append_eod):
    """process_json_file for one key: one add_document per input line, then finalize."""
    builder = Builder(prefix + ".bin", numpy.uint16)
    for sentences in documents:
        builder.add_document(*megatron_encode(sentences, encoder, append_eod))
    builder.finalize(prefix + ".idx")


def same_bytes(ours, reference):
    for suffix in (".bin", ".idx"):
        with open(ours + suffix, "rb") as a, open(reference + suffix, "rb") as b:
            if a.read() != b.read():
                return "%s%s differs from the reference %s%s" % (ours, suffix, reference, suffix)
    return None


class App:
    def __init__(self, app, data_dir, tmp):
        self.app, self.data_dir, self.tmp = app, data_dir, tmp

    def run(self, records, name, keys, *flags):
        path = os.path.join(self.tmp, name + ".jsonl")
        with open(path, "w", encoding="utf-8") as f:
            for record in records:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
        command = [self.app, "preprocess", "--input", path,
                   "--output-prefix", os.path.join(self.tmp, name), "--json-keys", *keys,
                   "--tokenizer-type", "GPT2BPETokenizer",
                   "--vocab-file", os.path.join(self.data_dir, "encoder.json"),
                   "--merge-file", os.path.join(self.data_dir, "vocab.bpe"),
                   "--workers", "2", *flags]
        run = subprocess.run(command, capture_output=True, text=True)
        check(run.returncode == 0, "%s: exit %d\n%s" % (name, run.returncode, run.stderr))
        return run


def check_lists_byte_identical(app, encoder, austen_texts):
    """Lists of sentences, with and without --split-sentences and --append-eod, two keys: the same
    bytes as Megatron's builder, under _document or _sentence names."""
    records = [
        {"text": ["First sentence.", " Second one.", ""], "title": ["A title"]},
        {"text": [], "title": ["Only a title."]},
        {"text": ["", ""], "title": []},
        {"text": ["Ünïcödé façade — naïve café 🤖.", "  ", "\n"], "title": ["x"], "other": 5},
        {"text": ["One.", "Two.", "Three.", ""], "title": ["T", "U"]},
    ]
    # Several longer documents: the paragraphs of the first Austen chapters.
    for text in austen_texts[:3]:
        records.append({"text": text.split("\n\n"), "title": [text.split("\n")[0]]})
    keys = ["text", "title"]
    for flags in ([], ["--append-eod"], ["--split-sentences"],
                  ["--split-sentences", "--append-eod"]):
        level = "sentence" if "--split-sentences" in flags else "document"
        name = "lists_%s_%s" % (level, "eod" if "--append-eod" in flags else "noeod")
        app.run(records, name, keys, *flags)
        for key in keys:
            ours = os.path.join(app.tmp, "%s_%s_%s" % (name, key, level))
            other = "document" if level == "sentence" else "sentence"
            check(not os.path.exists(os.path.join(app.tmp, "%s_%s_%s.idx" % (name, key, other))),
                  "%s: %s files written for %s" % (name, other, key))
            reference = os.path.join(app.tmp, "reference_" + name + "_" + key)
            write_reference(reference, [r[key] for r in records], encoder,
                            "--append-eod" in flags)
            problem = same_bytes(ours, reference)
            check(problem is None, "%s %s: %s" % (name, key, problem))


def check_split_sentences(app, encoder):
    """--split-sentences and --keep-newlines on texts whose sentences are written here by hand;
    the index is checked field by field (hand-counted documents) and byte for byte."""
    records = [
        {"text": "  Hello there.  How are you?\n\nFine!  "},
        {"text": "Mr. and Mrs. Dashwood came.  They stayed\nat Norland. \"Stop.\" he said."},
        {"text": ""},
        {"text": "   \n "},
        {"text": "One sentence without an end"},
        {"text": ["Already split. Not split again.", "", "Second."]},
    ]
    expected = {
        False: [["  Hello there.", "How are you?", "Fine!"],
                ["Mr. and Mrs. Dashwood came.", "They stayed\nat Norland.",
                 "\"Stop.\" he said."],
                [], [], ["One sentence without an end"],
                ["Already split. Not split again.", "", "Second."]],
        True: [["  Hello there.  ", "How are you?\n\n", "Fine!"],
               ["Mr. and Mrs. Dashwood came.  ", "They stayed\nat Norland. ",
                "\"Stop.\" he said."],
               [], [], ["One sentence without an end"],
               ["Already split. Not split again.", "", "Second."]],
    }
    # Sequences per document, counted by hand (the empty sentence of the list is dropped).
    expected_document_index = [0, 3, 6, 6, 6, 7, 9]
    for keep_newlines in (False, True):
        name = "split_keep" if keep_newlines else "split"
        flags = ["--split-sentences", "--append-eod"] + (["--keep-newlines"] if keep_newlines else [])
        run = app.run(records, name, ["text"], *flags)
        check("6 documents, 9 sentences," in run.stdout, "%s: summary %r" % (name, run.stdout))
        ours = os.path.join(app.tmp, name + "_text_sentence")
        dtype, lengths, _, documents = read_index(ours + ".idx")
        check(dtype == numpy.uint16, "%s: dtype %s" % (name, dtype))
        check(documents.tolist() == expected_document_index,
              "%s: document index %s, expected %s" % (name, documents.tolist(),
                                                      expected_document_index))
        sentences = [s for doc in expected[keep_newlines] for s in doc if s]
        expected_lengths = [len(encoder.encode(s)) for s in sentences]
        for start, end in zip(expected_document_index, expected_document_index[1:]):
            if end > start:
                expected_lengths[end - 1] += 1  # EOD on a non-empty document's last sentence
        check(lengths.tolist() == expected_lengths,
              "%s: sequence lengths %s, expected %s" % (name, lengths.tolist(), expected_lengths))
        _, docs = read_dataset(ours)
        for doc, doc_sentences in zip(docs, expected[keep_newlines]):
            ids = [encoder.encode(s) for s in doc_sentences]
            ids = [i for i in ids if i]
            if ids:
                ids[-1] = ids[-1] + [EOD]
            check(doc == ids, "%s: sequences %r, expected the ids of %r"
                  % (name, [encoder.decode(s) for s in doc], doc_sentences))
        reference = os.path.join(app.tmp, "reference_" + name)
        write_reference(reference, expected[keep_newlines], encoder, True)
        problem = same_bytes(ours, reference)
        check(problem is None, "%s: %s" % (name, problem))


def check_megatron_slices(app, encoder):
    """Megatron hands punkt 1,000,000 characters (code points, not bytes) at a time, so a
    sentence across that point is cut there: the first slice ends with "xy"."""
    text = "é " * 499_999 + "xyz. Next."
    expected = ["é " * 499_999 + "xy", "z.", "Next."]
    app.run([{"text": text}], "slices", ["text"], "--split-sentences")
    _, docs = read_dataset(os.path.join(app.tmp, "slices_text_sentence"))
    check(docs == [[encoder.encode(s) for s in expected]],
          "slices: %d sequences; expected the ids of %r" % (len(docs[0]) if docs else 0,
                                                           [s[-5:] for s in expected]))


def check_austen_loses_no_text(app, encoder, austen_texts):
    """The bundled corpus: with --keep-newlines the sentences put together give back each text
    (minus trailing whitespace), without it the same text save for whitespace."""
    for keep_newlines in (False, True):
        name = "austen_keep" if keep_newlines else "austen"
        run = app.run([{"text": t} for t in austen_texts], name, ["text"], "--split-sentences",
                      *(["--keep-newlines"] if keep_newlines else []))
        print(name + ":", run.stdout.splitlines()[0] if run.stdout else run.stderr)
        _, docs = read_dataset(os.path.join(app.tmp, name + "_text_sentence"))
        check(len(docs) == len(austen_texts), "%s: %d documents" % (name, len(docs)))
        for number, (text, doc) in enumerate(zip(austen_texts, docs), 1):
            sentences = [encoder.decode(s) for s in doc]
            if keep_newlines:
                ok = "".join(sentences) == text.rstrip()
            else:
                ok = "".join("".join(sentences).split()) == "".join(text.split())
                ok = ok and all(s == s.strip() for s in sentences[1:])
                ok = ok and (not sentences or sentences[0] == sentences[0].rstrip())
            if not ok:
                check(False, "%s: document %d does not give back its text" % (name, number))
                break


def main():
    app_path, data_dir, vectors_dir = sys.argv[1:4]
    encoder = Encoder(os.path.join(data_dir, "encoder.json"), os.path.join(data_dir, "vocab.bpe"))
    with open(os.path.join(vectors_dir, "reference_ids.jsonl"), encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            check(encoder.encode(record["text"]) == record["ids"],
                  "the Python reference encoder disagrees with reference_ids.jsonl")
    with open(os.path.join(data_dir, "austen_chapters.jsonl"), encoding="utf-8") as f:
        austen_texts = [json.loads(line)["text"] for line in f]

    tmp = tempfile.mkdtemp(prefix="megatron-preprocess-sentences-")
    app = App(app_path, data_dir, tmp)
    check_lists_byte_identical(app, encoder, austen_texts)
    check_split_sentences(app, encoder)
    check_megatron_slices(app, encoder)
    check_austen_loses_no_text(app, encoder, austen_texts)
    shutil.rmtree(tmp)
    if failures:
        print("%d check(s) failed" % len(failures), file=sys.stderr)
        return 1
    print("preprocess sentences: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
