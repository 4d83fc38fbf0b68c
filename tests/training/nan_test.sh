#!/usr/bin/env bash
# NaN/Inf in the gradients (injected with MEGATRON_TEST_NAN_ITERATIONS): the step is skipped and
# logged, the weights and optimizer state stay those of the last good step, training goes on;
# max_skipped_nan_steps consecutive skips save and stop with exit code 3 naming the iteration.
#   nan_test.sh MEGATRON_APP WORK_DIR
source "$(dirname "$0")/common.sh"
fail() { echo "FAIL: $*" >&2; exit 1; }
same_model() {  # the model/ and optimizer/ tensors of two checkpoints are bitwise equal
  /usr/bin/python3 - "$1" "$2" <<'PY'
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
names = []
a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
names = [n for n in names if n.startswith(("model/", "optimizer/"))]
assert names, "no tensors"
bad = [n for n in names if not np.array_equal(a[n][()], b[n][()])]
sys.exit(f"differ: {bad[:3]}" if bad else 0)
PY
}
common=(--set training.train_iters=8 --set training.eval_iters=0 --set model.hidden_dropout=0
        --set model.attention_dropout=0 --set checkpoint.save_interval=1)

# 1. Two NaN steps, then training goes on: iterations 3 and 4 change nothing.
MEGATRON_TEST_NAN_ITERATIONS=3,4 run_tiny "${common[@]}" --set "checkpoint.save=$work/a" \
  > "$work/a.log" 2>&1 || fail "run with two NaN steps failed: $(tail -3 "$work/a.log")"
grep -q "iteration 3: NaN or Inf (loss .*, grad norm nan), step skipped (1 in a row" "$work/a.log" \
  || fail "no skip message for iteration 3"
grep -q "iteration 4: NaN or Inf .* (2 in a row" "$work/a.log" || fail "no skip message for iteration 4"
grep -qE "iteration +4/ +8 .*number of skipped iterations: +1 \| number of nan iterations: +1 \|" \
  "$work/a.log" || fail "the log line of iteration 4 does not count the skip"
same_model "$work/a/iter_0000002.h5" "$work/a/iter_0000004.h5" || fail "weights moved on a NaN step"
same_model "$work/a/iter_0000004.h5" "$work/a/iter_0000005.h5" && fail "iteration 5 did not train"
grep -qE "iteration +8/ +8 .*lm loss: [0-9]" "$work/a.log" || fail "training did not finish"

# 2. Three NaN steps in a row with max_skipped_nan_steps = 3: saved and stopped, exit 3.
set +e
MEGATRON_TEST_NAN_ITERATIONS=3,4,5 run_tiny "${common[@]}" --set "checkpoint.save=$work/b" \
  --set training.max_skipped_nan_steps=3 > "$work/b.log" 2>&1
code=$?
set -e
[ "$code" = 3 ] || fail "exit code $code after 3 NaN steps, expected 3"
grep -q "iteration 5: NaN or Inf in the loss or gradient norm for 3 consecutive iteration(s) (\[training\] max_skipped_nan_steps = 3); the weights are those of iteration 2, saved as iteration 5" \
  "$work/b.log" || fail "stop message: $(grep error "$work/b.log")"
[ "$(cat "$work/b/latest_checkpointed_iteration.txt")" = 5 ] || fail "iteration 5 not the latest"
same_model "$work/b/iter_0000002.h5" "$work/b/iter_0000005.h5" || fail "saved weights are not the last good ones"
[ ! -e "$work/b/iter_0000006.h5" ] || fail "training went on after the stop"

# 3. max_skipped_nan_steps = 0: the first NaN stops the run.
set +e
MEGATRON_TEST_NAN_ITERATIONS=2 run_tiny "${common[@]}" --set "checkpoint.save=$work/c" \
  --set training.max_skipped_nan_steps=0 > "$work/c.log" 2>&1
code=$?
set -e
[ "$code" = 3 ] || fail "exit code $code with max_skipped_nan_steps = 0, expected 3"
grep -q "iteration 2: NaN or Inf in the loss or gradient norm for 1 consecutive" "$work/c.log" \
  || fail "stop message with max 0"
echo "nan_test: skips, counts, stop and saved weights as expected"
