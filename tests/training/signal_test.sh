#!/usr/bin/env bash
# SIGTERM during training saves a checkpoint of the iteration reached, exits 0, and that
# checkpoint resumes.
#   signal_test.sh MEGATRON_APP WORK_DIR
source "$(dirname "$0")/common.sh"
# The app itself in the background (not a shell function), so $! is its pid.
"${tiny[@]}" --set training.train_iters=100000 --set training.lr_decay_style=constant \
  --set "checkpoint.save=$work/ckpt" --set "logging.metrics_file=$work/m.jsonl" > /dev/null &
pid=$!
for _ in $(seq 600); do
  [ -s "$work/m.jsonl" ] && [ "$(grep -c '"train"' "$work/m.jsonl")" -ge 3 ] && break
  sleep 0.1
done
kill -TERM "$pid"
wait "$pid"
iteration=$(cat "$work/ckpt/latest_checkpointed_iteration.txt")
last=$(grep '"train"' "$work/m.jsonl" | tail -1 | sed 's/.*"iteration":\([0-9]*\).*/\1/')
echo "stopped at iteration $iteration (last logged $last)"
test "$iteration" -ge 3
test "$iteration" = "$last"
test -f "$work/ckpt/iter_$(printf %07d "$iteration").h5"
run_tiny --set "training.train_iters=$((iteration + 2))" --set training.lr_decay_style=constant \
  --set "checkpoint.load=$work/ckpt" --set "checkpoint.save=$work/ckpt" > "$work/resume.log"
test "$(cat "$work/ckpt/latest_checkpointed_iteration.txt")" = "$((iteration + 2))"
grep -q "iteration *$((iteration + 1))/" "$work/resume.log"
