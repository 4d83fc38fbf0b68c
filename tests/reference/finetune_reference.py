#!/usr/bin/python3
"""Independent PyTorch computation of Megatron-LM's RACE / MNLI / QQP evaluation accuracy on a
megatron-app HDF5 checkpoint (a BERT with a classification or multiple-choice head).

usage: finetune_reference.py --checkpoint FILE.h5 --task RACE|MNLI|QQP
           --valid-data PATH [PATH ...] --seq-length N --vocab-file bert-vocab.txt
           [--compare RESULTS.json]

Prints one JSON object on stdout:
  {"task", "sets": [{"name", "correct", "total", "accuracy"}, ...], "correct", "total", "accuracy"}
one set per --valid-data path, in the given order; accuracy = correct / total (a fraction; Megatron
prints the same ratio times 100). With --compare RESULTS.json (megatron-app's results file,
{"task", "epochs": [{"epoch", "sets": [...], "correct", "total", "accuracy"}, ...], ...}) the LAST
element of "epochs" must have the same set names in the same order and, per set and overall, the
same total exactly and the same correct up to the tolerance below. Exit status 1 on any
difference, 2 on input Megatron would refuse (its assertion or indexing failures), 0 otherwise.

Tolerance: none on counts, except for near-ties. Both sides run the forward in float32 with
different summation orders, so logits agree to ~1e-6 and an argmax can only flip where the top
two logits are closer than that. For every set the number of predictions whose top-2 margin is
below NEAR_TIE (1e-4) is printed on stderr, and that many differences in `correct` are allowed
(and said so); with no near-tie the counts must match exactly.

Written from Megatron-LM core_v0.13.0's tasks/ and legacy models, not from the C++ code:
- tasks/data_utils.py: clean_text; build_tokens_types_paddings_from_ids ([CLS] a [SEP] b [SEP],
  cut to seq_length - 1 and a closing [SEP] when too long, types padded with the PAD id).
- tasks/race/data.py (RaceDataset): every *.txt file of a directory (glob order is arbitrary in
  Python; sorted here, as the app does), one JSON object per line; the article cleaned and
  tokenized once; per question 4 sequences, qa = question with every "_" replaced by the option,
  else question + " " + option; cleaned, tokenized, cut to 128 tokens; label = ord(answer) - 65.
  Set name: datapath.split('RACE')[-1].strip('/').replace('/', '-').
- tasks/glue/mnli.py, qqp.py, finetune.py: header row decides test files (MNLI 10 columns ->
  label contradiction; QQP 3 columns -> label 0); MNLI text columns 8, 9 and label row[-1];
  QQP train/dev rows without 6 columns or with an empty question are skipped. Set name:
  datapath.split(task)[-1].strip('.tsv').strip('/').replace('_', '-') (strip() removes
  characters, so ".../QQP/dev.tsv" is named "de" and ".../QQP/test.tsv" "te"). Files are read
  as UTF-8 text (Megatron: the locale's encoding) with Python's universal newlines.
- tasks/eval_utils.py: correct = sum(argmax(logits) == label) (torch.argmax, first max).
- megatron/legacy/model/classification.py, multiple_choice.py, language_model.py (Pooler):
  encoder output at token 0 -> dense -> tanh -> (dropout, off in evaluation) -> head linear;
  RACE: the 4 choice scores of a question are its 4 logits.
- megatron/training/tokenizer/bert_tokenization.py: FullTokenizer(do_lower_case=True), ported
  below (BertWordPieceLowerCase); words over 200 characters become [UNK] as there.
The encoder (Megatron-core names and semantics, padded keys masked with -10000) is
bert_reference.py's encoder (encode) and linear.
"""
import argparse
import collections
import glob
import json
import os
import re
import sys
import tomllib
import unicodedata

import h5py
from checkpoint_attrs import config_text
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bert_reference import encode, linear  # noqa: E402
from gpt_reference import load_tensors  # noqa: E402

# bert_reference sets 2 threads on import; the machine is shared, one is enough.
torch.set_num_threads(1)

