#!/usr/bin/env bash
# Expert-parallel checkpoints are layout-free: a tiny MoE GPT saved at EP2 (iteration 10) equals
# the one-rank checkpoint of iteration 10 (every expert at its global index, optimizer state
# included) and resumes at EP1 with the uninterrupted one-rank run's losses for iterations 11-20;
# the one-rank checkpoint of iteration 10 resumes at EP2 x DP2 with the distributed optimizer
# likewise.
#   resume_moe_ep_test.sh MEGATRON_APP MPIEXEC WORK_DIR BASELINE_WORK_DIR
source "$(dirname "$0")/common.sh"
baseline=$1
first_ten "$baseline" 2 first "$work/ep2" --set parallel.expert_model_parallel_size=2
"$app" inspect "$work/ep2" > "$work/inspect.txt"
grep -q "mlp.experts.linear_fc1.weight" "$work/inspect.txt"

train 1 ep1 --set "checkpoint.load=$work/ep2" --set "checkpoint.save=$work/ep1"
matches "$baseline" ep1 "$work/ep1" 11 20

mkdir -p "$work/from_one_rank"
cp "$baseline/ckpt/iter_0000010.h5" "$work/from_one_rank/"
echo 10 > "$work/from_one_rank/latest_checkpointed_iteration.txt"
train 4 ep2_dp2 --set "checkpoint.load=$work/from_one_rank" --set "checkpoint.save=$work/ep2_dp2" \
  --set parallel.expert_model_parallel_size=2 --set ddp.use_distributed_optimizer=true
matches "$baseline" ep2_dp2 "$work/ep2_dp2" 11 20
