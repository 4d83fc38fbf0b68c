#!/usr/bin/env bash
# A checkpoint with bytes flipped inside a tensor's data: `inspect --verify` names the tensor
# (exit 1); resuming from it stops with exit code 5 naming the tensor and leaves every file as it
# was; with [checkpoint] fallback_to_previous the run resumes from the newest intact checkpoint and
# ends with the weights of an undisturbed run. With MPIEXEC, the same at pipeline 2 where only the
# last stage reads the damaged tensor: both ranks fall back together.
#   damaged_test.sh MEGATRON_APP WORK_DIR [MPIEXEC]
source "$(dirname "$0")/common.sh"
mpiexec=${3:-}
fail() { echo "FAIL: $*" >&2; exit 1; }
damage() { /usr/bin/python3 "$here/../checkpoint/damage_checkpoint.py" "$@"; }
common=(--set training.eval_iters=0 --set checkpoint.save_interval=2)

# The undisturbed runs: 6 iterations straight (iteration 6 is the reference).
run_tiny "${common[@]}" --set "checkpoint.save=$work/reference" --set training.train_iters=6 \
  > "$work/reference.log" 2>&1 || fail "reference run: $(tail -3 "$work/reference.log")"

save=$work/ckpt
run_tiny "${common[@]}" --set "checkpoint.save=$save" --set training.train_iters=4 \
  > "$work/first.log" 2>&1 || fail "first run: $(tail -3 "$work/first.log")"
"$app" inspect "$save" --verify > "$work/verify_intact.log" 2>&1 \
  || fail "verify of an intact checkpoint: $(cat "$work/verify_intact.log")"
grep -q "every tile matches its checksum" "$work/verify_intact.log" || fail "no intact verdict"

# Another HDF5 (h5py's) reads and checks what megatron-app wrote.
/usr/bin/python3 "$here/../checkpoint/h5py_verify.py" "$save/iter_0000004.h5" > "$work/h5py.log" \
  || fail "h5py cannot read the checkpoint: $(cat "$work/h5py.log")"

tensor=$(damage "$save/iter_0000004.h5" model/decoder.layers.0.mlp.linear_fc1.weight)
! /usr/bin/python3 "$here/../checkpoint/h5py_verify.py" "$save/iter_0000004.h5" > "$work/h5py_damaged.log" \
  || fail "h5py reads the damaged tensor without complaint"
grep -q "^$tensor: .*Fletcher32" "$work/h5py_damaged.log" || fail "h5py: $(cat "$work/h5py_damaged.log")"
sum=$(md5sum "$save/iter_0000004.h5" | cut -d' ' -f1)
set +e
"$app" inspect "$save" --verify > "$work/verify.log" 2>&1
code=$?
set -e
[ "$code" = 1 ] || fail "inspect --verify exit code $code on a damaged checkpoint, expected 1"
grep -q "DAMAGED: tensor '$tensor' is damaged: its data fails the checksum" "$work/verify.log" \
  || fail "verify does not name $tensor: $(cat "$work/verify.log")"

resume=(--set "checkpoint.save=$save" --set "checkpoint.load=$save" --set training.train_iters=6)
set +e
run_tiny "${common[@]}" "${resume[@]}" > "$work/refused.log" 2>&1
code=$?
set -e
[ "$code" = 5 ] || fail "resume from a damaged checkpoint: exit code $code, expected 5"
grep -q "tensor '$tensor' is damaged.*it is left as it is. Set \[checkpoint\] fallback_to_previous = true.*iter_0000002.h5 is the next older" \
  "$work/refused.log" || fail "refusal message: $(grep error "$work/refused.log")"
[ "$(cat "$save/latest_checkpointed_iteration.txt")" = 4 ] || fail "the marker moved"
[ "$(md5sum "$save/iter_0000004.h5" | cut -d' ' -f1)" = "$sum" ] || fail "the damaged file changed"

run_tiny "${common[@]}" "${resume[@]}" --set checkpoint.fallback_to_previous=true \
  > "$work/fallback.log" 2>&1 || fail "fallback run: $(tail -3 "$work/fallback.log")"
grep -q "tensor '$tensor' is damaged.*falling back to .*iter_0000002.h5" "$work/fallback.log" \
  || fail "no fallback warning: $(head -5 "$work/fallback.log")"
"$app" inspect "$save/iter_0000006.h5" --diff "$work/reference/iter_0000006.h5" \
  > "$work/diff.log" 2>&1 || fail "the fallback run differs from the undisturbed one: $(tail -5 "$work/diff.log")"

[ -z "$mpiexec" ] && { echo "damaged_test: verify, refusal and fallback as expected"; exit 0; }
# Pipeline 2: only the last stage reads the final norm, so only rank 1 finds the damage. The
# fallback run must equal a pipeline-2 resume from the intact iteration 2.
run_pp() {
  OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive "$mpiexec" --oversubscribe --allow-run-as-root --bind-to none -n 2 \
    "${tiny[@]}" "${common[@]}" --set parallel.pipeline_model_parallel_size=2 \
    --set training.train_iters=6 "$@"
}
pp=$work/pp pp_reference=$work/pp_reference
mkdir -p "$pp" "$pp_reference"
cp "$save/iter_0000002.h5" "$pp_reference/" && echo 2 > "$pp_reference/latest_checkpointed_iteration.txt"
run_pp --set "checkpoint.save=$pp_reference" --set "checkpoint.load=$pp_reference" \
  > "$work/pp_reference.log" 2>&1 || fail "pipeline-2 resume: $(tail -5 "$work/pp_reference.log")"
cp "$save/iter_0000002.h5" "$save/iter_0000004.h5" "$pp/" && echo 4 > "$pp/latest_checkpointed_iteration.txt"
damage "$pp/iter_0000004.h5" model/decoder.final_layernorm.weight 8 > /dev/null
run_pp --set "checkpoint.save=$pp" --set "checkpoint.load=$pp" \
  --set checkpoint.fallback_to_previous=true > "$work/pp.log" 2>&1 \
  || fail "pipeline-2 fallback run: $(tail -5 "$work/pp.log")"
grep -q "rank 1/2.*final_layernorm.weight' is damaged.*falling back to .*iter_0000002.h5" "$work/pp.log" \
  || fail "no fallback warning from rank 1: $(grep -i damaged "$work/pp.log")"
grep -q "rank 0/2.*world rank 1 found checkpoint .*iter_0000004.h5 damaged.*falling back" "$work/pp.log" \
  || fail "rank 0 did not learn of the damage: $(grep -i damaged "$work/pp.log")"
"$app" inspect "$pp/iter_0000006.h5" --diff "$pp_reference/iter_0000006.h5" > "$work/pp_diff.log" 2>&1 \
  || fail "the pipeline-2 fallback run differs: $(tail -5 "$work/pp_diff.log")"
echo "damaged_test: verify, refusal and fallback as expected, also at pipeline 2"
