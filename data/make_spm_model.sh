#!/usr/bin/env bash
# Rebuilds data/austen_spm.model and .vocab (a SentencePiece BPE model of the bundled Austen corpus)
# and, given a megatron-app, data/austen_spm_text_document.{bin,idx}. See data/SOURCES.md.
# Usage: bash data/make_spm_model.sh [path/to/megatron-app]
# Needs Debian's sentencepiece (spm_train) and /usr/bin/python3.
set -euo pipefail
data=$(cd "$(dirname "$0")" && pwd)
app=${1:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One chapter's text after another, each ending with a newline: spm_train reads one sentence per
# line, so the chapters' own line breaks make the training sentences (all well under spm_train's
# 4192-byte limit, which would silently drop whole chapters written one per line).
/usr/bin/python3 - "$data/austen_chapters.jsonl" "$work/austen_texts.txt" <<'EOF'
import json
import sys

with open(sys.argv[1], encoding="utf-8") as src, open(sys.argv[2], "w", encoding="utf-8") as out:
    for line in src:
        out.write(json.loads(line)["text"] + "\n")
EOF

# Relative names, run inside the work directory: the model records its trainer options (input
# and model_prefix included), so the bytes do not depend on where this script runs.
(
  cd "$work"
  spm_train --input=austen_texts.txt --model_prefix=austen_spm --model_type=bpe \
    --vocab_size=8000 --character_coverage=1.0 --input_sentence_size=0 --num_threads=1 \
    --random_seed=1 > spm_train.log 2>&1 || { cat spm_train.log >&2; exit 1; }
)
cp "$work/austen_spm.model" "$work/austen_spm.vocab" "$data/"
(cd "$data" && sha256sum austen_spm.model austen_spm.vocab)

if [ -n "$app" ]; then
  "$app" preprocess --input "$data/austen_chapters.jsonl" --output-prefix "$data/austen_spm" \
    --json-keys text --append-eod --tokenizer-type GPTSentencePieceTokenizer \
    --tokenizer-model "$data/austen_spm.model" --workers 2
  (cd "$data" && sha256sum austen_spm_text_document.bin austen_spm_text_document.idx)
fi