NEAR_TIE = 1e-4      # top-2 logit margin under which fp32 summation order may flip an argmax
LOGITS_TOL = 1e-6    # fp32 on both sides, different summation orders (seen: 6e-8)
SOFTMAX_ATOL = 1e-6  # fp32 logits agree to ~1e-7 (summation order); samples differ by 1e-4 or more
BATCH = 32           # sequences per forward; batching does not change per-row results
NUM_CHOICES = 4      # tasks/race/data.py
MAX_QA_LENGTH = 128  # tasks/race/data.py
MNLI_LABELS = {"contradiction": 0, "entailment": 1, "neutral": 2}
QQP_LABELS = [0, 1]
NUM_CLASSES = {"MNLI": 3, "QQP": 2}


def fail(message):
    """Exit 2: input this script (or Megatron) cannot evaluate; 1 is kept for compare failures."""
    print(f"finetune_reference: {message}", file=sys.stderr)
    sys.exit(2)


class DataError(Exception):
    """Input on which Megatron's dataset code fails (an assert or an IndexError)."""


# --- bert_tokenization.py (FullTokenizer, do_lower_case=True) --------------------------------

def load_vocab(vocab_file):
    # Each line stripped; a later duplicate overrides the id of an earlier one (dict assignment).
    vocab = collections.OrderedDict()
    with open(vocab_file, "r", encoding="utf-8") as reader:
        for index, line in enumerate(reader):
            vocab[line.strip()] = index
    return vocab


def whitespace_tokenize(text):
    text = text.strip()
    return text.split() if text else []


def _is_whitespace(char):
    if char in (" ", "\t", "\n", "\r"):
        return True
    return unicodedata.category(char) == "Zs"


def _is_control(char):
    if char in ("\t", "\n", "\r"):
        return False
    return unicodedata.category(char) in ("Cc", "Cf")


def _is_punctuation(char):
    cp = ord(char)
    # All non-letter/number ASCII counts as punctuation ("^", "$", "`" included).
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _is_chinese_char(cp):
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


def basic_tokenize(text):
    """BasicTokenizer(do_lower_case=True).tokenize."""
    # _clean_text: drop NUL, U+FFFD and control characters; any whitespace becomes a space.
    text = "".join(" " if _is_whitespace(c) else c for c in text
                   if not (ord(c) == 0 or ord(c) == 0xFFFD or _is_control(c)))
    # _tokenize_chinese_chars: spaces around every CJK ideograph.
    text = "".join(f" {c} " if _is_chinese_char(ord(c)) else c for c in text)
    split_tokens = []
    for token in whitespace_tokenize(text):
        token = token.lower()
        # _run_strip_accents: NFD, then drop combining marks (Mn).
        token = "".join(c for c in unicodedata.normalize("NFD", token)
                        if unicodedata.category(c) != "Mn")
        # _run_split_on_punc: every punctuation character is a token of its own.
        pieces, start_new = [], True
        for c in token:
            if _is_punctuation(c):
                pieces.append(c)
                start_new = True
            else:
                if start_new:
                    pieces.append("")
                start_new = False
                pieces[-1] += c
        split_tokens.extend(pieces)
    return whitespace_tokenize(" ".join(split_tokens))


def wordpiece_tokenize(word, vocab, max_chars=200):
    """WordpieceTokenizer.tokenize for one word: greedy longest match, "##" continuations; the
    whole word is [UNK] if any remainder has no match or it is over max_chars (Megatron: 200)."""
    if len(word) > max_chars:
        return ["[UNK]"]
    pieces, start = [], 0
    while start < len(word):
        end = len(word)
        while start < end:
            sub = ("##" if start > 0 else "") + word[start:end]
            if sub in vocab:
                break
            end -= 1
        else:
            return ["[UNK]"]
        pieces.append(sub)
        start = end
    return pieces


class BertWordPieceLowerCase:
    """_BertWordPieceTokenizer(lower_case=True): tokenize() returns ids. The [BOS]/[EOS] it appends
    to the vocabulary are never produced by tokenize(), so they are left out here."""

    def __init__(self, vocab_file):
        self.vocab = load_vocab(vocab_file)
        self.cls, self.sep, self.pad = (self.vocab[t] for t in ("[CLS]", "[SEP]", "[PAD]"))

    def tokenize(self, text):
        return [self.vocab[p] for w in basic_tokenize(text)
                for p in wordpiece_tokenize(w, self.vocab)]


