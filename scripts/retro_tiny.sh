#!/usr/bin/env bash
# Retro end to end on the bundled corpus, after the main job (scripts/main.sh) has built
# megatron-app: a bert_tiny checkpoint for the embeddings, the chunk database, the embeddings, a
# Flat and an IVF Faiss index (the IVF's recall against Flat reported), every training sample
# chunk's neighbours, one sample's neighbours shown as text, then configs/retro_tiny.toml trained
# beside a GPT of the same decoder on the same data and iterations, and their validation
# perplexities compared. About 10 minutes on 2 cores. Each pipeline stage keeps what a previous
# run completed (retro_workdir/retro_tiny); the two trainings start afresh.
#   bash scripts/retro_tiny.sh      (MEGATRON_APP=path/to/megatron-app to use another build)
set -euo pipefail
cd "$(dirname "$0")/.."
app=${MEGATRON_APP:-build-release/bin/megatron-app}
if [ ! -x "$app" ]; then
  echo "retro_tiny.sh: no $app: run \`bash scripts/main.sh\` first (it builds build-release/)," \
    "or set MEGATRON_APP" >&2
  exit 2
fi
config=configs/retro_tiny.toml
workdir=retro_workdir/retro_tiny
logs=retro_workdir/retro_tiny_logs
mkdir -p "$logs"
step() { printf '\n== %s\n' "$*"; }

step "1. BERT for the chunk embeddings: configs/bert_tiny.toml (checkpoints/bert_tiny)"
if [ -f checkpoints/bert_tiny/latest_checkpointed_iteration.txt ]; then
  echo "kept checkpoints/bert_tiny (remove it, and $workdir, to train it again)"
else
  "$app" --config configs/bert_tiny.toml --log-level warn > "$logs/bert_tiny.log"
  grep "validation loss at iteration .* on validation set" "$logs/bert_tiny.log" || true
fi

step "2. the chunk database (Megatron's chunks of 64 GPT tokens, re-tokenized for BERT)"
"$app" retro build-db --config "$config"
step "3. each chunk's BERT embedding"
"$app" retro embed --config "$config"
step "4. a Flat (exact) and the config's IVF64,Flat Faiss index"
"$app" retro index --config "$config" --set 'data.retro_index_str="Flat"'
"$app" retro index --config "$config"
if /usr/bin/python3 -c "import faiss, h5py" 2> /dev/null; then
  echo "the IVF index against the exact one (python3-faiss):"
  /usr/bin/python3 tests/retro/check_index.py "$workdir/embed" "$workdir/index/Flat/index.faiss" \
    "$workdir/index/IVF64_Flat/index.faiss" 64 | grep "recall"
fi
step "5. the neighbours of every chunk of the samples training reads"
"$app" retro query --config "$config"
step "6. what retrieval found for a validation sample (megatron-app retro inspect)"
"$app" retro inspect --config "$config" --split valid --sample 0 --chunk 0 --log-level warn

step "7. training Retro: $config (checkpoints/retro_tiny)"
rm -rf checkpoints/retro_tiny
"$app" --config "$config" 2>&1 | tee "$logs/retro.log"
step "8. training a GPT of the same decoder (configs/gpt_tiny.toml with 6 layers; checkpoints/gpt_tiny_6l)"
rm -rf checkpoints/gpt_tiny_6l
"$app" --config configs/gpt_tiny.toml --set model.num_layers=6 \
  --set "checkpoint.save=\"$PWD/checkpoints/gpt_tiny_6l\"" 2>&1 | tee "$logs/gpt.log"

step "9. validation perplexity after the same iterations on the same samples"
ppl() { grep "on validation set" "$1" | tail -1 | sed 's/.*lm loss PPL: \([^ ]*\).*/\1/'; }
retro_ppl=$(ppl "$logs/retro.log") gpt_ppl=$(ppl "$logs/gpt.log")
/usr/bin/python3 - "$retro_ppl" "$gpt_ppl" <<'PY'
import sys
retro, gpt = float(sys.argv[1]), float(sys.argv[2])
print(f"Retro {retro:.2f}, GPT {gpt:.2f}: {'Retro' if retro < gpt else 'GPT'} is lower "
      f"({abs(retro - gpt) / gpt:.1%} of the GPT's)")
PY
