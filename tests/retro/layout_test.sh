#!/usr/bin/env bash
# Retro at a parallel layout against one rank, through tests/train_parallel's scripts (20
# iterations, dropout off: losses within 1e-5 relative at every iteration, final weights and
# optimizer state), on the query test's neighbours (wrapped over its 20 train samples, as
# Megatron does with retro_verify_neighbor_count off).
#   layout_test.sh MEGATRON_APP MPIEXEC WORK_DIR EMBED_WORK_DIR BERT_LENGTH baseline [ARGS...]
#   layout_test.sh MEGATRON_APP MPIEXEC WORK_DIR EMBED_WORK_DIR BERT_LENGTH BASELINE_DIR NP [ARGS...]
set -euo pipefail
app=$1 mpiexec=$2 work=$3 embed_work=$4 bert_length=$5
shift 5
here=$(cd "$(dirname "$0")" && pwd)
source "$here/query_settings.sh"
export TRAIN_PARALLEL_CONFIG=$here/retro_db.toml
retro=("${query_settings[@]}" --set "data.retro_workdir=$embed_work/query/one"
  --set data.retro_verify_neighbor_count=false --set model.retro_encoder_hidden_dropout=0
  --set model.retro_encoder_attention_dropout=0 --set logging.log_interval=1)
if [ "$1" = baseline ]; then
  shift
  exec bash "$here/../train_parallel/baseline_test.sh" "$app" "$mpiexec" "$work" "${retro[@]}" "$@"
fi
exec bash "$here/../train_parallel/layout_test.sh" "$app" "$mpiexec" "$work" "$1" "$2" \
  "${retro[@]}" "${@:3}"