# --- tasks/data_utils.py ----------------------------------------------------------------------

def clean_text(text):
    text = text.replace("\n", " ")
    text = re.sub(r'\s+', ' ', text)      # Python's Unicode \s (NBSP, U+2028, \x1c-\x1f, ...)
    for _ in range(3):
        text = text.replace(' . ', '. ')
    return text


def build_tokens_types_paddings_from_ids(a_ids, b_ids, max_seq_length, cls_id, sep_id, pad_id):
    # [CLS] A [SEP], type 0.
    ids = [cls_id] + a_ids + [sep_id]
    types, paddings = [0] * len(ids), [1] * len(ids)
    if b_ids is not None:
        ids += b_ids
        types += [1] * len(b_ids)
        paddings += [1] * len(b_ids)
    trimmed = False
    if len(ids) >= max_seq_length:
        # Cut to seq_length - 1 (">=": a sequence of exactly seq_length is cut too) ...
        ids, types, paddings = (x[:max_seq_length - 1] for x in (ids, types, paddings))
        trimmed = True
    if b_ids is not None or trimmed:
        # ... and close with [SEP], typed 1 when there is a second segment.
        ids.append(sep_id)
        types.append(0 if b_ids is None else 1)
        paddings.append(1)
    pad = max_seq_length - len(ids)
    if pad > 0:
        ids += [pad_id] * pad
        types += [pad_id] * pad          # sic: types are padded with the PAD id (0 for BERT)
        paddings += [0] * pad
    return ids, types, paddings


# --- datasets ---------------------------------------------------------------------------------

def race_name(datapath):
    return datapath.split('RACE')[-1].strip('/').replace('/', '-')


def glue_name(datapath, task):
    # str.strip('.tsv') strips any of '.', 't', 's', 'v' from both ends, not the suffix.
    return datapath.split(task)[-1].strip('.tsv').strip('/').replace('_', '-')


def race_samples(datapath, tok, seq_len):
    """RaceDataset's process_single_datapath: [(4 x ids, 4 x types, 4 x paddings, label)]."""
    samples = []
    for filename in sorted(glob.glob(os.path.join(datapath, '*.txt'))):
        with open(filename, 'r', encoding='utf-8') as f:
            for line in f:
                try:
                    data = json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataError(f"{filename}: not JSON ({e})")
                try:
                    questions, choices, answers = (data[k] for k in ("questions", "options",
                                                                     "answers"))
                    article = data["article"]
                except (KeyError, TypeError) as e:
                    raise DataError(f"{filename}: no {e} in the JSON object")
                if not (len(questions) == len(answers) == len(choices)):
                    raise DataError(f"{filename}: questions/answers/options counts differ")
                context_ids = tok.tokenize(clean_text(article))
                for qi, question in enumerate(questions):
                    if not (isinstance(answers[qi], str) and len(answers[qi]) == 1):
                        raise DataError(f"{filename}: answer {answers[qi]!r} is not one letter")
                    label = ord(answers[qi]) - ord("A")
                    if not 0 <= label < NUM_CHOICES or len(choices[qi]) != NUM_CHOICES:
                        raise DataError(f"{filename}: question {qi} has answer {answers[qi]!r} "
                                        f"and {len(choices[qi])} options (Megatron asserts "
                                        f"A-D and {NUM_CHOICES})")
                    seqs = []
                    for choice in choices[qi]:
                        qa = question.replace("_", choice) if "_" in question \
                            else " ".join([question, choice])
                        qa_ids = tok.tokenize(clean_text(qa))[:MAX_QA_LENGTH]
                        seqs.append(build_tokens_types_paddings_from_ids(
                            qa_ids, context_ids, seq_len, tok.cls, tok.sep, tok.pad))
                    samples.append(tuple(zip(*seqs)) + (label,))
    return samples


