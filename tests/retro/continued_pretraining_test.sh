#!/usr/bin/env bash
# Continued pretraining of Retro from a GPT checkpoint of the same decoder (Megatron loads Retro
# non-strictly): with [checkpoint] finetune the GPT tensors are loaded and the cross-attention and
# retrieval encoder keep the initialisation a Retro model built from scratch gets, the loader's
# report counting both (at lr 0, so the saved checkpoint shows exactly what was loaded and
# initialised; check in Python). Refused with exit 2: the same without finetune (the message says
# to set it), and a Retro checkpoint into a GPT (tensors the GPT does not have).
#   continued_pretraining_test.sh MEGATRON_APP EMBED_WORK_DIR [BERT_LENGTH (default 128)]
# (the query test's workdir, EMBED_WORK_DIR/query/one, holds the neighbours)
set -euo pipefail
app=$1 embed_work=$2 bert_length=${3:-128}
query_work=$embed_work/query
here=$(cd "$(dirname "$0")" && pwd)
source "$here/query_settings.sh"
configs=$here/../../configs
work=$query_work/continued
rm -rf "$work" && mkdir -p "$work"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive
fail() { echo "FAIL: $*" >&2; exit 1; }
# A run of one iteration at learning rate 0, saved: the weights are what loading and building gave.
frozen=(--set training.train_iters=1 --set training.lr=0 --set training.min_lr=0
  --set training.lr_warmup_iters=0 --set training.eval_iters=0 --set checkpoint.save_interval=1
  --set "data.data_cache_path=$work/cache")
retro() {  # save_dir [more arguments]
  local save=$1
  shift
  "$app" --config "$here/retro_db.toml" --set "data.retro_workdir=$query_work/one" \
    "${query_settings[@]}" --set data.retro_verify_neighbor_count=false \
    --set "checkpoint.save=$save" "${frozen[@]}" "$@"
}
gpt=(--config "$configs/gpt_tiny.toml" --set model.num_layers=6 --set model.hidden_size=32)
refused() {  # expected-message command...
  local message=$1
  shift
  set +e
  "$@" 2> "$work/refused.log" > /dev/null
  local code=$?
  set -e
  [ "$code" = 2 ] || fail "exit $code, expected 2: $(cat "$work/refused.log")"
  grep -q -- "$message" "$work/refused.log" || fail "expected '$message': $(cat "$work/refused.log")"
}

# The GPT: 2 iterations of the same decoder (6 layers, hidden 32, 4 heads, sequence 128).
"$app" "${gpt[@]}" --log-level warn --set training.train_iters=2 --set training.lr_warmup_iters=1 \
  --set training.eval_iters=0 --set "checkpoint.save=$work/gpt" --set checkpoint.save_interval=2 \
  --set "data.data_cache_path=$work/cache" > /dev/null

retro "$work/scratch" --log-level warn > /dev/null
retro "$work/continued" --set "checkpoint.load=$work/gpt" --set checkpoint.finetune=true \
  > "$work/continued.log" 2>&1 || fail "finetune: $(tail -3 "$work/continued.log")"
report=$(grep -o "(a 'gpt' model) starts this 'retro' model: [0-9]* tensors loaded, [0-9]* not in it initialised" \
  "$work/continued.log") || fail "no loader report: $(grep -i pretrained "$work/continued.log" | tail -3)"
/usr/bin/python3 - "$work" "$report" <<'PY' || fail "continued checkpoint"
import re, sys, h5py, numpy as np
work, report = sys.argv[1], sys.argv[2]
loaded, initialised = map(int, re.findall(r"(\d+) tensors loaded, (\d+) not", report)[0])
gpt = h5py.File(f"{work}/gpt/iter_0000002.h5", "r")["model"]
cont = h5py.File(f"{work}/continued/iter_0000001.h5", "r")["model"]
scratch = h5py.File(f"{work}/scratch/iter_0000001.h5", "r")["model"]
names = lambda g: {n for n in _walk(g)}
def _walk(g, prefix=""):
    for k, v in g.items():
        if isinstance(v, h5py.Group):
            yield from _walk(v, prefix + k + "/")
        else:
            yield prefix + k
gpt_names, cont_names = names(gpt), names(cont)
assert gpt_names <= cont_names, sorted(gpt_names - cont_names)
new = cont_names - gpt_names
assert (len(gpt_names), len(new)) == (loaded, initialised), (len(gpt_names), len(new), report)
assert all("cross_attn" in n or "cross_attention" in n for n in new), sorted(new)
for n in gpt_names:
    assert np.array_equal(cont[n][()], gpt[n][()]), f"{n} is not the GPT's"
for n in new:
    assert np.array_equal(cont[n][()], scratch[n][()]), f"{n} is not as a Retro model builds it"
print(f"ok   {loaded} GPT tensors loaded, {initialised} Retro tensors as built ({report})")
PY

refused "it was saved from a 'gpt' model: to start this 'retro' model from it, set \[checkpoint\] finetune = true" \
  retro "$work/refused" --set "checkpoint.load=$work/gpt" --log-level warn
refused "has tensor 'decoder.layers.5.cross_attention.* which this model does not have" \
  "$app" "${gpt[@]}" "${frozen[@]}" --set "checkpoint.load=$work/continued" \
  --set checkpoint.finetune=true --set "checkpoint.save=$work/refused" --log-level warn
echo "continued pretraining: checked and refusals OK"
