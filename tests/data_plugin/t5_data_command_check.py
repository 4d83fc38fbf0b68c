#!/usr/bin/env python3
"""Checks the `t5` dataset plugin end to end through `megatron-app data` against Megatron-LM
core_v0.13.1's rules for every split (train, valid, test).

Megatron (pretrain_t5.py -> BlendedMegatronDatasetBuilder -> T5MaskedWordPieceDataset) splits the
sentence-level IndexedDataset by documents as for BERT; each split's sentence mapping is
helpers.build_mapping with max_seq_length = encoder length - 2 ("a single <bos> and single <eos>")
and min_sentences_per_sample 1. T5MaskedWordPieceDataset.__getitem__(idx), re-implemented below
from t5_dataset.py: RandomState((seed + idx) % 2**32); the row's sentences joined and cut to
the target length (truncated = it was longer); _create_masked_lm_predictions with pretrain_t5.py's
switches (whole words, geometric(0.2) n-gram sizes capped at 10, no permutation; _get_token_mask
always [MASK]); then, span by span, a sentinel popped from additional_special_tokens_ids:
encoder = the tokens between spans, each span replaced by its sentinel; decoder input = [BOS]
then sentinel + span per span; labels = sentinel + span per span then [EOS]; encoder and decoder
input padded with [PAD], labels with -1; enc_mask/dec_mask 1 over the tokens; loss_mask 1 over
the decoder tokens. The mapping and the masking come from tests/data/bert_samples_reference.py
(independent Python versions of build_mapping and _create_masked_lm_predictions); the data,
vocabulary, schedule, output parsing, cache checks and report from masked_data_check.py (shared
with bert_data_command_check.py).

Compared: the split sizes, each split's document range, every row of each split's cached
sample_index.npy, every field of the first --samples samples of each split, the cache files
<md5>-T5MaskedWordPieceDataset-{description.txt,sample_index.npy} with Megatron's description
(json.dumps(unique_identifiers, indent=4): MaskedWordPieceDataset's fields, then
sequence_length_decoder), and that `--text` decodes the sentinels.

usage: t5_data_command_check.py --app APP --config TOML --reference-dir tests/data
                                --workdir DIR [--samples N] [--reference-seed SEED]
(--reference-seed gives the reference another seed than the config's: the check must then fail.)
"""

import collections
import json
import os
import subprocess
import sys

import numpy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import masked_data_check as common  # noqa: E402

SPLITS = common.SPLITS
CLASS = "T5MaskedWordPieceDataset"
TOKEN_FIELDS = ("text_enc", "text_dec")
ENCODER_FIELDS = ("text_enc", "enc_mask")
MASK_FIELDS = ("loss_mask", "enc_mask", "dec_mask")
FIELDS = ["text_enc", "text_dec", "labels", "loss_mask", "truncated", "enc_mask", "dec_mask"]


def t5_masking(mask_prob):
    """pretrain_t5.py's T5MaskedWordPieceDatasetConfig masking fields, in Megatron's order."""
    return collections.OrderedDict([
        ("masking_probability", mask_prob), ("masking_max_ngram", 10),
        ("masking_do_full_word", True), ("masking_do_permutation", False),
        ("masking_use_longer_ngrams", False), ("masking_use_geometric_distribution", True)])


def t5_sample(bert, sentences, target, idx, case, vocab):
    """T5MaskedWordPieceDataset.__getitem__ for one mapping row."""
    rs = numpy.random.RandomState((case["seed"] + idx) % 2**32)
    assert target <= case["encoder_length"]
    tokens = [t for s in sentences for t in s]
    truncated = len(tokens) > target
    tokens = tokens[:target]
    masked = bert.masked_lm(tokens, target, case["masking"], vocab, "always", rs, None)
    sentinels = collections.deque(case["sentinels"])
    encoder, decoder, labels = [], [case["bos"]], []
    begin = 0
    for positions, span in masked["spans"]:
        sentinel = sentinels.popleft()
        encoder += masked["tokens"][begin:positions[0]] + [sentinel]
        decoder += [sentinel] + span
        labels += [sentinel] + span
        begin = positions[-1] + 1
    encoder += masked["tokens"][begin:]
    labels.append(case["eos"])
    enc_pads = case["encoder_length"] - len(encoder)
    dec_pads = case["decoder_length"] - len(decoder)
    assert enc_pads >= 0 and dec_pads >= 0, "Megatron's asserts on the padding"
    return {"text_enc": encoder + [vocab.pad] * enc_pads,
            "text_dec": decoder + [vocab.pad] * dec_pads,
            "labels": labels + [-1] * dec_pads,
            "loss_mask": [1] * len(decoder) + [0] * dec_pads,
            "truncated": int(truncated),
            "enc_mask": [1] * len(encoder) + [0] * enc_pads,
            "dec_mask": [1] * len(decoder) + [0] * dec_pads,
            "spans": [len(span) for _, span in masked["spans"]]}