def mnli_pairs(filename):
    """MNLIDataset.process_samples_from_single_path: [(text_a, text_b, label)]."""
    pairs, first, is_test = [], True, False
    with open(filename, 'r', encoding='utf-8') as f:
        for lineno, line in enumerate(f, 1):
            row = line.strip().split('\t')
            if first:
                first, is_test = False, len(row) == 10
                continue
            try:
                text_a, text_b = clean_text(row[8].strip()), clean_text(row[9].strip())
                uid, label = int(row[0].strip()), row[-1].strip()
            except (IndexError, ValueError) as e:
                raise DataError(f"{filename}:{lineno}: {len(row)} columns ({e})")
            if is_test:
                label = 'contradiction'
            if not (text_a and text_b and label in MNLI_LABELS and uid >= 0):
                raise DataError(f"{filename}:{lineno}: empty text, bad label {label!r} or uid")
            pairs.append((text_a, text_b, MNLI_LABELS[label]))
    return pairs


def qqp_pairs(filename):
    """QQPDataset.process_samples_from_single_path: [(text_a, text_b, label)]."""
    pairs, first, is_test, skipped = [], True, False, 0
    with open(filename, 'r', encoding='utf-8') as f:
        for lineno, line in enumerate(f, 1):
            row = line.strip().split('\t')
            if first:
                first, is_test = False, len(row) == 3
                if not is_test and len(row) != 6:
                    raise DataError(f"{filename}: header has {len(row)} columns, not 3 or 6")
                continue
            try:
                if is_test:
                    if len(row) != 3:
                        raise DataError(f"{filename}:{lineno}: test row with {len(row)} columns")
                    uid, label = int(row[0].strip()), 0
                    text_a, text_b = clean_text(row[1].strip()), clean_text(row[2].strip())
                    if not (text_a and text_b):
                        raise DataError(f"{filename}:{lineno}: empty question in a test row")
                else:
                    if len(row) != 6:
                        skipped += 1                     # '***WARNING*** index error, skipping'
                        continue
                    uid = int(row[0].strip())
                    text_a, text_b = clean_text(row[3].strip()), clean_text(row[4].strip())
                    label = int(row[5].strip())
                    if not (text_a and text_b):
                        skipped += 1                     # 'zero length a/b, skipping'
                        continue
            except ValueError as e:
                raise DataError(f"{filename}:{lineno}: {e}")
            if label not in QQP_LABELS or uid < 0:
                raise DataError(f"{filename}:{lineno}: label {label} or uid {uid}")
            pairs.append((text_a, text_b, label))
    if skipped:
        print(f"finetune_reference: {filename}: skipped {skipped} rows as Megatron does",
              file=sys.stderr)
    return pairs


def glue_samples(filename, task, tok, seq_len):
    """GLUEAbstractDataset.__getitem__: tokenize both texts, then the common builder."""
    pairs = mnli_pairs(filename) if task == "MNLI" else qqp_pairs(filename)
    return [build_tokens_types_paddings_from_ids(tok.tokenize(a), tok.tokenize(b), seq_len,
                                                 tok.cls, tok.sep, tok.pad) + (label,)
            for a, b, label in pairs]


# --- model ------------------------------------------------------------------------------------

