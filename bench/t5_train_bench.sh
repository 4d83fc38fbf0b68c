#!/usr/bin/env bash
# T5 training step of megatron-app against the same T5 in PyTorch fp32 (CPU).
#   bench/t5_train_bench.sh MEGATRON_APP [SHAPE [ITERATIONS [ROUNDS [PRECISIONS]]]]
# SHAPE (default tiny):
#   tiny: configs/t5_tiny.toml's shape as is: 2+2 layers, hidden 128, 4 heads, ffn 512, encoder
#         128 / decoder 40 tokens, micro batch 8 (global batch 8 here, one micro-batch per step);
#   base: Megatron's T5-220M shape (configs/t5_220m.toml): 12+12 layers, hidden 768, 12 heads of
#         64, ffn 3072, encoder 512 / decoder 128 tokens, max_position_embeddings 512, micro batch
#         = global batch 4.
# Both shapes use learned absolute positions (t5_tiny.toml's relative bias overridden): the
# PyTorch model has no relative bias. Otherwise configs/t5_tiny.toml (dropout 0.1, Adam with
# weight decay 0.01, clip 1.0, the bundled Austen sentence corpus), eval off, no checkpoint.
# megatron-app: mean metrics-file elapsed_ms of ITERATIONS iterations after one warm-up iteration;
# elapsed_ms spans the whole iteration: building the batch from the indexed dataset (T5 span
# masking included), forward, backward, grad-norm, clip, Adam step, logging. PyTorch
# (bench/t5_train_torch.py): forward, backward, clip, AdamW on a batch already in memory (no data
# loading), mean of ITERATIONS steps after one warm-up step. tokens/s counts encoder tokens
# (micro batch x encoder length) on both sides. ROUNDS (default 2) alternates the two: ours,
# torch, ours, torch, ... PRECISIONS (default "fp32") for ours: "fp32 bf16".
set -euo pipefail
app=$1 shape=${2:-tiny} iterations=${3:-2} rounds=${4:-2} precisions=${5:-fp32}
case "$shape" in
  tiny) enc_layers=2 dec_layers=2 hidden=128 heads=4 kv=32 ffn=512 se=128 sd=40 mbs=8 ;;
  base) enc_layers=12 dec_layers=12 hidden=768 heads=12 kv=64 ffn=3072 se=512 sd=128 mbs=4 ;;
  *) echo "t5_train_bench.sh: unknown shape '$shape' (tiny or base)" >&2; exit 2 ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
for round in $(seq "$rounds"); do
  for precision in $precisions; do
    flag=()
    [ "$precision" = bf16 ] && flag=(--set training.bf16=true)
    start=$(date -u +%T)
    "$app" --config "$here/../configs/t5_tiny.toml" --log-level warn \
      --set "model.encoder_num_layers=$enc_layers" --set "model.decoder_num_layers=$dec_layers" \
      --set "model.hidden_size=$hidden" --set "model.num_attention_heads=$heads" \
      --set "model.kv_channels=$kv" --set "model.ffn_hidden_size=$ffn" \
      --set "model.max_position_embeddings=$se" \
      --set model.position_embedding_type=learned_absolute \
      --set "data.encoder_seq_length=$se" --set "data.decoder_seq_length=$sd" \
      --set "data.data_cache_path=$work/cache" \
      --set "training.micro_batch_size=$mbs" --set "training.global_batch_size=$mbs" \
      --set "training.train_iters=$((iterations + 1))" --set training.lr_warmup_fraction=0 \
      --set training.eval_iters=0 --set logging.log_interval=1 --set checkpoint.save= \
      --set "logging.metrics_file=$work/m.jsonl" "${flag[@]}" > /dev/null
    ours=$(/usr/bin/python3 "$here/step_times.py" "$work/m.jsonl" $((mbs * se)) --per-iteration)
    rm -f "$work/m.jsonl"
    echo "round $round [$start, load $(cut -d' ' -f1 /proc/loadavg)] megatron-app $precision: $ours"
  done
  start=$(date -u +%T)
  torch=$(/usr/bin/python3 "$here/t5_train_torch.py" "$enc_layers" "$dec_layers" "$hidden" \
    "$heads" "$ffn" "$se" "$sd" "$mbs" "$iterations")
  echo "round $round [$start, load $(cut -d' ' -f1 /proc/loadavg)] $torch"
done
