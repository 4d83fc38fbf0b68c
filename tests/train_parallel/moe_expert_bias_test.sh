#!/usr/bin/env bash
# The aux-loss-free expert bias across layouts: a tiny MoE GPT routing by sigmoid with
# moe_router_enable_expert_bias, at TP2 + SP x EP2 (so DP2: the iteration's token counts are
# summed over the tensor- and data-parallel ranks) with the allgather dispatcher (the plain
# TP2 + SP x EP2 layout test runs alltoall), equals its one-rank run for iterations 1-10
# (losses, and the checkpoint of iteration 10 with every router.expert_bias), and that checkpoint
# resumes on one rank with the uninterrupted run's losses and final state for iterations 11-20.
#   moe_expert_bias_test.sh MEGATRON_APP MPIEXEC WORK_DIR BASELINE_WORK_DIR [--set key=value ...]
# (the --set arguments: the baseline's model settings, make_vocab_size_divisible_by 64 among them)
source "$(dirname "$0")/common.sh"
baseline=$1
shift
first_ten "$baseline" 4 first "$work/tp2_sp_ep2" "$@" --set parallel.tensor_model_parallel_size=2 \
  --set parallel.sequence_parallel=true --set parallel.expert_model_parallel_size=2 \
  --set parallel.expert_tensor_parallel_size=1
"$app" inspect "$work/tp2_sp_ep2" > "$work/inspect.txt"
grep -q "decoder.layers.0.mlp.router.expert_bias" "$work/inspect.txt"

train 1 resumed "$@" --set "checkpoint.load=$work/tp2_sp_ep2" --set "checkpoint.save=$work/resumed"
matches "$baseline" resumed "$work/resumed" 11 20