class ModelConfig:
    """The [model] table of the checkpoint's resolved TOML (only what the encoder needs)."""

    def __init__(self, toml_text):
        m = tomllib.loads(toml_text)["model"]
        self.layers = m["num_layers"]
        self.h = m["hidden_size"]
        self.np = m["num_attention_heads"]
        self.hn = m.get("kv_channels", self.h // self.np)
        self.eps = m.get("layernorm_epsilon", 1e-5)
        # The same limits as bert_reference.py.
        assert m.get("num_query_groups", self.np) == self.np, "the reference has no GQA"
        assert m.get("position_embedding_type", "learned_absolute") == "learned_absolute"
        assert m.get("normalization", "LayerNorm") == "LayerNorm"
        assert not m.get("swiglu", False)
        assert not m.get("disable_bias_linear", False), "the reference needs linear biases"


def head_scores(W, head, text, types, padding_mask, cfg):
    """Pooler (token 0 -> dense -> tanh), dropout off, then the task head: (b, outputs)."""
    # Megatron's Classification/MultipleChoice use 2 token types; added when the checkpoint has them.
    hidden = encode(W, text, types, padding_mask, cfg,
                    "embedding.tokentype_embeddings.weight" in W)
    pooled = torch.tanh(linear(hidden[:, 0], W, "pooler.dense"))
    return linear(pooled, W, head)


def load_model(path, task, seq_len):
    with h5py.File(path, "r") as f:
        cfg = ModelConfig(config_text(f))
        W = load_tensors(f, "model")
    head = "multichoice_head" if task == "RACE" else "classification_head"
    outputs = 1 if task == "RACE" else NUM_CLASSES[task]
    for name in ("pooler.dense.weight", head + ".weight", head + ".bias"):
        if name not in W:
            fail(f"{path} has no model/{name}")
    if tuple(W[head + ".weight"].shape) != (outputs, cfg.h):
        fail(f"{head}.weight is {tuple(W[head + '.weight'].shape)}, "
             f"expected {(outputs, cfg.h)} for {task}")
    if seq_len > W["embedding.position_embeddings.weight"].shape[0]:
        fail(f"--seq-length {seq_len} exceeds the checkpoint's "
             f"{W['embedding.position_embeddings.weight'].shape[0]} learned positions")
    if "embedding.tokentype_embeddings.weight" not in W:
        print("finetune_reference: no token-type embeddings in the checkpoint; none added",
              file=sys.stderr)
    return W, cfg, head


# --- evaluation (tasks/eval_utils.py) ---------------------------------------------------------

def logits_of(W, head, cfg, samples, task):
    """(n, choices) logits; RACE flattens each question's 4 sequences into the batch and views the
    scalar scores back as (n, 4), like MultipleChoice.forward."""
    if task == "RACE":
        rows = [(ids[c], types[c], pads[c]) for ids, types, pads, _ in samples
                for c in range(NUM_CHOICES)]
    else:
        rows = [(ids, types, pads) for ids, types, pads, _ in samples]
    out = []
    for i in range(0, len(rows), BATCH):
        ids, types, pads = (torch.tensor(x) for x in zip(*rows[i:i + BATCH]))
        out.append(head_scores(W, head, ids, types, pads, cfg))
    scores = torch.cat(out) if out else torch.zeros(0, 1)
    return scores.view(-1, NUM_CHOICES) if task == "RACE" else scores


def evaluate_set(W, head, cfg, samples, task):
    logits = logits_of(W, head, cfg, samples, task)
    labels = torch.tensor([s[-1] for s in samples], dtype=torch.long)
    correct = int((torch.argmax(logits, dim=-1) == labels).sum()) if len(samples) else 0
    top2 = logits.topk(2, dim=-1).values if len(samples) else torch.zeros(0, 2)
    near_ties = int(((top2[:, 0] - top2[:, 1]) < NEAR_TIE).sum())
    # Megatron's output_predictions: the softmax over each sample's classes (or choices).
    softmaxes = logits.double().softmax(-1).tolist()
    return correct, len(samples), near_ties, softmaxes, labels.tolist(), logits.tolist()


def build_set(path, task, tok, seq_len):
    if task == "RACE":
        return race_name(path), race_samples(path, tok, seq_len)
    return glue_name(path, task), glue_samples(path, task, tok, seq_len)


# --- comparison -------------------------------------------------------------------------------

def compare(ours, near_ties, path):
    with open(path, encoding="utf-8") as f:
        theirs = json.load(f)
    good = True

    def report(ok, what, detail):
        nonlocal good
        print(f"{'ok  ' if ok else 'FAIL'} {what}: {detail}")
        good &= ok

    if str(theirs.get("task", "")).upper() != ours["task"]:
        report(False, "task", f"reference {ours['task']} app {theirs.get('task')!r}")
    epochs = theirs.get("epochs") or []
    if not epochs:
        report(False, "epochs", f"no epochs in {path}")
        return good
    last = epochs[-1]
    names = [s["name"] for s in ours["sets"]]
    their_names = [s.get("name") for s in last.get("sets", [])]
    report(names == their_names, f"set names (epoch {last.get('epoch')})",
           f"reference {names} app {their_names}")
    if names != their_names:
        return good
    pairs = list(zip(ours["sets"], last["sets"], near_ties)) + \
        [(ours, last, sum(near_ties))]
    for mine, app, ties in pairs:
        what = mine.get("name", "overall")
        report(app.get("total") == mine["total"], f"{what} total",
               f"reference {mine['total']} app {app.get('total')} (exact)")
        diff = abs((app.get("correct") or 0) - mine["correct"]) \
            if isinstance(app.get("correct"), int) else None
        ok = diff is not None and diff <= ties
        if diff == 0:
            allowance = "equal"
        elif ok:
            allowance = f"differ by {diff}: allowed, {ties} near-ties"
        else:
            allowance = f"differ by {diff}, {ties} near-ties allowed"
        report(ok, f"{what} correct",
               f"reference {mine['correct']} app {app.get('correct')} ({allowance}); "
               f"app accuracy {app.get('accuracy')}, reference {mine['accuracy']:.6f}")
        if "softmaxes" in app:
            # The app writes Megatron's output_predictions when it only evaluates (one rank):
            # every sample's probabilities, compared to SOFTMAX_ATOL (fp32 logits both sides).
            got, want = app["softmaxes"], mine["softmaxes"]
            worst = max((abs(a - b) for ra, rb in zip(got, want) for a, b in zip(ra, rb)),
                        default=0.0)
            shapes = [len(r) for r in got] == [len(r) for r in want]
            report(shapes and worst <= SOFTMAX_ATOL, f"{what} softmaxes",
                   f"{len(got)} samples, largest difference {worst:.2e} (tolerance "
                   f"{SOFTMAX_ATOL})")
            if "logits" in app:
                # The scores behind the probabilities (the app's addition): a fine-tuned tiny
                # model's probabilities can sit near uniform while its scores still differ.
                worst = max((abs(a - b) / max(1.0, abs(b)) for ra, rb in
                             zip(app["logits"], mine["logits"]) for a, b in zip(ra, rb)),
                            default=0.0)
                report(worst <= LOGITS_TOL, f"{what} logits",
                       f"largest difference {worst:.2e} (relative to max(1, |logit|), tolerance "
                       f"{LOGITS_TOL})")
            report(app.get("labels") == mine["labels"], f"{what} labels", "equal"
                   if app.get("labels") == mine["labels"] else "differ")
    return good


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--task", required=True, choices=["RACE", "MNLI", "QQP"])
    p.add_argument("--valid-data", required=True, nargs="+")
    p.add_argument("--seq-length", type=int, required=True)
    p.add_argument("--vocab-file", required=True)
    p.add_argument("--compare")
    args = p.parse_args()

    tok = BertWordPieceLowerCase(args.vocab_file)
    W, cfg, head = load_model(args.checkpoint, args.task, args.seq_length)
    sets, near_ties = [], []
    with torch.no_grad():
        for path in args.valid_data:
            try:
                name, samples = build_set(path, args.task, tok, args.seq_length)
            except DataError as e:
                print(f"finetune_reference: Megatron would fail on this input: {e}",
                      file=sys.stderr)
                return 2
            correct, total, ties, softmaxes, labels, logits = evaluate_set(W, head, cfg, samples,
                                                                            args.task)
            if total == 0:
                # Megatron divides by the total: ZeroDivisionError.
                print(f"finetune_reference: {path}: no samples", file=sys.stderr)
                return 2
            print(f"finetune_reference: {name}: {ties} near-ties (top-2 margin < {NEAR_TIE})",
                  file=sys.stderr)
            sets.append({"name": name, "correct": correct, "total": total,
                         "accuracy": correct / total, "softmaxes": softmaxes, "labels": labels,
                         "logits": logits})
            near_ties.append(ties)
    correct, total = sum(s["correct"] for s in sets), sum(s["total"] for s in sets)
    result = {"task": args.task, "sets": sets, "correct": correct, "total": total,
              "accuracy": correct / total}
    print(json.dumps({k: v for k, v in result.items() if k != "sets"} |
                     {"sets": [{k: v for k, v in s.items() if k not in ("softmaxes", "labels", "logits")}
                               for s in sets]}))
    if args.compare:
        if any(near_ties):
            print(f"finetune_reference: {sum(near_ties)} near-ties: allowing that many "
                  f"differences in 'correct'", file=sys.stderr)
        return 0 if compare(result, near_ties, args.compare) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
