#!/usr/bin/env bash
# Pipeline parallelism with a separate output layer (no tied embedding across stages): PP2 and
# PP2 x DP2 with the distributed optimizer give the losses and final weights of one rank.
#   pp_untied_test.sh MEGATRON_APP MPIEXEC WORK_DIR
source "$(dirname "$0")/common.sh"
untied=(--set model.untie_embeddings_and_output_weights=true)
train 1 one "${untied[@]}" --set "checkpoint.save=$work/one"
train 2 pp2 "${untied[@]}" --set parallel.pipeline_model_parallel_size=2 \
  --set "checkpoint.save=$work/pp2"
compare losses "$work/one.jsonl" "$work/pp2.jsonl" 1 20
compare weights "$work/one/iter_0000020.h5" "$work/pp2/iter_0000020.h5"
train 4 pp2_dp2_distopt "${untied[@]}" --set parallel.pipeline_model_parallel_size=2 \
  --set ddp.use_distributed_optimizer=true --set ddp.overlap_grad_reduce=true \
  --set ddp.ddp_bucket_size=20000 --set "checkpoint.save=$work/distopt"
compare losses "$work/one.jsonl" "$work/pp2_dp2_distopt.jsonl" 1 20
compare weights "$work/one/iter_0000020.h5" "$work/distopt/iter_0000020.h5"
