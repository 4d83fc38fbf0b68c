#!/usr/bin/env bash
# The one-rank reference for the layout tests: 20 iterations, checkpoints at 10 and 20.
#   baseline_test.sh MEGATRON_APP MPIEXEC WORK_DIR [--set key=value ...]
source "$(dirname "$0")/common.sh"
train 1 baseline --set "checkpoint.save=$work/ckpt" --set checkpoint.save_interval=10 "$@"
test -f "$work/ckpt/iter_0000010.h5" && test -f "$work/ckpt/iter_0000020.h5"
compare losses "$work/baseline.jsonl" "$work/baseline.jsonl" 1 20
