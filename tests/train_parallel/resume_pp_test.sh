#!/usr/bin/env bash
# A checkpoint saved at TP2 x PP2 x DP2 (iteration 10) resumes at TP1 x PP1 x DP1 and at
# TP1 x PP4 with the losses of the uninterrupted one-rank run for iterations 11-20, and equals the
# one-rank checkpoint of iteration 10 (the tied embedding stored once).
#   resume_pp_test.sh MEGATRON_APP MPIEXEC WORK_DIR BASELINE4_WORK_DIR
source "$(dirname "$0")/common.sh"
baseline=$1
four=(--set model.num_layers=4 --set model.make_vocab_size_divisible_by=64)
train 8 first "${four[@]}" --set parallel.tensor_model_parallel_size=2 \
  --set parallel.pipeline_model_parallel_size=2 --set "checkpoint.save=$work/ckpt" \
  --set training.exit_interval=10
test "$(cat "$work/ckpt/latest_checkpointed_iteration.txt")" = 10
compare losses "$baseline/baseline.jsonl" "$work/first.jsonl" 1 10
compare weights "$baseline/ckpt/iter_0000010.h5" "$work/ckpt/iter_0000010.h5"

train 1 one "${four[@]}" --set "checkpoint.load=$work/ckpt" --set "checkpoint.save=$work/one"
compare losses "$baseline/baseline.jsonl" "$work/one.jsonl" 11 20
compare weights "$baseline/ckpt/iter_0000020.h5" "$work/one/iter_0000020.h5"

train 4 pp4 "${four[@]}" --set parallel.pipeline_model_parallel_size=4 \
  --set "checkpoint.load=$work/ckpt" --set "checkpoint.save=$work/pp4"
compare losses "$baseline/baseline.jsonl" "$work/pp4.jsonl" 11 20
compare weights "$baseline/ckpt/iter_0000020.h5" "$work/pp4/iter_0000020.h5"
