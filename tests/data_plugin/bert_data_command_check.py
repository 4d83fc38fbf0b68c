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

import collections
import json
import sys

import masked_data_check as common

SPLITS = common.SPLITS
FIELDS = ["text", "types", "labels", "loss_mask", "padding_mask", "is_random", "truncated"]
CLASS = "BERTMaskedWordPieceDataset"


# ---------------------------------------------------------------------------------------------
# Megatron's side: the description (data, tokenizer, schedule: masked_data_check.py)
# ---------------------------------------------------------------------------------------------


def description(reference, dataset_path, num_samples, index, data, seed, vocab_file):
    """MegatronDataset.unique_description of a BERTMaskedWordPieceDataset from pretrain_bert.py:
    MaskedWordPieceDataset and BERT key attributes; the tokenizer as MegatronTokenizer's
    unique_identifiers (class, tokenizer_path, then each option as str(value))."""
    ids = common.masked_dataset_identity(
        reference, CLASS, dataset_path, num_samples, index, seed, data["seq_length"],
        data["split"], vocab_file,
        data.get("tokenizer_type", "BertWordPieceLowerCase") == "BertWordPieceLowerCase",
        data.get("vocab_extra_ids", 0))
    ids["masking_probability"] = data.get("mask_prob", 0.15)
    ids["short_sequence_probability"] = data.get("short_seq_prob", 0.1)
    ids["masking_max_ngram"] = 3
    ids["masking_do_full_word"] = True
    ids["masking_do_permutation"] = False
    ids["masking_use_longer_ngrams"] = False
    ids["masking_use_geometric_distribution"] = False
    ids["classification_head"] = data.get("bert_binary_head", True)
    return json.dumps(ids, indent=4)


def main():
    run = common.start("--train-samples", 200)
    args, bert, reference = run.args, run.bert, run.reference
    data, training, prefix, vocab_file = run.data, run.training, run.prefix, run.vocab_file
    seed, cache_dir = run.seed, run.cache_dir
    head = data.get("bert_binary_head", True)
    S = data["seq_length"]

    lengths, documents, sentences = common.read_sentences(prefix)
    vocab = common.bert_vocabulary(vocab_file, data.get("vocab_extra_ids", 0))
    check = common.Checker()
    check.expect("vocabulary size", len(vocab["token_lookup"]), 30524)
    wanted = common.num_samples_per_split(training)
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
        sizes, ranges, stdout = common.run_data(args.app, config=args.config, cache_dir=cache_dir,
                                         split=name, first=first)
        where = "%s: " % name
        check.expect("sizes built/asked", sizes.get(name), (len(mapping), wanted[index]), where)
        if name in ranges:  # logged when the caches are built or loaded
            check.expect("documents", ranges[name], (len(mapping), begin, end), where)
        else:
            check.failures.append(where + "no 'samples from documents' line in the output")

        text = description(reference, prefix, wanted[index], index, data, seed, vocab_file)
        common.check_cache_files(check, cache_dir, CLASS, name, text, mapping)

        # Every field of every printed sample.
        samples = common.parse_samples(stdout, lambda field: S, ("text", "types"),
                                       ("loss_mask", "padding_mask"), ("is_random", "truncated"))
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

    return common.report(check, seen,
                         ("swapped", "truncated", "padded", "[MASK]", "kept", "random"), "bert")


if __name__ == "__main__":
    sys.exit(main())