def description(reference, dataset_path, num_samples, index, data, seed, vocab_file):
    """MegatronDataset.unique_description of a T5MaskedWordPieceDataset from pretrain_t5.py."""
    ids = common.masked_dataset_identity(
        reference, CLASS, dataset_path, num_samples, index, seed,
        data.get("encoder_seq_length", data.get("seq_length")), data["split"], vocab_file,
        data.get("tokenizer_type", "BertWordPieceCase") == "BertWordPieceLowerCase",
        data["vocab_extra_ids"])
    masking = t5_masking(data.get("mask_prob", 0.15))
    ids["masking_probability"] = masking.pop("masking_probability")
    ids["short_sequence_probability"] = data.get("short_seq_prob", 0.1)
    ids.update(masking)
    ids["sequence_length_decoder"] = data["decoder_seq_length"]
    return json.dumps(ids, indent=4)


def check_text_output(app, config, cache_dir, check):
    """`data --text` decodes the token fields: the encoder shows the sentinels, the decoder
    input starts with [BOS], the labels show decoded targets."""
    command = [app, "data", "--config", config, "--first", "3", "--text",
               "--set", "data.data_cache_path=%s" % json.dumps(cache_dir)]
    result = subprocess.run(command, capture_output=True, text=True)
    check.expect("data --text exit code", result.returncode, 0, result.stderr[-2000:])
    for needle in ("text_enc (text):", "<extra_id_0>", "text_dec (text):\n[BOS] ", "labels: "):
        check.expect("data --text shows %r" % needle, needle in result.stdout, True)


def main():
    run = common.start("--samples", 300)
    args, bert, reference = run.args, run.bert, run.reference
    data, training, prefix, vocab_file = run.data, run.training, run.prefix, run.vocab_file
    seed, cache_dir = run.seed, run.cache_dir
    encoder_length = data.get("encoder_seq_length", data.get("seq_length"))
    decoder_length = data["decoder_seq_length"]

    lengths, documents, sentences = common.read_sentences(prefix)
    extra_ids = data["vocab_extra_ids"]
    vocab = common.bert_vocabulary(vocab_file, extra_ids)
    strings = vocab["vocab"]
    check = common.Checker()
    check.expect("vocabulary size", len(vocab["token_lookup"]), 30522 + 2 + extra_ids)
    case = {**vocab, "seed": seed, "encoder_length": encoder_length,
            "decoder_length": decoder_length, "masking": t5_masking(data.get("mask_prob", 0.15)),
            "bos": strings.index("[BOS]"), "eos": strings.index("[EOS]"),
            "sentinels": [strings.index("<extra_id_%d>" % i) for i in range(extra_ids)]}
    view = bert.Vocab(case)
    wanted = common.num_samples_per_split(training)
    matrix = reference.split_vector_to_matrix(reference.parse_and_normalize_split(data["split"]))
    num_documents = len(documents) - 1
    seen = collections.Counter()

    for index, name in enumerate(SPLITS):
        assert matrix[index] is not None, "this check expects three non-empty splits"
        begin, end = reference.split_range(matrix[index], num_documents)
        mapping = bert.build_mapping(documents[begin:end + 1], lengths, wanted[index],
                                     encoder_length - 2, data.get("short_seq_prob", 0.1), seed, 1)
        first = min(args.samples, len(mapping))
        sizes, ranges, stdout = common.run_data(args.app, config=args.config, cache_dir=cache_dir,
                                                split=name, first=first)
        where = "%s: " % name
        check.expect("header", ("seq_length %d;" % encoder_length) in stdout, True, where)
        check.expect("sizes built/asked", sizes.get(name), (len(mapping), wanted[index]), where)
        if name in ranges:
            check.expect("documents", ranges[name], (len(mapping), begin, end), where)
        else:
            check.failures.append(where + "no 'samples from documents' line in the output")

        text = description(reference, prefix, wanted[index], index, data, seed, vocab_file)
        common.check_cache_files(check, cache_dir, CLASS, name, text, mapping)

        # Every field of every printed sample.
        samples = common.parse_samples(
            stdout, lambda field: encoder_length if field in ENCODER_FIELDS else decoder_length,
            TOKEN_FIELDS, MASK_FIELDS, ("truncated",))
        check.expect("samples printed", len(samples), first, where)
        for idx, got in enumerate(samples):
            b, e, target = (int(x) for x in mapping[idx])
            expected = t5_sample(bert, [list(s) for s in sentences[b:e]], target, idx, case, view)
            for field in FIELDS:
                check.expect(field, got.get(field), expected[field], "%s sample %d: " % (name, idx))
            check.checked["samples"] += 1
            seen["truncated"] += expected["truncated"]
            seen["padded encoder"] += expected["enc_mask"][-1] == 0
            seen["several spans"] += len(expected["spans"]) > 1
            seen["multi-token span"] += any(n > 1 for n in expected["spans"])
            seen["short target"] += target < encoder_length - 2
        # The masks are printed as set positions: lossless as long as [PAD] is 0.
        assert vocab["pad"] == 0

    check_text_output(args.app, args.config, cache_dir, check)
    return common.report(check, seen, ("truncated", "padded encoder", "several spans",
                                       "multi-token span", "short target"), "t5")


if __name__ == "__main__":
    sys.exit(main())
