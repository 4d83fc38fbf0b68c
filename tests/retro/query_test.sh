#!/usr/bin/env bash
# `megatron-app retro query` on the index test's workdir (IVF16,Flat) for the samples the config's
# training reads (train 20, valid 12, test 4: 40, 24 and 8 chunks), then training on it: the
# neighbours against an independent Python check (check_neighbors.py: no neighbour from the
# sample's own documents over every split, a recomputed search on sampled chunks, the Retro
# dataset's neighbour tokens); `retro inspect` shows a chunk's neighbours as the files hold them;
# a resumed query gives byte-identical blocks; a
# Retro model trains 10 iterations on the neighbours; refusals with exit 2 naming the reason: no
# index yet, a BERT of another hidden size, training with another seed than the neighbours'.
#   query_test.sh MEGATRON_APP EMBED_WORK_DIR [BERT_LENGTH (the embed test's, default 128)]
set -euo pipefail
app=$1 embed_work=$2 bert_length=${3:-128}
here=$(cd "$(dirname "$0")" && pwd)
data=$here/../../data
configs=$here/../../configs
work=$embed_work/query
rm -rf "$work" && mkdir -p "$work"
cp -r "$embed_work/one" "$work/one"
rm -rf "$work/one/query"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
fail() { echo "FAIL: $*" >&2; exit 1; }
source "$here/query_settings.sh"
settings=("${query_settings[@]}" --set "data.data_cache_path=$work/cache")
extra=()  # overrides after the settings
app_in() {  # workdir command... (the retro config, the settings and `extra` appended)
  local dir=$1
  shift
  "$@" --config "$here/retro_db.toml" --set "data.retro_workdir=$dir" "${settings[@]}" \
    ${extra[@]+"${extra[@]}"}
}
refused() {  # expected-message workdir command...
  local message=$1
  shift
  set +e
  app_in "$@" --log-level warn 2> "$work/refused.log"
  local code=$?
  set -e
  [ "$code" = 2 ] || fail "exit $code, expected 2: $(cat "$work/refused.log")"
  grep -q -- "$message" "$work/refused.log" || fail "expected '$message': $(cat "$work/refused.log")"
}

mkdir -p "$work/no_index" && cp -r "$work/one/db" "$work/one/embed" "$work/no_index/"
refused "has no index; run \`megatron-app retro index\`" "$work/no_index" "$app" retro query

app_in "$work/one" "$app" retro query --log-level warn
app_in "$work/one" "$app" data --split train --first 3 --log-level warn > "$work/samples.txt"
/usr/bin/python3 "$here/check_neighbors.py" "$work/one" "$work/cache" "$data/austen_text_document" \
  "$data/encoder.json" "$data/bert-base-uncased-vocab.txt" "$embed_work/bert/iter_0000002.h5" \
  "$work/samples.txt"

# inspect: valid sample 3's chunk 1 with its 2 neighbours and their continuations, the database
# chunks those of the query's file, named by their document and tokens as the database has them.
app_in "$work/one" "$app" retro inspect --split valid --sample 3 --chunk 1 --log-level warn \
  > "$work/inspect.txt"
grep -q "^valid sample 3 of [0-9]* (2 chunks of 64 tokens), from .*austen_text_document" \
  "$work/inspect.txt" || fail "inspect: no header: $(head -3 "$work/inspect.txt")"
[ "$(grep -c "^chunk " "$work/inspect.txt")" = 1 ] || fail "inspect: not chunk 1 alone"
grep -q '^chunk 1 (tokens 64-127): "' "$work/inspect.txt" || fail "inspect: no chunk 1 text"
[ "$(grep -c "^    continuation 1: \"" "$work/inspect.txt")" = 2 ] || fail "inspect: continuations"
/usr/bin/python3 - "$work/one" "$work/inspect.txt" <<'PY' || fail "inspect: neighbours differ"
import glob, re, sys, h5py
work, printed = sys.argv[1], open(sys.argv[2]).read()
shown = re.findall(r"neighbour \d: database chunk (\d+), \S+ document (\d+) tokens (\d+)-(\d+)", printed)
rows = h5py.File(glob.glob(f"{work}/query/valid/0-*.h5")[0], "r")["neighbors"][3 * 2 + 1, :2]
chunks = h5py.File(f"{work}/db/chunks.h5", "r")["chunks"][()]
expected = [(str(i), str(chunks[i, 1]), str(chunks[i, 2]), str(chunks[i, 3] - 1)) for i in rows]
assert shown == expected, (shown, expected)
PY
refused "inspect: --sample 99999: the valid split has" "$work/one" "$app" retro inspect \
  --split valid --sample 99999
refused "inspect: --split 'dev' is not one of train, valid, test" "$work/one" "$app" retro inspect \
  --split dev

# Resume (a block gone, a stale .partial) gives the same files. (Ranks share query blocks with
# the same code as build-db's and embed's, whose 2-rank runs are tested.)
cp -r "$work/one" "$work/resumed"
rm "$work/resumed/query/valid/0-24.h5"
echo "half a block" > "$work/resumed/query/test/0-8.h5.partial"
app_in "$work/resumed" "$app" retro query > "$work/resumed.log" 2>&1
grep -q "block 1/1: valid chunks 0-24" "$work/resumed.log" || fail "the valid block not redone"
[ "$(grep -c "already made" "$work/resumed.log")" = 2 ] || fail "the other blocks not kept"
for f in $(cd "$work/one/query" && ls */*.h5); do
  cmp "$work/one/query/$f" "$work/resumed/query/$f" || fail "resumed $f differs"
done

# Training reads them; another seed is refused.
app_in "$work/one" "$app" > "$work/train.log" 2>&1 || fail "training: $(tail -5 "$work/train.log")"
grep -q "iteration       10/      10 .* lm loss: [0-9]" "$work/train.log" || fail "no iteration 10"
refused "\[training\] seed: the retro workdir's .* was built for seed = 1234, the config gives 7" \
  "$work/one" "$app" --set training.seed=7

# A BERT of another hidden size than the index's.
"$app" --config "$configs/bert_tiny.toml" --log-level warn --set training.train_iters=2 \
  --set "checkpoint.save=$work/bert64" --set checkpoint.save_interval=2 \
  --set training.eval_interval=100 --set "data.data_cache_path=$work/bert_cache" \
  --set model.hidden_size=64 > /dev/null
extra=(--set "data.retro_bert_load=$work/bert64")
refused "retro_bert_load: .* has hidden size 64, the index holds 128-dimensional" "$work/one" \
  "$app" retro query
echo "query: checked, resumed, training and refusals OK"
