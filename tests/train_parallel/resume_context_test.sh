#!/usr/bin/env bash
# A checkpoint saved at CP2 x DP2 with the distributed optimizer (iteration 10: the optimizer
# state sharded over the four data x context ranks) equals the one-rank checkpoint of iteration
# 10, shows its layout only as metadata, and resumes on one rank and at CP2 (distributed
# optimizer, sharded over the two context ranks) with the losses of the uninterrupted one-rank
# run for iterations 11-20.
#   resume_context_test.sh MEGATRON_APP MPIEXEC WORK_DIR BASELINE_WORK_DIR
source "$(dirname "$0")/common.sh"
baseline=$1
first_ten "$baseline" 4 first "$work/cp2dp2" --set parallel.context_parallel_size=2 \
  --set ddp.use_distributed_optimizer=true
"$app" inspect "$work/cp2dp2" > "$work/inspect.txt"
grep -q "saved at layout:    tensor 1 x pipeline 1 x context 2 x data 2, distributed optimizer" \
  "$work/inspect.txt"

train 1 one --set "checkpoint.load=$work/cp2dp2" --set "checkpoint.save=$work/one"
matches "$baseline" one "$work/one" 11 20

train 2 cp2 --set "checkpoint.load=$work/cp2dp2" --set "checkpoint.save=$work/cp2" \
  --set parallel.context_parallel_size=2 --set ddp.use_distributed_optimizer=true
matches "$baseline" cp2 "$work/cp2" 11 20
