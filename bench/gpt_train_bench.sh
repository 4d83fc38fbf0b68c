#!/usr/bin/env bash
# Training-step time of megatron-app against the PyTorch reference model, same shapes, same
# machine, same run: ms/iteration and tokens/s for fp32 and bf16.
#   bench/gpt_train_bench.sh MEGATRON_APP [ITERATIONS [GPT2_SMALL_ITERATIONS]]
# Shapes: gpt_tiny (L4 h128 s128 b8), the issue's (L4 h256 s256 b8), GPT-2 small (L12 h768 s1024
# b4). megatron-app's time is the mean "elapsed time per iteration" of ITERATIONS iterations after
# one warm-up iteration (from the metrics file); PyTorch's the same after one warm-up step.
set -euo pipefail
app=$1 iterations=${2:-3} large_iterations=${3:-1}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
while read -r name layers hidden heads seq mbs; do
  n=$iterations
  [ "$name" = gpt2_small ] && n=$large_iterations
  for precision in fp32 bf16; do
    flag=()
    [ "$precision" = bf16 ] && flag=(--set training.bf16=true)
    "$app" --config "$here/../configs/gpt_tiny.toml" --log-level warn \
      --set "model.num_layers=$layers" --set "model.hidden_size=$hidden" \
      --set "model.num_attention_heads=$heads" --set "model.max_position_embeddings=$seq" \
      --set "data.seq_length=$seq" --set "data.data_cache_path=$work/cache" \
      --set "training.micro_batch_size=$mbs" --set "training.global_batch_size=$mbs" \
      --set "training.train_iters=$((n + 1))" --set training.lr_warmup_iters=0 \
      --set training.eval_iters=0 --set logging.log_interval=1 --set checkpoint.save= \
      --set "logging.metrics_file=$work/m.jsonl" "${flag[@]}" > /dev/null
    ours=$(/usr/bin/python3 "$here/step_times.py" "$work/m.jsonl" $((mbs * seq)))
    rm -f "$work/m.jsonl"
    torch=$(/usr/bin/python3 "$here/gpt_train_torch.py" "$layers" "$hidden" "$heads" "$seq" "$mbs" \
      "$precision" "$n")
    echo "$name $precision | megatron-app: $ours | $torch"
  done
done <<'SHAPES'
gpt_tiny 4 128 4 128 8
issue_L4_h256 4 256 4 256 8
gpt2_small 12 768 12 1024 4
SHAPES
