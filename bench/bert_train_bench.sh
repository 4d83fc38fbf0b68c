#!/usr/bin/env bash
# BERT-base training step of megatron-app against the same BERT in PyTorch fp32 (CPU).
#   bench/bert_train_bench.sh MEGATRON_APP [ITERATIONS [MICRO_BATCH [ROUNDS [PRECISIONS]]]]
# Shape: 12 layers, hidden 768, 12 heads, seq 512, max_position_embeddings 512, micro batch =
# global batch = MICRO_BATCH (default 4), configs/bert_tiny.toml otherwise (dropout 0.1, Adam with
# weight decay 0.01, clip 1.0, the bundled Austen sentence corpus), eval off, no checkpoint.
# megatron-app: mean metrics-file elapsed_ms of ITERATIONS iterations after one warm-up iteration;
# elapsed_ms spans the whole iteration: building the batch from the indexed dataset (BERT masking
# included), forward, backward, grad-norm, clip, Adam step, logging. PyTorch
# (bench/bert_train_torch.py): forward, backward, clip, AdamW on a batch already in memory (no data
# loading), mean of ITERATIONS steps after one warm-up step. ROUNDS (default 2) alternates
# the two: ours, torch, ours, torch, ... PRECISIONS (default "fp32") for ours: "fp32 bf16".
set -euo pipefail
app=$1 iterations=${2:-2} mbs=${3:-4} rounds=${4:-2} precisions=${5:-fp32}
seq=512
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
for round in $(seq "$rounds"); do
  for precision in $precisions; do
    flag=()
    [ "$precision" = bf16 ] && flag=(--set training.bf16=true)
    start=$(date -u +%T)
    "$app" --config "$here/../configs/bert_tiny.toml" --log-level warn \
      --set model.num_layers=12 --set model.hidden_size=768 \
      --set model.num_attention_heads=12 --set "model.max_position_embeddings=$seq" \
      --set "data.seq_length=$seq" --set "data.data_cache_path=$work/cache" \
      --set "training.micro_batch_size=$mbs" --set "training.global_batch_size=$mbs" \
      --set "training.train_iters=$((iterations + 1))" --set training.lr_warmup_fraction=0 \
      --set training.eval_iters=0 --set logging.log_interval=1 --set checkpoint.save= \
      --set "logging.metrics_file=$work/m.jsonl" "${flag[@]}" > /dev/null
    ours=$(/usr/bin/python3 "$here/step_times.py" "$work/m.jsonl" $((mbs * seq)) --per-iteration)
    rm -f "$work/m.jsonl"
    echo "round $round [$start, load $(cut -d' ' -f1 /proc/loadavg)] megatron-app $precision: $ours"
  done
  start=$(date -u +%T)
  torch=$(/usr/bin/python3 "$here/bert_train_torch.py" 12 768 12 "$seq" "$mbs" "$iterations")
  echo "round $round [$start, load $(cut -d' ' -f1 /proc/loadavg)] $torch"
done
