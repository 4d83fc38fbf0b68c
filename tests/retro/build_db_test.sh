#!/usr/bin/env bash
# `megatron-app retro build-db` on the bundled corpus: the database against an independent Python
# computation of Megatron's rule (check_chunk_db.py); a resumed build (a block file and the merged
# database removed, a stale .partial left behind) and a build on 2 ranks give byte-identical
# files; a second run does nothing; another chunk length or vocabulary is refused (exit 2, naming
# the key) with the files untouched.
#   build_db_test.sh MEGATRON_APP MPIEXEC WORK_DIR
set -euo pipefail
app=$1 mpiexec=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
data=$here/../../data
config=$here/retro_db.toml
rm -rf "$work" && mkdir -p "$work"
build() {  # workdir [more arguments]
  local dir=$1
  shift
  OMP_NUM_THREADS=1 "$app" retro build-db --config "$config" --log-level warn \
    --set "data.retro_workdir=$dir" "$@"
}
fail() { echo "FAIL: $*" >&2; exit 1; }

build "$work/one"
db=$work/one/db/chunks.h5
/usr/bin/python3 "$here/check_chunk_db.py" "$db" "$data/austen_text_document" \
  "$data/encoder.json" "$data/bert-base-uncased-vocab.txt" 64 0.9

# Resume: the merged file and block 3 gone, a stale half-written block 4 beside the real one.
cp -r "$work/one" "$work/resumed"
rm "$work/resumed/db/chunks.h5" "$work/resumed/db/0_austen_text_document/80-120.h5"
echo "half a block" > "$work/resumed/db/0_austen_text_document/120-160.h5.partial"
OMP_NUM_THREADS=1 "$app" retro build-db --config "$config" --set "data.retro_workdir=$work/resumed" \
  > "$work/resumed.log" 2>&1
grep -q "block 3/7: dataset 0, documents 80-120" "$work/resumed.log" || fail "block 3 not rebuilt"
[ "$(grep -c "already made" "$work/resumed.log")" = 6 ] || fail "the 6 other blocks not kept"
cmp "$db" "$work/resumed/db/chunks.h5" || fail "resumed database differs"

# Two ranks share the blocks; the merged file is the same.
OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive "$mpiexec" --oversubscribe --allow-run-as-root -np 2 \
  "$app" retro build-db --config "$config" --log-level warn --set "data.retro_workdir=$work/two"
cmp "$db" "$work/two/db/chunks.h5" || fail "2-rank database differs"

# Complete: nothing to do.
OMP_NUM_THREADS=1 "$app" retro build-db --config "$config" --set "data.retro_workdir=$work/one" \
  > "$work/again.log" 2>&1
grep -q "nothing to do" "$work/again.log" || fail "a complete database was rebuilt"

# Other settings: refused, naming the key, the database untouched.
before=$(sha256sum "$db")
refused() {  # key --set ...
  local key=$1
  shift
  set +e
  build "$work/one" "$@" 2> "$work/refused.log"
  local code=$?
  set -e
  [ "$code" = 2 ] || fail "$key: exit $code, expected 2"
  grep -q "\[data\] $key: the retro workdir's .* was built for $key" "$work/refused.log" ||
    fail "$key: $(cat "$work/refused.log")"
}
refused retro_chunk_length --set data.retro_chunk_length=32
refused retro_bert_tokenizer_type --set data.retro_bert_tokenizer_type=BertWordPieceCase
[ "$(sha256sum "$db")" = "$before" ] || fail "a refused run changed the database"
# A block of another build is refused too, before any merge.
rm "$work/resumed/db/chunks.h5"
set +e
build "$work/resumed" --set data.retro_chunk_length=32 2> "$work/refused.log"
code=$?
set -e
[ "$code" = 2 ] && grep -q "0-40.h5 was built for retro_chunk_length = 64" "$work/refused.log" ||
  fail "a block of other settings: exit $code, $(cat "$work/refused.log")"
echo "build-db: checked, resumed, 2 ranks and refusals OK"
