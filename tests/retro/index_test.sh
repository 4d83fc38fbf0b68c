#!/usr/bin/env bash
# `megatron-app retro index` on the embed test's workdir: a Flat and an IVF16,Flat index beside
# each other, checked with Debian's python3-faiss (check_index.py: every chunk held, Flat's
# vectors the embeddings and each chunk its own nearest neighbour, IVF exhaustive at nprobe 16,
# recall reported); a second run does nothing; refusals with exit 2 naming the key: an unknown
# index string, too few training chunks for the clusters, more training chunks than the
# database has, another retro_index_ntrain for an existing index.
#   index_test.sh MEGATRON_APP EMBED_WORK_DIR [BERT_LENGTH (the embed test's, default 128)]
set -euo pipefail
app=$1 embed_work=$2 bert_length=${3:-128}
here=$(cd "$(dirname "$0")" && pwd)
work=$embed_work/one
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
fail() { echo "FAIL: $*" >&2; exit 1; }
index() {  # index_string ntrain [more arguments]
  local string=$1 ntrain=$2
  shift 2
  "$app" retro index --config "$here/retro_db.toml" --set "data.retro_workdir=$work" \
    --set 'data.split="10,45,45"' --set data.retro_bert_max_chunk_length=$bert_length \
    --set data.retro_block_size=500 --set "data.retro_index_str=\"$string\"" \
    --set "data.retro_index_ntrain=$ntrain" "$@"
}
refused() {  # expected-message index_string ntrain
  local message=$1
  shift
  set +e
  index "$@" --log-level warn 2> "$embed_work/refused.log"
  local code=$?
  set -e
  [ "$code" = 2 ] || fail "exit $code, expected 2: $(cat "$embed_work/refused.log")"
  grep -q -- "$message" "$embed_work/refused.log" ||
    fail "expected '$message': $(cat "$embed_work/refused.log")"
}
rm -rf "$work/index"
index Flat 1000 --log-level warn
index IVF16,Flat 1000 --log-level warn
/usr/bin/python3 "$here/check_index.py" "$work/embed" "$work/index/Flat/index.faiss" \
  "$work/index/IVF16_Flat/index.faiss" 16
index Flat 1000 2>&1 | grep -q "nothing to do" || fail "a complete index was rebuilt"
refused "retro_index_str: Faiss's index factory cannot make 'Bogus99'" Bogus99 1000
refused "retro_index_ntrain: training 'IVF2048,Flat' on 1000 chunks failed" IVF2048,Flat 1000
refused "retro_index_ntrain: 5000 asks 5000 training chunks" IVF8,Flat 5000
refused "retro_index_ntrain: the retro workdir's .* was built for retro_index_ntrain = 1000" Flat 500
echo "index: checked, recall reported, refusals OK"
