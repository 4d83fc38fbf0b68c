#!/usr/bin/env bash
# A save that runs out of space (RLIMIT_FSIZE set by the test, with SIGXFSZ ignored so writes
# fail with EFBIG as on a full disk): the previous checkpoint and the marker are untouched, no
# partial file stays, the failure is logged and training goes on, ending with exit code 4 when
# its last state could not be saved; with [checkpoint] exit_on_save_failure the run stops at the
# failed save with exit code 4.
#   disk_full_test.sh MEGATRON_APP WORK_DIR
source "$(dirname "$0")/common.sh"
fail() { echo "FAIL: $*" >&2; exit 1; }
save=$work/ckpt
common=(--set training.eval_iters=0 --set "checkpoint.save=$save" --set "checkpoint.load=$save"
        --set checkpoint.save_interval=2)
mkdir -p "$save"
run_tiny "${common[@]}" --set training.train_iters=4 > "$work/first.log" 2>&1 \
  || fail "first run: $(tail -3 "$work/first.log")"
[ "$(cat "$save/latest_checkpointed_iteration.txt")" = 4 ] || fail "no checkpoint at 4"
before=$(md5sum "$save/iter_0000004.h5" | cut -d' ' -f1)
size_kb=$(( $(stat -c %s "$save/iter_0000004.h5") / 1024 ))
limit=$(( size_kb / 4 ))  # room for logs, not for a checkpoint

# HDF5 cannot free a file whose final flush failed (H5Fclose fails and keeps its caches), so a
# sanitizer build would report those allocations as leaks at exit; only these runs skip the check.
limited() {  # run_tiny with files limited to $limit KiB
  ( trap '' XFSZ; ulimit -f "$limit"
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
    run_tiny "$@" )
}
check_untouched() {
  [ "$(cat "$save/latest_checkpointed_iteration.txt")" = 4 ] || fail "$1: the marker moved"
  [ "$(md5sum "$save/iter_0000004.h5" | cut -d' ' -f1)" = "$before" ] || fail "$1: iteration 4 changed"
  ! ls "$save" | grep -q partial || fail "$1: a partial file stayed: $(ls "$save")"
  ! ls "$save" | grep -qE "iter_000000[6-8]" || fail "$1: a checkpoint appeared: $(ls "$save")"
}

# 1. Default: log and train on; the last save fails too, so the run ends with exit code 4.
set +e
limited "${common[@]}" --set training.train_iters=8 > "$work/go_on.log" 2>&1
code=$?
set -e
[ "$code" = 4 ] || fail "exit code $code, expected 4: $(tail -3 "$work/go_on.log")"
grep -q "checkpoint of iteration 6 not saved: .*; the previous checkpoint and latest_checkpointed_iteration.txt are untouched; training goes on" \
  "$work/go_on.log" || fail "no message for the failed save at 6"
grep -qE "iteration +8/ +8 " "$work/go_on.log" || fail "training did not go on to iteration 8"
grep -q "checkpoint of iteration 8 not saved: .*the run ended without saving its last state" \
  "$work/go_on.log" || fail "the failed last save is not the error"
check_untouched "train on"

# 2. exit_on_save_failure: the first failed save stops the run.
set +e
limited "${common[@]}" --set training.train_iters=8 --set checkpoint.exit_on_save_failure=true \
  > "$work/stop.log" 2>&1
code=$?
set -e
[ "$code" = 4 ] || fail "exit code $code with exit_on_save_failure, expected 4"
grep -q "checkpoint of iteration 6 not saved: .*(\[checkpoint\] exit_on_save_failure = true)" \
  "$work/stop.log" || fail "stop message: $(grep error "$work/stop.log")"
! grep -qE "iteration +7/ +8 " "$work/stop.log" || fail "training went on after the failed save"
check_untouched "stop"

# 3. With space again, the run resumes from iteration 4 and saves.
run_tiny "${common[@]}" --set training.train_iters=6 > "$work/again.log" 2>&1 \
  || fail "run with space: $(tail -3 "$work/again.log")"
[ "$(cat "$save/latest_checkpointed_iteration.txt")" = 6 ] || fail "no checkpoint at 6 with space"
echo "disk_full_test: failed saves left iteration 4 intact; go-on and stop modes as expected"
