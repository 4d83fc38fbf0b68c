#!/usr/bin/env bash
# `megatron-app retro embed` with a BERT checkpoint trained here for 2 iterations, on the chunks
# of the first 10% of the corpus: the embeddings against an independent PyTorch computation of
# Megatron's rule (check_embeddings.py); a resumed run (a block removed, a stale .partial left)
# and a run on 2 ranks give byte-identical block files; refusals with exit 2 naming the reason:
# no database yet, no retro_bert_load, a GPT checkpoint as the BERT, another BERT checkpoint than
# the blocks were made with.
#   embed_test.sh MEGATRON_APP MPIEXEC WORK_DIR [BERT_LENGTH (default 128)]
# (the sanitizer build passes 64: half the BERT work, and more chunks cut at the length)
set -euo pipefail
app=$1 mpiexec=$2 work=$3 bert_length=${4:-128}
here=$(cd "$(dirname "$0")" && pwd)
data=$here/../../data
configs=$here/../../configs
config=$here/retro_db.toml
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
fail() { echo "FAIL: $*" >&2; exit 1; }
short_run() {  # config save_dir [more arguments]
  local config=$1 save=$2
  shift 2
  "$app" --config "$config" --log-level warn --set training.train_iters=2 \
    --set "checkpoint.save=$save" --set checkpoint.save_interval=2 \
    --set training.eval_interval=100 --set "data.data_cache_path=$work/cache" "$@" > /dev/null
}
retro() {  # stage workdir [more arguments]
  local stage=$1 dir=$2
  shift 2
  "$app" retro "$stage" --config "$config" --log-level warn --set "data.retro_workdir=$dir" \
    --set 'data.split="10,45,45"' --set data.retro_bert_max_chunk_length=$bert_length \
    --set data.retro_block_size=500 "$@"
}
refused() {  # expected-message stage workdir [more arguments]
  local message=$1
  shift
  set +e
  retro "$@" 2> "$work/refused.log"
  local code=$?
  set -e
  [ "$code" = 2 ] || fail "exit $code, expected 2: $(cat "$work/refused.log")"
  grep -q -- "$message" "$work/refused.log" || fail "expected '$message': $(cat "$work/refused.log")"
}

short_run "$configs/bert_tiny.toml" "$work/bert"
refused "run \`megatron-app retro build-db\` with this config first" embed "$work/one" \
  --set "data.retro_bert_load=$work/bert"
retro build-db "$work/one"
refused "retro_bert_load: \`retro embed\` needs the BERT checkpoint" embed "$work/one"
retro embed "$work/one" --set "data.retro_bert_load=$work/bert"
/usr/bin/python3 "$here/check_embeddings.py" "$work/bert/iter_0000002.h5" \
  "$work/one/db/chunks.h5" "$work/one/embed" "$data/austen_text_document" "$data/encoder.json" \
  "$data/bert-base-uncased-vocab.txt" "$bert_length"

# Resume: block 2 gone, a stale half-written block 3 beside the real one.
cp -r "$work/one" "$work/resumed"
rm "$work/resumed/embed/500-1000.h5"
echo "half a block" > "$work/resumed/embed/1000-1110.h5.partial"
"$app" retro embed --config "$config" --set "data.retro_workdir=$work/resumed" \
  --set 'data.split="10,45,45"' --set data.retro_bert_max_chunk_length=$bert_length \
  --set data.retro_block_size=500 --set "data.retro_bert_load=$work/bert" > "$work/resumed.log" 2>&1
[ "$(grep -c "already made" "$work/resumed.log")" = 2 ] || fail "the 2 other blocks not kept"
grep -q "block 2/3: chunks 500-1000" "$work/resumed.log" || fail "block 2 not re-embedded"

# Two ranks share the blocks.
mkdir -p "$work/two" && cp -r "$work/one/db" "$work/two/db"
"$mpiexec" --oversubscribe --allow-run-as-root -np 2 "$app" retro embed --config "$config" \
  --log-level warn --set "data.retro_workdir=$work/two" --set 'data.split="10,45,45"' \
  --set data.retro_bert_max_chunk_length=$bert_length --set data.retro_block_size=500 \
  --set "data.retro_bert_load=$work/bert"
for f in "$work"/one/embed/*.h5; do
  cmp "$f" "$work/resumed/embed/$(basename "$f")" || fail "resumed $(basename "$f") differs"
  cmp "$f" "$work/two/embed/$(basename "$f")" || fail "2-rank $(basename "$f") differs"
done

# A GPT checkpoint is not a BERT; blocks made with another BERT checkpoint are refused.
short_run "$configs/gpt_tiny.toml" "$work/gpt" --set training.lr_warmup_iters=1
refused "retro_bert_load: .* not a BERT" embed "$work/one" --set "data.retro_bert_load=$work/gpt"
cp "$work/bert/iter_0000002.h5" "$work/other_bert.h5"
refused "retro_bert_load: the retro workdir's .* was built for retro_bert_load" embed "$work/one" \
  --set "data.retro_bert_load=$work/other_bert.h5"
echo "embed: checked, resumed, 2 ranks and refusals OK"
